"""Layer x head maps in the window (figures/headmap.py paints them): DLA, each head's direct
contribution to logit(target) − logit(alt) of the run shown, with rows and cells for the MLPs, the
embeddings and the biases; and the ablation scan's effects. Hover gives a cell's number; a click on
a head shows and focuses it in the grid (AppState.show_head); Alt+click switches it off or on."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from attnviz.figures import headmap as fig
from attnviz.figures.effects import DLA_NOTES
from attnviz.figures.numbers import signed
from attnviz.ui.views.fields import plain_tip
from attnviz.ui.views.painted import window_origin

PAPER = QColor(Qt.GlobalColor.white)  # the maps are drawn as on paper, like the exports


class HeadMapView(QWidget):
    """Paints one HeadMap at the widget's size; None paints `empty_text`."""

    def __init__(self, state, empty_text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.map: fig.HeadMap | None = None
        self.lay: fig.HeadMapLayout | None = None
        self.empty_text = empty_text
        self.hover_text = ""
        self.setMouseTracking(True)
        self.setMinimumSize(160, 120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        state.sigFocusChanged.connect(self._on_focus)

    def sizeHint(self) -> QSize:
        return QSize(360, 420)

    def set_map(self, hm: fig.HeadMap | None) -> None:
        self.map = hm
        self.lay = None
        self.update()

    def _on_focus(self, focus) -> None:
        if self.map is not None and self.map.focus != focus:
            from dataclasses import replace

            self.set_map(replace(self.map, focus=focus))

    def _layout(self) -> fig.HeadMapLayout | None:
        if self.map is None:
            return None
        if self.lay is None or (self.lay.width, self.lay.height) != (self.width(), self.height()):
            self.lay = fig.layout(self.map, self.width(), self.height())
        return self.lay

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.fillRect(self.rect(), PAPER)
        lay = self._layout()
        if lay is None:
            p.setPen(QColor(Qt.GlobalColor.darkGray))
            p.drawText(self.rect().adjusted(8, 8, -8, -8),
                       Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap,
                       self.empty_text)
            return
        fig.paint(p, self.map, lay)

    def hit_at(self, x: float, y: float):
        lay = self._layout()
        if lay is None:
            return None
        return fig.hit(self.map, lay, x, y, self.devicePixelRatioF(), window_origin(self))

    def cell_center(self, layer: int, head: int) -> tuple[float, float]:
        return fig.cell_center(self.map, self._layout(), layer, head)

    def mouseMoveEvent(self, ev) -> None:
        what = self.hit_at(ev.position().x(), ev.position().y())
        text = fig.readout(self.map, what) if self.map is not None else ""
        if not text and self.map is not None and fig.on_title(self._layout(), ev.position().y()):
            text = fig.whole_title(self.map, self._layout())  # (the picture may end them in "…")
        if text != self.hover_text:
            self.hover_text = text
            self.setToolTip(plain_tip(text))  # (it quotes the target token)
            if text:
                self.state.show_status(text)

    def mousePressEvent(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        what = self.hit_at(ev.position().x(), ev.position().y())
        if what is None or what[0] != "head":
            return
        _, layer, head = what
        if ev.modifiers() & Qt.KeyboardModifier.AltModifier:
            self.state.effects.toggle_head(layer, head)
        else:
            self.state.show_head(layer, head)


def dla_map(state, analysis) -> fig.HeadMap:
    """The DLA of an analysis as a head map."""
    d = analysis.dla
    title = (f"DLA: logit({analysis.label(d.target)}) − logit({analysis.label(d.alt)}) = "
             f"{signed(d.logit_diff, 3)}; parts add to {signed(d.total(), 3)}")
    kv = state.result.kv_group if state.result is not None else None
    return fig.HeadMap(title, np.asarray(d.heads), "logit", kv, ("MLP", np.asarray(d.mlp)),
                       (("embed", d.embed), ("bias", d.bias)), tuple(analysis.ablation.heads),
                       state.focus, notes=DLA_NOTES)


def scan_map(state, scan, what: str) -> fig.HeadMap:
    """The scan's effects (increase in loss when a head alone is zero-ablated) as a head map."""
    title = f"Ablation scan: Δ loss when one head is zeroed (baseline {scan.baseline_loss:.3f} nats)"
    kv = state.model.kv_group if state.model is not None else None
    return fig.HeadMap(title, np.asarray(scan.effect), "nats", kv, focus=state.focus)
