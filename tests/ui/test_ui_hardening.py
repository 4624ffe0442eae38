"""The window under hostile input: nothing blocks the event loop (model discovery and
loading run on the job runner, a load can be cancelled while the previous model stays usable, a
FIFO model folder does not freeze the window), an exception escaping a slot becomes the error banner
and a log line, and non-finite attentions are never drawn."""

import errno
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt, QTimer

from attnviz.ui.app import create_window
from tiny import tiny_llama

from windows import WAIT, drain_events, open_window, wait_for_text, widget
WATCHDOG_S = 120  # a reader still blocked on the test's FIFO after this long is released from outside
HOLD_S = 120  # a held load, scan or job waits at most this long (the test releases it long before)
# the event loop may stop this long on a loaded machine; a load or scan run on it stops it for a
# whole hold (HOLD_S, WATCHDOG_S): many times this
STALL_S = 10.0


class Ticker:
    """A QTimer on the main thread and the longest gap between its ticks: how long the event loop
    stopped turning."""

    def __init__(self, interval_ms=10):
        self.ticks = [time.perf_counter()]
        self.timer = QTimer()
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))
        self.timer.start()

    def longest_gap(self) -> float:
        self.ticks.append(time.perf_counter())
        return float(np.diff(self.ticks).max())


def _release_readers(fifo) -> bool:
    """Open the FIFO's write end and close it, so a reader blocked opening it gets EOF. False when no
    reader has it open (ENXIO)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return False
        raise
    os.close(fd)
    return True


# A reader that blocks inside native code holding the GIL (safetensors' open) freezes every Python
# thread of this process, teardown included: only another process can release it.
_WATCHDOG = """
import os, sys, time
time.sleep(float(sys.argv[2]))
while True:
    os.close(os.open(sys.argv[1], os.O_WRONLY))  # waits for a reader, then gives it EOF
    time.sleep(0.05)
