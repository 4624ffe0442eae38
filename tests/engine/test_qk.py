"""QK attribution of one score: on every family and on the bundled SmolLM2 and MiniLM the table
(bias row and column included) adds up to the score the run used, and score differences equal the
log-ratios of the run's own pattern; the residual parts add up to the stream entering the block,
and each MLP part is that MLP's own recorded output (a wrong head part would still add up, the MLP
part taking up the difference); bad cells are refused in one line."""

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.analysing import qk as Q
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.families import layer_consts, output_projection
from attnviz.engine.computing.layers import merge_heads
from attnviz.engine.computing.trace import Trace

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
FAMILIES = ["bert", "gpt2", "llama_gqa", "qwen2", "llama_mqa", "mistral", "mistral_window",
            "llama_headdim", "qwen3", "qwen3_yarn", "phi3", "gemma3", "gemma3_old",
            "llama_rope_llama3", "llama_rope_linear"]


NAMES = ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
         "thanked Mrs Vashmere Okkadine in Plumbrook.")


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name in FAMILIES:
        model = load_model(FIXTURES / name)
        out[name] = (model, model.run(ids=IDS, trace=Q.qk_trace(),
                                      request=RunRequest(use_cache=False)))
    return out


def _adds_up(a) -> bool:
    """|parts' sum - score| within 1e-5 of the sum of the terms' sizes, plus 1e-6: the run's score
    is a float32 product whose rounding scales with its terms, not with the score (a score near 0
    is off by far more than 1e-4 of itself: SmolLM2's L25 H0 at 45 -> 44 below, by about 5e-3)."""
    return abs(a.total() - a.score) < 1e-5 * np.abs(a.table).sum() + 1e-6


