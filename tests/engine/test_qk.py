"""QK attribution of one score: on every family the table (bias row and column included) adds up
to the score the run used, and score differences equal the log-ratios of the run's own pattern;
the residual parts add up to the stream entering the block; bad cells are refused in one line."""

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.analysing import qk as Q
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
FAMILIES = ["bert", "gpt2", "llama_gqa", "qwen2", "llama_mqa", "mistral", "mistral_window",
            "llama_headdim", "qwen3", "qwen3_yarn", "phi3", "gemma3", "gemma3_old",
            "llama_rope_llama3", "llama_rope_linear"]


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name in FAMILIES:
        model = load_model(FIXTURES / name)
        out[name] = (model, model.run(ids=IDS, trace=Q.qk_trace(),
                                      request=RunRequest(use_cache=False)))
    return out


def _relative(a):
    return abs(a.total() - a.score) / max(abs(a.score), 1e-6)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_table_adds_up_to_the_score_the_run_used(runs, name):
    model, r = runs[name]
    cfg = model.config
    q, k1, k2 = 9, 8, 7  # keys inside every fixture's window
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            a = Q.qk_attribution(model, r.trace, layer, head, q, k1)
            b = Q.qk_attribution(model, r.trace, layer, head, q, k2)
            assert _relative(a) < 1e-4 and _relative(b) < 1e-4, (layer, head, a.total(), a.score)
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
    assert _relative(a) < 1e-4


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


def test_smollm2_one_cell_adds_up(smollm2):
    r = smollm2.run(ids=IDS * 2, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    cfg = smollm2.config
    for layer, head in ((0, 0), (cfg.n_layer // 2, 3), (cfg.n_layer - 1, cfg.n_head - 1)):
        a = Q.qk_attribution(smollm2, r.trace, layer, head, 20, 9)
        assert _relative(a) < 1e-4, (layer, head, a.total(), a.score)
        row = r.attentions[layer, head, 20]
        b = Q.qk_attribution(smollm2, r.trace, layer, head, 20, 3)
        assert np.log(row[9] / row[3]) == pytest.approx(a.score - b.score, abs=1e-3)
