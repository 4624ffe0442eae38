"""What waits for What heads do's first analysis at start-up (the side panels' later builds, gc's
start-up collection) hears the runner say the analysis ended (Runner.sigEnded), never asks again
and again while it runs; the prediction is still shown first."""

import threading

from PySide6.QtCore import QSettings, QTimer

from attnviz.ui import panel_docks as PD
from attnviz.ui.machinery import effects_jobs as EJ
from attnviz.ui.machinery.worker import Worker
from windows import WAIT

TEXT = "The keys to the cabinet are on the"


def test_the_later_builds_wait_for_the_first_analysis_without_asking_again(
        qtbot, tmp_path, smollm2, monkeypatch):
    from attnviz.ui.app import create_window
    from attnviz.ui.machinery import tuning

    gate, asked, built, frozen = threading.Event(), [], [], []
    real_analyse, real_running = EJ.analyse_typed, Worker.running
    real_calc, real_freeze = PD.BUILDERS["calc"], tuning.freeze_start_up_objects

    def held(*a, **k):
        assert gate.wait(WAIT / 1000)
        return real_analyse(*a, **k)

    def running(self, kind):  # who outside the runner asks whether the analysis runs
        import sys

        if kind == EJ.ANALYSIS_KIND and sys._getframe(1).f_globals["__name__"] in (PD.__name__, "attnviz.ui.window"):
            asked.append(kind)
        return real_running(self, kind)

    def calc(w):
        built.append(w.state.effects.analysis is not None)
        real_calc(w)

    def freeze():
        frozen.append(w.state.effects.analysis is not None)
        real_freeze()
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(Worker, "running", running)
    monkeypatch.setitem(PD.BUILDERS, "calc", calc)
    monkeypatch.setattr(tuning, "freeze_start_up_objects", freeze)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    settings.setValue("raised_tabs", "predict_dock")  # What heads do shown as the window opens
    try:
        w = create_window(settings=settings, model=str(smollm2.path), text=TEXT, panels=("predict", "calc"))
        qtbot.addWidget(w)
        w.show()
        qtbot.waitUntil(lambda: len(asked) >= 1, timeout=WAIT)  # the later builds found it running
        assert w.worker.running(EJ.ANALYSIS_KIND) is not None and built == []
        ticks = []
        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(1))
        timer.start(25)  # (the interval the builds asked at before)
        qtbot.waitUntil(lambda: len(ticks) >= 12, timeout=WAIT)
        timer.stop()
        assert len(asked) == 1 and built == [] and frozen == []  # asked once, then told
    finally:
        gate.set()
    qtbot.waitUntil(lambda: w.panels_ready and bool(frozen), timeout=WAIT)
    assert built == [True] and frozen == [True]  # the prediction first, then the rest
    assert w.predict_panel.top_table.rowCount() > 0
    w.worker.wait_idle()


def test_the_start_up_collection_waits_for_a_keystroke_s_run_and_follows_its_result(
        qtbot, tmp_path, smollm2, monkeypatch):
    """A key typed as the first analysis ends: gc's start-up collection, which holds the GIL on the
    main thread, waits until the keystroke's run is done, its heatmaps shown."""
    from contextlib import contextmanager

    from PySide6.QtGui import QTextCursor

    from attnviz.ui.machinery import tuning, worker as WK
    from windows import open_window

    analysis_gate, run_gate, frozen, armed = threading.Event(), threading.Event(), [], []
    real_analyse, real_freeze, real_wide = EJ.analyse_typed, tuning.freeze_start_up_objects, WK.wide_blas

    def held(*a, **k):
        assert analysis_gate.wait(WAIT / 1000)
        return real_analyse(*a, **k)

    @contextmanager
    def run_held(*a, **k):  # the keystroke's run, once armed
        if armed:
            assert run_gate.wait(WAIT / 1000)
        with real_wide(*a, **k):
            yield

    def freeze():
        frozen.append(w.state.result.text)
        real_freeze()
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(WK, "wide_blas", run_held)
    monkeypatch.setattr(tuning, "freeze_start_up_objects", freeze)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        assert w.worker.running(EJ.ANALYSIS_KIND) is not None  # (held)
        armed.append(True)
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        qtbot.keyClick(w.text_box, "s")
        analysis_gate.set()  # the first analysis ends while the keystroke's run goes on
        ticks = []
        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(1))
        timer.start(25)
        qtbot.waitUntil(lambda: len(ticks) * 25 >= 10 * tuning.FREEZE_WAIT_MS, timeout=WAIT)
        timer.stop()
        assert frozen == [] and w.state.result.text == TEXT  # still running: no collection yet
    finally:
        analysis_gate.set()
        run_gate.set()
    qtbot.waitUntil(lambda: bool(frozen), timeout=WAIT)
    assert frozen == [TEXT + "s"]  # the keystroke's heatmaps first
    assert w.grid.drawn is w.state.result
    w.worker.wait_idle()


