"""The one config.json reader (engine/reading/hf_config.py): the engine and the calculator read the same
sizes and apply the same rules to a config."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.calc import calc_inputs_from_config, calculate
from attnviz.engine.reading.config import config_from_dict
from attnviz.engine.reading.hf_config import keys, read_fields
from tiny import llama_config, llama_tensors, write_model

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 96,
         "vocab_size": 100, "max_position_embeddings": 128}
CONFIGS = [
    LLAMA,
    {**LLAMA, "head_dim": 32},
    {**LLAMA, "model_type": "mistral", "sliding_window": 16},
    {**LLAMA, "model_type": "qwen2", "sliding_window": 16, "use_sliding_window": False},
    {**LLAMA, "model_type": "qwen2", "sliding_window": 16, "use_sliding_window": True},
    {**LLAMA, "attention_bias": True},
    {**LLAMA, "sliding_window": 0},
    {"model_type": "gpt2", "n_embd": 48, "n_head": 4, "n_layer": 2, "n_inner": None,
     "n_positions": 64, "vocab_size": 100},
    {"model_type": "bert", "hidden_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2,
     "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 64},
]


@pytest.mark.parametrize("raw", CONFIGS)
def test_engine_and_calculator_read_the_same_sizes_and_rules(raw):
    cfg = config_from_dict(raw)
    calc = calc_inputs_from_config(raw)
    found = read_fields(raw)
    assert (calc.d_model, calc.n_head, calc.n_layer, calc.d_ff, calc.vocab_size,
            calc.max_positions) == (cfg.d_model, cfg.n_head, cfg.n_layer, cfg.d_ff, cfg.vocab_size,
                                    cfg.max_positions)
    if cfg.family == "llama":
        assert calc.n_kv_head == cfg.n_kv_head
        assert (calc.arch.qkv_bias, calc.arch.o_bias) == (cfg.qkv_bias, cfg.o_bias)
        assert calc.sliding_window == cfg.sliding_window == found["sliding_window"]
    assert (calc.d_head or cfg.d_model // cfg.n_head) == cfg.d_head
    assert (found["d_model"], found["n_head"], found["n_layer"]) == (
        cfg.d_model, cfg.n_head, cfg.n_layer)


def test_qwen2_has_qkv_biases_and_no_o_bias_in_both():
    raw = {**LLAMA, "model_type": "qwen2", "attention_bias": False}
    cfg, calc = config_from_dict(raw), calc_inputs_from_config(raw)
    assert (cfg.qkv_bias, cfg.o_bias) == (calc.arch.qkv_bias, calc.arch.o_bias) == (True, False)


def test_the_engine_reads_only_what_hugging_face_reads_the_calculator_every_spelling():
    assert keys("d_model", "gpt2") == ("n_embd", "hidden_size")
    assert keys("d_model", "llama") == ("hidden_size",)
    assert keys("d_model", "llama", aliases=True) == ("hidden_size", "n_embd", "d_model", "dim")
    assert keys("n_kv_head", "gpt2", aliases=True) == ()  # GPT-2 has no KV heads of its own
    llama2c = {"model_type": "llama", "dim": 64, "n_heads": 4, "n_layers": 2, "n_kv_heads": 1}
    calc = calc_inputs_from_config(llama2c)
    assert (calc.d_model, calc.n_head, calc.n_layer, calc.n_kv_head) == (64, 4, 2, 1)
    with pytest.raises(Exception, match="does not set hidden_size, which must be"):
        config_from_dict({**llama2c, "vocab_size": 10, "intermediate_size": 8,
                          "max_position_embeddings": 8})


def test_a_missing_gpt2_size_is_named_as_gpt2_spells_it():
    from attnviz.engine.errors import CalcError, ModelLoadError
    with pytest.raises(CalcError, match="has no n_embd"):
        calc_inputs_from_config({"model_type": "gpt2", "n_head": 4, "n_layer": 2})
    with pytest.raises(ModelLoadError, match="does not set n_embd, which must be"):
        config_from_dict({"model_type": "gpt2", "n_head": 4, "n_layer": 2, "vocab_size": 10,
                          "n_positions": 8})


def _tiny_qwen2(folder, **extra):
    """A 3-layer Qwen2 checkpoint (Q, K, V biases) with a 4-token window switched on."""
    cfg = llama_config(n_layer=3, model_type="qwen2", use_sliding_window=True, sliding_window=4,
                       **extra)
    tensors = llama_tensors(cfg)
    for i in range(3):
        for proj, width in (("q", 32), ("k", 8), ("v", 8)):
            tensors[f"model.layers.{i}.self_attn.{proj}_proj.bias"] = np.full(width, 0.1, np.float32)
    return write_model(folder, cfg, tensors), cfg


def test_qwen_windows_only_the_layers_from_max_window_layers(tmp_path):
    """As transformers does (`layer_idx >= max_window_layers`): layers 0 and 1 see every earlier
    token, layer 2 its last 4, in the forward pass and in the calculator alike."""
    folder, cfg = _tiny_qwen2(tmp_path / "qwen2", max_window_layers=2)
    model = load_model(folder)
    assert [model.config.window(i) for i in range(3)] == [None, None, 4]
    att = model.run(ids=list(range(1, 11))).attentions  # [layer, head, query, key]
    assert np.all(att[:2, :, 9, :6] > 0) and np.all(att[2, :, 9, :6] == 0)
    calc = calculate(calc_inputs_from_config(cfg, seq_len=10))
    per_token_layer = 2 * 2 * 4 * 2  # K and V, 2 KV heads of 4, fp16
    assert calc.kv_bytes_total == per_token_layer * (2 * 10 + 1 * 4)
    assert calc.to_dict()["inputs"]["sliding_window_layers"] == [2]


def test_qwen_without_max_window_layers_takes_the_default_and_layer_types_win(tmp_path):
    """max_window_layers absent is transformers' 28: a 3-layer model windows none; a config's own
    layer_types decide where given."""
    cfg = _tiny_qwen2(tmp_path / "a")[1]
    assert config_from_dict(cfg).layer_types == ("full_attention",) * 3
    assert calc_inputs_from_config(cfg).sliding_window is None
    listed = {**cfg, "layer_types": ["sliding_attention", "full_attention", "full_attention"]}
    assert [config_from_dict(listed).window(i) for i in range(3)] == [4, None, None]
    assert calc_inputs_from_config(listed).sliding_window_layers == (0,)
    # layer_types saved with no sliding layer (a window size beside it): no window, and it computes
    unlisted = {**cfg, "layer_types": ["full_attention"] * 3}
    inputs = calc_inputs_from_config(unlisted)
    assert inputs.sliding_window is None and inputs.sliding_window_layers is None
    assert calculate(inputs).kv_bytes_total == calculate(calc_inputs_from_config(cfg)).kv_bytes_total


def test_a_qwen25_layout_windows_its_last_three_layers_in_the_calculator():
    """Qwen2.5-0.5B's layout with the window on: 21 full layers and 3 windowed."""
    raw = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
           "max_position_embeddings": 32768, "max_window_layers": 21, "num_attention_heads": 14,
           "num_hidden_layers": 24, "num_key_value_heads": 2, "sliding_window": 4096,
           "use_sliding_window": True, "vocab_size": 151936}
    calc = calculate(calc_inputs_from_config(raw, seq_len=8192))
    assert calc.kv_bytes_total == 512 * (21 * 8192 + 3 * 4096) == 94_371_840
