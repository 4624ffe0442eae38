"""The Anatomy panel: the current layer of the loaded model on the current sentence, drawn as the
lesson's pipeline (anatomy_figure.py), with the focused head lit. A view of AppState: it reads the
result, layer, focus and colormap, and writes back only the focus (click a slice) and the
value-weighting option.

Work happens only while the panel is shown (`set_shown`): hidden, a new result or layer costs
nothing but a flag. The figure's weight colours are kept per (layer, block), so switching heads
re-uses them and switching layers computes each once."""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QEvent, QRectF, Qt, QTimer
from PySide6.QtGui import QFontInfo, QPainter
from PySide6.QtWidgets import QCheckBox, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from attnviz.engine.errors import AttnvizError
from attnviz.figures import anatomy as fig
from attnviz.ui.views.fields import plain_label, plain_tip, rich_label

log = logging.getLogger(__name__)

VALUE_WEIGHTED_DEFINITION = (
    "<b>Value-weighted attention</b> (Kobayashi et al., 2020, \u201cAttention is not only a "
    "weight\u201d): each weight \u03b1<sub>ij</sub> of head h is scaled by "
    "\u2016v<sub>j</sub> W<sub>O</sub>(h)\u2016, the norm of what key j actually sends into the "
    "residual stream through this head (W<sub>O</sub>(h): the head's d_head rows of W_O), then "
    "each row is renormalised to sum to 1 for display. A head can put 0.9 of its weight on a key "
    "whose value is nearly zero and so write almost nothing. The <i>share</i> of a head is "
    "\u2016A<sub>h</sub> V<sub>h</sub> W<sub>O</sub>(h)\u2016 over the sum of all heads' in the "
    "layer (the output bias, shared by all heads, left out). Off by default; it changes the grid "
    "and the focus view, not this figure's pattern, which is the softmax itself.")


class AnatomyCanvas(QWidget):
    """Paints the figure at its own width; hover reads a value, click focuses a head."""

    def __init__(self, panel: "AnatomyPanel"):
        super().__init__(panel)
        self.panel = panel
        self.setMouseTracking(True)
        # the figure is laid out no narrower than this: a narrower dock scrolls it sideways
        self.setMinimumWidth(fig.MIN_WIDTH)
        self.view: fig.AnatomyView | None = None
        self.lay: fig.AnatomyLayout | None = None
        self.hover_text = ""
        self._colors: dict = {}  # block colours (weights kept across views of one model)
        self._images: dict = {}  # scaled images of the blocks

    def set_view(self, view: fig.AnatomyView | None) -> None:
        old = self.view
        if view is None or old is None or view.model != old.model or view.weights is not old.weights:
            self._colors.clear()
            self._images.clear()
        else:  # activations belong to one layer's numbers: drop the others'
            keep = id(view.anatomy)
            for d in (self._colors, self._images):
                for k in [k for k in d if k[0] == "a" and k[1] != keep]:
                    del d[k]
        self.view = view
        self._relayout()

    def _relayout(self) -> None:
        if self.view is None:
            self.lay = None
            self.setMinimumHeight(0)
            self.update()
            return
        width = max(fig.MIN_WIDTH, min(self.width(), fig.MAX_WIDTH))
        # the figure's text is sized to the panel's prose, not shrunk with a narrow dock
        self.lay = fig.layout(self.view, width, text_px=QFontInfo(self.font()).pixelSize())
        if self.height() != self.lay.height:
            self.setFixedHeight(self.lay.height)
        self.update()

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if self.view is not None and (self.lay is None or self.lay.width != max(fig.MIN_WIDTH, self.width())):
            self._relayout()

    def changeEvent(self, ev) -> None:
        super().changeEvent(ev)
        if ev.type() == QEvent.Type.FontChange and self.view is not None:
            self._relayout()  # another UI font: the figure's text follows it

    def paintEvent(self, ev) -> None:
        if self.lay is None:
            return
        p = QPainter(self)
        try:
            fig.paint(p, self.view, self.lay, self._colors, self._images, clip=QRectF(ev.rect()))
        finally:
            p.end()

    def text_at(self, x: float, y: float) -> str | None:
        return None if self.lay is None else fig.readout(self.view, self.lay, x, y)

    def head_at(self, x: float, y: float) -> int | None:
        """The query head a click at (x, y) picks: a W_Q / concat / W_O slice, a q block or a share
        bar gives its head; a K/V slice or block gives the focused head if it reads that KV head,
        else the first head that does."""
        if self.lay is None:
            return None
        hit = self.lay.hit(x, y)
        if hit is None:
            return None
        b, _ij, band = hit
        head, kv = (band.head, band.kv) if band is not None else (
            (b.head, b.kv) if b is not None and b.head is not None else (None, False))
        if head is None:
            return None
        if not kv:
            return head
        groups = self.view.anatomy.kv_group
        if self.view.head is not None and int(groups[self.view.head]) == head:
            return self.view.head
        return int(next(h for h in range(len(groups)) if int(groups[h]) == head))

    def mouseMoveEvent(self, ev) -> None:
        pos = ev.position()
        text = self.text_at(pos.x(), pos.y()) or ""
        if text != self.hover_text:
            self.hover_text = text
            self.setToolTip(plain_tip(text))  # (it quotes token labels)
            if text:
                QToolTip.showText(ev.globalPosition().toPoint(), plain_tip(text), self)
                self.panel.state.show_status(text)

    def mousePressEvent(self, ev) -> None:
        pos = ev.position()
        head = self.head_at(pos.x(), pos.y())
        if head is not None and self.view is not None:
            self.panel.state.set_focus(self.view.layer, head)

    def event(self, ev) -> bool:
        if ev.type() == QEvent.Type.ToolTip and self.hover_text:
            QToolTip.showText(ev.globalPos(), plain_tip(self.hover_text), self)
            return True
        return super().event(ev)


