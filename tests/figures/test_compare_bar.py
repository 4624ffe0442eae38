"""The diverging colour bar of Compare's A − B tiles (and Patching's maps): +lim at the top, 0 in the
middle, -lim at the bottom, each of its bands painted the colour the maps give that band's value,
whatever the limit."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import compare as F
from attnviz.figures import headmap
from attnviz.figures.anatomy_parts import DIVERGING
from attnviz.figures.numbers import bar_end


@pytest.mark.parametrize("lim", [0.013, 1.0, 250.0])
def test_each_band_has_the_colour_of_its_value(qapp, lim):
    image = QImage(120, 340, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    rect = QRectF(10, 20, 14, 256)
    p = QPainter(image)
    try:
        F.paint_colour_bar(p, rect, lim, "A \u2212 B", QColor("black"))
    finally:
        p.end()
    h = rect.height() / F.BAR_STEPS
    for s in range(F.BAR_STEPS):
        v = lim * (1 - 2 * (s + 0.5) / F.BAR_STEPS)  # the band's value
        want = DIVERGING[headmap.colour_indices(np.array([v]), lim)[0]]
        got = image.pixelColor(int(rect.center().x()), int(rect.top() + (s + 0.5) * h))
        assert (got.red(), got.green(), got.blue()) == tuple(int(c) for c in want), (s, v)
    top, bottom = (image.pixelColor(17, y) for y in (21, 274))
    assert top.red() > top.blue() and bottom.blue() > bottom.red()  # red above 0, blue below


@pytest.mark.parametrize("middle, lim, want", [
    (0.0, 2e-4, ["+0.0002", "0", "\u22120.0002"]),
    (1.0, 2e-4, ["1.0002", "1.0000", "0.9998"]),
    (1.0, 0.37, ["1.37", "1.00", "0.63"]),
    (1.0, 1.02, ["+2.02", "+1", "\u22120.02"]),
    (1.0, 5.0, ["+6", "+1", "\u22124"]),
    (1.0, 1 + 1e-9, ["+2", "+1", "\u22121e\u221209"]),
])
def test_the_bars_labels_name_its_ends_and_middle_apart(qapp, middle, lim, want, monkeypatch):
    """Around a middle of 1 (a noise run's patching map) a small limit still gives three different
    labels, written as every colour bar writes its labels (numbers.bar_ticks): the ends with the
    digits that set them apart, the middle in the same format (`1.0000`, not `1`), and a bar that
    crosses 0 with its signs, its middle written as its ends (`+1`: never a step's `0` or `+1e+00`,
    whatever its ends need)."""
    said = []
    image = QImage(120, 340, QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    try:
        F.paint_colour_bar(p, QRectF(10, 20, 14, 256), lim, "effect", QColor("black"), middle)
    finally:
        p.end()
    assert said == [*want, "effect"]


@pytest.mark.parametrize("value, text", [
    (0.4471, "+0.447"), (-0.4471, "\u22120.447"), (0.0002, "+0.0002"), (1.0, "+1"), (-1.23e-06, "\u22120.00000123"),
    (0.99961, "+1"), (12.345, "+12.3"), (999.4, "+999"), (999.6, "+1000"), (1234.5, "+1234"),
    (-98765.4, "\u221298765"), (0.0, "0"),
])
def test_a_bar_end_has_3_significant_digits_below_1000_and_the_whole_number_above(value, text):
    assert bar_end(value) == text


@pytest.mark.parametrize("effects, want", [
    ((1 + 2e-4, 1 - 1e-4), ["1.0002", "1.0000", "0.9998"]),
    ((1.37, 0.8), ["1.37", "1.00", "0.63"]),
    ((1 + 3e-9, 1 - 1.5e-9), ["1.000000003", "1.000000000", "0.999999997"]),
    ((6.0, 0.2), ["+6", "+1", "\u22124"]),  # beyond 1 from 1: the bar crosses 0
    ((1.3, -1e-9), ["+2", "+1", "\u22121e\u221209"]),  # a float-noise bottom just under 0
])
def test_the_noising_maps_bar_is_written_as_every_other_bar(qapp, effects, want):
    """An exported noising Patching map (white at 1): its colour bar's three labels, read off the
    SVG (the last texts, over its unit), are its ends as bar_ticks writes a bar from 1 − lim to
    1 + lim and its middle, which marks 1: in the ends' decimals on a bar above 0, `+1` on one
    that crosses 0 (signed, as its ends)."""
    import xml.etree.ElementTree as ET

    from attnviz.figures import patching
    from attnviz.figures.numbers import bar_ticks

    effect = np.ones((2, 3))
    effect[0, 1], effect[1, 2] = effects
    view = patching.PatchView("m", "head_out", "noise", effect, ("a", "b", "c"), ("a", "d", "c"), 2, 5, 6,
                              "x", "y", 1.5, -0.5)
    texts = [e.text.strip() for e in ET.fromstring(patching.svg_bytes(view, 700)[0]).iter()
             if e.tag.endswith("text") and e.text and e.text.strip()]
    assert texts[-1] == "effect"
    top, middle, bottom = texts[-4:-1]
    assert [top, middle, bottom] == want
    lim = view.limit
    ends = dict(bar_ticks(1 - lim, 1 + lim)[0])
    assert (top, bottom) == (ends[1 + lim], ends[1 - lim])
    assert float(middle.replace("\u2212", "-")) == 1.0


def _ink_columns(image: QImage, x0: int, y0: int, y1: int) -> list[int]:
    """The columns from x0 rightwards with a dark pixel (text) between rows y0 and y1."""
    return [x for x in range(x0, image.width())
            if any(image.pixelColor(x, y).lightness() < 140 for y in range(max(0, y0), min(image.height(), y1)))]


def _text_ink_width(text: str) -> int:
    """How many columns `text` takes painted alone, unclipped, in the bar's font."""
    from attnviz.figures.render import figure_font

    image = QImage(400, 30, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    p = QPainter(image)
    try:
        p.setPen(QColor("black"))
        p.setFont(figure_font(9))
        p.drawText(10, 20, text)
    finally:
        p.end()
    ink = _ink_columns(image, 0, 0, 30)
    return ink[-1] - ink[0] + 1


@pytest.mark.parametrize("effects", [(1 + 1e-12, 1 - 0.5e-12), (1 + 2e-4, 1 - 1e-4), (1.3, -1e-9)])
def test_an_exported_maps_bar_labels_are_painted_whole(qapp, effects):
    """An exported noising Patching map's colour-bar labels (1.000000000001 / 1.000000000000 /
    0.999999999999 for a limit of 1e-12) are painted whole inside the picture: each label's ink
    as wide as the label painted alone, never cut at a fixed box or at the picture's edge."""
    from attnviz.figures import patching
    from attnviz.figures.compare import bar_labels

    effect = np.ones((2, 3))
    effect[0, 1], effect[1, 2] = effects
    view = patching.PatchView("m", "head_out", "noise", effect, ("a", "b", "c"), ("a", "d", "c"), 2, 5, 6,
                              "x", "y", 1.5, -0.5)
    data, lay = patching.png_bytes(view, 700)
    image = QImage.fromData(data)
    bar = lay.bar
    for frac, label in zip((0.0, 0.5, 1.0), bar_labels(view.limit, view.unchanged)):
        y = round(bar.top() + frac * bar.height())
        ink = _ink_columns(image, int(bar.right()) + 2, y - 6, y + 7)
        assert ink and ink[-1] < image.width() - 1, (label, ink[-1:], image.width())
        assert abs((ink[-1] - ink[0] + 1) - _text_ink_width(label)) <= 1, label


def _half_unit(text: str):
    from decimal import Decimal

    mantissa, _, power = text.replace("\u2212", "-").lstrip("+-").partition("e")
    return Decimal(1).scaleb(int(power or 0) - len(mantissa.partition(".")[2])) / 2


@pytest.mark.parametrize("lim", [float(v) for v in np.geomspace(1e-4, 1e-16, 97)] + [1.1e-16, 2.2e-16, 3.3e-16])
def test_a_narrow_noising_bar_writes_every_label_alike_and_right(lim):
    """A noising map's bar (about 1) however narrow writes its three labels in one format, the rule
    of the wider ones (`1.0002 1.0000 0.9998`): fixed point, each to the same decimals, the middle
    `1.000…` (never `1` between ends in significant digits), the three apart, and each reads the
    exact 1 + lim, 1, 1 − lim within half a unit of its last digit (where the float nearest 1 + lim
    is more than that away, the end is written from the exact value)."""
    from decimal import Decimal

    labels = F.bar_labels(lim, 1.0)
    assert len(set(labels)) == 3 and not any("e" in t for t in labels), labels
    assert len({len(t.partition(".")[2]) for t in labels}) == 1, labels
    for text, want in zip(labels, (1 + Decimal(lim), Decimal(1), 1 - Decimal(lim))):
        assert abs(Decimal(text) - want) <= _half_unit(text), (text, want)
