"""The focus view: one head, large, with the tokens on both axes (queries down the left, top to
bottom; keys across the top, left to right), the state's overlay, and the picked query row; pooled
where its pane has fewer pixels than the text has tokens (focus_fit.py)."""

from __future__ import annotations

import html
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsRectItem, QLabel, QVBoxLayout, QWidget

from attnviz.engine.computing.patterns import group_size, head_title
from attnviz.figures.style import BACKGROUND, FOCUS, TEXT, WINDOW_EDGE, axis_label, bar_label
from attnviz.figures.view import window_edge
from attnviz.ui.views.compute_figures import tokens
from attnviz.ui.views.fields import plain_label, plain_tip, rich_label
from attnviz.ui.views.focus_fit import PAD, Picture, axis_pool, picture
from attnviz.ui.views.grid_items import (
    HIGHLIGHT, MosaicImage, NoModel, NoValueUnder, colour_bar, no_model_text, update_bar,
)
from attnviz.ui.views.mosaic import cell_readout
from attnviz.ui.views.painted import MoveWatch, PressWatch, painted_centres, painted_point

class KeyAxis(pg.AxisItem):
    """Top axis whose tick labels are drawn rotated, so long key tokens never overlap."""

    def __init__(self):
        super().__init__("top")
        self.setStyle(hideOverlappingLabels=False, tickLength=0)
        self.labels: list[tuple[float, str]] = []  # (key column's centre, label): setTicks'

    def setTicks(self, ticks):
        self.labels = list(ticks[0]) if ticks else []
        super().setTicks(ticks)

    def drawPicture(self, p, axisSpec, tickSpecs, textSpecs):
        # every label is drawn here, over its column, from the view's mapping: pyqtgraph's own
        # textSpecs leave out a label whose text, lying flat, would overrun the axis's ends (a
        # long first key such as <|endoftext|>), though turned upright it is one line wide
        super().drawPicture(p, axisSpec, tickSpecs, [])
        view = self.linkedView()
        if view is None:
            return
        p.setPen(self.textPen())
        if self.style["tickFont"] is not None:
            p.setFont(self.style["tickFont"])
        fm = QFontMetricsF(p.font())
        bounds = self.mapRectFromParent(self.geometry())
        bottom = self.boundingRect().bottom() - 4
        for value, text in self.labels:
            x = self.mapFromScene(view.mapViewToScene(QPointF(value, 0))).x()
            if not bounds.left() <= x <= bounds.right():
                continue
            p.save()
            p.translate(QPointF(x + fm.ascent() / 2 - 1, bottom))
            p.rotate(-90)
            p.drawText(QPointF(0, 0), text)
            p.restore()


MIN_LABEL_PT = 7.0  # the smallest label font tried before labelling every n-th token


def ordinal(n: int) -> str:
    """English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 101st, 111th."""
    if n % 100 in (11, 12, 13):
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def labelled_text(row_step: int, col_step: int) -> str:
    """What the axes label: '' when every token, else which ones (hover names every cell)."""
    if max(row_step, col_step) == 1:
        return ""
    nth = lambda n: "every" if n == 1 else f"every {ordinal(n)}"  # noqa: E731
    return (f"Labelled: {nth(row_step)} query, {nth(col_step)} key (no room for each at this size); "
            "hover a cell for its tokens")