"""


@pytest.fixture
def fifo_model(tmp_path):
    """A model folder with a valid config.json whose model.safetensors is a FIFO with no writer. On
    teardown every reader still blocked on it is released, so the suite never hangs."""
    folder = tiny_llama(tmp_path / "fifo-model")
    fifo = folder / "model.safetensors"
    fifo.unlink()
    os.mkfifo(fifo)
    watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(fifo), str(WATCHDOG_S)])
    yield folder
    watchdog.kill()
    watchdog.wait()
    loaders = [t for t in threading.enumerate() if t.name.startswith("attnviz-load")]
    deadline = time.monotonic() + WAIT / 1000
    while (alive := [t for t in loaders if t.is_alive()]) and time.monotonic() < deadline:
        _release_readers(fifo)
        alive[0].join(0.02)  # until it ends, or a reader opens again
    assert not any(t.is_alive() for t in loaders), "a load thread is still blocked on the FIFO"


@pytest.fixture(params=["engine", "python-reader"])
def fifo_loader(request, monkeypatch):
    """"engine": the real load_model (which refuses a FIFO before opening it, or, before it did,
    blocked on it). "python-reader": a loader that opens the weights as an engine without that
    check would, in Python (GIL released): the load stays blocked, so waiting and Cancel are
    exercised whatever the engine does."""
    if request.param == "python-reader":
        import attnviz.engine

        def load(source, text=None):
            with open(os.path.join(source, "model.safetensors"), "rb") as fh:  # blocks: no writer
                fh.read(8)
            raise AssertionError("a FIFO without a writer gave data")

        monkeypatch.setattr(attnviz.engine, "load_model", load)
    return request.param


def test_a_fifo_model_folder_never_freezes_the_window_and_cancel_restores_it(
        window, qtbot, fifo_model, fifo_loader):
    st = window.state
    model, result = st.model, st.result
    ticker = Ticker()
    window.load_model(str(fifo_model))
    assert window.load_box.isVisible() and st.loading == str(fifo_model)
    # the previous model stays usable: typing recomputes on it while the load waits
    window.text_box.clear()
    qtbot.keyClicks(window.text_box, "Typing goes on.")
    wait_for_text(qtbot, window, "Typing goes on.")
    assert st.model is model and st.result is not result
    if fifo_loader == "python-reader":  # the load is blocked on the FIFO
        turned = len(ticker.ticks) + 10
        qtbot.waitUntil(lambda: len(ticker.ticks) >= turned, timeout=WAIT)  # the loop turns meanwhile
        assert st.loading and "Loading" in widget(window, "load_label").text()
        job = window.worker.running("load")
        assert job.thread.is_alive()
        qtbot.mouseClick(widget(window, "load_cancel"), Qt.MouseButton.LeftButton)
        assert st.loading == "" and not window.load_box.isVisible()
        assert "Stopped loading" in window.statusBar().currentMessage()
        assert not widget(window, "error_banner").isVisible()
        assert job.thread.is_alive()  # blocked still, unheard; the fixture releases it
    else:  # the engine refused the FIFO without opening it
        qtbot.waitUntil(widget(window, "error_banner").isVisible, timeout=WAIT)
        assert str(fifo_model) in widget(window, "error_banner").text()
        assert any(w in widget(window, "error_banner").text() for w in ("FIFO", "regular file"))
        assert not window.load_box.isVisible()
    assert ticker.longest_gap() < STALL_S, "the event loop stopped while the FIFO model loaded"
    assert st.model is model and window.windowTitle() == "attnviz — all-MiniLM-L6-v2"
    window.set_text("Back to normal.")
    wait_for_text(qtbot, window, "Back to normal.")


@pytest.fixture
def slow_load(monkeypatch, minilm):
    """load_model replaced by one that waits for `release` (as a read from a stalled disk would),
    then returns a second MiniLM (any model other than the window's)."""
    import attnviz.engine
    from attnviz.engine.computing.model import Model

    release = threading.Event()
    calls = []
    real = attnviz.engine.load_model

    def load(source, text=None):
        if source != "slow":
            return real(source)
        calls.append(source)
        release.wait(HOLD_S)
        m = minilm
        return Model("slow", m.path, m.config, m.weights, m.tokenizer)

    monkeypatch.setattr(attnviz.engine, "load_model", load)
    yield release, calls
    release.set()


def test_cancel_keeps_the_model_and_the_late_result_is_ignored(window, qtbot, slow_load):
    release, calls = slow_load
    st = window.state
    model = st.model
    st.set_query(2)
    window.load_model("slow")
    qtbot.waitUntil(lambda: calls == ["slow"], timeout=WAIT)
    assert window.load_box.isVisible() and widget(window, "load_cancel").isVisible()
    job = window.worker.running("load")
    assert job is not None and job.thread.is_alive()
    window.set_text("The keys are here.")
    wait_for_text(qtbot, window, "The keys are here.")  # computed on the previous model
    assert st.model is model
    # Esc while loading stops the load and leaves the query; the next Esc clears the query
    st.set_query(1)
    qtbot.keyClick(window.text_box, Qt.Key.Key_Escape)
    assert st.loading == "" and not window.load_box.isVisible() and st.query_pos == 1
    assert window.worker.running("load") is None
    qtbot.keyClick(window.text_box, Qt.Key.Key_Escape)
    assert st.query_pos is None
    # the thread could not be stopped: it finishes in the background, and its model is dropped
    release.set()
    job.thread.join(HOLD_S)
    assert not job.thread.is_alive()
    drain_events()
    assert st.model is model and st.model_name == "all-MiniLM-L6-v2"
    assert not widget(window, "error_banner").isVisible() and st.loading == ""


def test_the_newest_load_wins_over_a_slow_one(window, qtbot, slow_load, tmp_path):
    release, _ = slow_load
    st = window.state
    window.load_model("slow")
    job = window.worker.running("load")
    tiny = tiny_llama(tmp_path / "tiny")
    window.load_model(str(tiny))
    qtbot.waitUntil(lambda: st.model_name == "tiny" and st.loading == "", timeout=WAIT)
    release.set()
    job.thread.join(HOLD_S)
    drain_events()
    assert st.model_name == "tiny"


def test_a_load_that_outlives_its_window_ends_quietly(qtbot, tmp_path, slow_load):
    import shiboken6
    from PySide6.QtCore import QCoreApplication, QEvent

    release, calls = slow_load
    w = create_window(model="attnviz-textbook", panels=(),
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    w.load_model("slow")
    job = w.worker.running("load")
    worker = w.worker
    w.deleteLater()  # deleted without closing: the load is still awaited
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(worker)
    release.set()  # the load finishes after its window is gone: dropped, no error, no Qt warning
    job.thread.join(HOLD_S)
    drain_events()
    assert calls == ["slow"]


def test_the_models_menu_scans_on_the_worker_and_shows_a_placeholder_meanwhile(
        window, qtbot, monkeypatch):
    import attnviz.engine

    real = attnviz.engine.find_models
    release = threading.Event()

    def slow_find_models():
        release.wait(HOLD_S)
        return real()

    monkeypatch.setattr(attnviz.engine, "find_models", slow_find_models)
    ticker = Ticker()
    menu = window.menus.models_menu
    menu.aboutToShow.emit()  # returns at once: the scan waits on its own thread
    texts = [a.text().replace("&", "") for a in menu.actions()]  # (File's own actions: mnemonics)
    assert texts[0] == "(looking for models…)" and "Open model…" in texts
    drain_events()  # the scan is held: nothing it could post replaces the placeholder
    assert [a.text() for a in menu.actions()][0] == "(looking for models…)"
    with qtbot.waitSignal(window.worker.sigModelsFound, timeout=WAIT):
        release.set()
    checked = [a.text() for a in menu.actions() if a.isChecked()]
    assert len(checked) == 1 and checked[0].startswith("all-MiniLM-L6-v2  (bert")
    assert ticker.longest_gap() < STALL_S
    # opened again: the last list shows at once while a new scan runs
    menu.aboutToShow.emit()
    assert any(a.isChecked() for a in menu.actions())
    window.worker.wait_idle()


@pytest.mark.qt_no_exception_capture  # the guard, not pytest-qt, is to catch it
def test_an_exception_escaping_a_slot_shows_the_banner_and_a_log_line(qtbot, tmp_path, monkeypatch,
                                                                      caplog):
    from attnviz.ui import app

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    w = open_window(qtbot, tmp_path / "s.ini")
    assert sys.excepthook is app.install_exception_guard()

    def broken_slot():
        raise ZeroDivisionError("a bug in a slot")

    with caplog.at_level(logging.ERROR, logger="attnviz.ui.app"):
        QTimer.singleShot(0, broken_slot)
        qtbot.waitUntil(widget(w, "error_banner").isVisible, timeout=WAIT)
    text = widget(w, "error_banner").text()
    assert "ZeroDivisionError: a bug in a slot" in text and "details are in the log" in text
    records = [r for r in caplog.records if "a bug in a slot" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info[0] is ZeroDivisionError
    w.set_text("Still running.")
    wait_for_text(qtbot, w, "Still running.")
    w.worker.wait_idle()


def test_make_app_installs_the_guard(monkeypatch):
    from attnviz.ui import app

    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    app.make_app()
    assert sys.excepthook is app.install_exception_guard()
    assert sys.excepthook.previous is sys.__excepthook__


def test_non_finite_attentions_show_a_banner_and_keep_the_last_good_heatmaps(window, qtbot,
                                                                           monkeypatch):
    st = window.state
    good = st.result
    st.set_focus(2, 5)
    mosaic, focus = window.grid.img.image.copy(), window.focus_view.img.image.copy()
    drawn = window.grid.update_count
    from attnviz.engine.computing import model as model_module

    real_forward = model_module.forward

    def nan_forward(config, weights, ids, trace, *rest):  # NaN weights: Model.run refuses them
        real_forward(config, weights, ids, trace, *rest)
        trace.attentions = trace.attentions.copy()
        trace.attentions[2, 5, 1, :] = np.nan

    monkeypatch.setattr(model_module, "forward", nan_forward)
    window.set_text("This run goes wrong.")
    qtbot.waitUntil(widget(window, "error_banner").isVisible, timeout=WAIT)
    text = widget(window, "error_banner").text()
    assert "non-finite" in text and "layer 2" in text and "last sentence" in text
    assert st.result is good and window.grid.update_count == drawn
    np.testing.assert_array_equal(window.grid.img.image, mosaic)
    np.testing.assert_array_equal(window.focus_view.img.image, focus)
    assert np.isfinite(window.focus_view.img.image).all()
    monkeypatch.setattr(model_module, "forward", real_forward)
    window.set_text("This run goes right.")
    wait_for_text(qtbot, window, "This run goes right.")
    assert not widget(window, "error_banner").isVisible()  # the next good result clears it


def test_the_job_runner_delivers_only_the_newest_job_of_a_kind(qtbot):
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.machinery.runner import POOL, THREAD
    from attnviz.ui.machinery.worker import Worker

    worker = Worker(AppState())
    heard = []
    gates = [threading.Event() for _ in range(3)]

    def job(i):
        def fn():
            gates[i].wait(HOLD_S)
            return i
        return fn

    on_done = lambda req, value, error: heard.append((req, value, error))  # noqa: E731
    first = worker.submit("probe", job(0), on_done, "first", THREAD)
    second = worker.submit("probe", job(1), on_done, "second", THREAD)
    assert worker.running("probe") is second and not worker.is_current(first)
    gates[0].set()
    first.thread.join(HOLD_S)
    with qtbot.waitSignal(worker.sigBusy, timeout=WAIT) as idle:
        gates[1].set()
    assert idle.args == [False] and heard == [("second", 1, None)]
    # a cancelled job is not waited for and not heard; another kind is unaffected
    third = worker.submit("probe", job(2), on_done, "third", THREAD)
    worker.submit("other", lambda: "ok", on_done, "other", POOL)
    assert worker.cancel("probe") is third and worker.running("probe") is None
    assert worker.wait_idle(WAIT)  # returns although the cancelled job still waits
    assert third.thread.is_alive()
    qtbot.waitUntil(lambda: ("other", "ok", None) in heard, timeout=WAIT)
    gates[2].set()
    third.thread.join(HOLD_S)
    drain_events()
    assert [h[0] for h in heard] == ["second", "other"]


def test_a_pasted_lone_surrogate_is_replaced_and_the_window_says_so(window, qtbot):
    text = "The cat \ud83d sat"  # a clipboard can carry half of a surrogate pair
    window.set_text(text)
    wait_for_text(qtbot, window, text.replace("\ud83d", "\ufffd"))
    assert not widget(window, "error_banner").isVisible()
    assert widget(window, "text_notice").isVisible() and "1 lone surrogate" in widget(window, "text_notice").text()
    window.set_text("The cat sat")
    wait_for_text(qtbot, window, "The cat sat")
    assert not widget(window, "text_notice").isVisible()


# ---- the window keeps its empty state --------------------------------------------------------------

def test_window_shows_the_empty_state_for_an_empty_text_on_a_decoder_without_bos(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window
    from tiny import tiny_text_model

    folder = tiny_text_model(tmp_path / "m")
    w = create_window(model=str(folder), text="the cat",
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == "the cat",
                    timeout=30000)
    statuses = []
    w.state.sigStatus.connect(statuses.append)
    w.set_text("")
    qtbot.waitUntil(lambda: w.state.result is None, timeout=30000)
    assert widget(w, "tokens_label").text() == "0 tokens"
    assert not any("Could not compute" in s for s in statuses), statuses
    assert not widget(w, "error_banner").isVisible()
    w.set_text("the dog")
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == "the dog",
                    timeout=30000)
    w.worker.wait_idle()


def test_side_panels_are_built_after_an_empty_first_text_too(qtbot, tmp_path):
    """A decoder without BOS has no tokens for the empty text, so no result comes: its side panels
    are built after that first compute all the same, not on the first keystroke (a 68 ms stall
    measured on SmolLM2 in benchmarks/typing_latency.py)."""
    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window
    from tiny import tiny_text_model

    w = create_window(model=str(tiny_text_model(tmp_path / "m")), text="",
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.panels_ready, timeout=30000)
    assert w.state.result is None and w.calc_panel is not None and w.roles_panel is not None
    w.worker.wait_idle()
