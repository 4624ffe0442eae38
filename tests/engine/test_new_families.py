"""Gemma 3, Qwen3, Phi-3 and scaled RoPE: attention within 1e-4 of transformers (eager) from the
safetensors folders and from GGUF copies written as llama.cpp's converter writes them, over a text
longer than the 8-token sliding window; the local layers' band; the KV cache across local layers."""

import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import load_model
from tiny import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import family_gguf  # noqa: E402
from attnviz.engine.computing.request import RunRequest

NEW = ("gemma3", "gemma3_old", "qwen3", "phi3", "llama_rope_llama3", "llama_rope_linear", "qwen3_yarn")
# Gemma 3's GGUF is read with llama.cpp's score scale (head_dim), which gemma3_old's 24 is not
GGUF = ("gemma3", "qwen3", "phi3", "llama_rope_llama3", "llama_rope_linear", "qwen3_yarn")
ATOL = 1e-4
WINDOW = 8


def _cases(ref):
    i = 0
    while f"ids_{i}" in ref:
        yield ref[f"ids_{i}"].tolist(), ref[f"attn_{i}"]
        i += 1


def test_the_fixtures_cross_the_window():
    """The longest reference text is longer than the window, so local layers mask some keys."""
    for name in ("gemma3", "phi3"):
        assert max(len(ids) for ids, _ in _cases(np.load(FIXTURES / name / "expected.npz"))) > WINDOW


@pytest.mark.parametrize("name", GGUF)
def test_gguf_copy_matches_transformers(tmp_path, name):
    model = load_model(family_gguf(FIXTURES / name, tmp_path / f"{name}.gguf"))
    for ids, want in _cases(np.load(FIXTURES / name / "expected.npz")):
        np.testing.assert_allclose(model.run(ids=ids).attentions, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["gemma3", "phi3"])
def test_local_layers_see_only_their_window(name):
    model = load_model(FIXTURES / name)
    ids = list(range(3, 23))
    attn = model.run(ids=ids).attentions
    q, k = np.indices((len(ids), len(ids)))
    outside = (q - k) >= WINDOW
    for i in range(model.config.n_layer):
        mass = attn[i][:, outside]
        if model.config.is_local(i):
            assert (mass == 0).all(), i
        else:
            assert mass.min() > 0, i


def test_gemma3_local_and_global_layers_use_their_own_rope():
    """Swapping the local RoPE base for the global one changes the local layers' patterns: the
    parity above depends on each layer's own base."""
    from dataclasses import replace

    model = load_model(FIXTURES / "gemma3")
    ids = list(range(3, 23))
    right = model.run(ids=ids).attentions
    model.config = replace(model.config, rope_local=model.config.rope)
    model.clear_cache()
    wrong = model.run(ids=ids).attentions
    assert model.config.is_local(0) and np.abs(wrong[0] - right[0]).max() > 1e-2


@pytest.mark.parametrize("name", ["gemma3", "qwen3", "phi3"])
def test_kv_cache_edits_equal_a_full_recompute(name):
    """Edits reuse the cached prefix across local and global layers; every result equals a run
    without the cache."""
    model = load_model(FIXTURES / name)
    rng = np.random.default_rng(5)
    ids = rng.integers(0, model.config.vocab_size, 12).tolist()
    for _ in range(6):
        cut = int(rng.integers(0, len(ids)))
        ids = ids[:cut] + rng.integers(0, model.config.vocab_size, int(rng.integers(1, 8))).tolist()
        cached = model.run(ids=ids)
        full = model.run(ids=ids, request=RunRequest(use_cache=False))
        np.testing.assert_allclose(cached.attentions, full.attentions, atol=1e-5, rtol=0)
    assert cached.cache_reused > 0


@pytest.mark.parametrize("name", ["llama_gqa", "qwen3", "gemma3"])
def test_a_decoders_matrices_keep_their_longer_side_contiguous(name, tmp_path):
    """A safetensors decoder's [in, out] matrices have their longer side contiguous, as GGUF
    layers are kept (the faster matrix-vector product for a cached keystroke): C order where
    out >= in, else the view of the file's rows (Fortran order: a down projection wider than the
    model). The fixtures' own MLPs are narrower than the model; a copy with d_ff = 2 d_model is
    loaded too. The values are the file's."""
    from safetensors.numpy import load_file, save_file
    import json
    import shutil

    wide = tmp_path / name
    shutil.copytree(FIXTURES / name, wide)
    cfg = json.loads((wide / "config.json").read_text())
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    rng = np.random.default_rng(0)
    tensors = {}
    for k, v in load_file(str(wide / "model.safetensors")).items():
        if k.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            v = np.concatenate([v, (rng.standard_normal((2 * d - f, d)) * 0.02).astype(v.dtype)])
        elif k.endswith("mlp.down_proj.weight"):
            v = np.concatenate([v, (rng.standard_normal((d, 2 * d - f)) * 0.02).astype(v.dtype)], axis=1)
        tensors[k] = np.ascontiguousarray(v)
    save_file(tensors, str(wide / "model.safetensors"))
    (wide / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 2 * d}))
    for folder in (FIXTURES / name, wide):
        layer = load_model(folder).weights.layers[0]
        for w in (layer.w_qkv, layer.w_o, layer.w_in, layer.w_out):
            n_in, n_out = w.shape
            assert w.flags.c_contiguous if n_out >= n_in else (w.flags.f_contiguous and not w.flags.c_contiguous)
        down = next(v for k, v in load_file(str(folder / "model.safetensors")).items()
                    if k.endswith("layers.0.mlp.down_proj.weight"))
        np.testing.assert_array_equal(layer.w_out.T, down.astype(np.float32))
    assert layer.w_out.flags.f_contiguous and layer.w_out.shape == (2 * d, d)
