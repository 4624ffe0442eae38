"""One display model for short and long texts (figures/view.Shown): a long run's cells, rows,
weights, regions and colour tops under every combination of Hide first token, Value-weighted, block
max or mean and pooled or exact equal a dense run's of the same patterns and a NumPy reduction of
the dense shown pattern; the options change what is shown; a long run's value norms are the dense
run's."""

from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.longdoc import run_long
from attnviz.engine.computing.patterns import drop_first_key, value_weighted
from attnviz.figures import overview as ov
from attnviz.figures import view
from attnviz.figures.view import Shown, cell_edges
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

# Two BLAS calls over different rows, keys or heads round a score differently (1 ulp of a score
# near 15 is 1e-6, and exp keeps it as a relative error): the long run's rows and the dense ones
# differ by up to 2e-6 relative before any option (LongPatterns.rows against .dense() on these
# fixtures). The display rules add about 1e-7 (the dense run against NumPy, at 1e-6).
CLOSE = dict(atol=1e-6, rtol=2e-6)
OPTIONS = [(hide, weighted) for hide in (False, True) for weighted in (False, True)]
# (region, shape): blocks of 4-5 rows x 5-6 keys; a region no larger than its cells (exact); a
# region whose first cell is the first key alone; every row and key into a few cells; the first
# rows exact (a decoder's first, under Hide first token: undefined, a blank row)
VIEWS = [((3, 34, 1, 30), (7, 5)), ((10, 22, 0, 20), (64, 64)), ((0, 37, 0, 37), (5, 37)),
         ((0, 37, 0, 37), (3, 4)), ((0, 6, 0, 37), (64, 64))]


@pytest.fixture(scope="module", params=["llama_gqa", "mistral_window", "bert"])
def runs(request):
    """A fixture model on 37 ids: (the long run, a dense run of the long run's own patterns and
    value norms, the model's dense run with values=True)."""
    model = load_model(FIXTURES / request.param)
    ids = np.random.default_rng(3).integers(0, 12, min(37, model.config.max_positions))
    long = run_long(model, ids=ids, row_block=4)
    same = SimpleNamespace(attentions=long.patterns.dense(), value_norms=long.result.value_norms)
    return long, same, model.run(ids=ids, request=RunRequest(use_cache=False, values=True))


def dense_shown(att, norms, hide_first, weighted):  # [.., T, T] -> [.., T, T], token coordinates
    """The shown pattern from patterns.value_weighted and drop_first_key, a hidden key as 0."""
    if weighted:
        att = value_weighted(att, norms)
    if hide_first:
        att = np.concatenate([np.zeros_like(att[..., :1]), drop_first_key(att)], axis=-1)
    return att


def numpy_cells(pattern, region, shape, reduce, hide_first=False):  # [n, T, T] -> [n, H, W], [n, H]
    """The cells and their blank rows, block by block: a max over the block (the hidden key a 0);
    a mean over its defined weights alone (Hide first token: not the hidden key, nor a row with no
    weight on any key), 0 where it has none; a row of cells with no defined row blank."""
    r0, r1, c0, c1 = region
    H, W = min(shape[0], r1 - r0), min(shape[1], c1 - c0)
    rows, cols = cell_edges(r0, r1, H), cell_edges(c0, c1, W)
    defined = (pattern > 0).any(-1) if hide_first else np.ones(pattern.shape[:2], bool)  # [n, T]
    shown = np.where(defined[:, :, None], pattern, np.nan)
    if hide_first:
        shown[:, :, 0] = np.nan
    out = np.zeros((len(pattern), H, W))
    for i in range(H):
        for j in range(W):
            block = shown[:, rows[i]:rows[i + 1], cols[j]:cols[j + 1]].reshape(len(pattern), -1)
            seen = ~np.isnan(block)
            if reduce == "max":
                out[:, i, j] = np.where(seen, block, 0).max(-1)
            else:
                out[:, i, j] = np.nansum(block, -1) / np.maximum(seen.sum(-1), 1)
    n_rows = np.add.reduceat(defined[:, r0:r1].astype(np.int64), rows[:-1] - r0, axis=1)  # [n, H]
    return out, n_rows == 0


