"""The cells under a head map (DLA's embed and bias) stay inside the picture at any width the map
is shown at: each names its number where the row has room, else its name alone (the hover gives
the number), and every painted text lies within the picture; a text too long or too tall for its
cell ends in an ellipsis or is left out, never cut at the cell's edge."""

from dataclasses import replace

import numpy as np
import pytest

from attnviz.figures import headmap
from attnviz.figures.numbers import signed
from windows import painted_texts


@pytest.mark.parametrize("width", [160, 200, 260, 600])
def test_the_bottom_row_fits_the_picture_and_names_its_numbers_where_there_is_room(qapp, monkeypatch, width):
    hm = headmap.HeadMap("DLA", np.linspace(-1, 1, 30 * 9).reshape(30, 9), "logit",
                         column=("MLP", np.zeros(30)), extras=(("embed", -12.345), ("bias", 0.5)))
    lay = headmap.layout(hm, width, 700)
    assert lay.extra_rects and all(r.left() >= 0 and r.right() <= lay.width for r in lay.extra_rects)
    painted = painted_texts(hm, lay, monkeypatch)
    with_numbers = [f"embed {signed(-12.345, 3)}", f"bias {signed(0.5, 3)}"]
    if width >= 600:
        assert all(t in painted for t in with_numbers), painted
    if width <= 200:  # (no room for "embed −12.345" and "bias +0.500" side by side)
        assert "embed" in painted and "bias" in painted and not any(t in painted for t in with_numbers)


def _image(hm, lay):
    from PySide6.QtGui import QColor, QImage, QPainter
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(image)
    headmap.paint(p, hm, lay, background=QColor("white"))
    p.end()
    return image


def _ink(hm, lay, i) -> list[tuple[int, int]]:
    """The pixels the bottom row's cell `i`'s text paints: the picture with that text alone against
    the picture with none."""
    texts = lay.extra_texts
    alone = _image(hm, replace(lay, extra_texts=tuple(t if j == i else "" for j, t in enumerate(texts))))
    none = _image(hm, replace(lay, extra_texts=("",) * len(texts)))
    return [(x, y) for y in range(lay.height) for x in range(lay.width)
            if alone.pixel(x, y) != none.pixel(x, y)]


NAMES = {"dla": (("embed", -12.345), ("bias", 0.5)),
         "long": (("token and position embeddings", 3.25), ("biases of every layer", -0.5))}


@pytest.mark.parametrize("names", NAMES)
@pytest.mark.parametrize("width", [80, 100, 110, 130, 160, 260])
def test_each_bottom_cells_text_is_painted_inside_its_cell_or_not_at_all(qapp, monkeypatch, width, names):
    """At a narrow map "embed" ran past its cell, cut mid-letter at the cell's edges: a text is
    whole, cut to an ellipsis or left out, its ink inside its own cell with a pixel to spare; the
    hover keeps the name and number."""
    hm = headmap.HeadMap("DLA", np.linspace(-1, 1, 30 * 9).reshape(30, 9), "logit",
                         column=("MLP", np.zeros(30)), extras=NAMES[names])
    lay = headmap.layout(hm, width, 700)
    painted = painted_texts(hm, lay, monkeypatch)
    for i, ((name, value), text, r) in enumerate(zip(hm.extras, lay.extra_texts, lay.extra_rects)):
        whole = headmap.extra_label(name, value)
        assert (text in painted) == bool(text), (text, painted)
        assert text in (whole, name, "") or (text.endswith("\u2026") and whole.startswith(text[:-1])), text
        # (a text drawn past its cell is cut at the cell's edge: its ink reaches the edge pixels)
        inside = r.toAlignedRect().adjusted(1, 1, -1, -1)
        ink = _ink(hm, lay, i)
        assert bool(ink) == bool(text), (text, width)
        outside = [(x, y) for x, y in ink if not inside.contains(x, y)]
        assert not outside, (text, inside, outside[:5])
        assert headmap.readout(hm, ("extra", i)) == f"{name}: {signed(value)} logit"
    if names == "dla" and width >= 110:
        assert lay.extra_texts[:2] in (("embed", "bias"), tuple(headmap.extra_label(n, v) for n, v in hm.extras))
