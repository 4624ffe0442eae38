"""The DLA view's hover names the cell whose colour the pixel under the pointer shows: every pixel
of the map's cells and the gaps around them is hovered, and the named cell's colour (heads, the MLP
column, the bottom row) compared with the grabbed pixel's; a pixel the hover names no cell on is
the paper. (The hover took a cell's unrounded edges while Qt fills it between its edges rounded to
whole pixels: on a pixel column or row near an edge it named the neighbour, or a cell on the paper
past the last one.)"""

import numpy as np
import pytest

from attnviz.figures import headmap as fig
from attnviz.ui.machinery.state import AppState
from attnviz.ui.panels.dla_view import PAPER, HeadMapView

PAPER_RGB = (PAPER.red(), PAPER.green(), PAPER.blue())


def _rgb(c) -> tuple[int, int, int]:
    return c.red(), c.green(), c.blue()


def _named_colour(hm: fig.HeadMap, what):
    if what is None:
        return None
    if what[0] == "head":
        v = hm.values[what[1], what[2]]
    elif what[0] == "column":
        v = hm.column[1][what[1]]
    else:
        v = hm.extras[what[1]][1]
    return _rgb(fig.colour(float(v), hm.limit))


def _wrong(view: HeadMapView, hm: fig.HeadMap) -> list:
    """The pixels of the map's cells (a pixel beyond them) whose hover names a cell of another
    colour than the pixel's, or none where the pixel is not the paper: (x, y, named, painted). In a
    bottom-row cell its text's ink is no paper (the bottom row's values paint it black)."""
    lay = view.lay
    image = view.grab().toImage()
    assert image.devicePixelRatio() == 1
    right = max(lay.x_column + lay.cell, *(r.right() for r in lay.extra_rects))
    bottom = max(r.bottom() for r in lay.extra_rects)
    wrong, colours = [], {}  # each cell's colour, worked out once
    for y in range(int(lay.title_h), int(bottom) + 2):
        for x in range(int(lay.left) - 2, int(right) + 2):
            what = view.hit_at(float(x), float(y))
            if what not in colours:
                colours[what] = _named_colour(hm, what)
            named, got = colours[what], _rgb(image.pixelColor(x, y))
            if named is None:
                if got != PAPER_RGB:
                    wrong.append((x, y, None, got))
            elif named != got and (what[0] != "extra" or got == PAPER_RGB):
                wrong.append((x, y, what, got))
    return wrong


@pytest.mark.parametrize("size", [(361, 423), (517, 389)])
def test_the_dla_hover_names_the_cell_each_pixel_shows(qtbot, size):
    rng = np.random.default_rng(size[0])
    n_layer, n_head = 7, 11
    hm = fig.HeadMap("DLA", rng.uniform(-1.0, 1.0, (n_layer, n_head)), "logit", np.arange(n_head) // 4,
                     ("MLP", rng.uniform(-1.0, 1.0, n_layer)), (("embed", 0.2), ("bias", -0.3)))
    view = HeadMapView(AppState())
    qtbot.addWidget(view)
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    view.set_map(hm)
    view.grab()
    lay = view.lay
    assert lay.cell != int(lay.cell) and all(lay.extra_texts)  # cells at fractional edges, texts in
    wrong = _wrong(view, hm)
    assert not wrong, (len(wrong), wrong[:5])
