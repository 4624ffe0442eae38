"""A head drawn a little smaller than its tokens (8% more tokens than its tile has screen pixels) is
pooled, several tokens a pixel, so that every pixel of the mosaic is at least a screen pixel: Qt's
nearest-pixel scaling then drops no row or column. (A tile up to 15% smaller than its tokens was
drawn a pixel a token, and the rows and columns that fell between screen pixels never reached the
screen: cells of a one-token diagonal vanished.) The hover over each painted pixel names a cell of
its block."""

import math

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF  # noqa: E402

from attnviz.figures.style import heat_table  # noqa: E402
from windows import bare_grid, diagonal_result, tile_side_on_screen  # noqa: E402


def _result(T: int, n_head: int = 4):
    attn = np.zeros((1, n_head, T, T), np.float32)
    attn[0, :] = np.eye(T, dtype=np.float32)  # a one-token-wide diagonal in every head
    return diagonal_result(attn)


def _unshown(g, st) -> list[tuple[int, int]]:
    """(head, pixel) of each pixel of the tiles' diagonals that the screen does not show where the
    pixel lies (a pixel a screen pixel or more: the screen pixel holding its centre shows it), and
    fails where the hover over it names no cell of the diagonal in its block."""
    lo = g.layout_
    image = g.gw.viewport().grab().toImage()
    hot = tuple(int(c) for c in heat_table(st.colormap)[255, :3])
    missing = []
    for i, (layer, head) in enumerate(lo.heads):
        for j in range(lo.T):
            x, y = float(lo.x0[i]) + j + 0.5, float(lo.y0[i]) + j + 0.5
            at = g.gw.viewportTransform().map(g.img.mapToScene(QPointF(x, y)))  # (not rounded)
            c = image.pixelColor(math.floor(at.x()), math.floor(at.y()))
            if (c.red(), c.green(), c.blue()) != hot:
                missing.append((head, j))
            cell = g.cell_at(x, y)
            assert cell[:2] == (layer, head) and cell[2] == cell[3] and cell[2] // lo.pool == j, (j, cell)
    return missing


@pytest.mark.parametrize("mode", ["layer", "all"])
def test_a_tile_a_little_smaller_than_its_tokens_drops_no_row_or_column(qtbot, mode):
    st, g = bare_grid(qtbot, mode)
    st.set_result(_result(40))
    T = int(tile_side_on_screen(g) * 1.08) + 1  # 8% more tokens than a tile has screen pixels
    st.set_result(_result(T))
    lo = g.layout_
    assert lo.n_tok == T and lo.pool > 1 and tile_side_on_screen(g) < T
    assert _unshown(g, st) == []


def test_a_view_made_smaller_pools_its_tiles_again(qtbot):
    st, g = bare_grid(qtbot, "layer")
    st.set_result(_result(40))
    T = int(tile_side_on_screen(g) * 0.98)  # a pixel a token, with room to spare
    st.set_result(_result(T))
    assert g.layout_.pool == 1
    g.resize(860, 480)  # the tiles 4% smaller: a little smaller than their tokens
    qtbot.waitUntil(lambda: g.layout_.pool > 1, timeout=5000)
    assert tile_side_on_screen(g) < T and _unshown(g, st) == []
