"""Value-weighted attention (Kobayashi et al., 2020): per-head value norms ||v_j W_O(h)|| and each
head's share of the layer's attention output, computed only when asked, checked against a naive
per-head loop on the same weights."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.trace import Trace
from attnviz.engine.computing.patterns import value_weighted
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest


def _naive(model, ids):
    """Per head, by hand: V from the fused projection (head h reads KV group h // n_group)."""
    c, w = model.config, model.weights
    trace = forward(c, w, np.asarray(ids), Trace(values=True))
    att, values = trace.attentions, trace.v
    norms = np.zeros(att.shape[:3])
    share = np.zeros(att.shape[:2])
    for i, layer in enumerate(w.layers):
        outs = []
        for h in range(c.n_head):
            v = values[i][h // c.n_group]  # [T, d_head]
            wo = layer.w_o[h * c.d_head:(h + 1) * c.d_head]  # [d_head, d_model]
            f = v @ wo
            norms[i, h] = np.linalg.norm(f, axis=-1)
            outs.append(np.linalg.norm(att[i, h] @ f))
        share[i] = np.array(outs) / sum(outs)
    return att, norms, share


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2", "bert"])
def test_value_norms_and_shares_equal_a_naive_loop(name):
    model = load_model(FIXTURES / name)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    r = model.run(ids=ids, request=RunRequest(values=True))
    att, norms, share = _naive(model, ids)
    np.testing.assert_allclose(r.value_norms, norms, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r.head_share, share, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(r.head_share.sum(axis=1), 1.0, rtol=1e-5)
    assert model.run(ids=ids).value_norms is None  # the default path computes none of it


def test_cached_run_gives_the_same_norms_as_a_fresh_one():
    model = load_model(FIXTURES / "llama_gqa")
    model.run(ids=[3, 1, 4, 1, 5], request=RunRequest(values=True))
    cached = model.run(ids=[3, 1, 4, 1, 5, 9, 2], request=RunRequest(values=True))
    assert cached.cache_reused == 5
    fresh = load_model(FIXTURES / "llama_gqa").run(ids=[3, 1, 4, 1, 5, 9, 2],
                                                   request=RunRequest(values=True))
    np.testing.assert_allclose(cached.value_norms, fresh.value_norms, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cached.head_share, fresh.head_share, rtol=1e-4, atol=1e-6)


def test_value_weighting_moves_weight_off_a_silent_key():
    att = np.array([[0.9, 0.1], [0.5, 0.5]], np.float32)
    norms = np.array([0.01, 1.0], np.float32)  # key 0 writes almost nothing
    vw = value_weighted(att, norms)
    np.testing.assert_allclose(vw.sum(-1), 1.0, rtol=1e-6)
    assert vw[0, 1] > 0.9 and vw[1, 1] > 0.98
    np.testing.assert_array_equal(value_weighted(att, np.zeros(2, np.float32)), 0)  # never NaN


def test_the_two_ways_to_a_heads_share_agree(minilm):
    """layers.head_output_share (from the pattern and v W_O, what runs give) and
    head_output_share_of_heads (from each head's output, what the anatomy has) are one number."""
    from attnviz.engine.analysing.anatomy import layer_anatomy
    from attnviz.engine.computing.layers import head_output_share_of_heads

    r = minilm.run("The keys to the cabinet are on the table.",
                   request=RunRequest(values=True, inputs=True))
    for layer in (0, 5):
        an = layer_anatomy(minilm.config, minilm.weights, r.layer_inputs[layer], layer, r.attentions[layer])
        np.testing.assert_allclose(head_output_share_of_heads(an.head_out, an.w_o), r.head_share[layer],
                                   rtol=1e-4, atol=1e-6)


def test_a_row_whose_other_keys_weigh_a_subnormal_total_is_renormalised_not_inf():
    """A sink head's row: the first key takes almost all, the others a float32 subnormal in all.
    Hiding the first key renormalises the rest to a finite row summing to 1 (1 / total overflowed,
    giving inf and NaN, which JSON cannot hold)."""
    from attnviz.engine.computing.patterns import key_totals, reweigh

    att = np.array([[[1.0, 1e-41, 3e-41]]], np.float32)
    keep = np.array([0.0, 1.0, 1.0], np.float32)
    out = reweigh(att, keep, key_totals(att, keep))
    assert np.isfinite(out).all(), out
    np.testing.assert_allclose(out[0, 0], [0, 0.25, 0.75], rtol=1e-3)


def test_hiding_the_first_key_of_a_row_whose_other_keys_weigh_a_subnormal_total_is_finite():
    """drop_first_key renormalises as reweigh does: a sink head's row whose other keys weigh a
    float32 subnormal in all comes out finite, summing to 1; a row with nothing left stays 0."""
    from attnviz.engine.computing.patterns import drop_first_key, no_weight_rows

    att = np.array([[1.0, 1e-41, 3e-41], [1.0, 0.0, 0.0]], np.float32)
    out = drop_first_key(att)
    assert np.isfinite(out).all(), out
    np.testing.assert_allclose(out[0], [0.25, 0.75], rtol=1e-3)
    assert (out[1] == 0).all() and no_weight_rows(out).tolist() == [False, True]
    into = np.full((2, 2), 7.0, np.float32)
    assert drop_first_key(att, out=into) is into and (into[1] == 0).all()
