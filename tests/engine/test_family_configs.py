"""Gemma 3, Qwen3 and Phi-3 configs (config.json and GGUF metadata): what is read, and what is
refused by the field's name."""

import json
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from attnviz.engine import ModelLoadError, config_from_dict, load_model
from attnviz.engine.reading.config import GLOBAL, LOCAL, Rope, read_config
from attnviz.engine.computing.rope import inv_freq
from tiny import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import family_gguf, llama3_rope_factors  # noqa: E402


def _raw(name):
    return json.loads((FIXTURES / name / "config.json").read_text())


def test_gemma3_config_new_style():
    """transformers 5 writes layer_types and rope_parameters per layer type."""
    c = read_config(FIXTURES / "gemma3")
    assert c.family == "gemma3" and c.qk_norm and c.query_pre_attn_scalar == 16
    assert c.layer_types == (LOCAL,) * 5 + (GLOBAL, LOCAL)
    assert [c.window(i) for i in (0, 5, 6)] == [8, None, 8]
    assert c.rope_of(5) == Rope(1_000_000.0) and c.rope_of(0) == Rope(10_000.0)
    assert c.activation == "gelu_pytorch_tanh"


def test_gemma3_config_old_style_and_multimodal_wrapper_read_alike():
    """The published checkpoints' spelling (rope_theta, rope_local_base_freq, rope_scaling,
    sliding_window_pattern), bare or as the text_config of a multimodal config."""
    raw = _raw("gemma3_old")
    bare = config_from_dict(raw)
    assert bare.layer_types == (LOCAL, GLOBAL, LOCAL, GLOBAL)
    assert bare.rope_of(1) == Rope(1_000_000.0, "linear", 8.0)  # scaling on global layers only
    assert bare.rope_of(0) == Rope(10_000.0)
    assert bare.query_pre_attn_scalar == 24
    wrapped = config_from_dict({"model_type": "gemma3", "text_config": raw, "vision_config": {}})
    assert (wrapped.layer_types, wrapped.rope, wrapped.rope_local, wrapped.d_head) == (
        bare.layer_types, bare.rope, bare.rope_local, bare.d_head)


