"""The tab raised in the side docks comes back: a window closed with What heads do raised opens
again on What heads do, its panel built as it shows and showing the current result; a first start,
or a saved tab the window no longer has (a panel left out, a dock closed, an unknown name), raises
the focus view's tab."""

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDockWidget, QTabBar

from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.ui.panel_docks import PanelDocks
from windows import WAIT, drain_events

TEXT = "The cat sat on the mat because the cat"
MODEL = "attnviz-textbook"  # a decoder: What heads do predicts


def _window(qtbot, path, **kw):
    from attnviz.ui.app import create_window

    w = create_window(model=MODEL, text=TEXT, settings=QSettings(str(path), QSettings.Format.IniFormat), **kw)
    qtbot.addWidget(w)
    w.show()
    return w


def _raised(w) -> list[str]:
    """The raised tab's name in each tab bar of the docks on screen."""
    return [bar.tabText(bar.currentIndex()) for bar in w.findChildren(QTabBar)
            if bar.parent() is w and bar.isVisible() and bar.currentIndex() >= 0]


def _in_sight(dock) -> bool:
    return dock.isVisible() and not dock.visibleRegion().isEmpty()


def _closed_with(qtbot, path, raise_name: str, **kw) -> None:
    """A window whose panels are built, closed with the dock `raise_name` raised."""
    w = _window(qtbot, path, **kw)
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    dock = w.findChild(QDockWidget, raise_name)
    dock.raise_()  # as a click on its tab does
    qtbot.waitUntil(lambda: _raised(w) == [dock.windowTitle()], timeout=WAIT)
    w.worker.wait_idle()
    w.close()


def test_a_window_closed_on_what_heads_do_opens_again_on_it_showing_the_result(qtbot, tmp_path, monkeypatch):
    path = tmp_path / "s.ini"
    _closed_with(qtbot, path, "predict_dock")
    monkeypatch.setattr(PanelDocks, "build_rest_later", lambda self: None)  # only what is shown
    w = _window(qtbot, path)
    qtbot.waitUntil(lambda: _raised(w) == ["What heads do"], timeout=WAIT)
    # built because it is shown, before any later build: and it shows this start's prediction
    qtbot.waitUntil(lambda: "predict" in w.panel_docks.built, timeout=WAIT)
    panel, eff = w.predict_dock.widget(), w.state.effects
    qtbot.waitUntil(lambda: eff.analysis is not None and panel.top_table.rowCount() > 0, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert _raised(w) == ["What heads do"]  # still, once the first result and prediction came
    assert _in_sight(w.predict_dock) and panel.isVisible() and not panel.visibleRegion().isEmpty()
    assert not _in_sight(w.focus_dock)
    assert w.panel_docks.built == {"predict"}
    model = w.state.model
    ref = analyse(model, window_run(model, TEXT))
    rows = [[panel.top_table.item(r, c).text() for c in range(2)] for r in range(panel.top_table.rowCount())]
    assert rows == [[ref.label(i), f"{np.exp(lp):.3f}"] for i, lp in zip(ref.clean.top_ids, ref.clean.top_logprobs)]
    w.close()


def test_a_first_start_raises_the_focus_view(qtbot, tmp_path):
    w = _window(qtbot, tmp_path / "s.ini")
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert _raised(w) == ["Focus head"] and _in_sight(w.focus_dock)
    assert not _in_sight(w.predict_dock)


@pytest.mark.parametrize("gone", ["unknown name", "panel left out", "dock closed"])
def test_a_saved_tab_the_window_no_longer_has_falls_back_to_the_focus_view(qtbot, tmp_path, gone):
    path = tmp_path / "s.ini"
    _closed_with(qtbot, path, "calc_dock")
    s = QSettings(str(path), QSettings.Format.IniFormat)
    assert s.value("raised_tabs") == "calc_dock"  # what the close remembered
    kw = {}
    if gone == "unknown name":  # (a panel an older version had)
        s.setValue("raised_tabs", "oracle_dock")
        s.sync()
    elif gone == "panel left out":
        kw["panels"] = ("roles", "predict")
    else:  # the Calculator's dock closed in a later session that was saved with its tab raised
        closed = _window(qtbot, path)
        qtbot.waitUntil(lambda: closed.state.result is not None and closed.panels_ready, timeout=WAIT)
        closed.calc_dock.close()
        closed.worker.wait_idle()
        closed.close()
        s = QSettings(str(path), QSettings.Format.IniFormat)
        s.setValue("raised_tabs", "calc_dock")
        s.sync()
    w = _window(qtbot, path, **kw)
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert _raised(w) == ["Focus head"] and _in_sight(w.focus_dock)
    if gone == "dock closed":
        assert not w.calc_dock.isVisible()  # closed it stays, not raised open again
