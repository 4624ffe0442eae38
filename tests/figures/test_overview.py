"""The long view's cells (figures/view.Shown.cells of a long run, no options) and its geometry and
colours (figures/overview.py): a cell is the max or the mean of its block of the dense pattern,
exact once a region is no larger than the cells; zoom keeps the token under the pointer and stays
inside the text; a dragged rectangle covers every token it touches; the log colour scale spans
LOG_DECADES below the top; hover's weight and the window edge match the dense pattern. The options
on a long run: tests/figures/test_shown_long.py."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.longdoc import run_long
from attnviz.engine.errors import Cancelled
from attnviz.figures import overview as ov
from attnviz.figures.view import Shown
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest


@pytest.fixture(scope="module", params=["llama_gqa", "mistral_window"])
def run(request):
    """A fixture decoder on 37 ids: (dense patterns [n_layer, n_head, T, T], the long run as shown
    with no options)."""
    model = load_model(FIXTURES / request.param)
    ids = np.random.default_rng(3).integers(0, 12, min(37, model.config.max_positions))
    dense = model.run(ids=ids, request=RunRequest(use_cache=False)).attentions
    return dense, Shown(run_long(model, ids=ids, row_block=4))


def blocks_of(a, edges_r, edges_c, fold):  # a [n, R, C] -> [n, len(edges_r), len(edges_c)]
    return fold(fold(a, edges_c, axis=2), edges_r, axis=1)


@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_overview_cells_are_a_numpy_reduction_of_the_dense_pattern(run, reduce):
    dense, shown = run
    lp = shown.patterns
    region = (3, 34, 1, 30)  # 31 rows x 29 keys into 7 x 5 cells: blocks of 4 or 5 by 5 or 6
    got = shown.cells(1, region, (7, 5), reduce)
    part = dense[1][:, 3:34, 1:30]
    rows, cols = (np.arange(7) * 31) // 7, (np.arange(5) * 29) // 5
    fold = np.maximum.reduceat if reduce == "max" else np.add.reduceat
    want = blocks_of(part, rows, cols, fold)
    if reduce == "mean":
        want = want / np.outer(np.diff([*rows, 31]), np.diff([*cols, 29]))
    assert got.values.shape == (lp.n_head, 7, 5) and not got.exact
    np.testing.assert_allclose(got.values, want, atol=1e-5, rtol=0)
    assert got.cell_tokens(0) == 5 and got.cell_tokens(1) == 6


def test_block_maxima_are_the_very_numbers_of_reducing_the_exact_rows(run):
    """The max is taken over the scores before exp (LongPatterns._row_maxima): the same float32s,
    blocks no row may see (above the diagonal, left of a window) included."""
    _, shown = run
    lp = shown.patterns
    for region in [(0, lp.T, 0, lp.T), (5, 30, 20, 37), (20, 37, 0, 9), (0, 3, 0, lp.T)]:
        r0, r1, c0, c1 = region
        H, W = min(6, r1 - r0), 5
        got = shown.cells(1, region, (H, W), "max", heads=[0, lp.n_head - 1]).values
        rows = lp.rows(1, r0, r1, heads=[0, lp.n_head - 1], cols=(c0, c1))
        want = blocks_of(rows, (np.arange(H) * (r1 - r0)) // H, (np.arange(W) * (c1 - c0)) // W,
                         np.maximum.reduceat)
        np.testing.assert_array_equal(got, want)


def test_a_region_no_larger_than_the_cells_is_exact(run):
    dense, shown = run
    got = shown.cells(0, (10, 22, 4, 20), (64, 64), "max", heads=[1, 3])
    assert got.exact and got.heads == (1, 3)
    np.testing.assert_allclose(got.values, dense[0][[1, 3], 10:22, 4:20], atol=1e-5, rtol=0)


def test_a_stale_overview_stops_with_cancelled(run):
    _, shown = run
    for hide_first in (False, True):  # the engine's block maxima, and exact rows of shown weights
        with pytest.raises(Cancelled):
            Shown(shown.result, hide_first).cells(0, ov.full_region(shown.n_tok), (8, 8),
                                                  stop=lambda: True)


def test_hover_reads_the_exact_weight_and_the_window_edge_lies_on_the_mask(run):
    dense, shown = run
    lp = shown.patterns
    for layer, h, q, k in [(0, 0, 30, 2), (1, lp.n_head - 1, 36, 36), (1, 2, 20, 11)]:
        assert shown.weight(layer, h, q, k) == pytest.approx(float(dense[layer, h, q, k]), abs=1e-6)
    window = lp.window[0]
    seg = ov.window_segment(ov.full_region(lp.T), window, lp.causal)
    if window is None or window >= lp.T:
        assert seg is None
        return
    (q0, k0), (q1, k1) = seg
    for q in range(q0, q1):  # the edge passes at key q - window + 1: left of it masked, itself not
        k = q - window + 1
        assert dense[0, :, q, k - 1].max() == 0 and dense[0, :, q, k].min() > 0


def test_zoom_keeps_the_token_under_the_pointer_and_stays_inside():
    T = 1000
    r = ov.zoom_region(ov.full_region(T), T, 0.5, (250.0, 800.0))
    assert r == (125, 625, 400, 900)  # 250 and 800 stay at a quarter and four fifths of the view
    r = ov.zoom_region(r, T, 1e-6, (300.0, 850.0))
    assert (r[1] - r[0], r[3] - r[2]) == (ov.MIN_SPAN, ov.MIN_SPAN) and r[0] <= 300 < r[1]
    assert ov.zoom_region((0, 10, 990, 1000), T, 8.0, (5.0, 995.0)) == (0, 80, 920, 1000)
    assert ov.zoom_region((0, 6, 0, 6), 6, 0.1, (1.0, 1.0)) == (0, 4, 0, 4)
    assert ov.zoom_region((0, 3, 0, 3), 3, 0.1, (1.0, 1.0)) == (0, 3, 0, 3)  # min(MIN_SPAN, T)


def test_a_dragged_rectangle_covers_every_token_it_touches():
    assert ov.rect_region(100, (40.2, 30.7), (60.9, 50.1)) == (40, 61, 30, 51)
    assert ov.rect_region(100, (60.9, 50.1), (40.2, 30.7)) == (40, 61, 30, 51)
    assert ov.rect_region(100, (98.5, 3.2), (99.9, 3.9)) == (96, 100, 2, 6)  # widened, kept inside
    assert ov.token_at((100, 200, 0, 50), (400.0, 100.0), 399.9, 0.0) == (199, 0)
    assert ov.token_at((100, 200, 0, 50), (400.0, 100.0), 400.0, 0.0) is None


def test_log_colours_span_the_decades_below_the_top():
    top = np.float32(0.5)
    v = np.array([[[0.5, 0.05, 0.5e-4, 0.0, 0.005]]], np.float32)  # [1, 1, 5]
    idx = ov.colour_index(v, [top], log=True)[0, 0]
    assert idx[0] == 255 and idx[2] == 1 and idx[3] == 1  # the top; 4 decades below and under: lowest
    # a tenth of the top sits 3/4 up the scale, a hundredth halfway (entries 1..255: 1 + 254 x level)
    assert abs(idx[1] - (1 + 254 * 3 / 4)) <= 0.5 + 1e-6 and abs(idx[4] - (1 + 254 / 2)) <= 0.5 + 1e-6
    assert ov.level_at(0.05, 0.5, log=True) == pytest.approx(0.75)
    lin = ov.colour_index(v, [top], log=False)[0, 0]
    assert lin[0] == 255 and lin[1] == 1 + round(254 * 0.1) and lin[4] == 1 + round(254 * 0.01)
    t = ov.tops(np.array([[[0.2]], [[0.0]]], np.float32), "per-head")
    assert t.tolist() == [pytest.approx(0.2), 1.0]
    assert ov.tops(np.array([[[0.2]], [[0.4]]], np.float32), "shared").tolist() == [pytest.approx(0.4)] * 2


@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_a_cell_pools_its_defined_rows_and_a_row_of_cells_with_none_is_blank(reduce):
    """Hide first token: a sink head's rows with all their weight on the first key are undefined.
    A cell of the long view shows the max or the mean of its block's defined rows alone, and a row
    of cells whose rows are all undefined is painted blank (the gap, index 0), as the grid leaves
    an undefined row; with a defined row it is coloured. (The mean took the undefined rows as 0s,
    and a block of undefined rows was painted in the colour of 0.)"""
    from types import SimpleNamespace

    T = 12
    att = np.tril(np.random.default_rng(1).random((T, T), dtype=np.float32)) + np.eye(T, dtype=np.float32)
    att[:6] = 0
    att[:6, 0] = 1  # rows 0..5: every weight on the first key
    att /= att.sum(-1, keepdims=True)
    shown = Shown(SimpleNamespace(attentions=att[None, None]), hide_first=True)
    cells = shown.cells(0, None, (3, 3), reduce)  # blocks of 4 rows: 0..3 undefined, 4..7 half, 8..11
    rows = shown.rows(0, 0, T)[0]
    fold = np.max if reduce == "max" else np.mean
    idx = ov.shown_index(cells, "per-head")
    assert (idx[0, 0] == 0).all() and (idx[0, 1:] > 0).all()
    for j, (c0, c1) in enumerate([(1, 4), (4, 8), (8, 12)]):  # (the hidden first key: no part of it)
        assert cells.values[0, 1, j] == pytest.approx(float(fold(rows[6:8, c0:c1])), rel=1e-6)
    assert cells.blank.tolist() == [[True, False, False]]
