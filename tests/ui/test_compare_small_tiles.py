"""A Compare panel whose tiles have fewer pixels than tokens shows each pixel the rows and keys it
covers, as the grid pools its heads: under Hide first token every head's tile looks alike at the
first token (a pixel over the undefined first row and the rows after it shows those rows), and
hover names a cell of the rows the pixel shows (one row picked per pixel at fractional
positions would show the blank first row and the hidden first column on some heads' tiles and not
on others)."""

import math

import pytest
from PySide6.QtCore import QPointF, Qt

from attnviz.figures import compare as F
from attnviz.figures.style import no_value_colour
from attnviz.ui.views import grid_compare as GC
from windows import WAIT, compare_tiles_image, hover, tip_shown, toy_compared_with_checkpoint

TEXT = "def add(a, b):\n    return a + b\n\n" * 12  # 128 tokens
BLANK = no_value_colour("viridis")  # (the window's colormap)
LAYER = 0


@pytest.fixture
def compared(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def _tiles(qtbot, w, mode):
    panel = w.compare_panel
    image, dpr = compare_tiles_image(qtbot, panel, mode)

    def pixel(x, y):
        return tuple(image.pixelColor(int(x * dpr), int(y * dpr)).getRgb()[:3])
    return panel, pixel


def _block(values, undefined, q0, k0, p, signed):
    """The cell a pixel over rows q0.. and keys k0.. shows: the largest (signed: of largest size)
    in a defined row, the hidden first key left out."""
    best = None
    for q in range(q0, min(q0 + p, values.shape[0])):
        if undefined[q]:
            continue
        for k in range(max(k0, 1), min(k0 + p, values.shape[1])):
            size = abs(values[q, k]) if signed else values[q, k]
            if best is None or size > best[0]:
                best = (size, q, k)
    return None if best is None else best[1:]


def test_small_tiles_pool_every_row_and_hover_names_a_row_shown(compared, qtbot):
    w = compared
    st, c = w.state, w.worker.compare_jobs.comparison
    w.resize(1200, 800)
    w.resizeDocks([w.compare_dock], [400], Qt.Orientation.Horizontal)
    st.set_layer(LAYER)
    st.set_hide_first(True)
    qtbot.waitUntil(lambda: st.shown().hide_first, timeout=WAIT)
    a, b = GC.sides(c, True)
    d, blank = GC.difference(a, b, LAYER)
    T, n_head = d.shape[-1], d.shape[0]
    assert T == 128 and blank[:, 0].all() and not blank[:, 1:].any()  # the first row alone undefined

    for mode in ("A-B", "A"):
        panel, pixel = _tiles(qtbot, w, mode)
        side = panel.tile_rects[0].width()
        p = math.ceil(T / side)
        assert p >= 2, side  # fewer pixels than tokens
        lim = F.signed_limit(d)
        for h, r in enumerate(panel.tile_rects):
            # the first pixel row and column show rows and keys past the first: no head's is blank
            top = [pixel(r.left() + x + 0.5, r.top() + 0.5) for x in range(int(side))]
            left = [pixel(r.left() + 0.5, r.top() + y + 0.5) for y in range(int(side))]
            assert BLANK not in top and BLANK not in left, (mode, h)
            values = d[h] if mode == "A-B" else a.rows(LAYER, 0, T)[h]
            for q0 in (0, p, 5 * p, 40 * p):
                for k0 in (0, p, 3 * p):
                    q, k = _block(values, blank[h], q0, k0, p, mode == "A-B")
                    want = (F.signed_rgb(d[h, q, k], lim) if mode == "A-B"
                            else F.weight_rgb(values[q, k], st.colormap))
                    x, y = panel.tile_cell(h, q0, k0)
                    assert pixel(x, y) == tuple(int(v) for v in want), (mode, h, q0, k0)
        # hover over the top-left pixel names the cell it shows, in a defined row
        for h in (0, n_head - 1):
            r = panel.tile_rects[h]
            hover(panel.tiles, QPointF(r.left() + 0.5, r.top() + 0.5))
            tip = tip_shown(panel.tiles.toolTip())
            q, k = _block(d[h] if mode == "A-B" else a.rows(LAYER, 0, T)[h], blank[h], 0, 0, p, mode == "A-B")
            assert "undefined" not in tip and "first key hidden" not in tip, tip
            assert tip.endswith(GC.cell_numbers(c, LAYER, h, q, k, True)), tip
