"""A row of widgets that wraps in a narrow dock: Compare's A | B | A − B and its Export… and Stop
comparing buttons, one row wider than a 320 px dock, made the whole panel scroll sideways.

Where every item fits on one line, the items from `tail` on stand at its right end (the modes at
the left, the actions at the right). Where they do not, the items before `tail` flow left to right,
each starting a new line where it would pass the right edge, and the tail does the same from a line
of its own. The least width is the widest item's, and the height follows the width
(`heightForWidth`)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QWidget, QWidgetItem


class WrapRow(QLayout):
    def __init__(self, widgets: list[QWidget], tail: int, spacing: int = 6):
        super().__init__()
        self._items: list[QWidgetItem] = []
        self._tail = tail
        self._gap = spacing
        self.setContentsMargins(0, 0, 0, 0)
        for w in widgets:
            self.addWidget(w)

    # --- QLayout's interface -------------------------------------------------------------------
    def addItem(self, item) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, i: int):
        return self._items[i] if 0 <= i < len(self._items) else None

    def takeAt(self, i: int):
        return self._items.pop(i) if 0 <= i < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def minimumSize(self) -> QSize:
        shown = [it for it in self._items if not it.isEmpty()]
        w = max((it.sizeHint().width() for it in shown), default=0)
        h = max((it.sizeHint().height() for it in shown), default=0)
        return QSize(w, h)

    def sizeHint(self) -> QSize:  # every item on one line
        shown = [it for it in self._items if not it.isEmpty()]
        w = sum(it.sizeHint().width() for it in shown) + self._gap * max(0, len(shown) - 1)
        return QSize(w, self.minimumSize().height())

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    # --- the lines -----------------------------------------------------------------------------
    def lines(self, width: int) -> list[list[int]]:
        """The indices of the items shown on each line at `width`."""
        shown = [i for i, it in enumerate(self._items) if not it.isEmpty()]
        if self.sizeHint().width() <= width:
            return [shown] if shown else []
        out: list[list[int]] = []
        for part in ([i for i in shown if i < self._tail], [i for i in shown if i >= self._tail]):
            x = None
            for i in part:
                w = self._items[i].sizeHint().width()
                if x is None or x + self._gap + w > width:
                    out.append([i])
                    x = w
                else:
                    out[-1].append(i)
                    x += self._gap + w
        return out

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in `rect` (when `move`); the height they take."""
        y = rect.y()
        for line in self.lines(rect.width()):
            sizes = [self._items[i].sizeHint() for i in line]
            h = max(s.height() for s in sizes)
            if move:
                x = rect.x()
                tail_w = sum(s.width() + self._gap for i, s in zip(line, sizes) if i >= self._tail)
                for i, s in zip(line, sizes):
                    if i >= self._tail and line[0] < self._tail and x < rect.right() + 1 - tail_w:
                        x = rect.right() + 1 - tail_w + self._gap  # (the tail at the line's right end)
                    self._items[i].setGeometry(QRect(QPoint(x, y + (h - s.height()) // 2), s))
                    x += s.width() + self._gap
            y += h + self._gap
        return max(0, y - rect.y() - self._gap)
