"""The Patching tab's hovers name the cell whose colour the pixel under the pointer shows, on the
map of effects and on the picked head's patterns, pooled (a text longer than the picture's pixels)
and not: every pixel of the grabbed picture is hovered and the named cell's colour compared with
the pixel's. (The map's hover took a cell's unrounded edges while Qt fills it between its edges
rounded to whole pixels, naming a neighbour on a pixel column near an edge; the patterns' hover read
the pixels past a tile's right and bottom edges, painted as the paper, as its last column and row.)"""


import numpy as np
import pytest

from attnviz.figures import compare as C
from attnviz.figures import patching as fig
from attnviz.figures.headmap import colour
from windows import patch_map_shown, rgb, shown_pattern_pair


def _shown(image, cell_colour, xs, ys):
    """The pixels whose hover names a cell of another colour than the pixel's: (x, y, named, painted)."""
    wrong = []
    for y in ys:
        for x in xs:
            cell = cell_colour(x, y)
            if cell is not None and cell != rgb(image.pixelColor(x, y)):
                wrong.append((x, y, cell, rgb(image.pixelColor(x, y))))
    return wrong


@pytest.mark.parametrize("T", [300, 37])
def test_the_map_hover_names_the_cell_each_pixel_shows(qtbot, T):
    toks = tuple(f"t{i}" for i in range(T))
    effect = np.random.default_rng(T).uniform(-1.0, 1.0, (5, T))
    view = fig.PatchView("toy", "resid", "denoise", effect, toks, toks, T - 1, 0, 1, "a", "b", 1.0, 0.0)
    m = patch_map_shown(qtbot, view, 421, 233)
    lay = m.layout_()
    assert (max(lay.pool) > 1) == (T == 300) and lay.cell_w != int(lay.cell_w)  # cells at fractional edges
    image = m.grab().toImage()

    limit, colours = view.limit, {}  # each cell's colour, worked out once

    def named(x, y):
        cell = m.hit_at(x, y)
        if cell is not None and cell not in colours:
            colours[cell] = rgb(colour(float(view.values[cell]) - view.unchanged, limit))
        return None if cell is None else colours[cell]
    xs = range(int(lay.xs[0]), int(np.ceil(lay.xs[-1] + lay.cell_w)) + 1)
    ys = range(int(lay.ys[0]), int(np.ceil(lay.ys[-1] + lay.cell_h)) + 1)
    wrong = _shown(image, named, xs, ys)
    assert not wrong, (len(wrong), wrong[:5])


@pytest.mark.parametrize("T", [300, 37])
def test_the_pattern_hover_names_the_cell_each_pixel_shows(qtbot, T):
    att = (np.random.default_rng(T).random((1, 1, T, T)) ** 3).astype(np.float32)
    labels = tuple(f"w{i}" for i in range(T))  # (shown_pattern_pair's tokens)
    pair, image = shown_pattern_pair(qtbot, att, 421, 233)
    side = int(pair.rects[0].width())
    assert (side < T) == (T == 300)

    index = {label: i for i, label in enumerate(labels)}  # (each token's label is its own)
    colours = C.weight_rgb(att[0, 0], "viridis")  # [T, T, 3]: every cell's colour at once

    def named(x, y):
        text = pair.readout_at(x, y)
        if not text:
            return None
        q, k = (index[s.strip("'")] for s in text.split("  ")[1].split(" \u2192 "))
        return tuple(int(v) for v in colours[q, k])
    r0, r1 = pair.rects
    wrong = _shown(image, named, range(int(r0.left()) - 1, int(r1.right()) + 2),
                   range(int(r0.top()) - 1, int(r0.bottom()) + 2))
    assert not wrong, (len(wrong), wrong[:5])
