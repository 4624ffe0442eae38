"""compare.tile_pixel names the picture pixel Qt paints on each device pixel of a tile, at device
pixel ratios whole and fractional, the tiles' widget at offsets in its window that are not whole
device pixels: the tiles are painted as a widget is (a painter on an image of that ratio, moved by
the widget's offset), and every device pixel of each tile and a pixel around it compared with the
colour of the picture pixel tile_pixel names there, the pointer where Qt delivers it (the device
pixel over the ratio, less the offset). (tile_pixel took the picture pixel under the pointer's
corner: at 1.25 and 1.75 Qt paints some device pixels with the next one.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import compare as F

PAPER = (255, 255, 255)


@pytest.mark.parametrize("dpr", [1.0, 1.25, 1.5, 1.75, 2.0])
@pytest.mark.parametrize("origin", [(0.0, 0.0), (11.0, 13.0), (3.0, 6.0)])
def test_the_tile_pixel_is_the_one_painted(qapp, dpr, origin):
    ox, oy = origin
    rects = F.tile_rects(QRectF(6, 6, 170, 140), 4)  # (tiles of an odd side: some at odd offsets)
    rng = np.random.default_rng(7)
    side = int(rects[0].width())
    rgbs = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in rects]
    width, height = 190 + ox, 160 + oy
    image = QImage(math.ceil(width * dpr), math.ceil(height * dpr), QImage.Format.Format_RGB32)
    image.setDevicePixelRatio(dpr)
    image.fill(QColor(*PAPER))
    p = QPainter(image)
    p.translate(ox, oy)
    F.paint_tiles(p, rgbs, rects, [""] * len(rects), QColor("black"))
    p.end()
    wrong = []
    for rgb, r in zip(rgbs, rects):
        for Y in range(math.floor((r.top() + oy) * dpr) - 1, math.ceil((r.bottom() + oy) * dpr) + 1):
            for X in range(math.floor((r.left() + ox) * dpr) - 1, math.ceil((r.right() + ox) * dpr) + 1):
                at = F.tile_pixel(r, X / dpr - ox, Y / dpr - oy, dpr, origin)
                want = PAPER if at is None else tuple(int(v) for v in rgb[at])
                c = image.pixelColor(X, Y)
                if (c.red(), c.green(), c.blue()) != want:
                    wrong.append((X, Y, at, (c.red(), c.green(), c.blue())))
    assert any((r.left() + ox) * dpr % 1 for r in rects) == (dpr % 1 != 0)  # (edges between device pixels)
    assert not wrong, (len(wrong), wrong[:5])
