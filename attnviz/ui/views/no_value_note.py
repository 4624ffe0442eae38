"""The line under the heatmap grid and the focus view that names the no-value colour
(style.no_value_colour) while the view paints a cell in it: a swatch of the colour and its words
(style.no_value_legend: "magenta: no value (the hidden first key, or a row with no weight left)"),
right-aligned under the colour bar, wrapped where the view is narrower than the words. Its room is
kept while Hide first token is on, a cell painted in the colour or not, as high as the longest words
need at the view's width: a line that came and went (or grew a line) as the view's pooling changed
which cells have no value would change the view's height, and with it the pooling."""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QWidget

from attnviz.figures.style import no_value_colour, no_value_legend

MARGIN, SPACING = 4, 6  # pixels: at the line's ends, between the swatch and the words
WRAP = Qt.TextFlag.TextWordWrap


class NoValueNote(QWidget):
    """The swatch and the words, painted here; hidden until a view says what it paints (say)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("no_value_note")
        self.full = ""  # the words ("" while no cell is painted in the colour)
        self.colour = QColor()
        self._said: tuple | None = None
        self._fit()
        self.hide()

    def say(self, colormap: str, first_key: bool, rows: bool, room: bool) -> None:
        """Name `colormap`'s no-value colour where the view paints it: in the hidden first key's
        column (`first_key`), in rows with no weight left (`rows`); `room`: the line's room kept
        (Hide first token on), empty while no cell is painted in the colour."""
        said = (colormap, first_key, rows, room)
        if said == self._said:
            return
        self._said = said
        self.full = no_value_legend(colormap, first_key, rows) if first_key or rows else ""
        self.colour = QColor(*no_value_colour(colormap))
        self._fit()
        self.setVisible(room or bool(self.full))
        self.update()

    def clear(self) -> None:
        """Hidden, its room too, until a view says again what it paints (the view is empty)."""
        self._said = None
        self.hide()

    def swatch_rect(self) -> QRect:
        """Where the swatch is painted (empty while no words are)."""
        if not self.full:
            return QRect()
        side = self.fontMetrics().height() - 2
        return QRect(self._words_rect().left() - SPACING - side, MARGIN // 2 + 1, side, side)

    def _room(self) -> int:  # the words' width at most
        return max(1, self.width() - 2 * MARGIN - self.fontMetrics().height() - SPACING)

    def _words_rect(self) -> QRect:
        fm = self.fontMetrics()
        width = min(self._room(), fm.horizontalAdvance(self.full) + 1)
        return QRect(self.width() - MARGIN - width, MARGIN // 2, width, self.height() - MARGIN)

    def _fit(self) -> None:
        """As high as the longest words (both reasons) need at the width there is."""
        fm = self.fontMetrics()
        longest = no_value_legend(self._said[0]) if self._said else "x"
        high = fm.boundingRect(QRect(0, 0, self._room(), 10 ** 4), WRAP, longest).height()
        height = max(high, fm.height()) + MARGIN
        if height != self.height() or self.minimumHeight() != height:
            self.setFixedHeight(height)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        self._fit()

    def paintEvent(self, ev) -> None:
        if not self.full:
            return
        p = QPainter(self)
        p.fillRect(self.swatch_rect(), self.colour)
        p.setPen(self.palette().windowText().color())
        p.drawText(self._words_rect(), int(WRAP | Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), self.full)
        p.end()
