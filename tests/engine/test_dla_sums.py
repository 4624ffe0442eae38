"""Direct logit attribution's parts add up, and each part is what its name says: the MLP row is the
MLP's own recorded output through the frozen final norm (not just what the heads leave over), on
every family and on SmolLM2, the window's default model.

Tolerances. Every part is a float32 product of a [d_model] vector with the frozen direction, so each
is off by a few float32 ulps of Σ_i |part_i d_i|; the parts and the logit difference are compared
relative to the sum of |parts| (1e-5, about 100 float32 ulps)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import predict as P
from attnviz.engine.computing.families import layer_consts
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import Trace
from attnviz.engine.reading import qpack
from gguf_files import Q, family_gguf
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
CAUSAL = ["gpt2", "llama_gqa", "qwen2", "llama_mqa", "mistral", "llama_headdim", "qwen3", "phi3", "gemma3",
          "gemma3_old"]
TEXT = ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
        "thanked Mrs Vashmere Okkadine in Plumbrook.")


def _direction(model, head, trace, q, target, alt):  # [d_model] float64: the frozen final norm · u
    x = trace.resid[-1][q].astype(np.float64)
    u = head.w_u[target].astype(np.float64) - head.w_u[alt]
    g = head.norm[0].astype(np.float64)
    if head.centred:  # LayerNorm: (p - mean p) · g u / std = p · (v - mean v)
        c = x - x.mean()
        v = g * u / np.sqrt(np.mean(c * c) + head.eps)
        return v - v.mean()
    return g * u / np.sqrt(np.mean(x * x) + head.eps)


def _mlp_written(model, trace, layer, q):  # [d_model] float64: what layer's MLP adds to the stream
    m = trace.mlp_out[layer][q:q + 1]
    post = model.weights.layers[layer].post_mlp_norm
    if post is not None:  # Gemma 3: the MLP's output passes its post-feedforward norm first
        m = layer_consts(model.config, 1, masks=False)[layer].norm(m, post)
    return m[0].astype(np.float64)


def _check(model, trace, q, target, alt):
    head = model.lm_head()
    a = P.attribute(model, head, trace, q, target, alt)
    d = _direction(model, head, trace, q, target, alt)
    scale = (np.abs(a.heads).sum() + np.abs(a.mlp).sum() + abs(a.embed) + abs(a.bias)) * 1e-5
    assert abs(a.total() - a.logit_diff) < scale, (a.total(), a.logit_diff)
    mlp = np.array([_mlp_written(model, trace, layer, q) @ d for layer in range(model.config.n_layer)])
    np.testing.assert_allclose(a.mlp, mlp, rtol=0, atol=scale)
    assert np.abs(mlp).max() > 100 * scale  # the MLPs take part
    return a


@pytest.mark.parametrize("name", CAUSAL)
def test_the_mlp_row_is_the_mlps_output_and_the_parts_add_up(name):
    model = load_model(FIXTURES / name)
    r = model.run(ids=IDS, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    for q, (target, alt) in ((len(IDS) - 1, (7, 11)), (4, (2, 30))):
        _check(model, r.trace, q, target, alt)


def test_smollm2_dla_adds_up_and_its_mlp_row_is_the_mlps_output(smollm2):
    r = smollm2.run(text=TEXT, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    head = smollm2.lm_head()
    for q in (len(r.trace.ids) - 1, 34, 5):
        pred = P.predict(head, r.trace, q, k=2)
        a = _check(smollm2, r.trace, q, int(pred.top_ids[0]), int(pred.top_ids[1]))
        # the difference DLA splits is the one the prediction shows
        assert a.logit_diff == pytest.approx(pred.top_logprobs[0] - pred.top_logprobs[1], abs=1e-4)


@pytest.mark.parametrize("name", ["gemma3", "llama_gqa"])
def test_a_packed_models_dla_reads_no_w_o_and_equals_the_float32_products(name, tmp_path, kernels, monkeypatch):
    """A GGUF model held in its blocks (the window's) attributes each head on its packed W_O
    through the kernels: no W_O read from the file (store.output) nor layer expanded for it, the
    parts still adding up (Gemma 3's post-attention norm too), and the heads those of the float32
    W_O of the same run to float32 rounding."""
    path = family_gguf(FIXTURES / name, tmp_path / f"{name}.gguf", Q.Q8_0)
    qpack.ask_for_kernels(False)
    ref = load_gguf(path)  # its layers float32
    qpack.ask_for_kernels()
    model = load_gguf(path)
    store = model.weights.layers
    r = model.run(ids=IDS, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    for q, (target, alt) in ((len(IDS) - 1, (7, 11)), (4, (2, 30))):
        reads, output, before = [], store.output, store.expansions
        monkeypatch.setattr(store, "output", lambda i: reads.append(i) or output(i))
        a = P.attribute(model, model.lm_head(), r.trace, q, target, alt)
        assert reads == [] and store.expansions == before
        monkeypatch.undo()
        _check(model, r.trace, q, target, alt)  # (its MLP rows expand the layers)
        want = P.attribute(ref, ref.lm_head(), r.trace, q, target, alt)
        scale = (np.abs(want.heads).sum() + np.abs(want.mlp).sum()) * 1e-6
        np.testing.assert_allclose(a.heads, want.heads, rtol=0, atol=scale)
