"""Circuit scores against the weights as transformers loads them (tests/make_circuits_fixtures.py):
copying, Q/K/V-composition and ov_top of the tiny families (GPT-2's Conv1D and LayerNorm, GQA,
Qwen3's q/k norms, Gemma 3's 1 + w gains, post-attention norm and embedding scale, Phi-3's fused
qkv), and on SmolLM2's GGUF (its Q/K rows un-permuted at load) the composition of some head pairs
from the engine's folded matrices and ov_top. A layout mistake at load (heads or KV groups mixed,
a projection transposed, a gain not folded) moves these numbers while the engine's own
recomputation from its loaded weights stays equal."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C
from tiny import FIXTURES

REF = FIXTURES / "circuits" / "ref.npz"
FAMILIES = ("gpt2", "llama_gqa", "qwen3", "gemma3", "phi3")
OV_HEAD, OV_TOKEN, OV_K = (1, 2), 5, 5
# the engine and transformers' weights agree within 7e-8 on the scores (SmolLM2's composition:
# exactly, the same float32 weights folded in float64) and within 1.1e-6 on ov_top's logits (up
# to 24 on Gemma 3, 8.4 on SmolLM2: the engine's unembedding runs in float32)
ATOL = 1e-6
OV_ATOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    with np.load(REF, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("family", FAMILIES)
def test_families_circuits_match_transformers_weights(ref, family):
    model = load_model(FIXTURES / family)
    got = C.circuits(model)
    np.testing.assert_allclose(got.copying, ref[f"{family}_copying"], rtol=0, atol=ATOL)
    assert np.ptp(ref[f"{family}_copying"]) > 0.1
    for m in C.MODES:
        np.testing.assert_allclose(got.composition[m], ref[f"{family}_comp_{m}"], rtol=0, atol=ATOL,
                                   err_msg=m)
        assert np.ptp(ref[f"{family}_comp_{m}"][ref[f"{family}_comp_{m}"] > 0]) > 0.01
    top = C.ov_top(model, *OV_HEAD, OV_TOKEN, OV_K)
    assert [i for i, _, _ in top] == ref[f"{family}_ov_ids"].tolist()
    np.testing.assert_allclose([v for _, _, v in top], ref[f"{family}_ov_vals"], rtol=0, atol=OV_ATOL)


def composition(a, b, mode):  # two heads' folded matrices (l1, h1), (l2, h2) -> score
    A = a[2] @ a[3]
    B = {"q": b[0] @ b[1].T, "k": b[1] @ b[0].T, "v": b[2] @ b[3]}[mode]
    return np.linalg.norm(A @ B) / (np.linalg.norm(A) * np.linalg.norm(B))


def test_smollm2_head_matrices_and_ov_top_match_transformers_weights(smollm2, ref):
    assert smollm2.tokenizer.encode(" Mary", add_special_tokens=False).ids == [int(ref["smollm2_ov_token"])]
    layers = {}
    for n, (l1, h1, l2, h2) in enumerate(ref["smollm2_pairs"].tolist()):
        for layer in (l1, l2):
            if layer not in layers:
                layers[layer] = C.head_matrices(smollm2, layer)
        a = [getattr(layers[l1], w)[h1] for w in "qkvo"]
        b = [getattr(layers[l2], w)[h2] for w in "qkvo"]
        for m in C.MODES:
            want = ref[f"smollm2_comp_{m}"][n]
            assert (composition(a, b, m) if l1 < l2 else 0.0) == pytest.approx(want, abs=ATOL), (n, m)
    for (layer, head), ids, vals in zip(ref["smollm2_ov_heads"].tolist(), ref["smollm2_ov_ids"],
                                        ref["smollm2_ov_vals"]):
        top = C.ov_top(smollm2, layer, head, int(ref["smollm2_ov_token"]), 10)
        assert [i for i, _, _ in top] == ids.tolist()
        np.testing.assert_allclose([v for _, _, v in top], vals, rtol=0, atol=OV_ATOL)
