"""The scan-report figure writes each cell's value in ink that reads on the cell: black on the bright
end of the colour map (viridis' yellow-green, which HSL lightness calls dark), white on the dark end."""

import numpy as np
import pytest
from PySide6.QtGui import QColor, QImage

from attnviz.figures.corpus import means_png
from attnviz.figures.data import COLORMAPS, DEFAULT_COLORMAP
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


def _cell_box(image: QImage, value: float, top: float) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of the cell of `value`: the box of the pixels in its colour."""
    c = heat_table(DEFAULT_COLORMAP)[int(heat_index(np.array([value]), top)[0])]
    colour = QColor(int(c[0]), int(c[1]), int(c[2]))
    pts = [(x, y) for y in range(image.height()) for x in range(image.width())
           if image.pixelColor(x, y) == colour]
    return min(p[0] for p in pts), min(p[1] for p in pts), max(p[0] for p in pts), max(p[1] for p in pts)


def test_a_panel_of_small_values_writes_cells_that_tell_them_apart(qapp):
    """A panel whose top is 0.0096 (an induction mean) and the same panel scaled by 1.5 colour their
    cells alike; the text in the top cell must differ (two decimals wrote "0.01" in both)."""
    small = np.array([[0.0, 0.0012, 0.0096]])
    boxes = []
    for a in (small, small * 1.5):
        image = QImage.fromData(means_png({"induction": a}, ["induction"], "small", width=900))
        x0, y0, x1, y1 = _cell_box(image, a.max(), a.max())
        boxes.append(image.copy(x0, y0, x1 - x0 + 1, y1 - y0 + 1))
    assert boxes[0].size() == boxes[1].size()
    assert boxes[0] != boxes[1]


def test_a_long_value_stays_inside_its_cell(qapp):
    """A tiny top needs many decimals; the text shrinks to its cell, leaving the cell's colour at both
    of its side edges on the text's rows."""
    means = {"induction": np.array([[0.0, 1.2e-7, 0.0, 0.0, 0.0, 0.0]])}
    image = QImage.fromData(means_png(means, ["induction"], "long", width=900))
    x0, y0, x1, y1 = _cell_box(image, 1.2e-7, 1.2e-7)
    colour = image.pixelColor((x0 + x1) // 2, y0)
    for y in range(y0, y1 + 1):
        for x in (x0, x0 + 1, x1 - 1, x1):
            assert image.pixelColor(x, y) == colour, (x, y)


def test_a_head_with_no_value_is_the_no_value_colour_and_the_heading_names_it(qapp, monkeypatch):
    """A NaN mean (no text gave one) is painted as every view paints no value (style.no_value_colour
    of the colormap, not a grey of its own), and that panel's heading says its colour's name."""
    from windows import figure_words

    from attnviz.figures import corpus as corpus_figures
    from attnviz.figures.style import no_value_colour, no_value_word

    drawn = figure_words(monkeypatch, corpus_figures)  # the figure's words, as it draws them
    means = {"previous": np.array([[0.2, 0.5, 1.0]]), "induction": np.array([[np.nan, 0.5, 1.0]])}
    image = QImage.fromData(means_png(means, ["previous", "induction"], "gaps", width=900))
    gap = QColor(*no_value_colour(DEFAULT_COLORMAP))
    assert sum(image.pixelColor(x, y) == gap for y in range(image.height()) for x in range(image.width())) > 100
    word = no_value_word(DEFAULT_COLORMAP)
    headings = {t.split()[0]: t for t in drawn if t.split() and t.split()[0] in means}
    assert headings["induction"].endswith(f"; {word}: no value") and word not in headings["previous"], headings


def _contrast(a, b) -> float:
    """WCAG 2's contrast ratio of two (r, g, b) colours."""
    def y(c):
        c = np.asarray(c, np.float64) / 255
        return float(np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4) @ (0.2126, 0.7152, 0.0722))
    hi, lo = sorted((y(a), y(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("name", COLORMAPS)
def test_the_ink_reads_on_every_cell_of_every_colormap(qapp, name):
    """Each cell's value is written black or white, whichever reads on the cell: at least 4.5:1
    (WCAG 2) on 64 colours evenly over every colormap. (A luma threshold wrote white on viridis'
    middle green at 2.9:1.)"""
    a = np.linspace(0.0, 1.0, 64).reshape(8, 8)
    image = QImage.fromData(means_png({"previous": a}, ["previous"], "ink", width=900, colormap=name))
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    px = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine())
    px = px[:, :3 * image.width()].reshape(image.height(), image.width(), 3).astype(int)
    lut = heat_table(name)
    worst = []
    for v in a.ravel():
        c = lut[int(heat_index(np.array([v]), 1.0)[0])][:3].astype(int)
        at = (px == c).all(axis=-1)  # the cell, and maybe pixels of a grey line's smoothed edge
        core = at[2:-2, 2:-2] & at[:-4, 2:-2] & at[4:, 2:-2] & at[2:-2, :-4] & at[2:-2, 4:]  # (no line)
        ys, xs = np.nonzero(core)
        box = px[ys.min() + 2:ys.max() + 3, xs.min() + 2:xs.max() + 3]
        far = np.abs(box - c).sum(axis=-1)
        written = box.reshape(-1, 3)[far.argmax()]  # the text's most inked pixel: toward its ink
        ink = (0, 0, 0) if written.sum() < c.sum() else (255, 255, 255)
        worst.append((_contrast(ink, c), tuple(c), ink))
    assert min(worst)[0] >= 4.5, min(worst)