@pytest.mark.parametrize("name", FAMILIES)
def test_the_table_adds_up_to_the_score_the_run_used(runs, name):
    model, r = runs[name]
    cfg = model.config
    q, k1, k2 = 9, 8, 7  # keys inside every fixture's window
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            a = Q.qk_attribution(model, r.trace, layer, head, q, k1)
            b = Q.qk_attribution(model, r.trace, layer, head, q, k2)
            assert _adds_up(a) and _adds_up(b), (layer, head, a.total(), a.score)
            n = 2 + layer * (cfg.n_head + 1)  # embed, each earlier head and MLP, bias
            assert a.table.shape == (n, n) and len(a.components) == n
            assert a.components[0] == "embed" and a.components[-1] == "bias"
            # the pattern the run showed: log a[q, k1] - log a[q, k2] = score(k1) - score(k2)
            row = r.attentions[layer, head, q]
            assert np.log(row[k1] / row[k2]) == pytest.approx(a.score - b.score, abs=2e-4)
            np.testing.assert_allclose(a.query_side.sum(), a.score, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(a.key_side.sum(), a.score, rtol=1e-4, atol=1e-6)
    assert np.abs(a.table[1:-1]).max() > 1e-3  # earlier heads and MLPs take part


@pytest.mark.parametrize("name", ["bert", "gpt2", "gemma3", "qwen3"])
def test_the_residual_parts_add_up_to_the_stream_entering_each_block(runs, name):
    model, r = runs[name]
    rows = np.array([0, 5, 10])
    for layer in range(model.config.n_layer + 1):
        names, parts = Q.residual_parts(model, r.trace, layer, rows)
        assert parts.shape == (len(names), 3, model.config.d_model)
        np.testing.assert_allclose(parts.sum(axis=0), r.trace.resid[layer][rows], atol=2e-5)


def test_bias_is_the_bias_row_and_column_and_top_is_sorted(runs):
    model, r = runs["gpt2"]  # biases everywhere
    a = Q.qk_attribution(model, r.trace, 1, 0, 10, 3)
    t = a.table
    assert a.bias == pytest.approx(t[-1].sum() + t[:, -1].sum() - t[-1, -1])
    assert abs(a.bias) > 1e-4
    top = a.top()
    assert len(top) == min(20, t.size)
    values = [abs(v) for _, _, v in top]
    assert values == sorted(values, reverse=True) and values[0] == pytest.approx(np.abs(t).max())
    qa, kb, v = top[0]
    assert t[a.components.index(qa), a.components.index(kb)] == v


def test_an_encoder_scores_keys_after_the_query(runs):
    model, r = runs["bert"]
    a = Q.qk_attribution(model, r.trace, 1, 0, 2, 9)
    assert _adds_up(a)


@pytest.mark.parametrize("cell, words", [
    ((0, 0, 3, 5), "key 5 comes after query 3"),
    ((0, 0, 11, 2), "query position 11 is outside the 11 tokens (0..10)"),
    ((0, 0, 2, -1), "key position -1 is outside"),
    ((2, 0, 2, 1), "layer 2 is outside this model's layers 0..1"),
    ((0, 8, 2, 1), "head 8 is outside"),
])
def test_cells_the_head_never_scored_are_refused_in_one_line(runs, cell, words):
    model, r = runs["llama_gqa"]
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        Q.qk_attribution(model, r.trace, *cell)
    assert "\n" not in str(e.value)


def test_a_key_outside_a_local_layers_window_is_refused(runs):
    model, r = runs["mistral_window"]
    w = model.config.window(0)
    with pytest.raises(InputError, match=f"outside layer 0's window of {w} tokens"):
        Q.qk_attribution(model, r.trace, 0, 0, 10, 10 - w)
    Q.qk_attribution(model, r.trace, 0, 0, 10, 10 - w + 1)


def test_smollm2_cells_add_up(smollm2):
    r = smollm2.run(ids=IDS * 2, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    cfg = smollm2.config
    for layer, head in ((0, 0), (cfg.n_layer // 2, 3), (cfg.n_layer - 1, cfg.n_head - 1)):
        a = Q.qk_attribution(smollm2, r.trace, layer, head, 20, 9)
        assert _adds_up(a), (layer, head, a.total(), a.score)
        row = r.attentions[layer, head, 20]
        b = Q.qk_attribution(smollm2, r.trace, layer, head, 20, 3)
        assert np.log(row[9] / row[3]) == pytest.approx(a.score - b.score, abs=1e-3)
    r = smollm2.run(text=NAMES, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    for head in range(cfg.n_head):  # L25 H0's score at 45 -> 44 is near 0 (about -3e-4)
        a = Q.qk_attribution(smollm2, r.trace, 25, head, 45, 44)
        assert _adds_up(a), (head, a.total(), a.score, np.abs(a.table).sum())


def _ulps(trace, layer, rows):
    """The MLP part is the layer's step in the float32 stream less its heads: 16 float32 ulps of the
    stream's largest entry there (SmolLM2's stream holds entries in the hundreds)."""
    return 1e-6 * max(np.abs(trace.resid[layer][rows]).max(), np.abs(trace.resid[layer + 1][rows]).max())


def _mlp_written(model, trace, layer, rows):  # [n, d_model] float64: layer's MLP output, less b_out
    lw = model.weights.layers[layer]
    m = trace.mlp_out[layer][rows]
    if lw.post_mlp_norm is not None:  # Gemma 3: the post-feedforward norm is inside the MLP's part
        m = layer_consts(model.config, len(rows), masks=False)[layer].norm(m, lw.post_mlp_norm)
    return m.astype(np.float64) - (0 if lw.b_out is None else lw.b_out)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "qwen3", "phi3", "gemma3"])
def test_each_mlp_part_is_that_mlps_recorded_output(name):
    """The MLP part is what the layer wrote less its heads; it must equal the MLP's own output, or
    a head part is wrong (the parts would still add up)."""
    _assert_mlp_parts_are_their_outputs(load_model(FIXTURES / name), IDS, np.array([0, 5, 10]))


def _assert_mlp_parts_are_their_outputs(model, ids, rows) -> None:
    """Each layer's MLP part of residual_parts at `rows` is _mlp_written, to the run's rounding."""
    r = model.run(ids=ids, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    L = model.config.n_layer
    names, parts = Q.residual_parts(model, r.trace, L, rows)
    for layer in range(L):
        want = _mlp_written(model, r.trace, layer, rows)
        np.testing.assert_allclose(parts[names.index(f"L{layer}.mlp")], want, rtol=0,
                                   atol=_ulps(r.trace, layer, rows))


def test_a_post_norm_mlp_part_is_its_output_through_the_frozen_second_norm(runs):
    """BERT: the block's MLP part entering the next block is (m - mean m) · g2 / std(y + m), with
    y = LN1(x + attention output) and m the MLP's output less its bias."""
    model, _ = runs["bert"]
    cfg = model.config
    r = model.run(ids=IDS, trace=Trace(z=True, resid=True, mlp_out=True), request=RunRequest(use_cache=False))
    rows = np.array([0, 5, 10])
    for i in range(cfg.n_layer):
        lw = model.weights.layers[i]
        attn = merge_heads(r.trace.z[i][:, rows]).astype(np.float64) @ lw.w_o + lw.b_o
        y = _layer_norm(r.trace.resid[i][rows] + attn, lw.norm1, cfg.norm_eps)
        m = r.trace.mlp_out[i][rows].astype(np.float64)
        u = y + m
        c = u - u.mean(axis=-1, keepdims=True)
        mc = (m - lw.b_out) - (m - lw.b_out).mean(axis=-1, keepdims=True)
        want = mc * lw.norm2[0] / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + cfg.norm_eps)
        names, parts = Q.residual_parts(model, r.trace, i + 1, rows)
        np.testing.assert_allclose(parts[names.index(f"L{i}.mlp")], want, rtol=0, atol=1e-5)


def _layer_norm(x, gain_bias, eps):  # float64 LayerNorm
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps) * gain_bias[0] + gain_bias[1]


def test_minilm_cells_add_up(minilm):
    """The bundled BERT: the table adds up to the score within 1e-5 of the sum of its |terms| (the
    run's own score is a float32 product), and score differences are the pattern's log-ratios."""
    r = minilm.run(text="The keys to the cabinet are on the table.", trace=Q.qk_trace(),
                   request=RunRequest(use_cache=False))
    T = len(r.trace.ids)
    for layer, head, q, k in ((0, 0, 2, T - 1), (3, 5, T - 2, 1), (5, 11, 4, 4)):
        a = Q.qk_attribution(minilm, r.trace, layer, head, q, k)
        assert _adds_up(a), (layer, head, a.total(), a.score)
        b = Q.qk_attribution(minilm, r.trace, layer, head, q, 0)
        row = r.attentions[layer, head, q]
        assert np.log(row[k] / row[0]) == pytest.approx(a.score - b.score, abs=1e-4)


def test_smollm2_mlp_parts_are_the_mlps_outputs(smollm2):
    _assert_mlp_parts_are_their_outputs(smollm2, IDS * 2, np.array([20, 9]))


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2"])
def test_a_switched_off_heads_part_is_what_its_replacement_writes(runs, name):
    """In the changed run of What heads do, a zero-ablated head's part is 0 and a mean-ablated
    head's is its mean z through W_O at every position (docs/why-here.md says both); the table
    of the changed run still adds up to its score."""
    from attnviz.engine.analysing import ablation as A

    model, r = runs[name]
    cfg = model.config
    rows = np.arange(len(IDS))
    w_out = output_projection(model.weights.layers, 0)[0]
    w_o = w_out.reshape(cfg.n_head, cfg.d_head, -1).astype(np.float64)  # [n_head, d_head, d_model]
    for mode in ("zero", "mean"):
        edits = A.head_edits(r.trace, [(0, 1)], mode)
        changed = A.run_edited(model, r.trace, edits)
        names, parts = Q.residual_parts(model, changed, 1, rows)
        part = parts[names.index("L0H1")]  # [T, d_model]
        want = np.zeros_like(part) if mode == "zero" else np.broadcast_to(
            r.trace.z[0][1].astype(np.float64).mean(axis=0) @ w_o[1], part.shape)
        np.testing.assert_allclose(part, want, atol=1e-6)
        assert mode == "zero" or np.abs(want).max() > 1e-2
        assert _adds_up(Q.qk_attribution(model, changed, 1, 0, 9, 8))
