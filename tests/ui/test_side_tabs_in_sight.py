"""The side panels' tabs at a window 700 px tall: every tab lies whole inside its bar, with no
scroll arrows to reach it, its name painted whole, with the eight panels a first start shows and
with Compare and Corpus opened from the View menu too. At 1500 x 950 each tab keeps the style's
own padding around its name (ui/views/side_tabs.py)."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyle, QStyleOptionTab, QTabBar, QToolButton

from windows import WAIT, drain_events, in_sight, open_window, raised_titles


def _bars(w) -> list[QTabBar]:
    return [b for b in w.findChildren(QTabBar) if b.parent() is w and b.isVisible() and b.count() > 1]


def _out_of_sight(w) -> list[str]:
    """Each tab of the window's dock tab bars that is not whole inside its bar, or whose name the
    bar paints other than whole; each bar that shows scroll arrows."""
    bad = []
    for bar in _bars(w):
        arrows = [b for b in bar.findChildren(QToolButton) if b.isVisible()]
        if arrows:
            bad.append(f"{bar.count()} tabs in {bar.height()} px show {len(arrows)} scroll arrows")
        for i in range(bar.count()):
            name, rect = bar.tabText(i), bar.tabRect(i)
            opt = QStyleOptionTab()
            bar.initStyleOption(opt, i)  # the text as painted
            if not bar.rect().contains(rect) or opt.text != name:
                bad.append(f"tab {name!r} at {rect.getRect()} in a bar of {bar.rect().getRect()}, "
                           f"painted {opt.text!r}")
    return bad


def _settle(w):
    w.worker.wait_idle()
    drain_events()
    drain_events()


def _names(w) -> list[str]:
    return [bar.tabText(i) for bar in _bars(w) for i in range(bar.count())]


def test_every_side_tab_is_in_sight_at_1200x700(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1200, 700)
    _settle(w)
    assert len(_names(w)) == 8 and _out_of_sight(w) == []
    for dock in (w.compare_dock, w.corpus_dock):  # as View > Compare and View > Corpus open them
        dock.toggleViewAction().trigger()
    _settle(w)
    assert {"Compare", "Corpus", "Focus head", "What heads do"} <= set(_names(w))
    assert len(_names(w)) == 10 and _out_of_sight(w) == []


def test_side_tabs_keep_their_padding_where_there_is_room(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1500, 950)
    _settle(w)
    (bar,) = _bars(w)
    own = w.style().pixelMetric(QStyle.PixelMetric.PM_TabBarTabHSpace)
    fm = bar.fontMetrics()  # (a tab's length: its name's, as QTabBar measures it, and the padding)
    names = [fm.size(Qt.TextFlag.TextShowMnemonic, bar.tabText(i)).width() for i in range(bar.count())]
    assert [bar.tabRect(i).height() - n for i, n in enumerate(names)] == [own] * bar.count()
    assert _out_of_sight(w) == []


def test_every_side_tab_is_in_sight_with_why_here_open(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1200, 700)
    w.why_dock.show()  # as a click on a cell of the focus view opens it
    _settle(w)
    assert in_sight(w.why_dock) and in_sight(w.focus_view)  # Why here? below the view it explains
    assert len(_names(w)) == 8 and _out_of_sight(w) == []
    for dock in (w.compare_dock, w.corpus_dock):
        dock.toggleViewAction().trigger()
    _settle(w)
    w.focus_dock.raise_()
    _settle(w)
    assert in_sight(w.why_dock) and in_sight(w.focus_view)
    assert len(_names(w)) == 10 and _out_of_sight(w) == []


def test_why_here_opens_again_below_the_focus_view_as_it_was_left(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1200, 700)
    w.why_dock.show()
    _settle(w)
    tab = w.focus_dock.widget()  # the Focus head tab's own docks: the focus view, Why here? below
    tab.resizeDocks([w.why_dock], [300], Qt.Orientation.Vertical)
    _settle(w)
    height = w.why_dock.height()
    w.close()
    again = open_window(qtbot, tmp_path / "s.ini")
    _settle(again)
    assert in_sight(again.why_dock) and in_sight(again.focus_view)
    assert again.why_dock.parent() is again.focus_dock.widget() and again.why_dock.height() == height
    assert _out_of_sight(again) == []


def test_view_why_here_behind_another_tab_raises_the_focus_head_tab(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    _settle(w)
    w.calc_dock.raise_()  # as a click on its tab does
    qtbot.waitUntil(lambda: raised_titles(w) == ["Calculator"], timeout=WAIT)
    assert not in_sight(w.focus_view)
    w.why_dock.toggleViewAction().trigger()  # View > Why here?
    _settle(w)
    assert in_sight(w.why_dock) and in_sight(w.focus_view)
