"""Engine invariants, bad inputs and bad files. No Qt here."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from attnviz.engine import InputError, ModelLoadError, config_from_dict, load_model
from attnviz.engine.computing.layers import (
    apply_rope, attention_pattern, causal_mask, erf, kv_group, mask_bias, repeat_kv, rope_cos_sin,
    softmax,
)
from attnviz.engine.reading.weights import bf16_to_f32
from tiny import llama_config, llama_tensors, tiny_llama, write_model
from attnviz.engine.computing.request import RunRequest

SENTENCE = "The keys to the cabinet are on the table."


def test_engine_import_loads_no_qt():
    code = ("import sys, attnviz.engine, attnviz.engine.reading.registry, attnviz.commands.engine_cmds; "
            "bad = [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph', 'attnviz.ui'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_minilm_run_shapes_and_rows(minilm):
    r = minilm.run(SENTENCE)
    assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"
    assert r.labels[2] == "keys" and r.labels[1] == "the"  # as the uncased model sees it
    T = len(r.tokens)
    assert r.attentions.shape == (6, 12, T, T) and r.attentions.dtype == np.float32
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert list(r.kv_group) == list(range(12))
    s, e = r.offsets[5]
    assert SENTENCE[s:e] == "cabinet"
    other = minilm.run("東京 tulip 😀")
    assert other.labels == ["[CLS]", "東", "京", "tu", "##lip", "[UNK]", "[SEP]"]


def test_minilm_empty_and_ids(minilm):
    r = minilm.run("")
    assert r.tokens == ["[CLS]", "[SEP]"] and r.attentions.shape == (6, 12, 2, 2)
    r = minilm.run(ids=[1996, 6309])
    assert list(r.input_ids) == [1996, 6309] and r.tokens == ["the", "keys"]
    with pytest.raises(InputError, match="no token ids"):  # nothing to show
        minilm.run(ids=[])


def test_too_long_text_names_both_numbers(minilm):
    text = "word " * 600
    with pytest.raises(InputError, match=r"60\d tokens .* 512 positions"):
        minilm.run(text)
    r = minilm.run(text, request=RunRequest(truncate=True))
    assert r.truncated and r.n_tokens == 512 and r.n_tokens_full > 512 and r.tokens[-1] == "[SEP]"


def test_bad_ids(minilm):
    with pytest.raises(InputError, match="30522|outside"):
        minilm.run(ids=[5, 40000])
    with pytest.raises(InputError):
        minilm.run(ids=[1.5, 2])
    with pytest.raises(InputError):
        minilm.run("a", ids=[1])


def test_causal_upper_triangle_zero_and_groups(tmp_path):
    model = load_model(tiny_llama(tmp_path / "gqa"))
    r = model.run(ids=list(range(1, 12)))
    upper = np.triu(np.ones((11, 11), bool), 1)
    assert np.all(r.attentions[..., upper] == 0)
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert list(r.kv_group) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_vectorised_attention_equals_per_head_loop():
    rng = np.random.default_rng(1)
    n_head, n_kv, T, d = 8, 2, 9, 16
    q = rng.standard_normal((n_head, T, d)).astype(np.float32)
    k = rng.standard_normal((n_kv, T, d)).astype(np.float32)
    mask = causal_mask(T)
    fast = attention_pattern(q, repeat_kv(k, n_head // n_kv), 0.25, mask_bias(mask))
    groups = kv_group(n_head, n_kv)
    for h in range(n_head):
        scores = (q[h] @ k[groups[h]].T) * 0.25
        scores[~mask] = -np.inf
        e = np.exp(scores - scores.max(-1, keepdims=True))
        np.testing.assert_allclose(fast[h], e / e.sum(-1, keepdims=True), atol=1e-6)


def test_sliding_window_mask():
    m = causal_mask(6, window=2)
    assert m[5].tolist() == [False, False, False, False, True, True]


def test_softmax_of_masked_and_huge_rows_is_the_right_distribution():
    """Masked keys (-inf) get 0 and the rest shares 1, huge scores included (the row max is
    subtracted first); never NaN, never an empty row."""
    x = np.array([[0.0, -np.inf, -np.inf], [1e30, -1e30, 0], [1e30, 1e30, -np.inf],
                  [np.log(3.0), 0.0, -np.inf]], np.float32)
    out = softmax(x.copy())
    np.testing.assert_allclose(out, [[1, 0, 0], [1, 0, 0], [0.5, 0.5, 0], [0.75, 0.25, 0]], rtol=1e-6)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)


def test_rope_rotate_half_is_relative():
    # q.k after RoPE depends only on the offset between positions (rotate-half layout)
    rng = np.random.default_rng(0)
    d = 8
    q = rng.standard_normal((1, 1, d)).astype(np.float32)
    k = rng.standard_normal((1, 1, d)).astype(np.float32)
    cos, sin = rope_cos_sin(np.arange(20), d, 100.0)
    dot = lambda i, j: (apply_rope(q, cos[i], sin[i]) @ apply_rope(k, cos[j], sin[j]).transpose(0, 2, 1)).item()  # noqa: E731
    assert dot(3, 1) == pytest.approx(dot(12, 10), rel=1e-4)
    assert dot(3, 1) != pytest.approx(dot(3, 2), rel=1e-3)
    # rotate-half pairs dimension i with i + d/2, not adjacent pairs
    x = np.zeros((1, 1, d), np.float32)
    x[..., 0] = 1
    y = apply_rope(x, cos[1], sin[1])
    assert y[0, 0, d // 2] != 0 and y[0, 0, 1] == 0


def test_erf_matches_math():
    import math
    xs = np.linspace(-5, 5, 101).astype(np.float32)
    ref = np.array([math.erf(float(x)) for x in xs])
    assert np.max(np.abs(erf(xs) - ref)) < 5e-7  # float32 rounding on top of 1.5e-7


def test_bf16_bits():
    f = np.array([1.0, -2.5, 3.140625], np.float32)
    u16 = (f.view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bf16_to_f32(u16), f)


def test_head_dim_explicit_and_rope_parameters():
    base = llama_config(d_model=48, n_head=4, n_kv_head=2)
    cfg = config_from_dict({**base, "head_dim": 16})
    assert cfg.d_head == 16 and cfg.n_head * cfg.d_head != cfg.d_model
    new_style = {k: v for k, v in base.items() if k != "rope_theta"}
    new_style["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
    assert config_from_dict(new_style).rope_theta == 5e5
    assert config_from_dict(base).rope_theta == 1000.0
    assert config_from_dict({**base, "model_type": "qwen2"}).qkv_bias


# ---- bad files: each gives a ModelLoadError with a clear message -------------------------------

def _good(tmp_path):
    return tiny_llama(tmp_path / "m")


def test_truncated_safetensors(tmp_path):
    folder = _good(tmp_path)
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match="truncated or is not a safetensors"):
        load_model(folder)


def test_garbage_header(tmp_path):
    folder = _good(tmp_path)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"garbage" * 10)
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(folder)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 8) + b"notjson!")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(folder)


def test_missing_tensor(tmp_path):
    cfg = llama_config()
    t = llama_tensors(cfg)
    del t["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(ModelLoadError, match="layers.1.self_attn.k_proj"):
        load_model(write_model(tmp_path / "m", cfg, t))


def test_wrong_shape_prints_numbers(tmp_path):
    cfg = llama_config()
    t = llama_tensors(cfg)
    t["model.layers.0.self_attn.q_proj.weight"] = np.zeros((31, 32), np.float32)
    with pytest.raises(ModelLoadError, match=r"\[31, 32\].*\[32, 32\]"):
        load_model(write_model(tmp_path / "m", cfg, t))


def test_unknown_model_type(tmp_path):
    cfg = llama_config(model_type="mamba")
    with pytest.raises(ModelLoadError, match="sets model_type to 'mamba', which is not supported"):
        load_model(write_model(tmp_path / "m", cfg, llama_tensors(llama_config())))


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 10**9), ("hidden_size", -4),
                                       ("num_attention_heads", 0), ("vocab_size", "many"),
                                       ("num_key_value_heads", 3)])
def test_absurd_config(tmp_path, key, value):
    cfg = llama_config()
    folder = write_model(tmp_path / "m", cfg, llama_tensors(cfg))
    cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError):
        load_model(folder)


def test_pickle_refused_with_conversion_hint(tmp_path):
    folder = tmp_path / "pt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(llama_config()))
    marker = tmp_path / "unpickled"
    # a real pickle that would create a file if it were ever loaded
    import pickle
    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    for target in (folder, folder / "pytorch_model.bin"):
        with pytest.raises(ModelLoadError, match="never unpickles.*safetensors"):
            load_model(target)
    assert not marker.exists()


def test_a_file_named_like_a_pickle_is_told_by_its_first_bytes(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(llama_config()))
    for name, data, said in (("model.bin", b"PK\x03\x04" + bytes(60), "is a PyTorch pickle checkpoint"),
                             ("model.pt", b"\x80\x04\x95" + bytes(60), "is a PyTorch pickle checkpoint"),
                             ("model.bin", bytes(range(7, 100)), "is not a model file attnviz can read"),
                             ("model.ckpt", b"", "is not a model file attnviz can read"),
                             # (a 0x80 first byte alone is no pickle: a safetensors header of 128 bytes)
                             ("w.bin", (128).to_bytes(8, "little") + b'{"x": 1}', "looks like safetensors"),
                             ("w.bin", b"\x80\x00" + bytes(60), "is not a model file attnviz can read")):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ModelLoadError, match=f"^{name} {said}"):
            load_model(path)
        path.unlink()


def test_a_gguf_file_named_like_a_pickle_is_opened_as_gguf(tmp_path):
    """resolve() looks at a .bin's first bytes before calling it anything: a GGUF file is a GGUF."""
    from attnviz.engine.reading.registry import resolve

    path = tmp_path / "model.bin"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(60))
    assert resolve(path)[1] == path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_pickle_named_fifo_is_refused_by_its_kind_not_called_a_non_checkpoint(tmp_path):
    from attnviz.engine.reading.weights import refuse_pickle

    fifo = tmp_path / "x.pt"
    os.mkfifo(fifo)
    message = str(refuse_pickle(fifo))
    assert "not a PyTorch checkpoint" not in message and "x.pt" in message, message