def _ticks_for(qtbot, ms: int) -> None:
    """The event loop turns for `ms` (counted in a 25 ms timer's ticks, as the tests above)."""
    ticks, timer = [], QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(25)
    qtbot.waitUntil(lambda: len(ticks) * 25 >= ms, timeout=WAIT)
    timer.stop()


def test_the_collection_waits_for_a_load_s_collector_pause_and_never_comes_after_a_close(
        qtbot, tmp_path, smollm2, monkeypatch):
    """A vocabulary build's collector pause (gguf_vocab.collector_paused) holds the start-up
    collection back, as a run does (it would walk and freeze the build's young objects); a window
    closed before its collection came makes none after (its objects are no start-up's)."""
    from windows import open_window

    from attnviz.engine.reading.gguf_vocab import collector_paused
    from attnviz.ui.machinery import tuning

    frozen, real_freeze = [], tuning.freeze_start_up_objects
    monkeypatch.setattr(tuning, "freeze_start_up_objects", lambda: (frozen.append(1), real_freeze()))
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
    with collector_paused():
        qtbot.waitUntil(lambda: w.state.effects.analysis is not None, timeout=WAIT)
        w.worker.wait_idle()
        _ticks_for(qtbot, 10 * tuning.FREEZE_WAIT_MS)
        assert frozen == []  # (paused: none)
    qtbot.waitUntil(lambda: bool(frozen), timeout=WAIT)  # and after the pause, once
    assert frozen == [1]

    frozen.clear()
    with collector_paused():  # (its collection held back until the window has closed)
        w2 = open_window(qtbot, tmp_path / "s2.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        qtbot.waitUntil(lambda: w2.state.effects.analysis is not None, timeout=WAIT)
        w2.worker.wait_idle()
        _ticks_for(qtbot, 10 * tuning.FREEZE_WAIT_MS)  # (its collection armed by now)
        w2.close()
    _ticks_for(qtbot, 10 * tuning.FREEZE_WAIT_MS)
    assert frozen == []


def test_the_start_up_collection_waits_for_a_first_analysis_a_keystroke_made_stale(
        qtbot, tmp_path, monkeypatch):
    """A key typed while the first analysis runs: the keystroke's own analysis is shown, and the
    first one, stale, runs on in its thread until its next check; the start-up collection (which
    freezes what is alive then) waits for that thread to end, not just for the analysis shown."""
    from PySide6.QtGui import QTextCursor

    from attnviz.ui.machinery import tuning
    from windows import IOI, TOY, open_window

    gate, calls, frozen = threading.Event(), [], []
    real_analyse, real_freeze = EJ.analyse_typed, tuning.freeze_start_up_objects

    def held(*a, **k):  # the first analysis only
        calls.append(1)
        if len(calls) == 1:
            assert gate.wait(WAIT / 1000)
        return real_analyse(*a, **k)

    def freeze():
        frozen.append(gate.is_set())
        real_freeze()
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(tuning, "freeze_start_up_objects", freeze)
    settings = tmp_path / "s.ini"
    QSettings(str(settings), QSettings.Format.IniFormat).setValue("raised_tabs", "predict_dock")
    try:
        w = open_window(qtbot, settings, model=TOY, text=IOI, panels=("predict",))
        st = w.state
        qtbot.waitUntil(lambda: len(calls) == 1, timeout=WAIT)  # (held)
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        qtbot.keyClick(w.text_box, "x")
        qtbot.waitUntil(lambda: st.result.text == IOI + "x" and st.effects.analysis_of(st.result) is not None,
                        timeout=WAIT)  # the keystroke's analysis shown; the first still at work
        assert w.predict_panel.top_table.rowCount() > 0
        _ticks_for(qtbot, 10 * tuning.FREEZE_WAIT_MS)
        assert frozen == []
    finally:
        gate.set()
    qtbot.waitUntil(lambda: bool(frozen), timeout=WAIT)
    assert frozen == [True]  # once the stale analysis's thread was let go on
    assert st.effects.analysis_of(st.result) is not None and w.predict_panel.top_table.rowCount() > 0
    w.worker.wait_idle()
