"""The Patching tab's two pictures: the map of effects (PatchMap) and the picked head's attention
on the clean and corrupted texts (PatternPair). Each pools what is smaller on screen than its cells
(figures/patch_blocks.py; a pattern as the Compare tiles pool theirs, figures/compare.weight_tile)
and its hover reads the cell a pixel shows."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures import compare as C
from attnviz.figures import patching as fig
from attnviz.figures.style import BACKGROUND
from attnviz.ui.views.fields import plain_tip
from attnviz.ui.views.painted import window_origin

PAPER, INK = QColor("white"), QColor(BACKGROUND)  # dark text on white: the heatmap views' dark
DIM = QColor(255, 255, 255, 170)  # paper laid over a map whose texts (settings, step) have changed since
DIMMED = " (computed before the change the line above names)"  # a dimmed map's hover read-out ends so


class PatchMap(QWidget):
    """Paints a PatchView at the widget's size; hover reads a cell; a click on a head picks it."""

    def __init__(self, on_head, parent: QWidget | None = None):
        super().__init__(parent)
        self.view: fig.PatchView | None = None
        self.lay: fig.PatchLayout | None = None
        self.on_head = on_head
        self.hover_text = ""
        self.dim = False  # the texts, settings or training step have changed since (PatchingPanel.stale_line)
        self.setMouseTracking(True)
        self.setMinimumSize(200, 160)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(420, 360)

    def set_view(self, view) -> None:
        self.view, self.lay = view, None
        self.update()

    def layout_(self):
        if self.view is None:
            return None
        if self.lay is None or (self.lay.width, self.lay.height) != (self.width(), self.height()):
            self.lay = fig.layout(self.view, self.width(), self.height())
        return self.lay

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        try:
            p.fillRect(self.rect(), PAPER)
            lay = self.layout_()
            if lay is None:
                p.setPen(QColor(Qt.GlobalColor.darkGray))
                p.drawText(self.rect().adjusted(8, 8, -8, -8), Qt.AlignmentFlag.AlignTop | Qt.TextFlag.TextWordWrap,
                           "The map of effects appears here after Run.")
                return
            fig.paint(p, self.view, lay, INK)
            if self.dim:
                p.fillRect(self.rect(), DIM)
        finally:
            p.end()

    def cell_center(self, row: int, col: int) -> tuple[float, float]:
        return fig.cell_center(self.layout_(), row, col)

    def hit_at(self, x: float, y: float):
        lay = self.layout_()
        if lay is None:
            return None
        return fig.hit(self.view, lay, x, y, self.devicePixelRatioF(), window_origin(self))

    def mouseMoveEvent(self, ev) -> None:
        cell = self.hit_at(ev.position().x(), ev.position().y())
        text = "" if cell is None else fig.readout(self.view, *cell) + (DIMMED if self.dim else "")
        if text != self.hover_text:
            self.hover_text = text
            self.setToolTip(plain_tip(text))  # (it quotes token labels)

    def mousePressEvent(self, ev) -> None:
        cell = self.hit_at(ev.position().x(), ev.position().y())
        if ev.button() == Qt.MouseButton.LeftButton and cell is not None:
            head = self.view.head_of(*cell)
            if head is not None:
                self.on_head(*head)


class PatternPair(QWidget):
    """The picked head's attention on the clean and on the corrupted text, side by side; hover
    reads a pixel's cell."""

    def __init__(self, panel, parent: QWidget | None = None):
        super().__init__(parent)
        self.panel = panel
        self.head: tuple[int, int] | None = None
        self.rects: list[QRectF] = []
        self.dim = False
        self.hover_text = ""
        self.setMouseTracking(True)
        self.setMinimumHeight(120)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def _weights(self) -> list:  # the head's [T, T] on the clean and the corrupted text
        sides, (l, h) = self.panel.jobs.sides, self.head
        return [sides.attentions_clean[l, h], sides.attentions_corrupt[l, h]]

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        try:
            p.fillRect(self.rect(), PAPER)
            sides, self.rects = self.panel.jobs.sides, []
            if sides is None or self.head is None:
                return
            l, h = self.head
            self.rects = C.tile_rects(QRectF(6, 6, self.width() - 12, self.height() - 12), 2)
            # (each a picture its tile's size: fewer pixels than tokens pool them, none dropped)
            rgbs = [C.weight_tile(m, None, False, self.panel.state.colormap, int(r.width()))
                    for m, r in zip(self._weights(), self.rects)]
            C.paint_tiles(p, rgbs, self.rects, [f"clean {head_title(l, h)}", f"corrupted {head_title(l, h)}"], INK)
            if self.dim:
                p.fillRect(self.rect(), DIM)
        finally:
            p.end()

    def readout_at(self, x: float, y: float) -> str:
        """The cell the pixel at (x, y) shows (a pooled pixel: its block's largest weight), "" off
        the tiles: `clean L1 H3  'Mary' → 'John'  0.4321`."""
        ask = self.panel.jobs.ask
        if self.panel.jobs.sides is None or self.head is None or ask is None:
            return ""
        dpr, origin = self.devicePixelRatioF(), window_origin(self)
        for name, m, labels, r in zip(("clean", "corrupted"), self._weights(),
                                      (ask.labels_clean, ask.labels_corrupt), self.rects):
            at = C.tile_pixel(r, x, y, dpr, origin)
            if at is not None:
                q, k = C.strongest_at(m, int(r.width()), *at)
                return (f"{name} {head_title(*self.head)}  {quoted(isolated(labels[q]))} \u2192 {quoted(isolated(labels[k]))}  "
                        f"{float(m[q, k]):.4f}")
        return ""

    def mouseMoveEvent(self, ev) -> None:
        text = self.readout_at(ev.position().x(), ev.position().y())
        text += DIMMED if text and self.dim else ""
        if text != self.hover_text:
            self.hover_text = text
            self.setToolTip(plain_tip(text))  # (it quotes token labels)
