"""Which pixel of an image the screen shows where, as Qt paints it; shared by the heatmap grid's
mosaic (grid.py) and the focus view's picture (focus.py), so that the pointer over a screen pixel
reads the cell whose value that pixel shows, and a mark (Find's, in the focus view) sits on the
pixel painted with its cell (`painted_span`, the other way round).

Qt's raster engine draws an unsmoothed scaled image into its rect on the screen rounded to whole
pixels, each screen pixel the image pixel at its centre in 16.16 fixed point (`painted_index`).
Near an image pixel's edge that is not the image pixel under the pointer's corner: the plain
mapping of the pointer into the image reads a neighbour."""

from __future__ import annotations

import math

from PySide6.QtCore import QPointF


def painted_index(v: int, lo: float, hi: float, n: int) -> int:
    """Which of an image's n pixels along an axis Qt paints at screen pixel v, the image spanning
    lo..hi screen pixels (unrounded): its rect rounded to whole pixels, then each pixel sampled at its
    centre in 16.16 fixed point. Outside the painted span: below 0 or n and above."""
    start = math.floor(lo + 0.5)
    width = max(1, math.floor(hi + 0.5) - start)
    step = int(65536 * n / width)
    first = math.ceil(0.5 * n / width * 65536) - 1
    return (first + (v - start) * step) >> 16


def painted_point(gw, vb, item, scene_pos) -> QPointF:
    """The point of view box `vb` at the centre of the pixel of image item `item` (a pyqtgraph
    ImageItem in `vb`, on GraphicsView `gw`) that Qt paints on the screen pixel under `scene_pos`.
    Off the image: where its pixels would lie; without an image: the point under `scene_pos`."""
    if item.image is None:
        return vb.mapSceneToView(scene_pos)
    t, dpr = gw.viewportTransform(), gw.devicePixelRatioF()  # (painted in device pixels)
    at, box = t.map(QPointF(scene_pos)) * dpr, t.mapRect(item.sceneBoundingRect())
    j = painted_index(math.floor(at.x()), box.left() * dpr, box.right() * dpr, int(item.width()))
    i = painted_index(math.floor(at.y()), box.top() * dpr, box.bottom() * dpr, int(item.height()))
    return vb.mapSceneToView(item.mapToScene(QPointF(j + 0.5, i + 0.5)))


def painted_span(j: int, lo: float, hi: float, n: int) -> tuple[int, int]:
    """The screen pixels [first, end) along an axis that Qt paints with image pixel j of n, the
    image spanning lo..hi screen pixels: those where painted_index reads j."""
    start = math.floor(lo + 0.5)
    v = start + j * max(1, math.floor(hi + 0.5) - start) // n  # (near it: painted_index settles it)
    while painted_index(v, lo, hi, n) >= j and v > start:
        v -= 1
    while painted_index(v, lo, hi, n) < j:
        v += 1
    end = v
    while painted_index(end, lo, hi, n) == j:
        end += 1
    return v, end


def painted_centres(gw, vb, item, cols, rows) -> tuple[list[float], list[float]]:
    """The view box's x of the middle of the screen pixels Qt paints with each image column in
    `cols`, and its y of the middle of those of each row in `rows` (image item `item` in view box
    `vb` on GraphicsView `gw`): a mark there sits on the pixel as painted (painted_span)."""
    t, dpr = gw.viewportTransform(), gw.devicePixelRatioF()
    box, back = t.mapRect(item.sceneBoundingRect()), t.inverted()[0]

    def middle(j, lo, hi, n) -> float:
        first, end = painted_span(j, lo * dpr, hi * dpr, n)
        return (first + end) / 2 / dpr

    n_x, n_y, c = int(item.width()), int(item.height()), box.center()
    xs = [vb.mapSceneToView(back.map(QPointF(middle(j, box.left(), box.right(), n_x), c.y()))).x()
          for j in cols]
    ys = [vb.mapSceneToView(back.map(QPointF(c.x(), middle(i, box.top(), box.bottom(), n_y)))).y()
          for i in rows]
    return xs, ys
