"""The Patching view's metric line says what effect 1 and 0 mean in the direction that was run:
denoising, 1 is the clean answer back and 0 no change; noising, the same formula gives 1 where
nothing changed and 0 where the corrupted answer came in."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.patching import patch
from attnviz.figures import patching
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
CORRUPT = [3, 1, 4, 1, 5, 9, 2, 7, 5, 3, 5]


@pytest.mark.parametrize("direction, words", [
    ("denoise", "effect 1 = clean answer back, 0 = unchanged"),
    ("noise", "effect 1 = unchanged, 0 = corrupted answer in"),
])
def test_the_metric_line_reads_the_effect_in_its_direction(direction, words):
    model = load_model(FIXTURES / "gpt2")
    result = patch(model, np.array(IDS), np.array(CORRUPT), "resid", position=8, direction=direction)
    view = patching.patch_view(result, model.name, list(map(str, IDS)), list(map(str, CORRUPT)), "5", "3")
    assert view.metric_line().endswith(words)
    unchanged = view.values[:, 9:]  # after P: the base run's own diff
    assert (unchanged == (0.0 if direction == "denoise" else 1.0)).all()
    assert patching.readout(view, 0, 10).endswith(f"effect {unchanged[0, 1]:+.4f}".replace("-", "\u2212"))


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_a_cell_the_patch_left_unchanged_is_painted_white(qapp, direction):
    """The map's white is the effect of a patch that changes nothing (0 denoising, 1 noising): the
    cells after P, which no patch can reach, are white in either direction, and the colour bar's
    middle is that value."""
    from PySide6.QtGui import QImage, QPainter

    model = load_model(FIXTURES / "gpt2")
    result = patch(model, np.array(IDS), np.array(CORRUPT), "resid", position=8, direction=direction)
    view = patching.patch_view(result, model.name, list(map(str, IDS)), list(map(str, CORRUPT)), "5", "3")
    lay = patching.layout(view, 700)
    img = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    img.fill(0)
    p = QPainter(img)
    patching.paint(p, view, lay)
    p.end()
    for r in range(view.values.shape[0]):
        for c in (9, 10):
            x, y = patching.cell_center(lay, r, c)
            pix = img.pixelColor(int(x), int(y))
            assert min(pix.red(), pix.green(), pix.blue()) > 235, (r, c, pix.name())
    assert view.limit == np.abs(view.values[np.isfinite(view.values)] - view.unchanged).max()


@pytest.mark.parametrize("direction, middle", [("denoise", "0"), ("noise", "1")])
def test_a_map_where_no_patch_changed_anything_is_white_and_its_bar_writes_only_that(qapp, direction, middle):
    """Every effect the unchanged one: the bar states that one value (not middle ± 1, a range no
    effect has), every cell is white, in the panel's paint and in the exported PNG."""
    import dataclasses

    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter

    model = load_model(FIXTURES / "gpt2")
    result = patch(model, np.array(IDS), np.array(CORRUPT), "resid", position=8, direction=direction)
    view = patching.patch_view(result, model.name, list(map(str, IDS)), list(map(str, CORRUPT)), "5", "3")
    view = dataclasses.replace(view, effect=np.full_like(view.effect, view.unchanged))
    lay = patching.layout(view, 700)
    img = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    img.fill(0)
    p = QPainter(img)
    said, draw = [], p.drawText
    p.drawText = lambda *t: (said.append(t), draw(*t))[1]
    patching.paint(p, view, lay)
    p.end()
    beside_bar = [t[-1] for t in said if isinstance(t[0], QRectF) and t[0].left() > lay.bar.right()]
    assert beside_bar == [middle, "effect"]
    data, png_lay = patching.png_bytes(view, 700)
    png = QImage.fromData(data)
    assert (png_lay.width, png_lay.height) == (lay.width, lay.height)
    for image in (img, png):
        for r in range(view.values.shape[0]):
            for c in range(view.values.shape[1]):
                x, y = patching.cell_center(lay, r, c)
                pix = image.pixelColor(int(x), int(y))
                assert min(pix.red(), pix.green(), pix.blue()) > 235, (r, c, pix.name())
