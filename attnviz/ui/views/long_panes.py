"""The panes of the long view (ui/views/long_view.py): the focused head large (PatternPane) and
every head of the layer as a tile (HeadTiles), both drawing overviews of the state's region
(figures/overview.py) and mapping their points to tokens; and the indexed images they paint, through
the picture's colour table (figures/long_picture.colour_table)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import isolated
from attnviz.figures.overview import shown_index, to_tokens, token_at, window_segment
from attnviz.figures.painted import device_pixel, drawn_index
from attnviz.figures.long_picture import REDUCE_WORDS, colour_table
from attnviz.figures.style import BACKGROUND, FOCUS, TEXT, WINDOW_EDGE
from attnviz.figures.titles import cut_title, tile_marks, title_form, title_forms
from attnviz.ui.views.mosaic import UNDEFINED
from attnviz.ui.views.painted import window_origin

LABEL_MAX = 48  # tokens a side up to which the pane labels each token
DRAG_PX = 5  # a press that moves less than this is a click, not a rectangle


def indexed_image(idx: np.ndarray, table: list[int]) -> QImage:
    """[H, W] uint8 colour indices -> a QImage that owns its pixels."""
    idx = np.ascontiguousarray(idx, dtype=np.uint8)
    h, w = idx.shape
    img = QImage(idx.data, w, h, w, QImage.Format.Format_Indexed8)
    img.setColorTable(table)
    return img.copy()


class _PatternArea(QWidget):
    """A widget that draws overviews of the state's region and maps its points to tokens: the base
    of the large pane and the tiles."""

    sigHover = Signal(str)

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state, self.long = state, state.long
        self.setMouseTracking(True)
        self._press: QPointF | None = None
        self._drag: QPointF | None = None
        self._table_name = ""
        self._table: list[int] = []
        self.paint_count = 0

    # subclasses: the rect of head h's image, and which head a point is over
    def head_rect(self, h: int) -> QRectF:
        raise NotImplementedError

    def head_at(self, p: QPointF) -> int | None:
        raise NotImplementedError

    def table(self) -> list[int]:
        if self._table_name != self.state.colormap:
            self._table_name, self._table = self.state.colormap, colour_table(self.state.colormap)
        return self._table

    def images(self, ov, scale_mode: str) -> list[QImage]:
        if ov is None:
            return []
        return [indexed_image(i, self.table()) for i in shown_index(ov, scale_mode, self.long.log)]

    def draw_image(self, p: QPainter, img: QImage, ov_region, rect: QRectF) -> None:
        """Draw an image of ov_region into `rect`, which shows the state's region: the same region
        fills it; another (an older overview while the new one is computed) is moved and scaled
        to where its tokens are now, clipped to the rect."""
        r0, r1, c0, c1 = self.long.region
        o0, o1, k0, k1 = ov_region
        sy, sx = rect.height() / (r1 - r0), rect.width() / (c1 - c0)
        target = QRectF(rect.left() + (k0 - c0) * sx, rect.top() + (o0 - r0) * sy,
                        (k1 - k0) * sx, (o1 - o0) * sy)
        p.save()
        p.setClipRect(rect)
        p.drawImage(target, img, QRectF(img.rect()))
        p.restore()

    def draw_window(self, p: QPainter, rect: QRectF, layer: int) -> None:
        lp = self.long.patterns
        seg = window_segment(self.long.region, lp.window[layer], lp.causal)
        if seg is None:
            return
        r0, r1, c0, c1 = self.long.region
        pts = [QPointF(rect.left() + (k - c0) * rect.width() / (c1 - c0),
                       rect.top() + (q - r0) * rect.height() / (r1 - r0)) for q, k in seg]
        pen = QPen(QColor(WINDOW_EDGE), 1, Qt.PenStyle.DashLine)
        p.setPen(pen)
        p.drawLine(pts[0], pts[1])

    def tokens_at(self, pos: QPointF):
        """(head, q, k) under a point, or None."""
        h = self.head_at(pos)
        if h is None or self.long.run is None:
            return None
        rect = self.head_rect(h)
        qk = token_at(self.long.region, (rect.height(), rect.width()), pos.y() - rect.top(),
                      pos.x() - rect.left())
        cell = None if qk is None else self.cell_at(h, pos)
        if cell is not None:  # the tokens nearest the point inside the block painted there
            ov, cy, cx = cell
            rows, cols = ov.edges(0), ov.edges(1)
            qk = (min(max(qk[0], int(rows[cy])), int(rows[cy + 1]) - 1),
                  min(max(qk[1], int(cols[cx])), int(cols[cx + 1]) - 1))
        return None if qk is None else (h, *qk)

    def cell_at(self, h: int, pos: QPointF):
        """(overview, row, column): the cell of head h's overview that Qt paints at the device pixel
        under `pos` (drawn by QPainter.drawImage: figures/painted.drawn_index), or None where no
        overview of the region shown is painted."""
        ov = self.overview_of(h)
        if ov is None or ov.region != self.long.region or ov.layer != self.layer() or h not in ov.heads:
            return None
        rect, dpr = self.head_rect(h), self.devicePixelRatioF()  # (painted in device pixels)
        # (counted from the window's edge: at a fractional ratio the widget's lies between two pixels)
        ox, oy = window_origin(self)
        H, W = ov.values.shape[1:]
        cy = drawn_index(device_pixel(pos.y(), dpr, oy), (rect.top() + oy) * dpr, rect.height() * dpr, H)
        cx = drawn_index(device_pixel(pos.x(), dpr, ox), (rect.left() + ox) * dpr, rect.width() * dpr, W)
        return ov, min(max(cy, 0), H - 1), min(max(cx, 0), W - 1)

    def readout(self, pos: QPointF) -> str:
        """'L3 H1  ·are → ·keys  (q 41, k 17)  0.0123', the exact weight, with the cell's value
        where a cell holds a block of tokens."""
        at = self.tokens_at(pos)
        if at is None:
            return ""
        h, q, k = at
        lg, layer = self.long, self.layer()
        labels = lg.run.result.labels
        w = lg.shown().weight(layer, h, q, k)  # the shown weight, under the view's options
        undefined = w is not None and lg.shown().undefined(layer, h, q)  # (the dense views' words)
        text = (f"{self.whole_title(layer, h)}  {isolated(labels[q])} → {isolated(labels[k])}  (q {q:,}, k {k:,})  "
                + ("(hidden)" if w is None else UNDEFINED if undefined else f"{w:.4g}"))
        cell = self.cell_at(h, pos)
        if cell is not None and not cell[0].exact:
            ov, cy, cx = cell
            i = ov.heads.index(h)
            size = ov.block_text()
            text += (f"   (cell of up to {size}: undefined, no row of it has weight left)"
                     if ov.blank is not None and ov.blank[i, cy] else
                     f"   (cell: {REDUCE_WORDS[ov.reduce]} {float(ov.values[i, cy, cx]):.4g} over up to {size})")
        return text

    def overview_of(self, h: int):
        raise NotImplementedError

    def whole_title(self, layer: int, h: int) -> str:  # the head as the readout names it
        return head_title(layer, h)

    def layer(self) -> int:
        lp = self.long.patterns
        return min(self.state.layer, lp.n_layer - 1)

    # --- mouse: wheel zoom, drag a rectangle, hover -----------------------------------------------
    def _token_coords(self, pos: QPointF, h: int | None = None):
        h = self.head_at(pos) if h is None else h
        if h is None:
            return None
        rect = self.head_rect(h)
        return to_tokens(self.long.region, (rect.height(), rect.width()), pos.y() - rect.top(),
                         pos.x() - rect.left())

    def wheelEvent(self, ev) -> None:
        at = self._token_coords(ev.position())
        if at is None or self.long.run is None:
            return
        self.long.zoom(ev.angleDelta().y() / 120.0, at)
        ev.accept()

    def mousePressEvent(self, ev) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            self._press, self._drag = ev.position(), None

    def mouseMoveEvent(self, ev) -> None:
        pos = ev.position()
        if self._press is not None and (pos - self._press).manhattanLength() >= DRAG_PX:
            self._drag = pos
            self.update()
        text = self.readout(pos)
        if text:
            self.sigHover.emit(text)

    def mouseReleaseEvent(self, ev) -> None:
        press, drag, self._press, self._drag = self._press, self._drag, None, None
        if press is None:
            return
        h = self.head_at(press)
        if drag is not None and h is not None:
            a, b = self._token_coords(press, h), self._token_coords(ev.position(), h)
            self.long.zoom_to(a, b)
            self.update()
        elif h is not None:
            self.clicked(h)

    def clicked(self, h: int) -> None:
        pass

    def mouseDoubleClickEvent(self, ev) -> None:
        self.long.reset_zoom()

    def paintEvent(self, ev) -> None:  # each area draws itself in paint(p)
        p = QPainter(self)
        try:
            self.paint(p)
        finally:
            p.end()
        self.paint_count += 1

    def paint_drag(self, p: QPainter) -> None:
        if self._press is not None and self._drag is not None:
            pen = QPen(QColor("#ffffff"), 1, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.setBrush(QColor(255, 255, 255, 40))
            p.drawRect(QRectF(self._press, self._drag).normalized())


class PatternPane(_PatternArea):
    """The focused head large, its token labels once the region is small enough."""

    MARGIN = 8

    def __init__(self, state, parent=None):
        super().__init__(state, parent)
        self.setMinimumSize(120, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._font = QFont()
        self._font.setPointSize(8)
        self._cache = (None, None, None, None)  # (overview, colormap, log, image)

    def label_room(self) -> tuple[float, float]:
        """(left, bottom) pixels for token labels: only while the region is labelled."""
        r = self.long.region
        if r is None:
            return 0.0, 0.0
        return (90.0 if r[1] - r[0] <= LABEL_MAX else 0.0, 70.0 if r[3] - r[2] <= LABEL_MAX else 0.0)

    def head_rect(self, h: int = 0) -> QRectF:
        left, bottom = self.label_room()
        m = self.MARGIN
        side = max(1.0, min(self.width() - left - 2 * m, self.height() - bottom - 2 * m))
        return QRectF(left + m, m, side, side)

    def head_at(self, p: QPointF):
        return self.long.head() if self.long.run is not None and self.head_rect().contains(p) else None

    def overview_of(self, h):
        return self.long.pane

    def pixels(self) -> tuple[int, int]:  # the cells the pane has room for (its pixels)
        r = self.head_rect()
        return int(r.height()), int(r.width())

    def image(self):
        ov = self.long.pane
        key = (ov, self.state.colormap, self.long.log)
        if self._cache[:3] != key:
            imgs = self.images(ov, "per-head")
            self._cache = (*key, imgs[0] if imgs else None)
        return self._cache[3]

    def paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), QColor(BACKGROUND))
        lg = self.long
        if lg.run is None:
            return
        rect = self.head_rect()
        img = self.image()
        if img is not None and lg.pane.layer == self.layer():
            self.draw_image(p, img, lg.pane.region, rect)
        self.draw_window(p, rect, self.layer())
        pen = QPen(QColor(FOCUS), 1)
        p.setPen(pen)
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRect(rect)
        self.draw_labels(p, rect)
        self.paint_drag(p)

    def draw_labels(self, p: QPainter, rect: QRectF) -> None:
        r0, r1, c0, c1 = self.long.region
        labels = self.long.run.result.labels
        p.setFont(self._font)
        p.setPen(QColor(TEXT))
        if r1 - r0 <= LABEL_MAX:
            step = rect.height() / (r1 - r0)
            for i, q in enumerate(range(r0, r1)):
                p.drawText(QRectF(0, rect.top() + i * step, rect.left() - 3, step),
                           Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, labels[q][:12])
        if c1 - c0 <= LABEL_MAX:
            step = rect.width() / (c1 - c0)
            for i, k in enumerate(range(c0, c1)):
                p.save()
                p.translate(rect.left() + (i + 0.5) * step, rect.bottom() + 3)
                p.rotate(90)
                p.drawText(QRectF(0, -step / 2, 66, step),
                           Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, labels[k][:12])
                p.restore()


class HeadTiles(_PatternArea):
    """Every head of the layer, one tile each over the same region; a click focuses a head."""

    GAP, TITLE = 6, 16

    def __init__(self, state, parent=None):
        super().__init__(state, parent)
        self.setMinimumSize(120, 120)
        self._font = QFont()
        self._font.setPointSize(8)
        self._cache = (None, None, None, None, [])  # (overview, colormap, log, scale mode, images)

    def n_head(self) -> int:
        return 0 if self.long.run is None else self.long.patterns.n_head

    def columns(self) -> int:
        n = max(1, self.n_head())
        best, best_side = 1, 0.0
        for c in range(1, n + 1):
            side = self._side(c)
            if side > best_side:
                best, best_side = c, side
        return best

    def _side(self, c: int) -> float:
        n = max(1, self.n_head())
        rows = -(-n // c)
        return min((self.width() - (c + 1) * self.GAP) / c,
                   (self.height() - rows * (self.GAP + self.TITLE) - self.GAP) / rows)

    def tile_px(self) -> int:
        return max(8, int(self._side(self.columns())))

    def head_rect(self, h: int) -> QRectF:
        c = self.columns()
        side = self.tile_px()
        row, col = divmod(h, c)
        x = self.GAP + col * (side + self.GAP)
        y = self.GAP + row * (side + self.GAP + self.TITLE) + self.TITLE
        return QRectF(x, y, side, side)

    def head_at(self, p: QPointF):
        for h in range(self.n_head()):
            if self.head_rect(h).contains(p):
                return h
        return None

    def overview_of(self, h):
        return self.long.tiles

    def clicked(self, h: int) -> None:
        self.state.set_focus(self.layer(), h)

    def whole_title(self, layer: int, h: int) -> str:
        """The tile's title whole, badge and all (its painted title may be shortened)."""
        kind = self._kind(layer)
        return title_forms(layer, h, self.state.badge(layer, h), f" · {kind}" if kind else "")[0]

    def _kind(self, layer: int):
        model = self.state.model
        return model.config.layer_kind(layer) if model is not None and layer < model.config.n_layer else None

    def title_parts(self, layer: int) -> tuple[tuple[str, ...], str]:
        """(each head's role badge, what the titles say of the layer: " · local"), as the tiles'
        titles (forms) and the exported picture's say them."""
        kind = self._kind(layer)
        return tuple(self.state.badge(layer, h) for h in range(self.n_head())), tile_marks(kind)

    def forms(self, layer: int) -> list[tuple[str, ...]]:
        """Each tile's title and its shorter forms as the grid's tiles write them
        (figures/titles.title_forms: the layer kind, the role badge)."""
        badges, marks = self.title_parts(layer)
        return [title_forms(layer, h, badges[h], marks) for h in range(self.n_head())]

    def titles(self, layer: int) -> list[str]:
        """Each tile's title (forms), the row in the first form whose titles all fit a tile, cut
        where none does."""
        fm, forms = QFontMetricsF(self._font), self.forms(layer)
        room = self.tile_px() + self.GAP - 2  # (a title up to the next tile's, a gap short of its title)
        i = title_form(forms, lambda _j, text: fm.horizontalAdvance(text) <= room)
        return [cut_title(fm, f[min(i, len(f) - 1)], room) for f in forms]

    def images(self, ov, scale_mode):
        key = (ov, self.state.colormap, self.long.log, scale_mode)
        if self._cache[:4] != key:
            self._cache = (*key, super().images(ov, scale_mode))
        return self._cache[4]

    def paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), QColor(BACKGROUND))
        lg = self.long
        if lg.run is None:
            return
        layer = self.layer()
        ov = lg.tiles if lg.tiles is not None and lg.tiles.layer == layer else None
        imgs = self.images(ov, self.state.scale_mode)
        focus = lg.head()
        p.setFont(self._font)
        titles = self.titles(layer)
        for h in range(self.n_head()):
            rect = self.head_rect(h)
            if ov is not None and h in ov.heads:
                self.draw_image(p, imgs[ov.heads.index(h)], ov.region, rect)
            self.draw_window(p, rect, layer)
            p.setPen(QColor(TEXT))
            p.drawText(QRectF(rect.left(), rect.top() - self.TITLE, rect.width() + self.GAP, self.TITLE),
                       Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, titles[h])
            frame = QColor(FOCUS) if h == focus else QColor(TEXT)
            if h != focus:
                frame.setAlpha(80)
            p.setPen(QPen(frame, 2 if h == focus else 1))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(rect)
        self.paint_drag(p)
