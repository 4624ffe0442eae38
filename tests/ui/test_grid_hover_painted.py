"""A pooled grid's hover and click name the cell whose value the screen pixel under the pointer
shows. Qt paints the mosaic into its rect rounded to whole pixels, each screen pixel the mosaic
pixel at its centre; a mosaic pixel a little over a screen pixel wide is then painted on screen
pixels whose top-left corner lies in its neighbour. (The hover read the mosaic pixel under the
pointer's corner: near a pooled diagonal it named a cell of weight 0 on pixels painted in the colour
of weight 1, and the other way round.)"""

import math
import re

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QRectF, Qt  # noqa: E402

from attnviz.figures.style import heat_positions, heat_table  # noqa: E402
from attnviz.ui.views.grid_fit import fitted, scale  # noqa: E402
from windows import bare_grid, diagonal_result, drain_events, tile_side_on_screen  # noqa: E402

READOUT = re.compile(r"L0 H(\d+)  t(\d+) → t(\d+)  (\S+)")


def _grid(qtbot, mode: str, attn_of):
    """A grid whose tiles are drawn about 1.3 times smaller than their tokens (pooled, a mosaic
    pixel a little over a screen pixel), showing attn_of(T) ([1, n_head, T, T])."""
    st, g = bare_grid(qtbot, mode)
    st.set_result(diagonal_result(attn_of(40)))
    drain_events()
    T = int(tile_side_on_screen(g) * 1.3)
    st.set_result(diagonal_result(attn_of(T)))
    drain_events()
    assert g.layout_.pool > 1
    return st, g, g.gw.viewport().grab().toImage()


def _diagonal(T: int) -> np.ndarray:
    attn = np.zeros((1, 4, T, T), np.float32)
    attn[0, :] = np.eye(T, dtype=np.float32)
    return attn


def _random(T: int) -> np.ndarray:
    return (np.random.default_rng(3).random((1, 4, T, T)) ** 3).astype(np.float32)


def _read(g, x: int, y: int):
    """(head, q, k, weight as written) the hover names with the pointer on viewport pixel (x, y),
    None where it names no cell."""
    g.plot.scene().sigMouseMoved.emit(g.gw.mapToScene(QPoint(x, y)))
    m = READOUT.match(g.hover_text)
    return None if m is None else (int(m[1]), int(m[2]), int(m[3]), m[4])


