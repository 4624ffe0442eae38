"""The tab raised in the side docks comes back: a window closed with What heads do raised opens
again on What heads do, its panel built as it shows and showing the current result; a first start,
or a saved tab the window no longer has (a panel left out, a dock closed, an unknown name), raises
the focus view's tab."""

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QDockWidget

from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.ui.panel_docks import PanelDocks
from windows import CAT, WAIT, drain_events, in_sight, raised_titles


def _closed_with(qtbot, open_window, path, raise_name: str, **kw) -> None:
    """A window (`open_window`: the textbook_window fixture) whose panels are built, closed with
    the dock `raise_name` raised."""
    w = open_window(path, ready=True, **kw)
    dock = w.findChild(QDockWidget, raise_name)
    dock.raise_()  # as a click on its tab does
    qtbot.waitUntil(lambda: raised_titles(w) == [dock.windowTitle()], timeout=WAIT)
    w.worker.wait_idle()
    w.close()


def test_a_window_closed_on_what_heads_do_opens_again_on_it_showing_the_result(qtbot, tmp_path, textbook_window, monkeypatch):
    path = tmp_path / "s.ini"
    _closed_with(qtbot, textbook_window, path, "predict_dock")
    monkeypatch.setattr(PanelDocks, "build_rest_later", lambda self: None)  # only what is shown
    w = textbook_window(path)
    qtbot.waitUntil(lambda: raised_titles(w) == ["What heads do"], timeout=WAIT)
    # built because it is shown, before any later build: and it shows this start's prediction
    qtbot.waitUntil(lambda: "predict" in w.panel_docks.built, timeout=WAIT)
    panel, eff = w.predict_dock.widget(), w.state.effects
    qtbot.waitUntil(lambda: eff.analysis is not None and panel.top_table.rowCount() > 0, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert raised_titles(w) == ["What heads do"]  # still, once the first result and prediction came
    assert in_sight(w.predict_dock) and panel.isVisible() and not panel.visibleRegion().isEmpty()
    assert not in_sight(w.focus_dock)
    assert w.panel_docks.built == {"predict"}
    model = w.state.model
    ref = analyse(model, window_run(model, CAT))
    rows = [[panel.top_table.item(r, c).text() for c in range(2)] for r in range(panel.top_table.rowCount())]
    assert rows == [[ref.label(i), f"{np.exp(lp):.3f}"] for i, lp in zip(ref.clean.top_ids, ref.clean.top_logprobs)]
    w.close()


def test_a_first_start_raises_the_focus_view(qtbot, tmp_path, textbook_window):
    w = textbook_window(tmp_path / "s.ini")
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert raised_titles(w) == ["Focus head"] and in_sight(w.focus_dock)
    assert not in_sight(w.predict_dock)


@pytest.mark.parametrize("gone", ["unknown name", "panel left out", "dock closed"])
def test_a_saved_tab_the_window_no_longer_has_falls_back_to_the_focus_view(qtbot, tmp_path, textbook_window, gone):
    path = tmp_path / "s.ini"
    _closed_with(qtbot, textbook_window, path, "calc_dock")
    s = QSettings(str(path), QSettings.Format.IniFormat)
    assert s.value("raised_tabs") == "calc_dock"  # what the close remembered
    kw = {}
    if gone == "unknown name":  # (a panel an older version had)
        s.setValue("raised_tabs", "oracle_dock")
        s.sync()
    elif gone == "panel left out":
        kw["panels"] = ("roles", "predict")
    else:  # the Calculator's dock closed in a later session that was saved with its tab raised
        closed = textbook_window(path)
        qtbot.waitUntil(lambda: closed.state.result is not None and closed.panels_ready, timeout=WAIT)
        closed.calc_dock.close()
        closed.worker.wait_idle()
        closed.close()
        s = QSettings(str(path), QSettings.Format.IniFormat)
        s.setValue("raised_tabs", "calc_dock")
        s.sync()
    w = textbook_window(path, **kw)
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert raised_titles(w) == ["Focus head"] and in_sight(w.focus_dock)
    if gone == "dock closed":
        assert not w.calc_dock.isVisible()  # closed it stays, not raised open again
