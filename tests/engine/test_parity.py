"""Parity with Hugging Face `transformers` (eager attention, output_attentions=True) within 1e-4.

The fixtures were written by tests/make_fixtures.py in a dev-only venv with torch; this test needs
neither torch nor transformers.
"""

import numpy as np
import pytest

from attnviz.engine import load_model
from tiny import FIXTURES

# tiny checkpoints (config.json + safetensors); smollm2/ holds references for a GGUF (test_smollm2.py)
TINY = sorted(p.name for p in FIXTURES.iterdir()
              if (p / "expected.npz").is_file() and (p / "config.json").is_file()) if FIXTURES.is_dir() else []
ATOL = 1e-4


def _cases(npz):
    i = 0
    while f"ids_{i}" in npz:
        yield i
        i += 1


def test_all_families_are_covered():
    expected = {"gpt2", "gpt2_noprefix", "bert", "llama_gqa", "llama_mqa", "llama_headdim", "mistral",
                "qwen2", "llama_bf16", "llama_sharded", "mistral_window", "gemma3", "gemma3_old",
                "qwen3", "phi3", "llama_rope_llama3", "llama_rope_linear", "qwen3_yarn"}
    assert expected <= set(TINY)


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_matches_transformers(name):
    model = load_model(FIXTURES / name)
    ref = np.load(FIXTURES / name / "expected.npz")
    n = 0
    for i in _cases(ref):
        result = model.run(ids=ref[f"ids_{i}"].tolist())
        want = ref[f"attn_{i}"]
        assert result.attentions.shape == want.shape
        np.testing.assert_allclose(result.attentions, want, atol=ATOL, rtol=0)
        n += 1
    assert n >= 2


def test_tiny_models_exercise_what_they_claim():
    assert load_model(FIXTURES / "llama_gqa").kv_group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert set(load_model(FIXTURES / "llama_mqa").kv_group.tolist()) == {0}
    cfg = load_model(FIXTURES / "llama_headdim").config
    assert cfg.n_head * cfg.d_head != cfg.d_model
    assert len(list((FIXTURES / "llama_sharded").glob("*.safetensors"))) >= 2
    assert load_model(FIXTURES / "qwen2").config.qkv_bias


def test_minilm_matches_transformers(minilm):
    ref = np.load(FIXTURES / "minilm_expected.npz")
    texts = []
    for i in _cases(ref):
        text = str(ref[f"text_{i}"])
        texts.append(text)
        result = minilm.run(text)
        assert result.input_ids.tolist() == ref[f"ids_{i}"].tolist(), text
        assert result.tokens == [str(t) for t in ref[f"tokens_{i}"]]
        assert [tuple(o) for o in result.offsets] == [tuple(o) for o in ref[f"offsets_{i}"].tolist()]
        np.testing.assert_allclose(result.attentions, ref[f"attn_{i}"], atol=ATOL, rtol=0)
    assert "" in texts and any(not t.isascii() for t in texts) and len(texts) >= 4


def test_gpt2_old_checkpoint_buffers_are_skipped(tmp_path):
    """Older GPT-2 files also hold attn.bias / attn.masked_bias buffers; they are not weights."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "gpt2_old"
    shutil.copytree(FIXTURES / "gpt2", folder)
    tensors = load_file(str(folder / "model.safetensors"))
    for i in range(2):
        tensors[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((1, 1, 64, 64), np.uint8))
        tensors[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    save_file(tensors, str(folder / "model.safetensors"))
    ref = np.load(FIXTURES / "gpt2" / "expected.npz")
    result = load_model(folder).run(ids=ref["ids_2"].tolist())
    np.testing.assert_allclose(result.attentions, ref["attn_2"], atol=ATOL, rtol=0)
