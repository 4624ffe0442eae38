"""The Compare panel's tiles' hover names the cell whose colour the pixel under the pointer shows,
pooled (a text longer than a tile's pixels) and not, in A and in A − B: every pixel of a tile and
the pixels around it are hovered, and the named cell's colour compared with the grabbed pixel's.
(A tile's right and bottom edges were read as its last column and row: the pixels past the tile,
painted as the paper, named a cell.)"""

import pytest
from PySide6.QtCore import Qt

from attnviz.figures import compare as F
from attnviz.figures.style import no_value_colour
from attnviz.ui.views import grid_compare as GC
from windows import compare_tiles_image, toy_compared_with_checkpoint

LONG = "def add(a, b):\n    return a + b\n\n" * 12  # 128 tokens: more than a tile's pixels
SHORT = "def add(a, b):\n    return a + b\n"
BLANK = no_value_colour("viridis")  # (the window's colormap)
LAYER = 0


@pytest.fixture(params=[LONG, SHORT], ids=["pooled", "unpooled"])
def compared(qtbot, tmp_path, request):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", request.param)


def test_the_tiles_hover_names_the_cell_each_pixel_shows(compared, qtbot, monkeypatch):
    w = compared
    st, c = w.state, w.worker.compare_jobs.comparison
    w.resize(1200, 800)
    w.resizeDocks([w.compare_dock], [400], Qt.Orientation.Horizontal)
    st.set_layer(LAYER)
    assert st.layer == LAYER
    hide = st.shown().hide_first
    a, b = GC.sides(c, hide)
    d, blank = GC.difference(a, b, LAYER)
    T = d.shape[-1]
    named = []  # the cell each hover reads its numbers of
    numbers = GC.cell_numbers
    monkeypatch.setattr(GC, "cell_numbers", lambda c_, l_, h, q, k, hf: named.append((h, q, k)) or numbers(c_, l_, h, q, k, hf))
    for mode in ("A", "A-B"):
        panel = w.compare_panel
        image, dpr = compare_tiles_image(qtbot, panel, mode)
        assert dpr == 1
        side = int(panel.tile_rects[0].width())
        assert (side < T) == (T == 128), (side, T)
        lim = F.signed_limit(d)
        values = d if mode == "A-B" else a.rows(LAYER, 0, T)
        # every cell's colour at once, [n_head, T, T, 3] (both maps work value by value)
        colours = F.signed_rgb(values, lim) if mode == "A-B" else F.weight_rgb(values, st.colormap)
        wrong = []
        for r in (panel.tile_rects[0], panel.tile_rects[-1]):
            for y in range(int(r.top()) - 1, int(r.bottom()) + 2):
                for x in range(int(r.left()) - 1, int(r.right()) + 2):
                    named.clear()
                    panel.tiles.hover(float(x), float(y))
                    if not named:
                        continue
                    h, q, k = named[-1]
                    want = BLANK if blank is not None and blank[h, q] else colours[h, q, k]
                    got = tuple(image.pixelColor(x, y).getRgb()[:3])
                    if tuple(int(v) for v in want) != got:
                        wrong.append((mode, x, y, h, q, k, got))
        assert not wrong, (len(wrong), wrong[:5])