def _tile_span(g, i: int) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) screen pixels around tile i, a pixel beyond its edges."""
    lo = g.layout_
    box = g.gw.viewportTransform().mapRect(g.img.mapRectToScene(
        QRectF(float(lo.x0[i]), float(lo.y0[i]), lo.T, lo.T)))
    return (math.floor(box.left()) - 1, math.ceil(box.right()) + 1,
            math.floor(box.top()) - 1, math.ceil(box.bottom()) + 1)


def _rgb(image, x: int, y: int) -> tuple[int, int, int]:
    c = image.pixelColor(x, y)
    return c.red(), c.green(), c.blue()


def _diagonal_rows(g, image, hot, i: int):
    """(y, hot xs, r) for each screen row y of tile i that shows its diagonal, r the mosaic row
    painted there: each new run of hot pixels, the next row (the diagonal's block (r, r))."""
    left, right, top, bottom = _tile_span(g, i)
    r, run = -1, None
    for y in range(top, bottom):
        xs = [x for x in range(left, right) if _rgb(image, x, y) == hot]
        if xs:
            if xs != run:
                r, run = r + 1, xs
            yield y, xs, r


@pytest.mark.parametrize("mode", ["layer", "all"])
def test_the_hover_and_a_click_on_a_pooled_diagonal_name_the_block_each_pixel_shows(qtbot, mode):
    st, g, image = _grid(qtbot, mode, _diagonal)
    lo, p = g.layout_, g.layout_.pool
    hot = tuple(int(c) for c in heat_table(st.colormap)[255, :3])
    wrong, seen, clicks = [], 0, 0
    for i in range(len(lo.heads)):
        left, right, top, _ = _tile_span(g, i)
        r = -1
        for y, xs, r in _diagonal_rows(g, image, hot, i):
            for x in range(xs[0] - 2, xs[-1] + 3):
                cell = _read(g, x, y)
                if cell is None:  # (off the tile: left of its first key, right of its last)
                    assert not left + 1 < x < right - 2, (x, y, g.hover_text)
                    continue
                head, q, k, value = cell
                shows = x in xs  # the diagonal's block (r, r), or a block of 0s beside it
                if head != lo.heads[i][1] or q // p != r or (k // p == r) != shows or \
                        (value == "1.00" and q == k) != shows:
                    wrong.append((head, x, y, r, q, k, value))
                seen += 1
            if clicks < 6 and (y - top) % 9 == 0:  # Shift+click: that query in every head
                st.set_query(None)
                qtbot.mouseClick(g.gw.viewport(), Qt.MouseButton.LeftButton,
                                 Qt.KeyboardModifier.ShiftModifier, QPoint(xs[0], y))
                assert st.query_pos is not None and st.query_pos // p == r, (y, r, st.query_pos)
                clicks += 1
        assert r + 1 == lo.T, (i, r)  # (every row of the tile painted, and counted)
    assert seen > 4 * lo.T * len(lo.heads) and not wrong, f"{len(wrong)} of {seen}: {wrong[:6]}"


@pytest.mark.parametrize("mode", ["layer", "all"])
def test_a_mosaic_less_than_a_pixel_larger_than_its_pixels_drops_no_row_or_column(qtbot, mode):
    """Qt paints the mosaic into its rect rounded to whole pixels: where the mosaic's exact size on
    screen is under a pixel more than its pixels, every tile's diagonal is still painted whole, each
    mosaic row and column on a screen row and column of its own."""
    st, g, _ = _grid(qtbot, mode, _diagonal)
    w, h = g._view_size()
    edge = []  # (screen pixels over the mosaic's own along its tighter side, -T): the closest, pooled
    for T in range(40, 6 * g.layout_.n_tok):
        lo = fitted(mode, 1, 0, np.arange(4), T, w, h)[0]
        s = scale(lo, w, h)
        edge.append((round(min(s * lo.width - lo.width, s * lo.height - lo.height), 6), -T))
    over, T = min(edge)
    T = -T
    assert over < 1, over
    st.set_result(diagonal_result(_diagonal(T)))
    drain_events()
    lo = g.layout_
    assert g._view_size() == (w, h), lo.pool
    image = g.gw.viewport().grab().toImage()
    hot = tuple(int(c) for c in heat_table(st.colormap)[255, :3])
    for i in range(len(lo.heads)):
        runs = {}
        for _, xs, r in _diagonal_rows(g, image, hot, i):
            runs.setdefault(r, xs)
        firsts = [runs[r][0] for r in sorted(runs)]  # (each row's run right of the last one's)
        assert len(runs) == lo.T and firsts == sorted(set(firsts)), (i, len(runs), lo.T, lo.pool, over)


def test_the_hover_over_a_pooled_random_pattern_names_a_cell_of_the_colour_painted(qtbot):
    st, g, image = _grid(qtbot, "layer", _random)
    lo, shown = g.layout_, st.shown()
    table = heat_table(st.colormap)
    attn = st.result.attentions
    tops = shown.tops(st.scale_mode, [0])[0]
    # every cell's colour, [n_head, T, T, rgb]: heat_positions broadcasts (each value as on its own)
    colours = table[heat_positions(attn[0], np.asarray(tops)[:, None, None]).astype(np.intp)][..., :3]
    wrong, seen = [], 0
    for i in range(len(lo.heads)):
        left, right, top, bottom = _tile_span(g, i)
        for y in range(top, bottom, 2):
            for x in range(left, right, 2):
                cell = _read(g, x, y)
                if cell is None:
                    continue
                head, q, k, _ = cell
                if tuple(colours[head, q, k].tolist()) != _rgb(image, x, y):
                    wrong.append((head, x, y, q, k))
                seen += 1
    assert seen > lo.T * lo.T and not wrong, f"{len(wrong)} of {seen}: {wrong[:6]}"
