"""A row of widgets that wraps in a narrow dock: Compare's A | B | A − B and its Export… and Stop
comparing buttons, one row wider than a 320 px dock, made the whole panel scroll sideways.

Where every item fits on one line, the items from `tail` on stand at its right end (the modes at
the left, the actions at the right). Where they do not, the items before `tail` flow left to right,
each starting a new line where it would pass the right edge, and the tail does the same from a line
of its own. The least width is the widest item's, and the height follows the width
(`heightForWidth`). Right to left, all of it is mirrored."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QLayout, QLayoutItem, QStyle, QWidget, QWidgetItem


class WrapRow(QLayout):
    """A flow layout of widgets in one row that wraps to more lines where the width is short.

    The gap between items is `spacing()` once `setSpacing` was called, else the style's (its layout
    spacing metric, or its spacing between the two kinds of control, as QBoxLayout takes it). The
    items go from the right edge in a right-to-left layout direction. The row owns its items: they
    are deleted with it, and one taken (`takeAt`) belongs to the taker."""

    def __init__(self, widgets: list[QWidget], tail: int):
        super().__init__()
        self._items: list[QLayoutItem] = []
        self._tail = tail
        self.setContentsMargins(0, 0, 0, 0)
        for w in widgets:
            self.addWidget(w)
        # (QLayout's destructor leaves the items to the subclass; Python has no destructor that runs
        # while the C++ row is still there, so the items go when it is destroyed)
        items = self._items
        self.destroyed.connect(lambda: _delete_items(items))

    # --- QLayout's interface -------------------------------------------------------------------
    def addWidget(self, w: QWidget) -> None:
        # (an item made here is Python's own, so the row can delete it; QLayout.addWidget's is not)
        self.addChildWidget(w)
        self.addItem(QWidgetItem(w))

    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)
        self.invalidate()

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, i: int):
        return self._items[i] if 0 <= i < len(self._items) else None

    def takeAt(self, i: int):
        if not 0 <= i < len(self._items):
            return None
        item = self._items.pop(i)
        self.invalidate()
        return item

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
        w = sum(it.sizeHint().width() for it in shown)
        w += sum(self._gap(a, b) for a, b in zip(shown, shown[1:]))
        return QSize(w, self.minimumSize().height())

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    # --- the gaps ------------------------------------------------------------------------------
    def _gap(self, a: QLayoutItem | list[QLayoutItem], b: QLayoutItem | list[QLayoutItem],
             orientation: Qt.Orientation = Qt.Orientation.Horizontal) -> int:
        """The space between `a` and `b` side by side, or between two lines of items (lists) when
        `orientation` is vertical: setSpacing's, else the style's, as QBoxLayout takes it."""
        if (s := self.spacing()) >= 0:  # (set, or the parent layout's, or the style's metric)
            return s
        parent = self.parentWidget()
        style = parent.style() if parent is not None else QApplication.style()
        kinds = [_kinds(x) for x in (a, b)]
        return max(0, style.combinedLayoutSpacing(kinds[0], kinds[1], orientation, None, parent))

    # --- the lines -----------------------------------------------------------------------------
    def lines(self, width: int) -> list[list[int]]:
        """The indices of the items shown on each line at `width`."""
        shown = [i for i, it in enumerate(self._items) if not it.isEmpty()]
        if self.sizeHint().width() <= width:
            return [shown] if shown else []
        out: list[list[int]] = []
        for part in ([i for i in shown if i < self._tail], [i for i in shown if i >= self._tail]):
            x = None
            for prev, i in zip([None, *part], part):
                w = self._items[i].sizeHint().width()
                gap = 0 if prev is None else self._gap(self._items[prev], self._items[i])
                if x is None or x + gap + w > width:
                    out.append([i])
                    x = w
                else:
                    out[-1].append(i)
                    x += gap + w
        return out

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in `rect` (when `move`), mirrored right to left; the height they take."""
        parent = self.parentWidget()
        direction = parent.layoutDirection() if parent is not None else QGuiApplication.layoutDirection()
        y = rect.y()
        lines = self.lines(rect.width())
        for n, line in enumerate(lines):
            items = [self._items[i] for i in line]
            sizes = [it.sizeHint() for it in items]
            gaps = [0, *(self._gap(a, b) for a, b in zip(items, items[1:]))]
            h = max(s.height() for s in sizes)
            if move:
                x = rect.x()
                tail_w = sum(s.width() + g for i, s, g in zip(line, sizes, gaps) if i >= self._tail)
                for i, s, g, it in zip(line, sizes, gaps, items):
                    x += g
                    if i >= self._tail and line[0] < self._tail and x < rect.right() + 1 - tail_w + g:
                        x = rect.right() + 1 - tail_w + g  # (the tail at the line's right end)
                    at = QRect(QPoint(x, y + (h - s.height()) // 2), s)
                    it.setGeometry(QStyle.visualRect(direction, rect, at))
                    x += s.width()
            if n + 1 < len(lines):
                y += h + self._gap(items, [self._items[i] for i in lines[n + 1]], Qt.Orientation.Vertical)
            else:
                y += h
        return max(0, y - rect.y())


def _kinds(x: QLayoutItem | list[QLayoutItem]):
    """The kinds of control in an item or a line of items (QSizePolicy.ControlTypes)."""
    items = x if isinstance(x, list) else [x]
    out = items[0].controlTypes()
    for it in items[1:]:
        out |= it.controlTypes()
    return out


def _delete_items(items: list[QLayoutItem]) -> None:
    for it in items:
        if shiboken6.isValid(it) and shiboken6.createdByPython(it):
            shiboken6.delete(it)
    items.clear()
