"""The scan-report figure writes each cell's value in ink that reads on the cell: black on the bright
end of the colour map (viridis' yellow-green, which HSL lightness calls dark), white on the dark end."""

import numpy as np
from PySide6.QtGui import QColor, QImage

from attnviz.figures.corpus import means_png
from attnviz.figures.data import DEFAULT_COLORMAP
from attnviz.figures.style import heat_index, heat_table


def _ink(image: QImage, value: float, top: float) -> tuple[int, int]:
    """(dark, light) pixels of the text written in the cell of `value`: the pixels inside the cell's
    box that are far from its colour."""
    c = heat_table(DEFAULT_COLORMAP)[int(heat_index(np.array([value]), top)[0])]
    colour = QColor(int(c[0]), int(c[1]), int(c[2]))
    pts = [(x, y) for y in range(image.height()) for x in range(image.width())
           if image.pixelColor(x, y) == colour]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    dark = light = 0
    for y in range(min(ys), max(ys) + 1):
        for x in range(min(xs), max(xs) + 1):
            p = image.pixelColor(x, y)
            if abs(p.red() - colour.red()) + abs(p.green() - colour.green()) + abs(p.blue() - colour.blue()) > 150:
                dark += p.lightness() < 100
                light += p.lightness() > 200
    return dark, light


def test_the_values_ink_reads_on_the_bright_and_the_dark_cells(qapp):
    means = {"previous": np.array([[0.0, 0.95, 1.0]])}
    image = QImage.fromData(means_png(means, ["previous"], "ink", width=900))
    for value in (0.95, 1.0):  # the bright end: black
        dark, light = _ink(image, value, 1.0)
        assert dark > 10 and light < dark // 10, (value, dark, light)
    dark, light = _ink(image, 0.0, 1.0)  # the dark end: white
    assert light > 10 and dark < light // 10, (dark, light)  # (a few dark pixels: the frame)
