"""A table's columns fitted to its width (Head roles' Overview map, Scores table and Find list):
each column as wide as its texts with the style's padding and the spare width shared out evenly;
where the padded texts outgrow the viewport (a narrow dock, many columns), each as wide as its
widest text in the font it is drawn in and the margins the style keeps beside a cell's text, so
every text is drawn whole (the table scrolls sideways where even that is wider than the viewport);
a map whose cells' colours say what their texts abbreviate may be `cut` instead, each column its
text and a hair, every column in sight and a text that does not fit ending in an ellipsis. The
texts are measured when they change (`measure`); a resize only shares the width out again."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QEvent, QObject, QRect, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStyle, QStyleOptionHeader

TIGHT_PAD = 4  # pixels beside a cut map's cell text where the table is too narrow for the usual padding


class ColumnFit(QObject):
    """Fits `table`'s columns as its viewport resizes; `measure()` after its cells change,
    `measure(texts=False)` after its rows are sorted. Its horizontal header is set to fixed sections, at least a digit wide (the
    style's least, 38 px, would undo the narrow columns). `cut`: short of room, the cells' texts
    may end in an ellipsis rather than the table scroll sideways (a map coloured by its texts)."""

    def __init__(self, table, cut: bool = False):
        super().__init__(table)
        self.table = table
        self.hints: list[int] = []  # per column: the style's width for its cells (sizeHintForColumn)
        self.cells: list[int] = []  # per column: its widest cell text and the room beside it
        self.pad = TIGHT_PAD if cut else text_margins(table) + 1  # (+1: a text's fractional width)
        header = table.horizontalHeader()
        header.setSectionResizeMode(header.ResizeMode.Fixed)
        header.setMinimumSectionSize(table.fontMetrics().horizontalAdvance("0") + self.pad)
        self.viewport = table.viewport()
        self.viewport.installEventFilter(self)

    def measure(self, texts: bool = True) -> None:
        """Measure the cells and fit the columns to them: the style's widths (its size hints sample
        the rows in their order: after a sort too) and, where `texts` (new cells, not a new order of
        the same ones), the widest text of each column."""
        t = self.table
        self.hints = [t.sizeHintForColumn(c) for c in range(t.columnCount())]
        if texts or len(self.cells) != t.columnCount():
            self.cells = [widest(cell_texts(t, c)) + self.pad for c in range(t.columnCount())]
        self.fit()

    def fit(self) -> None:
        t, header = self.table, self.table.horizontalHeader()
        n, width = t.columnCount(), t.viewport().width()
        if n == 0 or len(self.hints) != n:
            return
        need = [max(header.sectionSizeHint(c), self.hints[c]) for c in range(n)]
        if sum(need) > width:  # (none below the header's least: it would widen it past the sum)
            need = [max(self.cells[c], label_width(t, c), header.minimumSectionSize()) for c in range(n)]
        spare = max(0, width - sum(need))
        for c in range(n):
            header.resizeSection(c, need[c] + spare // n + (c < spare % n))

    def eventFilter(self, obj, event):
        # (a table being deleted still sends its viewport's events: not fitted then)
        if event.type() == QEvent.Type.Resize and obj is self.viewport and shiboken6.isValid(self.table):
            self.fit()
        return super().eventFilter(obj, event)


def text_margins(table) -> int:
    """The pixels an item view's style keeps beside a cell's text, both sides together (the focus
    frame's margin and one): a column narrower than its text and these draws the text cut."""
    return 2 * (table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1)


def label_width(table, c: int) -> int:
    """The least width that shows column `c`'s header label whole: its text and what the style
    takes beside it (its margins, and the sort arrow of the sorted column)."""
    return widest([header_text(table, c)]) + header_room(table.horizontalHeader(), c)


def header_room(header, c: int) -> int:
    """The pixels the style keeps beside section `c`'s label (margins, and the sort indicator's
    arrow where the section is sorted), as it lays the label out when painting."""
    opt = QStyleOptionHeader()
    opt.initFrom(header)
    opt.orientation = Qt.Orientation.Horizontal
    opt.state |= QStyle.StateFlag.State_Horizontal
    opt.section = c
    opt.rect = QRect(0, 0, 1000, max(header.height(), header.sizeHint().height()))
    sorted_here = header.isSortIndicatorShown() and header.sortIndicatorSection() == c
    opt.sortIndicator = QStyleOptionHeader.SortIndicator.SortDown if sorted_here else \
        QStyleOptionHeader.SortIndicator.None_
    label = header.style().subElementRect(QStyle.SubElement.SE_HeaderLabel, opt, header)
    return opt.rect.width() - label.width()


def column_texts(table, c: int) -> list:
    """(text, font) of a table column's header label and cells, each text as its delegate shows it
    and each font as it is drawn: the item's own over the header's or the table's."""
    return [header_text(table, c)] + cell_texts(table, c)


def header_text(table, c: int) -> tuple:
    """(text, font) of column `c`'s header label; a header that highlights the current cell's
    section draws its label bold."""
    head, header = table.horizontalHeaderItem(c), table.horizontalHeader()
    font = head.font().resolve(header.font()) if head is not None else header.font()
    font.setBold(font.bold() or header.highlightSections())
    return str(table.model().headerData(c, Qt.Orientation.Horizontal)), font  # (a number where unnamed)


def cell_texts(table, c: int) -> list:
    delegate, locale = table.itemDelegateForColumn(c) or table.itemDelegate(), table.locale()
    return [
        (delegate.displayText(table.item(r, c).data(Qt.ItemDataRole.DisplayRole), locale),
         table.item(r, c).font().resolve(table.font()))
        for r in range(table.rowCount()) if table.item(r, c) is not None]


def widest(texts) -> int:
    """The widest of (text, font) pairs as drawn (0 for none), each distinct text measured once
    per font (a table's cells repeat their numbers and share one font)."""
    by_font: dict = {}
    for text, font in texts:
        by_font.setdefault(font.key(), (font, set()))[1].add(text)
    return max((max(map(QFontMetrics(font).horizontalAdvance, shown), default=0)
                for font, shown in by_font.values()), default=0)
