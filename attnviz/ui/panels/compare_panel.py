"""Compare: model B beside the loaded model A (Models > Compare with…). The panel is a view of the
runner's Compare session (ui/machinery/compare_jobs.py):

- A | B | A − B: every head of the layer on screen, as the grid shows them (under Hide first token
  renormalised, the hidden key and rows with no weight painted in the no-value colour,
  figures/style.no_value_colour, a line under them naming it; never value-weighted, a line saying
  so under Value-weighted; each tile pooled to its pixels: compare_tiles.py); the difference in a
  diverging colour map symmetric about 0 with its own colour bar (its limit the layer's largest
  |A − B|);
- the layers x heads JSD map (figures/headmap.py); a click focuses that head, shown below as A, B
  and A − B side by side;
- the token strip: a red frame where the top-1 next token flips, a bar for each position's
  KL(A || B), hover reads the numbers;
- the summary (the residual stream's cosine, the KLD statistics, same top-1; its hover says what
  each is), and the induction heads that survived or were lost on the probe. (These texts and the
  strip's and the map's hovers: compare_readouts.py.)
Stop comparing (or closing the panel) frees B. Export writes the picture and its numbers
(compare_export.py)."""

from __future__ import annotations

import functools
import weakref
from pathlib import Path

import numpy as np
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QPainter
from PySide6.QtWidgets import (
    QButtonGroup, QLabel, QPushButton, QSizePolicy, QToolButton, QVBoxLayout, QWidget,
)

from attnviz.engine.computing.patterns import head_title
from attnviz.figures import compare as F
from attnviz.figures import headmap
from attnviz.figures.render import figure_font
from attnviz.figures.style import BACKGROUND
from attnviz.ui.machinery.compare_jobs import MODE_TITLES, MODES, side_name
from attnviz.ui.panels import compare_export, compare_readouts, compare_tiles
from attnviz.ui.views import grid_compare as GC
from attnviz.ui.views.fields import plain_label, plain_tip
from attnviz.ui.views.painted import window_origin
from attnviz.ui.views.wrap_row import WrapRow

PAPER, INK = QColor("white"), QColor(BACKGROUND)  # dark text on white: the heatmap views' dark
LATER_MS = 20  # the JSD map and the focused head repaint this long after the A | B | A - B tiles
MAP_HEIGHT = 160  # the JSD map's least height (cells large enough to click with a two-line heading)
BAR_W, FOCUS_BAR_W = 70, 70  # px right of the tiles for the colour bar and its labels, at the least


def bar_room(least: float, lim: float, inset: float) -> float:
    """The pixels right of the tiles for a colour bar `inset` from their left edge and its labels
    whole (F.bar_label_width), `least` or more."""
    return max(least, inset + 14 + F.bar_label_width(lim) + 2)


def _dead():
    """A weak reference to nothing: the panel's caches before their first comparison."""
    return None


class Canvas(QWidget):
    """A widget painted by `paint(painter, width, height)`; clicks and hovers go to the panel.
    With `fit` (width -> the height its picture needs: titles whole, every row) the layout gives
    it at least that height at its width."""
    sigClicked = Signal(float, float)

    def __init__(self, paint, min_height: int, parent=None, fit=None):
        super().__init__(parent)
        self._paint = paint
        self._fit = fit
        self._fitted = None  # the height fit gave at the last refit
        self.setMinimumHeight(min_height)
        self.setMouseTracking(True)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        policy.setHeightForWidth(fit is not None)
        self.setSizePolicy(policy)
        # it paints every pixel (PAPER first): a neighbour's repaint (the strip's, as a keystroke's
        # numbers come in) then does not paint this one again
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)
        self.hover = None  # (x, y) -> tooltip text or None

    def hasHeightForWidth(self) -> bool:
        return self._fit is not None

    def heightForWidth(self, width: int) -> int:
        if self._fit is None:
            return -1
        return max(self.minimumHeight(), int(np.ceil(self._fit(width))))

    def sizeHint(self):
        hint = super().sizeHint()
        if self._fit is not None:
            hint.setHeight(self.heightForWidth(self.width()))
        return hint

    def refit(self) -> None:
        """Ask the layout again when what is shown needs another height (more tokens, another
        model's heads): a comparison that needs the same height moves nothing."""
        if self._fit is None:
            return
        need = self.heightForWidth(self.width())
        if need != self._fitted:
            self._fitted = need
            self.updateGeometry()

    def paintEvent(self, _ev):
        p = QPainter(self)
        try:
            p.fillRect(self.rect(), PAPER)
            self._paint(p, self.width(), self.height())
        finally:
            p.end()

    def mousePressEvent(self, ev):
        self.sigClicked.emit(ev.position().x(), ev.position().y())

    def mouseMoveEvent(self, ev):
        text = self.hover(ev.position().x(), ev.position().y()) if self.hover else None
        self.setToolTip(plain_tip(text or ""))  # (its readouts quote token labels)


