"""A head map whose heads are all 0 (a model compared with itself: every JSD 0; a DLA where no head
writes toward the target) says so, paints its heads white and never claims a scale of ±1."""

import numpy as np
import pytest
from PySide6.QtGui import QImage, QPainter

from attnviz.figures import headmap


def _painted(hm: headmap.HeadMap) -> tuple[QImage, headmap.HeadMapLayout]:
    lay = headmap.layout(hm, 600, 400)
    img = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(img)
    headmap.paint(p, hm, lay, background=headmap.QColor("white"))
    p.end()
    return img, lay


@pytest.mark.parametrize("nonnegative", [True, False])
def test_a_map_of_zeros_reads_0_and_paints_white(qapp, nonnegative):
    hm = headmap.HeadMap("JSD", np.zeros((2, 4)), "bits", nonnegative=nonnegative)
    text = hm.scale_text()
    assert "every head 0 bits" in text and "1 bits" not in text and "\u00b11" not in text
    img, lay = _painted(hm)
    for l in range(2):
        for h in range(4):
            x, y = lay.origin(l, h)
            c = img.pixelColor(int(x + lay.cell / 2), int(y + lay.cell / 2))
            assert (c.red(), c.green(), c.blue()) == tuple(int(v) for v in headmap.DIVERGING[127])


def test_zero_heads_beside_a_writing_mlp_draw_the_mlp_at_the_end_of_its_sign(qapp):
    mlp = np.array([2.0, -0.5])
    hm = headmap.HeadMap("DLA", np.zeros((2, 3)), "logit", column=("MLP", mlp))
    assert hm.scale_text() == "white: every head 0 logit; blue < 0 < red (MLP up to \u00b12: clipped)"
    img, lay = _painted(hm)
    ends = [tuple(int(v) for v in headmap.DIVERGING[i]) for i in (255, 0)]
    for l in range(2):
        c = img.pixelColor(int(lay.x_column + lay.cell / 2), int(lay.y_layers[l] + lay.cell / 2))
        assert (c.red(), c.green(), c.blue()) == ends[l]


def test_a_zero_extra_beside_zero_heads_writes_its_name_in_dark_ink(qapp):
    hm = headmap.HeadMap("DLA", np.zeros((2, 3)), "logit", extras=(("bias", 0.0),))
    img, lay = _painted(hm)
    r = lay.extra_rects[0]
    darkest = min(img.pixelColor(x, y).lightness() for x in range(int(r.left()) + 1, int(r.right()))
                  for y in range(int(r.top()) + 1, int(r.bottom())))
    assert darkest < 100


def test_a_head_without_a_value_leaves_the_scale_to_the_others(qapp):
    hm = headmap.HeadMap("JSD", np.array([[np.nan, 0.5], [0.25, 0.0]]), "bits", nonnegative=True)
    assert hm.limit == 0.5 and hm.scale_text() == "white 0 to red 0.5 bits"
