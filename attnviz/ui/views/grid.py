"""The heatmap mosaic: every head of one layer (or of all layers) tiled into ONE uint8 image.

Per update only the reused uint8 buffer is refilled and handed to `setImage` with a 256-entry lookup
table (style.heat_table: entry 0 is the transparent gap, 1..255 the colormap; under each head the
no-value colour, NoValueUnder, which a cell of the gap shows). Items around the image
(titles, KV-group bands, the focus frame, the query-row highlight) are pooled and only moved; where they
go is computed in ui/views/mosaic.py (the marks over the tiles are drawn by ui/views/grid_marks.py).
Token labels live in the focus view and in the hover read-out, never on the small heads."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QGraphicsRectItem, QVBoxLayout, QWidget

from attnviz.engine.computing.patterns import group_size, head_title
from attnviz.ui.views.mosaic import (
    Geometry, GridLayout, cell_readout, kv_segments, same_layout, tile_index, title_room,
    title_spots,
)
from attnviz.figures.style import (
    BACKGROUND, bar_label, heat_positions, heat_table,
    signed_positions, signed_table,
)
from attnviz.figures.roles import SHORT_PROBE_NOTE
from attnviz.figures.titles import tile_marks, title_form, title_forms
from attnviz.ui.views import grid_compare as GC
from attnviz.ui.views.grid_fit import PAD, fitted, view_size
from attnviz.ui.views.grid_marks import draw_crosses, draw_focus, draw_query, draw_window, mark_items
from attnviz.ui.views.fields import plain_tip
from attnviz.ui.views.painted import MoveWatch, PressWatch, painted_point
from attnviz.ui.views.grid_items import (
    HeadOutline, Label, MosaicImage, NoModel, NoValueUnder, colour_bar, head_mask, place_bands, place_titles,
    update_bar,
)

BAND_ALPHA = 100  # KV-group bands: the group colour (figures.style) as a tint on the dark background


class HeatmapGrid(QWidget):
    """View of AppState: result, layer, view mode, colormap, scale, focus, query, head labels."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setToolTip("Hover a cell to read its weight; click a head to focus it; "
                        "Shift+click a row to pick that query token in every head; Alt+click a "
                        "head to switch it off; right-click it for a menu of ways")
        self.gw = pg.GraphicsLayoutWidget()
        self.gw.setBackground(BACKGROUND)
        # the view paints every pixel itself with its opaque background: Qt need not fill the
        # viewport with the same colour first
        self.gw.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.gw.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.gw)

        # a bare view box, no plot: hidden axes would still re-label themselves on every re-layout
        self.plot = self.vb = self.gw.addViewBox(row=0, col=0, enableMenu=False)
        self.vb.setMouseEnabled(False, False)
        self.vb.setAspectLocked(True)
        self.vb.invertY(True)
        self.vb.disableAutoRange()

        self.img = MosaicImage(axisOrder="row-major")
        self.img.setZValue(0)
        self.plot.addItem(self.img)
        self.no_value = NoValueUnder(self.plot, self.gw)  # what a transparent cell (the gap entry) shows
        self.cbar = colour_bar(state.colormap, self.font())
        self.gw.addItem(self.cbar, row=0, col=1)
        self.no_model = NoModel(state, self.cbar, self.gw)  # an empty grid says why

        # the focus frame, the query row's highlight, the window's edge, the switched-off crosses
        self.focus_rect, self.query_dim, self.query_line, self.window_line, self.off_marks = mark_items(self.plot)
        self._titles: list[Label] = []
        self._captions: list[Label] = []
        self._bands: list[QGraphicsRectItem] = []
        self._font = QFont()
        self._font.setPointSize(9)

        self.layout_: GridLayout | None = None
        self._flat = np.zeros(0, np.uint8)  # reused mosaic storage
        self._fbuf = np.zeros(0, np.float32)  # reused quantisation scratch
        self._mosaic: np.ndarray | None = None
        self._lut = heat_table(state.colormap)
        self._lut_name = state.colormap
        self._kv_key: tuple = ()
        self._bar: tuple | None = None
        self.hover_text = ""
        self.update_count = 0  # results drawn, for tests and benchmarks
        self.drawn = None  # the RunResult on screen: the state's result, or a preview of its run
        self._layout_key: tuple = ()  # what layout_ was made for (_draw)
        self._geo: Geometry | None = None
        self.compare = None  # the Compare session (attach_compare): B or A - B in place of A
        self.shown_mode = "A"  # what the mosaic shows: "A", "B" or "A-B" (grid_compare)

        state.sigResultChanged.connect(self._on_data)
        state.sigPreviewChanged.connect(self._on_data)
        state.sigLayerChanged.connect(self._on_data)
        state.sigDisplayChanged.connect(self._on_data)
        state.sigFocusChanged.connect(self._draw_focus)
        state.sigQueryChanged.connect(self._draw_query)
        state.sigHeadLabelsChanged.connect(self._draw_titles)
        state.effects.sigAblationChanged.connect(self._draw_off)
        self.moves = MoveWatch(self.gw, self._on_mouse_moved)  # (its last move read, dropped or not)
        self.vb.sigResized.connect(self._view_resized)
        self.plot.scene().sigMouseClicked.connect(self._on_mouse_clicked)
        self.press = PressWatch(self.gw)  # (where a click's press fell, between whole pixels)
        self.outline = HeadOutline(self, state)  # the state's outlined heads (after the redraws above)

    def attach_compare(self, jobs) -> None:  # (grid_compare.attach)
        GC.attach(self, jobs)

    # --- drawing --------------------------------------------------------------------------------
    def _on_data(self, *_):
        self.refresh()

    def refresh(self) -> None:
        """Refill the mosaic from the state (and re-lay it out only if its geometry changed)."""
        if self._draw():
            self.update_count += 1

    def _draw(self) -> bool:
        """Draw the state's result; False when there is none (the grid is cleared)."""
        st = self.state
        shown, previewing = st.on_screen()  # a preview: the running text's first layers
        r = None if shown is None else shown.result
        if r is not None and self.compare is not None and GC.pending(self.compare, r, shown):
            return False  # B or A - B of this text is not in yet: the last picture stays
        self.drawn = r
        if r is None:
            self.img.clear()
            self._mosaic = None
            self.layout_ = None
            for item in (*self._titles, *self._captions, *self._bands, self.no_value):
                item.hide()
            self._draw_focus()
            self._draw_query()
            return False
        n_layer, n_head, T = shown.n_layer, shown.n_head, shown.n_tok
        if previewing:
            n_layer = st.n_layer  # laid out as the whole run will be: no re-layout when it comes
        kv_group = np.asarray(r.kv_group)
        layer = min(st.layer, n_layer - 1)
        # what the layout depends on: the same as the last draw's (a keystroke that adds no token)
        # keeps its layout without computing it again
        key = (st.view_mode, n_layer, n_head, layer, T, kv_group.tobytes(), self._view_size())
        if key != self._layout_key or self.layout_ is None:
            lo, geo = fitted(st.view_mode, n_layer, layer, kv_group, T, *self._view_size())
            if not same_layout(lo, self.layout_):
                self._relayout(lo, kv_group)
            self._layout_key, self._geo = key, geo
        lo, geo = self.layout_, self._geo

        layers = None if st.view_mode == "all" else [layer]
        region = shown.region(layers, pool=geo.pool)  # [n_layers, n_head, rows, cols]
        cmp = None if self.compare is None else GC.compare_values(self.compare, r, shown, layers, geo.pool)
        self.shown_mode = "A" if cmp is None else GC.compared_mode(self.compare)
        values = region.values if cmp is None else cmp.values
        heads = values.reshape((-1,) + values.shape[2:])
        signed = cmp is not None and cmp.lim is not None
        lut_name = "A-B" if signed else st.colormap
        if lut_name != self._lut_name:
            self._lut = signed_table() if signed else heat_table(st.colormap)
            self._lut_name = lut_name
            self.cbar.setColorMap(GC.signed_colormap() if signed else pg.colormap.get(st.colormap))
        if cmp is not None:
            shown = cmp.b  # B's colour tops (and A - B's scale below)
        # weight -> table position 1.5..255.5, truncated to 1..255 in the mosaic (0 stays the gap)
        n = heads.size
        if self._fbuf.size < n:
            self._fbuf = np.empty(n, np.float32)
        f = self._fbuf[:n].reshape(heads.shape)
        if signed:  # symmetric about 0: blue below, white at 0, red above
            signed_positions(heads, cmp.lim or 1.0, out=f)  # (A = B: every difference 0, white)
            bar = (-cmp.lim, cmp.lim, "A \u2212 B (weight)")
        elif st.scale_mode == "per-head":
            heat_positions(heads, shown.tops("per-head", layers).reshape(-1)[:, None, None], out=f)
            bar = (0.0, 1.0, bar_label(shown.weighted, per_head_max=True))
        else:
            top = shown.shared_top()
            heat_positions(heads, top, out=f)
            bar = (0.0, top, bar_label(shown.weighted))
        blank = region.blank if cmp is None else cmp.blank  # rows with no weight left (0/0): the gap
        if blank is not None:  # (exports: blank; A - B: undefined on either side)
            f[blank.reshape(f.shape[:2])] = 0
        self._bar = update_bar(self.cbar, self._bar, bar[:2], bar[2])  # (its colormap: above)
        mosaic = self._mosaic
        mosaic.fill(0)
        side = lo.T
        c0 = int(region.cols[0]) // region.pool if len(region.cols) else 0  # a hidden first key: a gap
        for i in range(len(lo.heads)):
            y, x = lo.y0[i], lo.x0[i]
            mosaic[y:y + side, x + c0:x + side] = f[i]  # float -> uint8 truncation: the table index
        self.img.setImage(mosaic, levels=(0, 255), lut=self._lut, autoLevels=False)
        has_blank = blank is not None and bool(blank.any())  # (the colour: far from A − B's map too)
        self.no_value.show_for(st.colormap, c0 > 0 and bool(lo.heads), has_blank, region.hide_first)
        self._draw_titles()
        self._draw_off_marks()  # (none over B or A − B: the clean runs)
        self._draw_window()
        return True

    def _draw_titles(self, *_):
        """Layer view: `L3 H1` above each head, `· off` where it is switched off, with value
        weighting on the head's share of the layer's summed head-output norms (`· 12% out`), then its role
        badge (only text changes here)."""
        lo = self.layout_
        if lo is None or lo.mode != "layer":
            return
        r = self.state.result
        share = r.head_share if self.state.value_weighted and r is not None and r.head_share is not None else None
        shown, _ = self.state.on_screen()
        if self.drawn is not (shown.result if shown is not None else None):
            return  # a label change heard before the grid's own redraw for a new result (or model)
        model = self.state.model
        # over a preview (another text than the scores'), badges from the typed text's scores would
        # be the last text's: none, as while the scores are stale; a probe's are about the probe
        text_badges_stale = self.drawn is not r and self.state.role_options.source == "text"
        side = "" if self.shown_mode == "A" else GC.MODE_TITLES[self.shown_mode] + " "
        off = self.state.effects.changed_by(self.drawn)  # (None: a clean run, or one not applied)
        for i, (l, h) in enumerate(lo.heads):  # (B, A − B: clean runs, none of A's run's marks)
            badge = "" if text_badges_stale or side else self.state.badge(l, h)
            kind = model.config.layer_kind(l) if model is not None else None
            marks = tile_marks(kind, not side and off is not None and (l, h) in off.heads,
                               share[l][h] if not side and share is not None and l < len(share) else None)
            # (the badge last: a cut title loses it before the marks; the short forms lack the layer
            # and side every title shares, named by the layer selector and the Grid shows buttons)
            self._titles[i].setText(*title_forms(l, h, badge, marks, side), keep=SHORT_PROBE_NOTE)
        self._title_form()

    def _title_form(self) -> None:
        """Layer view: where any title is too wide for its tile, every title without its layer and
        compared side ("H6  induction (probe)", for "A − B L18 H6  induction (probe)": the view's);
        where one still is, every badge abbreviated ("H6 ind (p)"), so the row reads alike; cut
        with "…" only where even that is too wide, a probe's note kept (its tooltip: the whole)."""
        shown = [t for t in self._titles if t.isVisible()]
        layer = self.layout_ is not None and self.layout_.mode == "layer"
        form = title_form([t.forms for t in shown], lambda j, text: shown[j].fits(text)) if layer else 0
        for t in shown:
            t.use_form(form)

    def _draw_window(self) -> None:  # (grid_marks.draw_window)
        draw_window(self.window_line, self.layout_, self.state.model)

    def _view_size(self) -> tuple[int, int]:  # the screen pixels the mosaic may fill
        return view_size(self.gw, self.cbar)

    def _relayout(self, lo: GridLayout, kv_group: np.ndarray) -> None:
        self.layout_ = lo
        self._kv_key = tuple(kv_group.tolist())
        size = lo.width * lo.height
        if self._flat.size < size:
            self._flat = np.zeros(max(size, 2 * self._flat.size), np.uint8)
        self._mosaic = self._flat[:size].reshape(lo.height, lo.width)
        gqa = group_size(kv_group) > 1
        n_head = len(kv_group)

        place_titles(self.plot, self._titles, self._font, *title_spots(lo, n_head))
        self.no_value.place(head_mask(lo))
        segments = kv_segments(lo, kv_group) if gqa else []  # bands behind each group's tiles, "KV g"
        place_bands(self.plot, self._bands, self._captions, self._font, segments, lo.caption_h,
                    BAND_ALPHA)
        self._set_range()
        self._draw_focus()
        self._draw_query()
        self._draw_off_marks()

    def _set_range(self) -> None:
        """Fit the mosaic in the view and apply the new view transform now: left to the paint, the
        titles' transforms would change during it and the scene would be painted a second time."""
        lo = self.layout_
        self.vb.setRange(QRectF(0, 0, lo.width, lo.height), padding=PAD)
        self.plot.scene().prepareForPaint()
        room = title_room(lo)  # (a layer view's title cut short of the next tile's: a long badge)
        right, px = self.vb.viewRect().right(), max(self.vb.viewPixelSize()[0], 1e-9)
        for t in self._titles:  # (the right-most column's: short of the view's edge too)
            t.fit_width(None if room is None else min(room, right - t.pos().x()) / px - 3 * Label.PAD)
        self._title_form()

    def _tile_index(self, layer: int, head: int) -> int | None:
        return None if self.layout_ is None else tile_index(self.layout_, layer, head)

    def _draw_focus(self, *_):
        f = self.state.focus
        draw_focus(self.focus_rect, self.layout_, None if f is None else self._tile_index(*f))

    def _draw_off(self, *_):
        """A cross over each switched-off head shown, and its title says so (layer view)."""
        self._draw_off_marks()
        self._draw_titles()

    def _draw_off_marks(self) -> None:  # the crosses alone (a re-layout: _draw writes the titles)
        # (B or A − B shows both models' clean runs: nothing is off there)
        off = self.state.effects.changed_by(self.drawn) if self.shown_mode == "A" else None
        heads = off.heads if off is not None else ()
        draw_crosses(self.off_marks, self.layout_, [self._tile_index(l, h) for l, h in heads])

    def _draw_query(self, *_):
        draw_query(self.query_dim, self.query_line, self.layout_, self.state.query_pos)

    def _view_resized(self, *_):  # (the window's size, or the colour bar's labels widened)
        lo = self.layout_
        if lo is not None and self.state.result is not None:
            n_layer = self.state.result.attentions.shape[0]
            if not same_layout(fitted(lo.mode, n_layer, lo.heads[0][0], np.asarray(self._kv_key), lo.n_tok,
                                      *self._view_size())[0], lo):
                self._draw()  # the same result, laid out for the new size
            else:
                self._set_range()

    # --- interaction ---------------------------------------------------------------------------
    def cell_at(self, x: float, y: float) -> tuple[int, int, int, int] | None:
        """(layer, head, q, k) under the view point (x, y) in image pixels, or None."""
        lo = self.layout_
        if lo is None:
            return None
        hit = np.nonzero((x >= lo.x0) & (x < lo.x0 + lo.T) & (y >= lo.y0) & (y < lo.y0 + lo.T))[0]
        if not len(hit):
            return None
        i = int(hit[0])
        layer, head = lo.heads[i]
        q, k = int(y - lo.y0[i]), int(x - lo.x0[i])
        if lo.pool == 1:
            return layer, head, q, k
        p = lo.pool  # a pooled pixel: the cell whose value it shows (B's, A − B's or the block's largest)
        shown = (self.state.shown_preview() if self.drawn is not self.state.result else None) or self.state.shown()
        cmp = self.compare and GC.pooled_cell(self.compare, self.drawn, layer, head, q * p, k * p, p, shown.hide_first)
        return (layer, head, *(cmp or shown.strongest_in_block(layer, head, q * p, k * p, p)))

    def cell_center(self, layer: int, head: int, q: int, k: int) -> tuple[float, float]:
        """View point (x, y) at the centre of one cell (tests use it to aim the mouse)."""
        i = self._tile_index(layer, head)
        assert i is not None, f"{head_title(layer, head)} is not shown"
        p = self.layout_.pool
        return float(self.layout_.x0[i] + k // p + 0.5), float(self.layout_.y0[i] + q // p + 0.5)

    def titles(self) -> list[str]:
        """The head titles on screen ("L0 H5  self"), in the order of the layout's heads."""
        return [t.full for t in self._titles if t.isVisible()]

    def readout_at(self, layer: int, head: int, q: int, k: int) -> str:
        st = self.state  # (B or A − B: what the pixel shows, of the clean runs; grid_compare)
        compared = self.compare and GC.compare_readout(self.compare, self.drawn, layer, head, q, k,
                                                       st.shown().hide_first, st.effects.ablation.active)
        return compared or cell_readout(st, layer, head, q, k)

    def _on_mouse_moved(self, scene_pos):
        if self.state.result is None or not self.vb.sceneBoundingRect().contains(scene_pos):
            return
        at = self.gw.lastMousePos  # (the pointer as Qt delivered it, between whole pixels)
        p = painted_point(self.gw, self.vb, self.img, scene_pos, at)  # (the mosaic pixel painted there)
        cell = self.cell_at(p.x(), p.y())
        # no read-out over a preview (the read-outs read the state's result, another text's): a
        # few ms later the result is in and the read-out with it
        text = self.readout_at(*cell) if cell and self.drawn is self.state.result else ""
        tip = plain_tip(text or ("" if cell else self._title_tip_at(scene_pos)))  # (it quotes tokens)
        if tip != self.gw.toolTip():
            self.gw.setToolTip(tip)
        if text != self.hover_text:
            self.hover_text = text
            if text:
                self.state.show_status(text)

    def _title_tip_at(self, scene_pos) -> str:
        """The whole text of the head title under `scene_pos` where it is shown shortened or cut
        (its tooltip), else "". Its own tooltip never shows: the scene finds no item at a pixel
        of a title drawn unscaled (ItemIgnoresTransformations) inside the view box, so each
        title's rect on the screen is hit here."""
        at = QPointF(self.gw.mapFromScene(scene_pos))
        for t in self._titles:
            if t.isVisible() and t.toolTip() and \
                    t.deviceTransform(self.gw.viewportTransform()).mapRect(t.boundingRect()).contains(at):
                return t.toolTip()
        return ""

    def _on_mouse_clicked(self, ev):
        if self.state.result is None:
            return
        p = painted_point(self.gw, self.vb, self.img, ev.scenePos(), self.press.at)
        cell = self.cell_at(p.x(), p.y())
        if cell is None:
            return
        layer, head, q, k = cell
        if ev.button() == Qt.MouseButton.RightButton:  # switch it off, knock out this edge
            from attnviz.ui.panels.ablation_panel import head_menu

            head_menu(self.state, layer, head, q, k, self).popup(ev.screenPos().toPoint())
            return
        if ev.modifiers() & Qt.KeyboardModifier.AltModifier:
            self.state.effects.toggle_head(layer, head)
            return
        if ev.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.state.toggle_query(q)
            return
        self.state.show_head(layer, head)

    def keyPressEvent(self, ev):
        st = self.state
        lo = self.layout_
        key = ev.key()
        if lo is None or st.result is None or key not in (Qt.Key.Key_Left, Qt.Key.Key_Right,
                                                          Qt.Key.Key_Up, Qt.Key.Key_Down):
            super().keyPressEvent(ev)
            return
        n_layer, n_head = st.result.attentions.shape[:2]
        layer, head = st.focus if st.focus is not None else (st.layer, -1 if key == Qt.Key.Key_Right else 0)
        if key == Qt.Key.Key_Left:
            head -= 1
        elif key == Qt.Key.Key_Right:
            head += 1
        elif st.view_mode == "all":
            layer += -1 if key == Qt.Key.Key_Up else 1
        else:
            head += -lo.ncols if key == Qt.Key.Key_Up else lo.ncols
        if not (0 <= head < n_head and 0 <= layer < n_layer):
            return
        st.show_head(layer, head)
