"""Which pixel of an image the screen shows where, as Qt paints it; shared by the heatmap grid's
mosaic (grid.py) and the focus view's picture (focus.py), so that the pointer over a screen pixel
reads the cell whose value that pixel shows, and a mark (Find's, in the focus view) sits on the
pixel painted with its cell (`painted_span`, the other way round).

Qt's raster engine draws an unsmoothed scaled image into its rect on the screen rounded to whole
pixels, each screen pixel the image pixel at its centre in 16.16 fixed point (`painted_index`, in
figures/painted.py, which the head maps' and the Compare strip's hovers read too). Near an image
pixel's edge that is not the image pixel under the pointer's corner: the plain mapping of the
pointer into the image reads a neighbour."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, QTimer

from attnviz.figures.painted import device_pixel, painted_index


def painted_point(gw, vb, item, scene_pos, at=None) -> QPointF:
    """The point of view box `vb` at the centre of the pixel of image item `item` (a pyqtgraph
    ImageItem in `vb`, on GraphicsView `gw`) that Qt paints on the screen pixel under `scene_pos`.
    Off the image: where its pixels would lie; without an image: the point under `scene_pos`.
    `at`: the pointer's viewport position as Qt delivered it (pyqtgraph's GraphicsView keeps the
    last move's, lastMousePos; a press's: PressWatch), read where `scene_pos` is it rounded."""
    if item.image is None:
        return vb.mapSceneToView(scene_pos)
    t, dpr = gw.viewportTransform(), gw.devicePixelRatioF()  # (painted in device pixels)
    # QGraphicsView gives its scene the pointer rounded to a whole widget pixel: above a device
    # pixel ratio of 1 that is often the device pixel beside the one under the pointer
    exact = at is not None and gw.mapToScene(QPointF(at).toPoint()) == scene_pos
    at = QPointF(at) if exact else t.map(QPointF(scene_pos))
    # (counted from the window's edge: at a fractional ratio the viewport's lies between two pixels)
    box, (ox, oy) = t.mapRect(item.sceneBoundingRect()), window_origin(gw.viewport())
    j = painted_index(device_pixel(at.x(), dpr, ox), (box.left() + ox) * dpr, (box.right() + ox) * dpr,
                      int(item.width()))
    i = painted_index(device_pixel(at.y(), dpr, oy), (box.top() + oy) * dpr, (box.bottom() + oy) * dpr,
                      int(item.height()))
    return vb.mapSceneToView(item.mapToScene(QPointF(j + 0.5, i + 0.5)))


def window_origin(widget) -> tuple[float, float]:
    """Where `widget`'s top-left lies in its window, in widget pixels: Qt paints it on its window's
    device pixels, so at a fractional ratio (an odd offset at 1.5) its own edge lies between two of
    them, and the figures' hits (figures/painted.py) count from the window's."""
    p = widget.mapTo(widget.window(), QPoint(0, 0))
    return float(p.x()), float(p.y())


class PressWatch(QObject):
    """The viewport position of the last mouse press on GraphicsView `gw` as Qt delivered it
    (`at`; None before the first), for painted_point on a click. pyqtgraph's GraphicsView records
    its mousePressPos only while its own mouse handling is on, which it is not by default."""

    def __init__(self, gw):
        super().__init__(gw)
        self.at: QPointF | None = None
        gw.viewport().installEventFilter(self)

    def eventFilter(self, watched, ev) -> bool:
        if ev.type() in (QEvent.Type.MouseButtonPress, QEvent.Type.MouseButtonDblClick):
            self.at = QPointF(ev.position())
        return False


class MoveWatch(QObject):
    """Passes the scene point under the pointer on GraphicsView `gw` to `on_moved` at each move the
    scene passes on (its sigMouseMoved), and at the last move it dropped, once the pointer has been
    still for the scene's rate limit: the scene drops a move sooner after the last it passed on than
    that limit, and a read-out would name the cell before until the pointer moved again."""

    def __init__(self, gw, on_moved):
        super().__init__(gw)
        self.gw, self.on_moved, self.dropped = gw, on_moved, False
        self.later = QTimer(self)
        self.later.setSingleShot(True)
        self.later.timeout.connect(self._still)
        gw.viewport().installEventFilter(self)
        gw.scene().sigMouseMoved.connect(self._passed)

    def eventFilter(self, watched, ev) -> bool:
        if ev.type() == QEvent.Type.MouseMove:
            self.dropped = True  # (until the scene passes it on, as the event is delivered)
            rate = pg.getConfigOption("mouseRateLimit")
            if rate > 0:
                self.later.start(math.ceil(1000 / rate))
        return False

    def _passed(self, scene_pos) -> None:
        self.dropped = False
        self.on_moved(scene_pos)

    def _still(self) -> None:
        at = self.gw.lastMousePos  # (the last move's, dropped or not)
        if self.dropped and at is not None:
            self._passed(self.gw.mapToScene(at.toPoint()))  # (where the scene puts a move there)


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
    ox, oy = window_origin(gw.viewport())

    def middle(j, lo, hi, n, o) -> float:  # (counted from the window's edge, as painted_point)
        first, end = painted_span(j, (lo + o) * dpr, (hi + o) * dpr, n)
        return (first + end) / 2 / dpr - o

    n_x, n_y, c = int(item.width()), int(item.height()), box.center()
    xs = [vb.mapSceneToView(back.map(QPointF(middle(j, box.left(), box.right(), n_x, ox), c.y()))).x()
          for j in cols]
    ys = [vb.mapSceneToView(back.map(QPointF(c.x(), middle(i, box.top(), box.bottom(), n_y, oy)))).y()
          for i in rows]
    return xs, ys
