"""A keystroke's run does not queue behind the head scores of the text before it: the window stops
waiting for them, they stop at their next role, and the keystroke's heatmaps are shown; the roles
then follow for the new text, never for the old one."""

import threading

from PySide6.QtGui import QTextCursor

from attnviz.engine.analysing import heads
from attnviz.ui.machinery.score_jobs import SCORES_KIND
from windows import IOI, scores_settled, toy_window, wait_for_text

HOLD_MS = 10000  # the keystroke's heatmaps come long before this, or never while the scores hold


def test_a_keystroke_is_shown_while_the_scores_of_the_text_before_it_hold(qtbot, tmp_path, monkeypatch):
    w = toy_window(qtbot, tmp_path / "s.ini", IOI)
    st = w.state
    assert scores_settled(w.worker)
    inside, gate, real = threading.Event(), threading.Event(), heads.detection_pattern

    def held(*a, **k):  # the first scores job holds at its first role while the window waits for it
        if not inside.is_set():
            inside.set()
            while not gate.wait(0.005) and w.worker.running(SCORES_KIND) is not None:
                pass
        return real(*a, **k)
    monkeypatch.setattr(heads, "detection_pattern", held)
    shown = []  # the text of the result each announced set of text scores is of
    st.sigHeadScoresChanged.connect(
        lambda: shown.append(st.scores_result.text if st.text_scores is not None else None))
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    try:
        qtbot.keyClick(w.text_box, "x")
        wait_for_text(qtbot, w, IOI + "x")
        qtbot.waitUntil(inside.is_set, timeout=HOLD_MS)  # IOI + "x"'s scores hold on the pool
        qtbot.keyClick(w.text_box, "y")
        qtbot.waitUntil(lambda: st.result.text == IOI + "xy", timeout=HOLD_MS)  # shown meanwhile
    finally:
        gate.set()
    qtbot.waitUntil(lambda: st.text_scores is not None and st.scores_result is st.text_result
                    and not st.scores_stale, timeout=HOLD_MS)
    assert st.scores_result.text == IOI + "xy" and w.grid.drawn is st.result
    assert IOI + "x" not in shown  # the old text's scores were never shown
    assert st.head_labels == st.text_scores.labels  # the new text's badges on the grid
    assert scores_settled(w.worker)


def test_the_text_shown_is_scored_when_the_keystroke_that_stopped_its_scores_fails(
        qtbot, tmp_path, monkeypatch):
    from contextlib import contextmanager

    from attnviz.engine.errors import InputError
    from attnviz.ui.machinery import worker as WK

    w = toy_window(qtbot, tmp_path / "s.ini", IOI)
    st = w.state
    assert scores_settled(w.worker)
    inside, gate, failing, real = threading.Event(), threading.Event(), [], heads.detection_pattern

    def held(*a, **k):  # as above
        if not inside.is_set():
            inside.set()
            while not gate.wait(0.005) and w.worker.running(SCORES_KIND) is not None:
                pass
        return real(*a, **k)

    @contextmanager
    def failing_run(*a, **k):  # the keystroke's run fails, once armed
        if failing:
            raise InputError("this run fails")
        yield
    monkeypatch.setattr(heads, "detection_pattern", held)
    monkeypatch.setattr(WK, "wide_blas", failing_run)
    reported = []
    st.sigComputeReported.connect(lambda _req, message: reported.append(message))
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    try:
        qtbot.keyClick(w.text_box, "x")
        wait_for_text(qtbot, w, IOI + "x")
        qtbot.waitUntil(inside.is_set, timeout=HOLD_MS)
        failing.append(True)
        qtbot.keyClick(w.text_box, "y")  # (its run stops the scores, then fails)
        qtbot.waitUntil(lambda: "this run fails" in reported, timeout=HOLD_MS)
    finally:
        gate.set()
    qtbot.waitUntil(lambda: st.text_scores is not None and st.scores_result is st.text_result
                    and not st.scores_stale, timeout=HOLD_MS)
    assert st.scores_result.text == IOI + "x" and st.head_labels == st.text_scores.labels