class AnatomyPanel(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.shown = False
        self._dirty = True
        # one redraw per turn of the event loop: a layer change also moves the focus (two signals)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self.refresh)
        self.last_draw_s = 0.0  # the last rebuild + repaint (wall clock), for the benchmark
        self.last_draw_cpu_s = 0.0  # the same in this thread's CPU time (less what others took)
        self.status = plain_label(QLabel())
        self.status.setWordWrap(True)
        self.status.setStyleSheet("color: #555555;")
        self.value_check = QCheckBox("Value-weighted heatmaps (grid and focus view)")
        self.value_check.setToolTip("Scale each weight by the norm of what its key sends through "
                                    "the head, rows renormalised; see the definition below")
        self.definition = rich_label(QLabel(VALUE_WEIGHTED_DEFINITION))
        self.definition.setWordWrap(True)
        self.definition.setStyleSheet("color: #444444;")
        self.canvas = AnatomyCanvas(self)
        # the figure, then the value-weighting option and its definition, in one scrolled column
        content = QWidget()
        col = QVBoxLayout(content)
        col.setContentsMargins(0, 0, 0, 6)
        col.addWidget(self.canvas)
        col.addWidget(self.value_check)
        col.addWidget(self.definition)
        col.addStretch(1)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(content)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.status)
        lay.addWidget(self.scroll, 1)

        state.sigResultChanged.connect(self._changed)
        state.sigLayerChanged.connect(self._changed)
        state.sigFocusChanged.connect(self._changed)
        state.sigModelChanged.connect(self._changed)
        state.sigDisplayChanged.connect(self._on_display)
        self.value_check.toggled.connect(state.set_value_weighted)
        self._on_display()

    # --- state -> panel ---------------------------------------------------------------------
    def set_shown(self, shown: bool) -> None:
        """The dock tab is selected (or floating): draw now if anything changed meanwhile."""
        self.shown = bool(shown)
        if self.shown and self._dirty:
            self.refresh()

    def _changed(self, *_) -> None:
        self._dirty = True
        if self.shown:
            self._timer.start()

    @property
    def pending(self) -> bool:
        """A redraw is scheduled and not done yet."""
        return self._timer.isActive()

    def _on_display(self) -> None:
        st = self.state
        if self.value_check.isChecked() != st.value_weighted:
            self.value_check.blockSignals(True)
            self.value_check.setChecked(st.value_weighted)
            self.value_check.blockSignals(False)
        v = self.canvas.view
        if v is not None and v.colormap != st.colormap:
            self._changed()

    def focused_head(self) -> int | None:
        f = self.state.focus
        return f[1] if f is not None and f[0] == self.state.layer else None

    def refresh(self) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        self._timer.stop()
        self._dirty = False
        st = self.state
        r, model = st.result, st.model
        if model is None or r is None:
            self.canvas.set_view(None)
            self.status.setText("No result yet: type a sentence.")
            return
        if r.layer_inputs is None:  # the window asks for a run that keeps them
            self.status.setText("Computing the layer inputs for the anatomy\u2026")
            return
        if r.attentions.shape[:2] != (model.config.n_layer, model.config.n_head):
            return  # a result of the previous model, about to be replaced
        try:
            view = fig.make_anatomy_view(model, r, st.layer, self.focused_head(), st.colormap,
                                         previous=self.canvas.view)
        except AttnvizError as exc:
            self.canvas.set_view(None)
            self.status.setText(str(exc))
            return
        self.canvas.set_view(view)
        h = view.head
        self.status.setText(
            f"Layer {view.layer} (0–{view.n_layer - 1}): "  # as the layer box counts: 'of 30' read 1-based
            + (f"head {h} lit (KV head {int(view.anatomy.kv_group[h])})" if h is not None and
               view.n_group > 1 else f"head {h} lit" if h is not None else "no head focused")
            + ". Hover a block for its shape, bytes and values; click a slice to focus its head.")
        if self.canvas.isVisible():
            self.canvas.repaint()  # now, so last_draw_s counts the paint too
        self.last_draw_s = time.perf_counter() - t0
        self.last_draw_cpu_s = time.thread_time() - c0