def test_unknown_name():
    with pytest.raises(ModelLoadError, match="attnviz models"):
        load_model("no-such-model-xyz")


def test_model_without_tokenizer_takes_typed_ids(tmp_path):
    model = load_model(tiny_llama(tmp_path / "m"))
    r = model.run("3, 7 9")
    assert r.input_ids.tolist() == [3, 7, 9] and r.text == "3, 7 9" and r.attentions.shape[-1] == 3
    with pytest.raises(InputError, match="type token ids"):  # empty: the window shows its empty state
        model.run("")
    with pytest.raises(InputError, match="no tokenizer.json: type token ids"):
        model.run("hello")


def test_model_too_big_for_memory_is_refused_before_loading(tmp_path, monkeypatch):
    import attnviz.engine.reading.weights as W
    folder = tiny_llama(tmp_path / "m")
    monkeypatch.setattr(W, "available_memory", lambda: 1000)
    # (in a unit that shows them: "0.0 GiB" beside "0.0 GiB" would say nothing)
    with pytest.raises(ModelLoadError, match=r"needs about [1-9][\d.]* KiB to run even one layer at a time .* "
                                             r"but only 1,000 bytes of memory is available"):
        load_model(folder)
    monkeypatch.setattr(W, "available_memory", lambda: None)  # unknown: load as usual
    assert load_model(folder).config.n_head == 8
    monkeypatch.undo()
    assert W.available_memory() > 10 * (1 << 20)  # Linux: MemAvailable is read
