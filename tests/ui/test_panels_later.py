"""The side panels built later (ui/panel_docks.py): the window starts with every panel's dock made
but empty, builds a panel when its dock is shown or anything asks for it, and the rest one per
event-loop turn after the first result. The tabs, their names, the View menu and a saved layout are
those of a window that builds every panel at once; a panel built late shows the current result."""

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtWidgets import QDockWidget, QTabBar

from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.ui.panel_docks import PanelDocks
from windows import CAT, WAIT, drain_events


def _looks(w) -> dict:
    """What a user sees of the docks: each tab bar's names and raised tab, each dock's title, area
    and object name in order, and the View menu."""
    bars = sorted(([bar.tabText(i) for i in range(bar.count())], bar.currentIndex())
                  for bar in w.findChildren(QTabBar) if bar.parent() is w)
    docks = [(d.objectName(), d.windowTitle(), w.dockWidgetArea(d).name, d.isFloating())
             for d in w.findChildren(QDockWidget)]
    return {"bars": bars, "docks": docks, "view": [a.text() for a in w.menus.view_menu.actions()]}


def _settled(qtbot, w):
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()


def test_the_tabs_names_and_menu_are_those_of_a_window_that_builds_every_panel_at_once(qtbot, tmp_path, textbook_window):
    now = textbook_window(tmp_path / "a.ini", shown=False)
    now._build_panel_docks()  # every panel at once, before the window is shown
    later = textbook_window(tmp_path / "b.ini", shown=False)
    assert later.panel_docks.built == set()  # nothing built while the window is made
    assert all(later.findChild(QDockWidget, n).widget() is None for n in ("calc_dock", "predict_dock"))
    for w in (now, later):
        w.show()
        _settled(qtbot, w)
    assert _looks(later) == _looks(now)
    assert _looks(later)["bars"][-1][0] == ["Focus head", "Calculator", "Head roles", "Anatomy",
                                            "What heads do", "Generate", "Circuits", "Patching"]
    # every panel came without anything asking, each in its dock
    assert later.panel_docks.built == set(later.panel_docks.wanted)
    on_show = {"compare_dock", "corpus_dock"}  # made hidden and empty, built only when shown
    assert all(d.widget() is not None for d in later.findChildren(QDockWidget) if d.objectName() not in on_show)
    assert all(later.findChild(QDockWidget, n).widget() is None and later.findChild(QDockWidget, n).isHidden()
               for n in on_show)


def test_a_panel_raised_before_the_later_builds_shows_the_current_result(qtbot, tmp_path, textbook_window, monkeypatch):
    monkeypatch.setattr(PanelDocks, "build_rest_later", lambda self: None)  # never, in this test
    w = textbook_window(tmp_path / "s.ini", shown=False)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    assert w.panel_docks.built == set()
    dock = w.findChild(QDockWidget, "predict_dock")
    dock.raise_()  # as a click on its tab does
    qtbot.waitUntil(lambda: "predict" in w.panel_docks.built, timeout=WAIT)
    assert w.panel_docks.built == {"predict"}  # only the one shown
    panel = dock.widget()
    model, eff = w.state.model, w.state.effects
    qtbot.waitUntil(lambda: eff.analysis is not None and panel.top_table.rowCount() > 0, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    ref = analyse(model, window_run(model, CAT))
    rows = [[panel.top_table.item(r, c).text() for c in range(2)] for r in range(panel.top_table.rowCount())]
    assert rows == [[ref.label(i), f"{np.exp(lp):.3f}"] for i, lp in zip(ref.clean.top_ids, ref.clean.top_logprobs)]
    assert panel.isVisible() and not panel.visibleRegion().isEmpty()


def test_a_click_in_the_focus_view_before_the_later_builds_opens_why_here(qtbot, tmp_path, textbook_window, monkeypatch):
    monkeypatch.setattr(PanelDocks, "build_rest_later", lambda self: None)  # never, in this test
    w = textbook_window(tmp_path / "s.ini", shown=False, panels=("why", "predict"))
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    w.state.set_focus(0, 1)
    drain_events()
    assert w.panel_docks.built == set() and not w.why_dock.isVisible()
    fv = w.focus_view
    pos = fv.gw.mapFromScene(fv.vb.mapViewToScene(QPointF(0.5, 2.5)))  # query 2, key 0
    qtbot.mouseClick(fv.gw.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    qtbot.waitUntil(lambda: w.why_dock.isVisible(), timeout=WAIT)
    assert w.panel_docks.built == {"why"} and w.why_dock.widget() is w.why_panel
    qtbot.waitUntil(lambda: w.why_jobs.cell == (0, 1, 2, 0), timeout=WAIT)
    w.worker.wait_idle()


def test_reading_a_panel_builds_it_into_its_dock(qtbot, tmp_path, textbook_window):
    w = textbook_window(tmp_path / "s.ini", shown=False, panels=("calc", "why"))
    assert w.panel_docks.built == set() and w.predict_panel is None and w.predict_dock is None
    panel = w.circuits_panel  # the Why here? build gives both of its docks their panels
    assert w.panel_docks.built == {"why"} and w.circuits_dock.widget() is panel
    assert w.why_dock.widget() is w.why_panel and not w.why_dock.isVisible()
    assert w.calc_dock.widget() is None
    w.show()
    _settled(qtbot, w)
    assert w.calc_dock.widget() is w.calc_panel


def test_a_saved_layout_comes_back_with_its_docks_and_the_panels_shown_are_built_first(
        qtbot, tmp_path, textbook_window, monkeypatch):
    path = tmp_path / "s.ini"
    first = textbook_window(path, shown=False)
    first.show()
    _settled(qtbot, first)
    first.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, first.generate_dock)  # its own area, shown
    first.calc_dock.setFloating(True)
    drain_events()
    before = _looks(first)
    first.close()
    monkeypatch.setattr(PanelDocks, "build_rest_later", lambda self: None)  # only what is shown
    w = textbook_window(path, shown=False)
    assert w.dockWidgetArea(w.generate_dock) == Qt.DockWidgetArea.LeftDockWidgetArea
    assert w.calc_dock.isFloating()
    w.show()
    # the docks in sight are built as the window shows (the focus view's tab raised: not the others)
    qtbot.waitUntil(lambda: {"generate", "calc"} <= w.panel_docks.built, timeout=WAIT)
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    drain_events()
    assert w.panel_docks.built == {"generate", "calc"}
    w._build_panel_docks()
    _settled(qtbot, w)
    assert _looks(w) == before