class ComparePanel(QWidget):
    def __init__(self, state, jobs, parent=None):
        super().__init__(parent)
        self.state, self.jobs = state, jobs
        self.title = plain_label(QLabel("Compare: pick model B in Models \u25b8 Compare with\u2026"))  # (model names)
        self.title.setWordWrap(True)
        self.note = plain_label(QLabel())
        self.note.setWordWrap(True)
        self.stop_button = QPushButton("Stop comparing")
        self.stop_button.setToolTip("Leave Compare: model B is freed")
        self.stop_button.clicked.connect(self.jobs.close)
        self.export_button = QPushButton("Export\u2026")
        self.export_button.clicked.connect(self.export_dialog)
        self.mode_buttons = QButtonGroup(self)
        for mode in MODES:
            b = QToolButton()
            b.setText(MODE_TITLES[mode])
            b.setCheckable(True)
            b.setChecked(mode == self.jobs.mode)
            b.clicked.connect(lambda _=False, m=mode: self.jobs.set_mode(m))
            self.mode_buttons.addButton(b)
        # (a row that wraps: one line of all five is wider than a narrow dock)
        modes = WrapRow([*self.mode_buttons.buttons(), self.export_button, self.stop_button], len(MODES))
        self.tiles = Canvas(self._paint_tiles, 220, fit=self._tiles_fit)
        self.tiles.hover = lambda x, y: compare_tiles.tile_readout(self, x, y)
        self.blank_note = plain_label(QLabel(F.blank_note(state.colormap)))  # (under Hide first token)
        self.unweighted = plain_label(QLabel(GC.TILES_NOT_WEIGHTED))  # (under Value-weighted)
        for note in (self.blank_note, self.unweighted):
            note.setWordWrap(True)
        self.map = Canvas(self._paint_map, MAP_HEIGHT, fit=self._map_fit)
        self.map.sigClicked.connect(self._on_map_click)
        self.map.hover = lambda x, y: compare_readouts.map_readout(self, x, y)
        self.focus = Canvas(self._paint_focus, 140, fit=self._focus_fit)
        self.strip = Canvas(self._paint_strip, 60, fit=self._strip_fit)
        self.strip.hover = lambda x, y: compare_readouts.strip_readout(self, x, y)
        self.summary = plain_label(QLabel())
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.induction = plain_label(QLabel())
        self.induction.setWordWrap(True)
        col = QVBoxLayout(self)
        for w in (self.title, self.note):
            col.addWidget(w)
        col.addLayout(modes)
        col.addWidget(self.tiles, 3)
        col.addWidget(self.blank_note)
        col.addWidget(self.unweighted)
        col.addWidget(self.strip, 1)
        col.addWidget(self.summary)
        col.addWidget(self.map, 2)
        col.addWidget(self.focus, 2)
        col.addWidget(self.induction)
        # where things were painted last (tests and read-outs): rects in widget pixels
        self.tile_rects: list[QRectF] = []
        self.tile_titles: list[str] = []  # as painted (a title wider than its tile elided)
        self.focus_rects: list[QRectF] = []
        self.focus_titles: list[str] = []
        self.tile_T = 0
        # the panel's caches hold a comparison weakly: a model A replaced (and B closed) while the
        # layout asks nothing more or the panel is hidden must not keep their runs and models alive
        self._tiles_of = _dead  # the comparison the tiles last painted
        self.strip_cells: list[QRectF] = []
        self._strip_fitted = (_dead, 0, 0.0)  # (result, width, height) the strip's rows last needed
        self._limits = (_dead, {})  # (comparison, {layer or (layer, head): its A − B colour limit})
        self.map_layout = None
        self._later = QTimer(self)
        self._later.setSingleShot(True)
        self._later.setInterval(LATER_MS)
        self._later.timeout.connect(lambda: (self.map.update(), self.focus.update()))
        self.jobs.sigChanged.connect(self.refresh)
        self.jobs.sigNumbers.connect(self._numbers_in)
        for sig in (state.sigLayerChanged, state.sigFocusChanged, state.sigDisplayChanged,
                    state.effects.sigAblationChanged):
            sig.connect(lambda *_: self.refresh())
        self.refresh()

    # --- state -> widgets ---------------------------------------------------------------------
    def refresh(self) -> None:
        j, a = self.jobs, self.state.model
        if j.identity is not None and a is not None:
            clean = f" ({GC.CLEAN_RUNS})" if self.state.effects.ablation.active else ""
            self.title.setText(f"A: {side_name(a)}   B: {j.identity['name']}{clean}")
        else:
            self.title.setText("Compare: pick model B in Models \u25b8 Compare with\u2026")
        self.note.setText(j.note)
        self.note.setVisible(bool(j.note))
        for b, mode in zip(self.mode_buttons.buttons(), MODES):
            b.setChecked(mode == j.mode)
        self.stop_button.setEnabled(j.active or j.loading is not None)
        self.export_button.setEnabled(self.doc() is not None)
        self.blank_note.setText(F.blank_note(self.state.colormap))
        self.blank_note.setVisible(self.state.hide_first and self.doc() is not None)
        self.unweighted.setVisible(self.state.value_weighted and self.doc() is not None)
        self._set_summary()
        self.induction.setText(compare_readouts.induction_text(self))
        for canvas in (self.tiles, self.strip, self.focus, self.map):
            canvas.refit()
        if self.jobs.comparison is not self._tiles_of() and self.isVisible():
            # a new comparison: the tiles and the strip painted now, in this turn, and the grid's
            # A − B in a turn of its own after it (one turn for all three holds the main thread
            # longer than typing's frame)
            self.tiles.repaint()
            self.strip.repaint()
        else:
            self.tiles.update()
            self.strip.update()
        # the map and the focused head in a later paint of their own: one paint of all four would
        # hold the main thread twice as long (typing's frame)
        self._later.start()

    def _numbers_in(self) -> None:
        """A keystroke's next-token numbers: the strip and the summary change, the tiles and the
        map do not (repainting them too would double a keystroke's paint on the main thread)."""
        self._set_summary()
        self.export_button.setEnabled(self.doc() is not None)
        self.strip.update()

    def _set_summary(self) -> None:
        """The summary's text; its height never shrinks while B is open: a keystroke's comparison
        comes before its next-token numbers, and a summary that lost and regained their line per
        keystroke would move the tiles and the map (and repaint them) twice a keystroke."""
        self.summary.setText(compare_readouts.summary_text(self))
        self.summary.setToolTip(plain_tip(F.SUMMARY_TIP if self.summary.text() else ""))
        if not self.jobs.active:
            self.summary.setMinimumHeight(0)
            return
        if not self.summary.isVisible() or self.summary.width() < 100:  # (not laid out yet)
            return
        need = self.summary.heightForWidth(self.summary.width())
        if need > self.summary.minimumHeight():
            self.summary.setMinimumHeight(need)

    def doc(self) -> dict | None:
        c = self.jobs.comparison
        return None if c is None else c.doc

    # --- the pictures ---------------------------------------------------------------------------
    def sides(self, c) -> tuple:
        """A's and B's weights of comparison `c` as shown (grid_compare.sides, which keeps them):
        under Hide first token renormalised, as the grid shows them."""
        return GC.sides(c, self.state.hide_first)

    def layer_pictures(self, layer: int, mode: str | None = None, heads=None, lim: float | None = None,
                       side: int | None = None):
        """(rgb tiles, colour limit) of `layer` as shown: compare_tiles.layer_pictures."""
        return compare_tiles.layer_pictures(self, layer, mode, heads, lim, side)

    def _paint_tiles(self, p: QPainter, w: int, h: int) -> None:
        c = self.jobs.comparison
        self._tiles_of = _dead if c is None else weakref.ref(c)
        self.tile_rects, self.tile_titles = [], []
        if c is None or c.doc is None:
            return
        layer = min(self.state.layer, c.b_attentions.shape[0] - 1)
        bar_w = self._tiles_bar_w(c, layer)
        rects = F.tile_rects(QRectF(6, 6, w - 12 - bar_w, h - 12), c.b_attentions.shape[1],
                             min_side=self._title_side(c))
        rgbs, lim = self.layer_pictures(layer, side=rects[0].width())
        focus = self.state.focus
        fh = focus[1] if focus is not None and focus[0] == layer else None
        titles = [f"{MODE_TITLES[self.jobs.mode]} {head_title(layer, i)}" for i in range(len(rgbs))]
        self.tile_titles = F.paint_tiles(p, rgbs, rects, titles, INK, fh)
        if lim is not None:
            F.paint_colour_bar(p, QRectF(w - bar_w + 4, 24, 14, h - 60), lim, "A \u2212 B", INK)
        self.tile_rects, self.tile_T = rects, c.b_attentions.shape[-1]

    # --- heights that keep every title whole and every row of the strip in view --------------------
    @staticmethod
    def _title_side(c) -> float:
        """The width of the widest tile title any mode or layer of `c` gives (a layer or mode change
        then keeps the tiles where they are)."""
        return _title_side_of_shape(*c.b_attentions.shape[:2])

    def _limit(self, c, key, difference) -> float:
        """The A − B colour limit of `key` (a layer, or a (layer, head)) of comparison `c`, worked out
        from `difference()` once: the layout asks for it at every width it tries."""
        of, limits = self._limits
        key = (self.state.hide_first, key)  # (the difference as shown)
        if of() is not c:
            limits = {}
            self._limits = (weakref.ref(c), limits)
        if key not in limits:
            limits[key] = F.signed_limit(difference())
        return limits[key]

    def _tiles_bar_w(self, c, layer: int) -> float:
        """The room right of the layer's tiles for its A − B colour bar and its labels as measured
        (bar_room): none in A or B, which paint no bar."""
        if self.jobs.mode != "A-B":
            return 0.0
        return bar_room(BAR_W, self._limit(c, layer, lambda: GC.difference(*self.sides(c), layer)[0]), 4)

    def _focus_limit(self, c, l: int, hd: int) -> float:
        return self._limit(c, (l, hd), lambda: GC.difference(*self.sides(c), l)[0][hd])

    def _tiles_fit(self, width: int) -> float:
        c = self.jobs.comparison
        if c is None or c.doc is None:
            return 0.0
        n_head = c.b_attentions.shape[1]
        bar_w = self._tiles_bar_w(c, min(self.state.layer, c.b_attentions.shape[0] - 1))
        return F.tiles_height(width - 12 - bar_w, n_head, self._title_side(c)) + 12

    def _map_fit(self, width: int) -> float:
        """The map's least height, and a line more for each line past two that its title and
        caption wrap to at `width` (its cells keep their size under a longer heading)."""
        if self.doc() is None:
            return 0.0
        title, caption, _ = headmap.heading(self.head_map(), width, across=True)
        return MAP_HEIGHT + max(0, len(title) + len(caption) - 2) * QFontMetricsF(figure_font(11)).height()

    def _focus_fit(self, width: int) -> float:
        c, focus = self.jobs.comparison, self.state.focus
        if c is None or c.doc is None:
            return 0.0
        bar_w = bar_room(FOCUS_BAR_W, self._focus_limit(c, *focus), 0) if focus is not None else FOCUS_BAR_W
        return F.tiles_height(width - 12 - bar_w, 3, self._title_side(c)) + 12

    def _strip_fit(self, width: int) -> float:
        c = self.jobs.comparison
        if c is None or c.doc is None:
            return 0.0
        # (the layout asks again for each width it tries: a long text's labels measured once)
        result, at, _ = self._strip_fitted
        if result() is not c.result or at != width:  # (by identity: a result's == compares arrays)
            fit = F.strip_fit_height(c.result.labels, width - 8) + 8
            self._strip_fitted = (weakref.ref(c.result), width, fit)
        return self._strip_fitted[2]

    def tile_cell(self, head: int, q: int, k: int) -> tuple[float, float]:
        """The centre of the pixels showing cell (q, k) of `head`'s tile: compare_tiles.tile_cell."""
        return compare_tiles.tile_cell(self, head, q, k)

    def _paint_map(self, p: QPainter, w: int, h: int) -> None:
        d = self.doc()
        self.map_layout = None
        if d is None:
            return
        hm = self.head_map()
        # layers across in a wide box: 30 layers x 9 heads fill the panel's width, not its corner
        self.map_layout = lay = headmap.layout_fit(hm, w, h)
        headmap.paint(p, hm, lay, background=PAPER)

    def head_map(self) -> headmap.HeadMap:
        a = self.state.model
        return F.jsd_map(self.doc()["heads_jsd"], side_name(a), self.jobs.identity["name"], a.kv_group,
                         focus=self.state.focus, note=F.EVERY_KEY if self.state.hide_first else "")

    def _on_map_click(self, x: float, y: float) -> None:
        if self.map_layout is None:
            return
        hit = headmap.hit(self.head_map(), self.map_layout, x, y, self.map.devicePixelRatioF(),
                          window_origin(self.map))
        if hit is not None and hit[0] == "head":
            self.state.set_focus(hit[1], hit[2])

    def _paint_focus(self, p: QPainter, w: int, h: int) -> None:
        c, focus = self.jobs.comparison, self.state.focus
        self.focus_rects, self.focus_titles = [], []
        if c is None or c.doc is None or focus is None:
            return
        l, hd = focus
        lim = self._focus_limit(c, l, hd)
        bar_w = bar_room(FOCUS_BAR_W, lim, 0)
        rects = F.tile_rects(QRectF(6, 6, w - 12 - bar_w, h - 12), 3, min_side=self._title_side(c))
        rgbs = [self.layer_pictures(l, mode, [hd], lim, rects[0].width())[0][0] for mode in ("A", "B", "A-B")]
        titles = [f"A {head_title(l, hd)}", f"B {head_title(l, hd)}", f"A \u2212 B {head_title(l, hd)}"]
        self.focus_titles, self.focus_rects = F.paint_tiles(p, rgbs, rects, titles, INK), rects
        F.paint_colour_bar(p, QRectF(w - bar_w, 24, 14, h - 60), lim, "A \u2212 B", INK)

    def _paint_strip(self, p: QPainter, w: int, h: int) -> None:
        c = self.jobs.comparison
        self.strip_cells = []
        if c is None or c.doc is None:
            return
        d = c.doc
        cells = F.strip_rects(c.result.labels, QRectF(4, 4, w - 8, h - 8))
        flipped = {f["position"] for f in d["flips"]} if d["flips"] is not None else set()
        F.paint_strip(p, c.result.labels, cells, d["kld"], flipped, INK)
        self.strip_cells = cells

    # --- export (compare_export.py) ---------------------------------------------------------------
    def export_dialog(self) -> None:
        compare_export.export_dialog(self)

    def export(self, path) -> list[Path]:
        """The panel as a .png or .svg picture with its sidecar, or its numbers (.json, .csv):
        compare_export.export."""
        return compare_export.export(self, path)


@functools.lru_cache(maxsize=8)
def _title_side_of_shape(n_layer: int, n_head: int) -> float:
    """ComparePanel._title_side of a model of this shape (the layout asks it many times a keystroke)."""
    last = head_title(n_layer - 1, n_head - 1)
    return max(F.title_width(f"{MODE_TITLES[m]} {last}") for m in MODES) + 2

