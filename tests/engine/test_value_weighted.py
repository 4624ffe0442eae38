"""Value-weighted attention (Kobayashi et al., 2020): per-head value norms ||v_j W_O(h)|| and each
head's share of the layer's attention output, computed only when asked, checked against a naive
per-head loop on the same weights."""

import dataclasses

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.families import forward, output_projection
from attnviz.engine.computing.model import Model
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
    from attnviz.engine.computing.layers import head_grams, head_output_share_of_heads

    r = minilm.run("The keys to the cabinet are on the table.",
                   request=RunRequest(values=True, inputs=True))
    for layer in (0, 5):
        an = layer_anatomy(minilm.config, minilm.weights, r.layer_inputs[layer], layer, r.attentions[layer])
        gram = head_grams(an.w_o, minilm.config.n_head)  # (from the anatomy's W_O, not the model's kept Grams)
        np.testing.assert_allclose(head_output_share_of_heads(an.head_out, gram), r.head_share[layer],
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


def _by_v_w_o(model, r):
    """Value norms and head shares from each head's v W_O in float64 (no Gram), for run `r`."""
    c = model.config
    norms, share = np.empty(r.value_norms.shape), np.empty(r.head_share.shape)
    for i, v in enumerate(r.trace.v):
        w_o = output_projection(model.weights.layers, i)[0].astype(np.float64)
        f = np.matmul(np.repeat(v, c.n_group, axis=0).astype(np.float64),
                      w_o.reshape(c.n_head, c.d_head, -1))  # [n_head, T, d_model]
        norms[i] = np.linalg.norm(f, axis=-1)
        out = np.linalg.norm(np.matmul(r.attentions[i].astype(np.float64), f), axis=(1, 2))
        share[i] = out / out.sum()
    return norms, share


@pytest.mark.parametrize("name", ["llama_gqa", "smollm2"])
def test_norms_from_the_kept_grams_equal_v_w_o_within_float32_rounding(name, request):
    """Model.value_norms reads each layer's W_O Grams (G_h = W_O(h) W_O(h)^T, kept with the model):
    the norms and shares of v W_O computed in float64, to float32 rounding, on a tiny model and
    on the real SmolLM2 held in its Q4_1 blocks."""
    model = (load_model(FIXTURES / name) if name != "smollm2"
             else request.getfixturevalue("smollm2_packed"))
    text = None if name != "smollm2" else "The keys to the cabinet are on the table, said the cat."
    ids = None if text else [3, 1, 4, 1, 5, 9, 2, 6]
    for _ in range(2):  # the Grams made, then kept
        r = model.run(text, ids=ids, request=RunRequest(values=True, use_cache=False), trace=Trace())
        norms, share = _by_v_w_o(model, r)
        np.testing.assert_allclose(r.value_norms, norms, rtol=2e-6, atol=0)
        np.testing.assert_allclose(r.head_share, share, rtol=0, atol=1e-7)


def test_keystrokes_with_value_weighted_on_read_w_o_once(smollm2_packed, monkeypatch):
    """A packed model's W_O is read from its file's blocks (store.output) for its Grams once; the
    keystrokes after read none, and give the norms a fresh model of the file gives their V."""
    model, store = smollm2_packed, smollm2_packed.weights.layers
    text, request = "The keys to the cabinet", RunRequest(values=True)
    model.run(text[:-1], request=request)
    reads, output = [], store.output
    monkeypatch.setattr(store, "output", lambda i: reads.append(i) or output(i))
    for n in range(len(text) - 6, len(text) + 1):
        got = model.run(text[:n], request=request, trace=Trace())
    assert reads == [] and got.cache_reused > 0
    want = load_model("SmolLM2-135M-Instruct").value_norms(got.attentions, got.trace.v)
    np.testing.assert_array_equal(got.value_norms, want[0])
    np.testing.assert_array_equal(got.head_share, want[1])


def test_an_edited_w_o_gives_its_own_norms_not_the_kept_ones():
    """Weights with a changed W_O (a model's weights replaced, or a new Model of them) give the
    norms of the new W_O: the Grams kept are the weights' they were made from."""
    model = load_model(FIXTURES / "llama_gqa")
    ids, request = [3, 1, 4, 1, 5, 9, 2, 6], RunRequest(values=True, use_cache=False)
    before = model.run(ids=ids, request=request).value_norms
    w = model.weights
    layers = list(w.layers)
    layers[1] = dataclasses.replace(layers[1], w_o=layers[1].w_o * np.float32(2))
    model.weights = dataclasses.replace(w, layers=tuple(layers))
    after = model.run(ids=ids, request=request).value_norms
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[1], 2 * before[1], rtol=1e-6)
    other = Model("edited", model.path, model.config, model.weights, model.tokenizer)
    np.testing.assert_array_equal(other.run(ids=ids, request=request).value_norms, after)
