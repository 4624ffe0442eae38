"""QK attribution against transformers (tests/make_qk_fixtures.py, from hooks on HF's decoder
layers). On SmolLM2 (tests/fixtures/qk/smollm2.npz): each query-side total equals that component's
query contribution times HF's whole key, each key-side total HF's whole query times that
component's key contribution, the score is HF's, and the whole table of the early cells holds
entry by entry. On the tiny families (tests/fixtures/qk/families.npz): the whole table and the
score, with biases (Qwen2's q/k biases; GPT-2's LayerNorm shift and projection biases), q/k norms
(Qwen3, Gemma 3), Gemma 3's post-norms, local and global RoPE and query_pre_attn_scalar."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import qk as Q
from attnviz.engine.computing.request import RunRequest
from tiny import FIXTURES

REF = FIXTURES / "qk" / "smollm2.npz"
FAMILY_REF = FIXTURES / "qk" / "families.npz"
TEXT = ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
        "thanked Mrs Vashmere Okkadine in Plumbrook.")
FAMILIES = ("qwen2", "qwen3", "gpt2", "gemma3", "gemma3_old")
# table entries: the engine and transformers (float64, its norms in float32) agree within 3.1e-6 on
# the families (entries up to 4.7) and 1.2e-6 on SmolLM2; scores within 6.9e-6
FAMILY_ATOL = 3e-5
TABLE_ATOL = 1e-5


def names(layer, n_head):  # the components in attnviz's order
    return ["embed", *[n for i in range(layer) for n in [f"L{i}H{j}" for j in range(n_head)] + [f"L{i}.mlp"]],
            "bias"]


def test_the_ids_are_attnviz_tokens(smollm2):
    assert smollm2.tokenizer.encode(TEXT, add_special_tokens=False).ids == np.load(REF)["ids"].tolist()


def test_query_and_key_sides_match_transformers(smollm2):
    ref = np.load(REF)
    r = smollm2.run(ids=ref["ids"].tolist(), trace=Q.qk_trace(),
                    request=RunRequest(use_cache=False))
    tables = 0
    for n, (layer, head, q, k) in enumerate(ref["cells"]):
        a = Q.qk_attribution(smollm2, r.trace, int(layer), int(head), int(q), int(k))
        tol = 1e-4 * max(1.0, abs(ref["score"][n]))
        assert a.score == pytest.approx(ref["score"][n], abs=tol)
        np.testing.assert_allclose(a.query_side, ref[f"query_side_{n}"], atol=tol)
        np.testing.assert_allclose(a.key_side, ref[f"key_side_{n}"], atol=tol)
        assert np.abs(ref[f"key_side_{n}"]).max() > 0.1  # a cell with something to split
        if f"table_{n}" in ref:
            assert list(a.components) == names(int(layer), smollm2.config.n_head)
            np.testing.assert_allclose(a.table, ref[f"table_{n}"], rtol=0, atol=TABLE_ATOL)
            tables += 1
    assert tables == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_families_tables_match_transformers(family):
    ref = np.load(FAMILY_REF)
    model = load_model(FIXTURES / family)
    r = model.run(ids=ref["ids"].tolist(), trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    for n, cell in enumerate(ref[f"{family}_cells"].tolist()):
        a = Q.qk_attribution(model, r.trace, *cell)
        table = ref[f"{family}_table_{n}"]
        assert list(a.components) == names(cell[0], model.config.n_head)
        assert a.score == pytest.approx(ref[f"{family}_score"][n], abs=FAMILY_ATOL)
        np.testing.assert_allclose(a.table, table, rtol=0, atol=FAMILY_ATOL, err_msg=f"{family} {cell}")
        assert np.ptp(table) > 0.5  # entries that differ: a table that can come out wrong