def test_gemma3_text_config_fills_transformers_defaults():
    """A text_config of only a few keys (as gemma-3-4b's) takes Gemma3TextConfig's defaults."""
    cfg = config_from_dict({"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024}})
    assert (cfg.n_head, cfg.n_kv_head, cfg.d_head, cfg.vocab_size) == (8, 4, 256, 262_208)
    assert sum(cfg.is_local(i) for i in range(34)) == 29 and not cfg.is_local(5)
    assert cfg.rope_of(5) == Rope(1_000_000.0, "linear", 8.0)


def test_qwen3_and_phi3_configs():
    q = read_config(FIXTURES / "qwen3")
    assert q.family == "qwen3" and q.qk_norm and not q.qkv_bias and q.d_head == 24
    assert q.layer_types == (GLOBAL, GLOBAL) and q.sliding_window is None
    p = read_config(FIXTURES / "phi3")
    assert p.family == "llama" and not p.qk_norm and p.layer_types == (LOCAL, LOCAL)
    assert p.window(0) == 8


def test_rope_scaling_kinds_are_read():
    assert read_config(FIXTURES / "llama_rope_linear").rope == Rope(10_000.0, "linear", 4.0)
    assert read_config(FIXTURES / "llama_rope_llama3").rope == Rope(10_000.0, "llama3", 8.0, 1.0, 4.0, 16)
    yarn = read_config(FIXTURES / "qwen3_yarn").rope  # the attention factor is 0.1 ln(factor) + 1
    assert (yarn.kind, yarn.factor, yarn.original_max_positions) == ("yarn", 4.0, 16)
    assert yarn.attention_factor == pytest.approx(0.1 * np.log(4.0) + 1)


def test_llama_cpp_rope_freqs_equal_the_llama3_scaling():
    """A GGUF stores the llama3 scaling as one divisor per frequency (rope_freqs.weight); both
    forms give the same frequencies."""
    rope = {"rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}
    llama3 = inv_freq(Rope(10000.0, "llama3", 8.0, 1.0, 4.0, 16), 16)
    factors = inv_freq(Rope(10000.0, "factors", freq_divisors=tuple(llama3_rope_factors(rope, 16))), 16)
    np.testing.assert_allclose(factors, llama3, rtol=1e-6)
    assert not np.allclose(llama3, inv_freq(Rope(10000.0), 16))


BAD = [
    ("gemma3_old", {"layer_types": [LOCAL, GLOBAL, LOCAL]},
     "config.json sets layer_types to ['sliding_attention', 'full_attention', 'sliding_attention'], "
     "but it must be a list of one entry per layer (4, num_hidden_layers), not 3"),
    ("gemma3_old", {"layer_types": [LOCAL, "global", LOCAL, GLOBAL]},
     "config.json lists 'global' in layer_types, but each entry must be 'sliding_attention' or "
     "'full_attention'"),
    ("gemma3_old", {"sliding_window": 0},
     "config.json sets sliding_window to 0, but it must be a whole number (keys a query sees) in 1.."),
    ("gemma3_old", {"sliding_window": -4},
     "config.json sets sliding_window to -4, but it must be a whole number (keys a query sees) in 1.."),
    ("phi3", {"sliding_window": -4},
     "config.json sets sliding_window to -4, but it must be a whole number (keys a query sees) in 1.."),
    ("gemma3_old", {"sliding_window_pattern": 0},
     "config.json sets sliding_window_pattern to 0, but it must be a whole number"),
    ("gemma3_old", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
     "config.json sets rope_scaling.rope_type to 'dynamic', which is not supported (supported: default, "
     "linear, llama3, yarn)"),
    ("gemma3_old", {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}},
     "config.json sets rope_scaling.rope_type to 'longrope', which is not supported"),
    ("phi3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
     "config.json sets rope_parameters.rope_type to 'longrope', which is not supported"),
    ("gemma3_old", {"rope_scaling": {"rope_type": "linear"}},
     "config.json does not set rope_scaling.factor, which must be a positive finite number"),
    ("gemma3_old", {"attn_logit_softcapping": 50.0},
     "config.json sets attn_logit_softcapping to 50.0, but soft-capped logits are not supported yet "
     "(expected null)"),
    ("gemma3_old", {"final_logit_softcapping": 30.0},
     "config.json sets final_logit_softcapping to 30.0, but soft-capped logits are not supported yet "
     "(expected null)"),
    ("phi3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                  "partial_rotary_factor": 0.75}},
     "config.json sets partial_rotary_factor to 0.75, but RoPE on part of each head is not supported "
     "yet (expected 1.0)"),
    ("gemma3", {"use_bidirectional_attention": True},
     "config.json sets use_bidirectional_attention to true, but bidirectional attention is not "
     "supported (expected false, for causal)"),
]


@pytest.mark.parametrize("name, change, message", BAD, ids=[m.split(" ", 1)[1][:40] for _, _, m in BAD])
def test_bad_config_is_one_line_naming_file_and_field(tmp_path, name, change, message):
    raw = {**_raw(name), **change}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError) as err:
        read_config(tmp_path)
    text = str(err.value)
    assert "\n" not in text and str(tmp_path / "config.json") in text, text
    assert text.endswith(message) or message in text.replace(str(tmp_path) + "/", ""), text


def _gguf_with(tmp_path, name, edit):
    """A GGUF copy of fixture `name` whose metadata `edit(writer_kv)` changes."""
    src = family_gguf(FIXTURES / name, tmp_path / "src.gguf")
    reader = gguf.GGUFReader(str(src))
    arch = str(reader.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), arch)
    kv = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kv[key] = (field.contents(), field.types)
    edit(kv, arch)
    for key, (value, types) in kv.items():
        vtype = types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=types[1])
        else:
            w.add_key_value(key, value, vtype)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed(t.shape.tolist())),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tmp_path / "bad.gguf"


