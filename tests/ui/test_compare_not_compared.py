"""Compare when nothing comes back to compare: a long text (A's run is a long run, which Compare
does not compare) or A's run failing. The Compare panel's note then says the text is not compared
(the long view hides the grid, its selector with it, and the grid shows A, not an A − B of the text
before), or the selector says it could not be, never that it is still comparing; a text of dense
size typed after the long one is compared again."""

from __future__ import annotations

import pytest

from attnviz.engine.analysing import effects
from attnviz.engine.computing.longdoc import dense_bytes
from attnviz.engine.errors import InputError
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from attnviz.ui.views.grid_compare import grid_mode

WAIT = 30000
TEXT = "the cat sat on the mat and the cat sat"
LONG = " ".join([TEXT] * 6)


@pytest.fixture
def window(toy_compare_window):
    return toy_compare_window(TEXT)


def selector_says(w) -> str:
    sel = w.grid.mode_selector
    return sel.waiting.text() if sel.waiting.isVisible() else ""


def note_says(w) -> str:
    """The Compare panel's note as the user sees it (the window shown, the panel's dock open)."""
    assert w.isVisible()
    note = w.compare_panel.note
    return note.text() if note.isVisible() else ""


def test_compare_opened_on_a_long_text_says_it_is_not_compared(window, qtbot):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    cfg = st.model.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    w.set_text(LONG)
    qtbot.waitUntil(lambda: st.long.run is not None, timeout=WAIT)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.active and bool(jobs.note) and not jobs.note.startswith("Loading"),
                    timeout=WAIT)
    w.worker.wait_idle()
    assert jobs.comparison is None
    assert jobs.note.startswith("Not compared: a long text (")
    assert note_says(w) == jobs.note and not w.grid.isVisible()  # (the long view in its place)
    w.set_text(TEXT)  # a text of dense size: compared
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                    timeout=WAIT)
    w.worker.wait_idle()
    assert jobs.note == "" and selector_says(w) == ""


def test_a_long_text_pasted_while_compared_is_said_not_compared_and_leaves_a_minus_b(window, qtbot):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    jobs.set_mode("A-B")
    cfg = st.model.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    w.set_text(LONG)
    qtbot.waitUntil(lambda: jobs.long_text, timeout=WAIT)
    w.worker.wait_idle()
    assert note_says(w).startswith("Not compared: a long text (")
    assert grid_mode(jobs) == "A" and jobs.mode == "A-B"  # (A's run: no A − B of another text)
    w.set_text(TEXT)  # compared again: A − B as chosen
    qtbot.waitUntil(lambda: not jobs.long_text and jobs.comparison.result.text == TEXT, timeout=WAIT)
    w.worker.wait_idle()
    assert note_says(w) == "" and grid_mode(jobs) == "A-B" and w.grid.isVisible()


def test_a_new_step_whose_run_fails_is_not_said_to_be_comparing(window, qtbot, monkeypatch):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    run = effects.window_run

    def fails(*args, **kw):
        raise InputError("no room for this run")
    monkeypatch.setattr(effects, "window_run", fails)
    st.set_checkpoint(16)
    qtbot.waitUntil(lambda: "No room for this run" in w.compare_panel.note.text(), timeout=WAIT)
    w.worker.wait_idle()
    assert w.compare_panel.note.text() == "A's run of the text failed, so nothing is compared. No room for this run."
    assert selector_says(w) == "(could not compare: A's last run shown)"
    monkeypatch.setattr(effects, "window_run", run)
    st.set_checkpoint(8)  # (its run goes through: compared, the selector hidden once it is in)
    assert selector_says(w) == "(comparing\u2026: A's last run shown meanwhile)"
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.pair.a.model is st.model,
                    timeout=WAIT)
    w.worker.wait_idle()
    assert selector_says(w) == "" and jobs.note == ""
