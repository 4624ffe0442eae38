"""The marks over the heatmap mosaic (ui/views/grid.py), each one item laid over the image and
drawn again for its layout (ui/views/mosaic.py): the focused head's frame, the query row's
highlight (the other rows dimmed, a line round the row), the sliding window's edge on the tiles of a
local layer, a cross over each switched-off head."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem

from attnviz.figures.style import ERROR as OFF, FOCUS, WINDOW_EDGE
from attnviz.figures.view import window_edge
from attnviz.ui.views.grid_items import MosaicImage
from attnviz.ui.views.mosaic import focus_margin

DIM = np.zeros((256, 4), np.uint8)  # the dimmed rows' table: entry 1 darkens, entry 0 leaves be
DIM[1] = (0, 0, 0, 150)


def _cosmetic(colour: str, width: int, style=Qt.PenStyle.SolidLine) -> QPen:  # (as wide at any zoom)
    pen = QPen(QColor(colour), width, style)
    pen.setCosmetic(True)
    return pen


def mark_items(plot) -> tuple[QGraphicsRectItem, MosaicImage, QGraphicsPathItem, QGraphicsPathItem,
                              QGraphicsPathItem]:
    """(the focus frame, the query's dimmed rows, the query's line, the window's edge, the crosses
    over switched-off heads): each hidden, added to view box `plot` over the mosaic (z 0)."""
    focus_rect = QGraphicsRectItem()
    focus_rect.setPen(_cosmetic(FOCUS, 2))
    focus_rect.setZValue(5)
    # an image of the mosaic's size over it: Qt paints its pixels on exactly the screen pixels of
    # the mosaic's (a filled rect's edges round to other pixels than a scaled image's columns)
    query_dim = MosaicImage(axisOrder="row-major")
    query_dim.setZValue(3)
    query_line = QGraphicsPathItem()
    query_line.setPen(_cosmetic("#ffffff", 1))
    query_line.setZValue(4)
    window_line = QGraphicsPathItem()  # the sliding window's edge on local layers
    window_line.setPen(_cosmetic(WINDOW_EDGE, 1, Qt.PenStyle.DashLine))
    window_line.setZValue(2)
    off_marks = QGraphicsPathItem()  # switched-off heads (state.effects.ablation): crossed out
    off_marks.setPen(_cosmetic(OFF, 2))
    off_marks.setZValue(5)
    for item in (focus_rect, query_dim, query_line, window_line, off_marks):
        item.hide()
        plot.addItem(item)
    return focus_rect, query_dim, query_line, window_line, off_marks


def draw_focus(frame: QGraphicsRectItem, lo, i: int | None) -> None:
    """The focus frame round tile `i` of layout `lo`, hidden where the focused head is not shown."""
    if i is None:
        frame.hide()
        return
    m = focus_margin(lo.T)
    frame.setRect(QRectF(lo.x0[i] - m, lo.y0[i] - m, lo.T + 2 * m, lo.T + 2 * m))
    frame.show()


def draw_query(dim: MosaicImage, line: QGraphicsPathItem, lo, q: int | None) -> None:
    """Query `q`'s row in every tile of layout `lo`: the other rows dimmed (an image laid over the
    mosaic, cell for cell), a line round it; both hidden without a query, a layout or that token."""
    if q is None or lo is None or q >= lo.n_tok:
        dim.hide()
        line.hide()
        return
    T = lo.T
    q //= lo.pool
    dims, lines = np.zeros((lo.height, lo.width), np.uint8), QPainterPath()
    for x, y in zip(lo.x0.tolist(), lo.y0.tolist()):
        dims[y:y + T, x:x + T] = 1
        dims[y + q, x:x + T] = 0
        lines.addRect(QRectF(x, y + q, T, 1))
    dim.setImage(dims, levels=(0, 255), lut=DIM, autoLevels=False)
    line.setPath(lines)
    dim.show()
    line.show()


def draw_window(item: QGraphicsPathItem, lo, model) -> None:
    """The sliding window's edge on every tile of a local layer of `model`, once the text is longer
    than the window: keys left of the dashed line are out of the window."""
    path = QPainterPath()
    if lo is not None and model is not None:
        c = model.config
        for i, (layer, _) in enumerate(lo.heads):
            edge = window_edge(lo.n_tok, c.window(layer) if layer < c.n_layer else None, lo.pool)
            if edge:
                x0, y0 = float(lo.x0[i]), float(lo.y0[i])
                path.moveTo(x0 + edge[0][0], y0 + edge[0][1])
                for x, y in edge[1:]:
                    path.lineTo(x0 + x, y0 + y)
    item.setPath(path)
    item.setVisible(not path.isEmpty())


def draw_crosses(item: QGraphicsPathItem, lo, tiles) -> None:
    """A cross over each of the `tiles` (indices into layout `lo`; None: a head not shown)."""
    path = QPainterPath()
    for i in tiles:
        if i is not None:
            x, y, T = float(lo.x0[i]), float(lo.y0[i]), float(lo.T)
            path.moveTo(x, y)
            path.lineTo(x + T, y + T)
            path.moveTo(x + T, y)
            path.lineTo(x, y + T)
    item.setPath(path)
    item.setVisible(not path.isEmpty())
