"""The forward pass's trace: it records only what it is asked for, its records add up to the
residual stream, the KV cache gives the same records as a fresh run, and its edits (replace a head's
output, knock out an edge) equal the same change made to the weights or the scores by hand, also
when the run resumes from an earlier layer's residual."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.errors import InputError
from attnviz.engine.computing.families import forward, layer_consts, mlp
from attnviz.engine.computing.trace import Knockout, ReplaceHead, Trace
from tiny import FIXTURES, tiny_llama
from attnviz.engine.computing.request import RunRequest

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], dtype=np.int64)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    return {"gpt2": load_model(FIXTURES / "gpt2"),
            "llama_gqa": load_model(tiny_llama(root / "gqa", seed=2, n_head=8, n_kv_head=2, n_layer=3))}


def _head_out(model, i, z):  # z [n_head, T, d_head] -> attention output [T, d_model] from the heads
    w_o = model.weights.layers[i].w_o
    b_o = model.weights.layers[i].b_o
    out = sum(z[h] @ w_o[h * z.shape[2]:(h + 1) * z.shape[2]] for h in range(z.shape[0]))
    return out + (b_o if b_o is not None else 0)


def test_a_trace_records_only_what_it_asks_for(models):
    model = models["gpt2"]
    cfg = model.config
    plain = forward(cfg, model.weights, IDS)
    assert plain.attentions.shape == (cfg.n_layer, cfg.n_head, len(IDS), len(IDS))
    assert all(x is None for x in plain.z + plain.resid + plain.inputs + plain.v)
    full = forward(cfg, model.weights, IDS, Trace(z=True, resid=True))
    assert [z.shape for z in full.z] == [(cfg.n_head, len(IDS), cfg.d_head)] * cfg.n_layer
    assert len(full.resid) == cfg.n_layer + 1 and full.resid[-1].shape == (len(IDS), cfg.d_model)
    np.testing.assert_array_equal(full.attentions, plain.attentions)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_head_outputs_and_mlps_add_up_to_the_residual_stream(models, name):
    model = models[name]
    cfg, w = model.config, model.weights
    t = forward(cfg, w, IDS, Trace(z=True, resid=True))
    consts = layer_consts(cfg, len(IDS))
    for i, layer in enumerate(w.layers):
        mid = t.resid[i] + _head_out(model, i, t.z[i])  # after attention
        after = mid + mlp(consts[i].norm(mid, layer.norm2), layer, consts[i])
        np.testing.assert_allclose(after, t.resid[i + 1], rtol=1e-4, atol=1e-4)


def test_the_kv_cache_gives_the_same_records_as_a_fresh_run(models):
    model = models["llama_gqa"]
    model.clear_cache()
    ask = dict(z=True, resid=True, inputs=True)
    model.run(ids=IDS[:7], trace=Trace(**ask))
    cached = model.run(ids=IDS, trace=Trace(**ask))
    fresh = model.run(ids=IDS, trace=Trace(**ask), request=RunRequest(use_cache=False))
    assert cached.cache_reused == 7
    for name in ("z", "resid", "inputs"):
        for a, b in zip(getattr(cached.trace, name), getattr(fresh.trace, name)):
            np.testing.assert_allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError):  # shared with the cache: read-only
        cached.trace.resid[0][0, 0] = 1.0
    # the same ids again: every record comes from the cache
    same = model.run(ids=IDS, trace=Trace(z=True))
    assert same.cache_reused == len(IDS) and same.trace.z[0] is cached.trace.z[0]
    # a plain run that computes keeps no records: the next run asking for them starts from the
    # earlier run that kept them (the cache keeps a few earlier runs), else computes in full
    other = np.concatenate([IDS[:-1], [7]])
    assert model.run(ids=other).cache_reused == len(IDS) - 1
    again = model.run(ids=other, trace=Trace(z=True))
    assert again.cache_reused == len(IDS) - 1
    want = model.run(ids=other, trace=Trace(z=True), request=RunRequest(use_cache=False))
    for a, b in zip(again.trace.z, want.trace.z):
        np.testing.assert_allclose(a, b, atol=1e-5)
    model.clear_cache()
    model.run(ids=other)  # no earlier run now: the only one kept has no records
    full = model.run(ids=other, trace=Trace(z=True))
    assert full.cache_reused == 0 and full.trace.z[0] is not None


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_zeroing_a_head_equals_zeroing_its_rows_of_w_o(models, name, tmp_path):
    model = models[name]
    cfg, w = model.config, model.weights
    layer, head = 1, 2
    edited = forward(cfg, w, IDS, Trace(resid=True, edits=[ReplaceHead(layer, head, 0.0)]))
    rows = slice(head * cfg.d_head, (head + 1) * cfg.d_head)
    w_o = np.array(w.layers[layer].w_o)
    w_o[rows] = 0
    layers = list(w.layers)
    layers[layer] = type(layers[layer])(**{**layers[layer].__dict__, "w_o": w_o})
    by_hand = forward(cfg, type(w)(**{**w.__dict__, "layers": tuple(layers)}), IDS, Trace(resid=True))
    np.testing.assert_allclose(edited.resid[-1], by_hand.resid[-1], rtol=1e-5, atol=1e-5)
    clean = forward(cfg, w, IDS, Trace(resid=True))
    assert np.abs(edited.resid[-1] - clean.resid[-1]).max() > 1e-3  # the head mattered
    np.testing.assert_array_equal(edited.attentions[:layer + 1], clean.attentions[:layer + 1])


def test_a_knockout_removes_one_edge_and_renormalises_the_row(models):
    model = models["llama_gqa"]
    cfg, w = model.config, model.weights
    layer, q, k = 1, 6, 2
    clean = forward(cfg, w, IDS)
    cut = forward(cfg, w, IDS, Trace(edits=[Knockout(layer, q, k)]))
    np.testing.assert_array_equal(cut.attentions[:layer], clean.attentions[:layer])
    row = clean.attentions[layer, :, q].copy()  # [n_head, T]
    row[:, k] = 0
    np.testing.assert_allclose(cut.attentions[layer, :, q], row / row.sum(-1, keepdims=True), atol=1e-6)
    others = [r for r in range(len(IDS)) if r != q]
    np.testing.assert_allclose(cut.attentions[layer][:, others], clean.attentions[layer][:, others],
                               atol=1e-6)
    assert np.abs(cut.attentions[layer + 1] - clean.attentions[layer + 1]).max() > 1e-4


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_a_run_resumed_from_a_layer_equals_the_whole_edited_run(models, name):
    model = models[name]
    cfg, w = model.config, model.weights
    clean = forward(cfg, w, IDS, Trace(resid=True, z=True))
    edits = [ReplaceHead(1, 0, 0.0), Knockout(1, 5, 0)]
    whole = forward(cfg, w, IDS, Trace(resid=True, z=True, edits=edits))
    resumed = forward(cfg, w, IDS, Trace(resid=True, z=True, edits=edits, start=1, base=clean))
    assert resumed.resid[0] is clean.resid[0]  # layer 0 was not run again
    np.testing.assert_allclose(resumed.resid[-1], whole.resid[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(resumed.attentions, whole.attentions)
    np.testing.assert_array_equal(resumed.z[0], whole.z[0])
    np.testing.assert_array_equal(resumed.z[1][0], 0)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_a_run_of_the_first_layers_equals_those_layers_of_the_whole_run(models, name):
    """RunRequest(layers=n): the first n layers' patterns, inputs and value norms as the whole run
    has them, nothing after; the KV cache is neither read nor changed; n outside 1..n_layer is
    refused."""
    model = models[name]
    n_layer = model.config.n_layer
    ids = IDS.tolist()
    whole = model.run(ids=ids, request=RunRequest(inputs=True, values=True, use_cache=False))
    for n in range(1, n_layer + 1):
        part = model.run(ids=ids, request=RunRequest(inputs=True, values=True, layers=n))
        assert part.attentions.shape == (n,) + whole.attentions.shape[1:]
        np.testing.assert_array_equal(part.attentions, whole.attentions[:n])
        np.testing.assert_array_equal(part.value_norms, whole.value_norms[:n])
        assert len(part.layer_inputs) == n
        for a, b in zip(part.layer_inputs, whole.layer_inputs):
            np.testing.assert_array_equal(a, b)
        assert part.cache_reused == 0
    if model.config.causal:
        model.run(ids=ids)  # fills the cache
        model.run(ids=ids[:-1], request=RunRequest(layers=1))
        assert model.run(ids=ids).cache_reused == len(ids)  # the early-ending run left it alone
    for bad in (0, n_layer + 1):
        with pytest.raises(InputError, match=f"layers must be 1..{n_layer}"):
            model.run(ids=ids, request=RunRequest(layers=bad))
    with pytest.raises(ValueError, match="must start before it"):
        Trace(end=0)