V = gguf.GGUFValueType
GGUF_BAD = [
    ("gemma3", lambda kv, a: kv.update({f"{a}.attention.sliding_window_pattern": (
        [True, True, False], (V.ARRAY, V.BOOL))}),
     "bad.gguf sets gemma3.attention.sliding_window_pattern to ['sliding_attention', "),
    ("gemma3", lambda kv, a: kv.update({f"{a}.rope.scaling.type": ("longrope", (V.STRING,)),
                                        f"{a}.rope.scaling.factor": (4.0, (V.FLOAT32,))}),
     "bad.gguf sets gemma3.rope.scaling.type to 'longrope', which is not supported"),
    ("gemma3", lambda kv, a: kv.update({f"{a}.attn_logit_softcapping": (50.0, (V.FLOAT32,))}),
     "bad.gguf sets gemma3.attn_logit_softcapping to 50.0, but soft-capped logits are not supported yet "
     "(expected null)"),
    ("phi3", lambda kv, a: kv.update({f"{a}.attention.sliding_window": (-3, (V.INT32,))}),
     "bad.gguf sets phi3.attention.sliding_window to -3, but it must be a whole number"),
    ("qwen3", lambda kv, a: kv.update({f"{a}.rope.scaling.type": ("yarn", (V.STRING,)),
                                       f"{a}.rope.scaling.factor": (4.0, (V.FLOAT32,)),
                                       f"{a}.rope.scaling.yarn_attn_factor": (0.5, (V.FLOAT32,))}),
     "bad.gguf sets qwen3.rope.scaling.yarn_attn_factor to 0.5, but YaRN with llama.cpp's attn_factor "
     "is not supported (expected 1)"),
]


@pytest.mark.parametrize("name, edit, message", GGUF_BAD, ids=[m.split(" ", 1)[1][:40] for _, _, m in GGUF_BAD])
def test_bad_gguf_metadata_is_one_line_naming_file_and_key(tmp_path, name, edit, message):
    with pytest.raises(ModelLoadError) as err:
        load_model(_gguf_with(tmp_path, name, edit))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_gemma3_gguf_takes_llama_cpp_defaults(tmp_path):
    """No layer pattern in the file: every 6th layer global (llama.cpp's set_swa_pattern(6)); local
    RoPE base 10,000; query_pre_attn_scalar = head_dim; a file without a window: all global."""
    c = load_model(family_gguf(FIXTURES / "gemma3", tmp_path / "g.gguf")).config
    assert c.layer_types == read_config(FIXTURES / "gemma3").layer_types
    assert c.rope_local == Rope(10_000.0) and c.query_pre_attn_scalar == 16

    def no_window(kv, arch):
        del kv[f"{arch}.attention.sliding_window"]

    c = load_model(_gguf_with(tmp_path, "gemma3", no_window)).config
    assert c.layer_types == (GLOBAL,) * 7 and c.sliding_window is None


def test_equal_ropes_hash_alike_and_a_pickle_carries_the_fields_alone():
    """A Rope's hash (kept after the first) is its fields', so equal ropes meet in a dict whichever
    was hashed first; a pickled Rope (hashed before) equals and hashes as the original."""
    import pickle
    from dataclasses import astuple, replace

    a = Rope(500_000.0, "factors", freq_divisors=(1.0, 2.5, 8.0))
    assert hash(a) == hash(astuple(a))
    b = replace(a)
    assert b == a and hash(b) == hash(a) and {a: 1}[b] == 1
    assert {b: 1}.get(replace(a, theta=1.0)) is None
    c = pickle.loads(pickle.dumps(a))
    assert c == a and vars(c) == {k: v for k, v in vars(a).items() if k != "_hash"}
    assert hash(c) == hash(a)