@pytest.mark.parametrize("row_block", [256, 5])  # every row at once; blocks of 5 rows, totals kept
@pytest.mark.parametrize("reduce", ["max", "mean"])
@pytest.mark.parametrize("options", OPTIONS)
def test_a_long_runs_cells_are_the_dense_runs_under_every_option(runs, options, reduce, row_block,
                                                                 monkeypatch):
    monkeypatch.setattr(view, "ROW_BLOCK", row_block)
    long, same, _ = runs
    lp = long.patterns
    got, dense = Shown(long, *options), Shown(same, *options)
    assert got.applied == dense.applied == options
    want = dense_shown(same.attentions, same.value_norms, *options)  # [n_layer, n_head, T, T]
    for layer in range(lp.n_layer):
        for region, shape in VIEWS:
            a = got.cells(layer, region, shape, reduce)
            b = dense.cells(layer, region, shape, reduce, heads=range(lp.n_head))
            assert a.values.shape == b.values.shape and a.options == b.options == options
            np.testing.assert_allclose(a.values, b.values, **CLOSE)
            values, blank = numpy_cells(want[layer], region, shape, reduce, options[0])
            np.testing.assert_allclose(b.values, values, atol=1e-6, rtol=0)
            assert np.array_equal(a.blank, blank) and np.array_equal(b.blank, blank)
            assert a.exact == (shape == (64, 64))
            for mode in ("shared", "per-head"):  # the colour levels of what is shown
                np.testing.assert_allclose(ov.tops(a.values, mode), ov.tops(b.values, mode), **CLOSE)
        part = got.cells(layer, (5, 30, 2, 33), (4, 4), reduce, heads=[lp.n_head - 1, 0])
        np.testing.assert_allclose(part.values, numpy_cells(want[layer][[-1, 0]], (5, 30, 2, 33),
                                                            (4, 4), reduce, options[0])[0], **CLOSE)


@pytest.mark.parametrize("options", OPTIONS)
def test_a_long_runs_weights_regions_and_tops_are_the_dense_runs(runs, options):
    long, same, _ = runs
    got, dense = Shown(long, *options), Shown(same, *options)
    T = got.n_tok
    assert list(got.key_pos) == list(dense.key_pos) == list(range(1 if options[0] else 0, T))
    for layer, h, q, k in [(0, 0, 30, 2), (1, got.n_head - 1, 36, 36), (1, 2, 20, 11), (0, 1, 9, 0)]:
        a, b = got.weight(layer, h, q, k), dense.weight(layer, h, q, k)
        assert (a is None) == (b is None) == (options[0] and k == 0)
        if a is not None:
            assert a == pytest.approx(b, abs=CLOSE["atol"], rel=CLOSE["rtol"])
    for pool in (1, 4):
        a, b = got.region([1], [0, 2], rows=(3, 29), pool=pool), dense.region([1], [0, 2], rows=(3, 29), pool=pool)
        assert list(a.cols) == list(b.cols) and list(a.rows) == list(b.rows)
        np.testing.assert_allclose(a.values, b.values, **CLOSE)
    np.testing.assert_allclose(got.head_top(), dense.head_top(), **CLOSE)
    assert got.shared_top() == pytest.approx(dense.shared_top(), abs=CLOSE["atol"], rel=CLOSE["rtol"])
    assert got.strongest_in_block(1, 2, 8, 0, 6) == dense.strongest_in_block(1, 2, 8, 0, 6)


def test_each_option_changes_what_a_long_run_shows(runs):
    """No option is ignored: each moves some cell by more than rounding, and a hidden first key is
    0 where the plain pattern is not."""
    long, _, _ = runs
    full = (0, long.patterns.T, 0, long.patterns.T)
    cells = {o: Shown(long, *o).cells(1, full, (64, 64)).values for o in OPTIONS}
    for a in OPTIONS:
        for b in OPTIONS:
            if a != b:
                assert np.abs(cells[a] - cells[b]).max() > 1e-3, (a, b)
    assert cells[(True, False)][:, :, 0].max() == 0 < cells[(False, False)][:, :, 0].max()
    rows = cells[(True, True)].sum(-1)  # renormalised over the keys left (BOS's own row: nothing)
    np.testing.assert_allclose(rows[rows > 0], 1.0, atol=1e-5)


def test_a_long_run_has_the_dense_runs_value_norms_and_shows_what_it_shows(runs):
    long, _, full = runs
    np.testing.assert_allclose(long.result.value_norms, full.value_norms, rtol=1e-4, atol=1e-6)
    for options in OPTIONS:  # the model's own dense run, within what the two forward passes differ by
        a = Shown(long, *options).cells(1, (0, 37, 0, 37), (9, 9), "mean").values
        b = Shown(full, *options).cells(1, (0, 37, 0, 37), (9, 9), "mean").values
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_cells_refuse_a_region_outside_the_text_or_an_unknown_reduction(runs):
    from attnviz.engine.errors import InputError

    long, same, _ = runs
    for run in (long, same):
        shown = Shown(run, True, True)
        with pytest.raises(InputError):
            shown.cells(0, (0, 38, 0, 37), (4, 4))
        with pytest.raises(InputError):
            shown.cells(0, (0, 37, 0, 37), (4, 4), "median")