class FocusView(QWidget):
    # a click on a cell of the result shown: (layer, head, q, k), the button, the screen point
    sigCellClicked = Signal(object, object, object)

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.title = rich_label(QLabel("Click a head in the grid to look at it here."))
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.title.setWordWrap(True)
        self.title.setToolTip("The focused head: row = query token, column = key token")
        self.gw = pg.GraphicsLayoutWidget()
        self.gw.setBackground(BACKGROUND)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        # which tokens the axes name when there is no room for each: the rest read on hover
        self.label_note = plain_label(QLabel(""))
        self.label_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label_note.setWordWrap(True)
        self.label_note.hide()
        self.label_steps = (1, 1)  # (rows, columns): every n-th token labelled
        self._labels: tuple[list[str], list[str]] = ([], [])  # what the axes show (axis_labels)
        self._measured: list = []  # the view box sizes the labels were last chosen for (the last two)
        lay.addWidget(self.title)
        lay.addWidget(self.gw, 1)
        lay.addWidget(self.label_note)

        self.key_axis = KeyAxis()
        self.plot = self.gw.addPlot(row=0, col=0, axisItems={"top": self.key_axis})
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.plot.showAxis("top")
        self.plot.hideAxis("bottom")
        self.vb = self.plot.getViewBox()
        self.vb.invertY(True)  # query rows top to bottom; cells stretch to fill the dock
        self.vb.disableAutoRange()
        self.vb.sigResized.connect(self._view_box_resized)
        self.vb.sigTransformChanged.connect(self._draw_overlay)  # (pooled: marks on painted pixels)
        for name in ("left", "top"):
            ax = self.plot.getAxis(name)
            ax.setPen(pg.mkPen(BACKGROUND))
            ax.setTextPen(pg.mkPen(TEXT))
        self.plot.getAxis("left").setStyle(tickLength=0)
        self.img = MosaicImage(axisOrder="row-major")  # drawn as ARGB, as the grid's mosaic
        self.plot.addItem(self.img)
        self.no_value = NoValueUnder(self.plot, self.gw)  # what a cell with no value (NaN, transparent) shows
        self.cbar = colour_bar(state.colormap, self.font())
        self.cbar.setImageItem(self.img)
        self.gw.addItem(self.cbar, row=0, col=1)
        self.no_model = NoModel(state, self.cbar, then=self.refresh)  # no bar, the title says why
        self.overlay = pg.ScatterPlotItem(pxMode=False, symbol="s", size=0.8,
                                          pen=pg.mkPen("#ff4081", width=2), brush=None)
        self.overlay.setZValue(2)
        self.plot.addItem(self.overlay)
        self.window_line = QGraphicsPathItem()  # the sliding window's edge on a local layer
        wpen = QPen(QColor(WINDOW_EDGE), 1.5, Qt.PenStyle.DashLine)
        wpen.setCosmetic(True)
        self.window_line.setPen(wpen)
        self.window_line.setZValue(3)
        self.window_line.hide()
        self.plot.addItem(self.window_line)
        self.query_rect = QGraphicsRectItem()
        pen = QPen(QColor(FOCUS), 2)
        pen.setCosmetic(True)
        self.query_rect.setPen(pen)
        self.query_rect.setZValue(3)
        self.query_rect.hide()
        self.plot.addItem(self.query_rect)
        self.cell_rect = QGraphicsRectItem()  # the state's marked cell (the one Why here? explains)
        cpen = QPen(HIGHLIGHT, 2)
        cpen.setCosmetic(True)
        self.cell_rect.setPen(cpen)
        self.cell_rect.setZValue(4)
        self.cell_rect.hide()
        self.plot.addItem(self.cell_rect)
        self._T = -1
        self.picture: Picture | None = None  # what the image shows, pooled for the view box's size
        self._extent: tuple[int, int] | None = None  # the picture's (keys, rows) the view's range fits
        self._drawn_preview = None  # what the image shows when it was drawn from a preview
        self._bar: tuple | None = None  # what the colour bar shows (update_bar)
        self._k0 = 0  # first key column drawn: 1 with Hide first token
        self.hover_text = ""
        self._clear()

        state.sigFocusChanged.connect(self.refresh)
        state.sigResultChanged.connect(self.refresh)
        state.sigPreviewChanged.connect(self.refresh)  # the running text's first layers: the focused one among them
        state.long.sigRunChanged.connect(self.refresh)  # a long text: the long view shows its head
        state.sigDisplayChanged.connect(self.refresh)
        state.sigOverlayChanged.connect(self._draw_overlay)
        state.sigQueryChanged.connect(self._draw_query)
        state.sigHeadLabelsChanged.connect(self._draw_title)  # the badge: the title only
        for sig in (state.sigMarkedCellChanged, state.sigFocusChanged, state.sigResultChanged):
            sig.connect(self._draw_cell)
        self.moves = MoveWatch(self.gw, self._on_mouse_moved)  # (its last move read, dropped or not)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.press = PressWatch(self.gw)  # (where a click's press fell, between whole pixels)

    def _head(self):
        st = self.state
        if st.focus is None or st.result is None:
            return None
        layer, head = st.focus
        # the preview while the grid shows one (one layer on screen, the focus follows it: the
        # preview holds that layer, final), else the result
        shown = st.on_screen()[0]
        n_layer, n_head = shown.n_layer, shown.n_head
        if layer >= n_layer or head >= n_head:
            return None
        return layer, head

    def refresh(self, *_):
        st = self.state
        lh = self._head()
        if lh is None:
            self._drawn_preview = None
            self.title.setText(self._empty_text())
            self.cbar.setOpacity(0.0)  # no head, no scale to read (not hidden: its room stays)
            if self._T == -1:
                return  # already empty: nothing to repaint while the user types
            self._T = -1
            self.picture = self._extent = None
            self._clear()
            self.overlay.clear()
            self.query_rect.hide()
            return
        layer, head = lh
        shown, previewing = self.state.on_screen()
        # a result after its preview: the same text's layer on screen, final in the preview, so the
        # same picture (a keystroke's second redraw): only the title, the marks and the query change
        drawn = (shown.result.text, shown.n_tok, layer, head, st.scale_mode, st.colormap,
                 shown.hide_first, shown.weighted)
        same = self._drawn_preview == drawn and not previewing
        self._drawn_preview = drawn if previewing else None
        if same:
            self._draw_title()
            self._draw_overlay()
            self._draw_query()
            return
        T = shown.n_tok
        top = float(shown.tops(st.scale_mode, [layer], [head])[0, 0])
        self._T = T
        self._draw_picture()
        self._bar = update_bar(self.cbar, self._bar, (0.0, top), bar_label(shown.weighted), st.colormap)
        self.cbar.setOpacity(1.0)
        self._draw_title()
        self._set_ticks()
        self._draw_overlay()
        self._draw_window(layer, T)

    def _pools(self, T: int) -> tuple[int, int]:  # (query rows, keys) a pixel in the view box as it is
        return axis_pool(T, self.vb.height()), axis_pool(T, self.vb.width())

    def _draw_picture(self) -> None:
        """The focused head's picture, pooled for the view box's size (focus_fit): each of its
        pixels painted on a screen pixel of its own, so no row or column is left out; the query's
        outline and the marked cell's frame on the pixels that hold them."""
        shown = self.state.on_screen()[0]
        layer, head = self._head()
        region = shown.region([layer], [head])  # [1, 1, T, n_k]: the shown key columns only
        k0 = int(region.cols[0]) if len(region.cols) else 0  # a hidden first key is a gap, as in the grid
        self._k0 = k0  # (and has no label)
        # (a row with no weight left under Hide first token (0/0): NaN, in the no-value colour)
        pic = self.picture = picture(region.values[0, 0], k0, shown.hide_first, *self._pools(shown.n_tok))
        self.img.setImage(pic.values, autoLevels=False)
        self.img.setRect(QRectF(*pic.rect()))
        self.no_value.place(np.ones((1, 1), np.uint8), QRectF(0, 0, *pic.extent))  # (the hidden first key's column too)
        self.no_value.show_for(self.state.colormap, pic.x0 > 0, bool(np.isnan(pic.values).any()), shown.hide_first)
        if pic.extent != self._extent:
            self._extent = pic.extent
            self.vb.setRange(QRectF(0, 0, *(max(v, 1) for v in pic.extent)), padding=PAD)
        self._draw_query()
        self._draw_cell()

    def _draw_title(self, *_) -> None:
        """The focused head's title: `L3 H1 · KV 0 · badge · ...` (a new badge changes only this)."""
        st = self.state
        lh = self._head()
        if lh is None:
            return
        layer, head = lh
        shown, previewing = self.state.on_screen()
        r = shown.result
        T = shown.n_tok
        kv = int(np.asarray(r.kv_group)[head])
        gqa = group_size(r.kv_group) > 1
        badge = None if previewing else st.badge(layer, head)  # (the badges are the result's text's)
        share = (f" · value-weighted, {100 * float(r.head_share[layer, head]):.0f}% of the layer's "
                 "summed head-output norms" if shown.weighted and r.head_share is not None else "")
        kind = st.model.config.layer_kind(layer) if st.model is not None else None
        self.title.setText(f"<b>{head_title(layer, head)}</b>" + (f" · {kind}" if kind else "")
                           + (f" · KV {kv}" if gqa else "")
                           + (f" · {html.escape(badge)}" if badge else "") + share
                           + f" · {html.escape(st.model_name)} · {tokens(T)} · rows: query, columns: key")

    def _draw_window(self, layer: int, T: int) -> None:
        """The sliding window's edge on a local layer, once the text is longer than the window."""
        model = self.state.model
        edge = window_edge(T, model.config.window(layer) if model is not None else None)
        path = QPainterPath()
        if edge:
            path.moveTo(*edge[0])
            for x, y in edge[1:]:
                path.lineTo(x, y)
        self.window_line.setPath(path)
        self.window_line.setVisible(bool(edge))

    def _empty_text(self) -> str:
        if self.state.model is None and self.state.result is None:
            return html.escape(no_model_text(self.state))  # (the title is rich text; a path may hold '<')
        if self.state.long.run is not None:
            return ("A long text: its focused head is the large pane of the long view, beside the "
                    "grid (zoom there for the exact weights).")
        return "Click a head in the grid to look at it here."

    def _clear(self):
        """No head: an empty frame, no numbered axes, no colour bar."""
        self.img.clear()
        self.no_value.hide()
        self.cbar.setOpacity(0.0)
        self.window_line.hide()
        self.title.setText(self._empty_text())
        self.plot.getAxis("left").setTicks([[]])
        self.key_axis.setTicks([[]])
        self._labels = ([], [])
        self.label_steps = (1, 1)
        self.label_note.hide()

    def axis_labels(self) -> tuple[list[str], list[str]]:
        """(rows, columns): the token labels the left and top axes show, top to bottom and left to
        right (every label_steps-th token; none without a head)."""
        return self._labels

    def _view_box_resized(self, *_) -> None:
        """The labels chosen again for the view box's new size: it changes after the labels were
        chosen, as the row labels' axis and the colour bar's widen to theirs. Where the new labels
        would take it back to the size before (a size between two spacings), both sizes' smaller
        sides choose them, and they fit either."""
        size = (self.vb.width(), self.vb.height())
        if self._head() is None:
            return
        pic = self.picture
        if pic is not None and (pic.pool, pic.key_pool) != self._pools(self._T):
            self._draw_picture()  # pooled again for the new size (the labels do not depend on it)
        if self._measured[-1:] == [size]:
            return
        if len(self._measured) == 2 and self._measured[0] == size:
            self._set_ticks(tuple(map(min, *self._measured)))
        else:
            self._set_ticks()

    def _set_ticks(self, size: tuple[float, float] | None = None):  # size: the view box's (width, height)
        r = self.state.on_screen()[0].result
        width, height = size if size is not None else (self.vb.width(), self.vb.height())
        self._measured = [*self._measured[-1:], (self.vb.width(), self.vb.height())]
        T = len(r.labels)
        # every token labelled while rows / columns are a line of label text apart (in the
        # window's font, or a smaller one when that labels each), else every step-th in the
        # window's font; columns' labels are turned upright, so both need the line's height
        small = QFont(self.font())
        small.setPointSizeF(max(MIN_LABEL_PT, 0.8 * self.font().pointSizeF()))
        for font in (self.font(), small, self.font()):
            line = QFontMetricsF(font).height() + 1
            steps = [max(1, math.ceil(line * max(T, 1) / max(side, 1.0)))
                     for side in (height, width)]
            if max(steps) == 1:
                break
        ticks = [[(i + 0.5, axis_label(r.labels[i])) for i in range(first, T, step)]
                 for first, step in zip((0, min(self._k0, T)), steps)]
        self.label_steps = tuple(steps)
        self.label_note.setText(labelled_text(*steps))
        self.label_note.setVisible(max(steps) > 1)
        for axis in (self.plot.getAxis("left"), self.key_axis):
            axis.setStyle(tickFont=font)
        self.plot.getAxis("left").setTicks([ticks[0]])
        self.key_axis.setTicks([ticks[1]])
        self._labels = tuple([text for _, text in level] for level in ticks)
        ticks = ticks[1]
        fm = QFontMetricsF(font)
        longest = max((fm.horizontalAdvance(t) for _, t in ticks), default=10)
        self.key_axis.setHeight(int(longest) + 12)

    def _draw_overlay(self, *_):
        mask = self.state.overlay  # (Find's matches in the result's text: not over a preview)
        lh = self._head()
        if mask is None or lh is None or self.state.on_screen()[1] or mask.shape != (self._T, self._T):
            self.overlay.clear()
            return
        q, k = np.nonzero(mask)
        pic = self.picture
        if pic is None or not pic.pooled or self.vb.width() < 1:
            self.overlay.setData(x=k + 0.5, y=q + 0.5, size=0.8)
            return
        # pooled: one mark on each painted pixel that holds a match, in its middle as Qt paints it
        # (a hidden first key is a gap, not a pixel: its mark stays on it)
        rows, cols = q // pic.pool, np.where(k < pic.x0, -1 - k, (k - pic.x0) // pic.key_pool)
        rows, cols = np.unique(np.stack([rows, cols]), axis=1)
        self.vb.updateMatrix()  # (the picture's place on the screen as it will be painted)
        js, is_ = np.unique(cols[cols >= 0]).tolist(), np.unique(rows).tolist()
        xs, ys = painted_centres(self.gw, self.vb, self.img, js, is_)
        x_of, y_of = dict(zip(js, xs)), dict(zip(is_, ys))
        self.overlay.setData(x=[x_of[j] if j >= 0 else -j - 0.5 for j in cols.tolist()],
                             y=[y_of[i] for i in rows.tolist()], size=0.8 * min(pic.pool, pic.key_pool))

    def _draw_query(self, *_):
        q = self.state.preview_query() if self.state.on_screen()[1] else self.state.query_pos
        if q is None or self._head() is None or q >= self._T:
            self.query_rect.hide()
            return
        pic = self.picture  # (the row of pixels that holds the query's row: its block, pooled)
        self.query_rect.setRect(QRectF(0, q, self._T, 1) if pic is None else
                                QRectF(0, pic.block(q, 0)[1], pic.extent[0], pic.pool))
        self.query_rect.show()

    def _draw_cell(self, *_) -> None:
        """Frame the state's marked cell while this view shows its head."""
        st, c = self.state, self.state.marked_cell
        on = c is not None and st.focus == c[:2] and st.result is not None
        if on:  # x: key column, y: query row (pooled: the pixel that holds it)
            self.cell_rect.setRect(QRectF(*(self.picture.block(c[2], c[3]) if self.picture is not None
                                            else (c[3], c[2], 1, 1))))
        self.cell_rect.setVisible(on)

    def cell_at(self, x: float, y: float):
        """(layer, head, q, k) of the cell whose value the picture shows at view point (x, y) in
        tokens: pooled, its block's largest weight (Shown.strongest_in_block); None off it."""
        lh, pic = self._head(), self.picture
        if lh is None or pic is None or not (0 <= x < pic.extent[0] and 0 <= y < pic.extent[1]):
            return None
        q, k = int(y), int(x)
        if not pic.pooled:
            return (*lh, q, k)
        k0, q0, pk, pq = pic.block(q, k)
        return (*lh, *self.state.on_screen()[0].strongest_in_block(*lh, q0, k0, pq, pk))

    def _painted_point(self, scene_pos, at) -> QPointF:
        """The view point, in tokens, at the centre of the picture pixel painted on the screen pixel
        under `scene_pos`, the pointer at viewport position `at` (painted.py): near a pixel's edge
        the pointer reads the block that pixel shows, not its neighbour. (Off the picture: where
        its pixels would lie.)"""
        if self.picture is None:
            return self.vb.mapSceneToView(scene_pos)
        return painted_point(self.gw, self.vb, self.img, scene_pos, at)

    def _on_mouse_moved(self, scene_pos):
        if not self.vb.sceneBoundingRect().contains(scene_pos):
            return
        p = self._painted_point(scene_pos, self.gw.lastMousePos)
        cell = self.cell_at(p.x(), p.y())
        if cell is None:
            return
        st = self.state
        # no read-out over a preview (the read-outs read the state's result, another text's)
        text = "" if self.state.on_screen()[1] else cell_readout(st, *cell)
        if text != self.hover_text:
            self.hover_text = text
            self.gw.setToolTip(plain_tip(text))  # (it quotes tokens: fields.py)
            if text:
                st.show_status(text)

    def _on_mouse_clicked(self, ev):
        p = self._painted_point(ev.scenePos(), self.press.at)
        cell = self.cell_at(p.x(), p.y())
        if cell is None or self.state.on_screen()[1]:  # a query is a position in the whole result
            return
        if ev.button() == Qt.MouseButton.LeftButton:
            self.state.toggle_query(cell[2])
        # then whoever offers more on a cell (Why here?: a left click explains it, a right click
        # opens its menu)
        self.sigCellClicked.emit(cell, ev.button(), ev.screenPos().toPoint())
