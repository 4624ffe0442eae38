"""Compare's wrapping row of buttons (attnviz/ui/views/wrap_row.py) on its own, with real buttons
laid out in a shown widget: right to left it mirrors (the first button at the right edge, the
actions at the left end, wrapped lines from the right edge); its gaps are setSpacing's, else the
style's as a QHBoxLayout takes them; the items it holds are deleted with it."""

import pytest
import shiboken6
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import (QHBoxLayout, QProxyStyle, QPushButton, QSizePolicy, QStyle,
                               QToolButton, QVBoxLayout, QWidget)

from attnviz.ui.views.wrap_row import WrapRow
from windows import drain_events

MODES = ("A", "B", "A \u2212 B")


def _buttons():
    tools = []
    for title in MODES:
        b = QToolButton()
        b.setText(title)
        tools.append(b)
    return [*tools, QPushButton("Export\u2026"), QPushButton("Stop comparing")]


def _row(buttons, spacing=None):
    row = WrapRow(buttons, len(MODES))
    if spacing is not None:
        row.setSpacing(spacing)
    return row


def _box(buttons):
    box = QHBoxLayout()
    for b in buttons:
        box.addWidget(b)
    return box


def _shown(qtbot, width, make=_row, rtl=False, style=None):
    """A widget `width` px wide holding a row of Compare's five buttons (`make(buttons)`: a
    WrapRow unless told) under a column as in the panel, shown and laid out: (the widget, the row,
    the buttons)."""
    host = QWidget()
    qtbot.addWidget(host)
    if style is not None:
        host.setStyle(style)
    if rtl:
        host.setLayoutDirection(Qt.LayoutDirection.RightToLeft)
    col = QVBoxLayout(host)
    col.setContentsMargins(0, 0, 0, 0)
    buttons = _buttons()
    row = make(buttons)
    col.addLayout(row)
    col.addStretch(1)
    host.resize(width, 200)
    host.show()
    qtbot.waitExposed(host)
    drain_events()
    return host, row, buttons


def _lines(buttons):
    """The buttons grouped into the lines they are painted on (vertical extents that overlap),
    top line first, each line in its order on screen from left to right."""
    lines: list[list] = []
    for b in sorted(buttons, key=lambda b: b.geometry().top()):
        g = b.geometry()
        if lines and any(g.top() <= o.geometry().bottom() and o.geometry().top() <= g.bottom()
                         for o in lines[-1]):
            lines[-1].append(b)
        else:
            lines.append([b])
    return [sorted(line, key=lambda b: b.geometry().left()) for line in lines]


def _painted_at(host, b):
    """The button painted at the middle of `b`'s place: `b` itself when it is painted there."""
    return host.childAt(b.geometry().center())


def test_one_line_right_to_left_starts_at_the_right_edge_with_the_actions_at_the_left(qtbot):
    host, row, buttons = _shown(qtbot, 600, rtl=True)
    (line,) = _lines(buttons)
    assert line == buttons[::-1], [b.text() for b in line]
    a = buttons[0]
    assert a.geometry().right() == host.width() - 1, (a.geometry(), host.width())
    assert host.childAt(QPoint(host.width() - 3, a.geometry().center().y())) is a
    stop = buttons[-1]
    assert stop.geometry().left() == 0, stop.geometry()
    assert all(_painted_at(host, b) is b for b in buttons)


def test_left_to_right_the_same_row_starts_at_the_left_edge_with_the_actions_at_the_right(qtbot):
    host, row, buttons = _shown(qtbot, 600)
    (line,) = _lines(buttons)
    assert line == buttons
    assert buttons[0].geometry().left() == 0
    assert buttons[-1].geometry().right() == host.width() - 1


def test_wrapped_lines_right_to_left_each_start_at_the_right_edge(qtbot):
    width = 130
    host, row, buttons = _shown(qtbot, width, rtl=True)
    lines = _lines(buttons)
    assert len(lines) >= 3, [[b.text() for b in line] for line in lines]
    order = [b for line in lines for b in line[::-1]]  # (each line read right to left)
    assert order == buttons, [b.text() for b in order]
    for line in lines:
        assert line[-1].geometry().right() == width - 1, [(b.text(), b.geometry()) for b in line]
        assert line[0].geometry().left() >= 0
    assert all(_painted_at(host, b) is b for b in buttons)


def _gaps_on_line(line):
    return [b.geometry().left() - a.geometry().right() - 1 for a, b in zip(line, line[1:])]


def test_set_spacing_is_the_gap_between_buttons_and_between_lines(qtbot):
    host, row, buttons = _shown(qtbot, 800, make=lambda b: _row(b, spacing=20))
    (line,) = _lines(buttons)
    modes_gaps = _gaps_on_line(line[:len(MODES)]) + _gaps_on_line(line[len(MODES):])
    assert modes_gaps == [20] * (len(buttons) - 2), modes_gaps
    host.resize(130, 200)
    drain_events()
    lines = _lines(buttons)
    assert len(lines) >= 3
    for line in lines:
        assert _gaps_on_line(line) == [20] * (len(line) - 1), _gaps_on_line(line)
    for upper, lower in zip(lines, lines[1:]):
        gap = min(b.geometry().top() for b in lower) - max(b.geometry().bottom() for b in upper) - 1
        assert gap == 20, gap


class _Spaced(QProxyStyle):
    """Fusion with its own layout spacing: a metric of 13 px, or (`metric` -1) none, and 9 px
    between two push buttons, 4 between other controls."""

    def __init__(self, metric):
        super().__init__("Fusion")
        self.metric = metric

    def pixelMetric(self, m, option=None, widget=None):
        if m in (QStyle.PixelMetric.PM_LayoutHorizontalSpacing, QStyle.PixelMetric.PM_LayoutVerticalSpacing):
            return self.metric
        return super().pixelMetric(m, option, widget)

    def layoutSpacing(self, a, b, orientation, option=None, widget=None):
        push = QSizePolicy.ControlType.PushButton
        return 9 if a == push and b == push else 4


@pytest.mark.parametrize("metric", [13, -1])
def test_without_set_spacing_the_gaps_are_the_styles_as_a_box_layout_takes_them(qtbot, metric):
    style = _Spaced(metric)
    host, row, buttons = _shown(qtbot, 900, style=style)
    box_host, _, box_buttons = _shown(qtbot, 900, make=_box, style=_Spaced(metric))
    (line,) = _lines(buttons)
    want = _gaps_on_line(box_buttons)
    assert want == ([13] * 4 if metric == 13 else [4, 4, 4, 9]), want
    got = _gaps_on_line(line)
    # (the tail stands at the right end: the gap before it is whatever is left)
    assert got[:2] + got[3:] == want[:2] + want[3:], (got, want)
    assert row.sizeHint().width() == sum(b.sizeHint().width() for b in buttons) + sum(want)


def test_the_items_it_holds_are_deleted_with_it_and_one_taken_is_the_takers(qtbot):
    host = QWidget()
    col = QVBoxLayout(host)
    row = WrapRow(_buttons(), len(MODES))
    col.addLayout(row)
    gone = []
    kept = QVBoxLayout()  # (layouts are items that say when they are deleted)
    kept.destroyed.connect(lambda: gone.append("kept"))
    row.addItem(kept)
    taken = QVBoxLayout()
    taken.destroyed.connect(lambda: gone.append("taken"))
    row.addItem(taken)
    assert row.takeAt(row.count() - 1) is taken
    del kept
    shiboken6.delete(host)
    assert gone == ["kept"]
    assert shiboken6.isValid(taken)
