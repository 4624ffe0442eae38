"""A panel's body that fills its dock while every part fits at its least height, and scrolls
down once they do not (the Corpus panel: a warning that wraps to four lines in a narrow dock left
its plots less than their least heights, one drawn over the other).

A layout's least height leaves out what its wrapped lines need at the width they are given, so
a dock can be given less than the parts need; here the body's height for a width is its least
height at that width (`QLayout.minimumHeightForWidth`), the scroll area gives the body the larger
of that and the viewport's height, and shows its bar when that is the body's. Scrolled down only:
the body's least width is the area's (the dock never cuts it across)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import QFrame, QLayout, QScrollArea, QWidget


class _Body(QWidget):
    def heightForWidth(self, width: int) -> int:  # its least height at this width
        return self.layout().minimumHeightForWidth(width)


class LeastHeightScroll(QScrollArea):
    """A scroll area around a body laid out by `layout` (module docstring)."""

    def __init__(self, layout: QLayout, parent: QWidget | None = None):
        super().__init__(parent)
        body = _Body()
        body.setLayout(layout)
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:  # as wide as the body's least width and the bar
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(self.widget().minimumSizeHint().width() + bar, super().minimumSizeHint().height())

    def eventFilter(self, watched, event) -> bool:  # (the area filters its body's events)
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # (its least width may have changed: a longer button text)
        return super().eventFilter(watched, event)
