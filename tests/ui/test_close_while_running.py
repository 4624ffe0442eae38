"""Closing the window while its first run is on its way: the runner shuts down, so the run's result,
arriving after the close, starts nothing (a first analysis started then could outlive
Python's own shutdown, its unembedding's thread pool then refusing work: "cannot schedule new
futures after interpreter shutdown" in the log), and nothing is logged."""

import logging
import threading

from PySide6.QtCore import QSettings

from attnviz.ui.app import create_window
from attnviz.ui.machinery.runner import THREAD, Runner
from attnviz.ui.machinery.state import AppState
from attnviz.ui.machinery.worker import Worker
from windows import CAT, TEXTBOOK, WAIT, drain_events

HOLD_S = 120  # a job the test holds waits at most this long (let go long before)


def spy_on_jobs(monkeypatch, closed: list) -> list:
    """The kinds of the jobs submitted once `closed` is not empty that ran all the same."""
    ran_after = []
    submit = Runner.submit

    def spied_submit(self, kind, fn, *args, **kw):
        after = bool(closed)

        def spied():
            if after:
                ran_after.append(kind)
            return fn()
        return submit(self, kind, spied, *args, **kw)
    monkeypatch.setattr(Runner, "submit", spied_submit)
    return ran_after


def test_closing_while_the_first_run_is_on_its_way_starts_nothing_more(qtbot, tmp_path, monkeypatch,
                                                                        caplog):
    closed: list = []
    ran_after = spy_on_jobs(monkeypatch, closed)
    w = create_window(model=TEXTBOOK, text=CAT,
                      settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()

    def close_now(model):  # the runner's own slot, connected first, has submitted the first run
        if model is not None and not closed:
            closed.append(True)
            w.close()
    w.state.sigModelChanged.connect(close_now)
    with caplog.at_level(logging.WARNING, logger="attnviz"):
        qtbot.waitUntil(lambda: bool(closed), timeout=WAIT)
        drain_events()  # the first run's result, if it were still heard, would start its analysis
        assert w.worker.wait_idle(WAIT)
        drain_events()
    assert ran_after == []
    assert w.state.result is None  # (the run's result was dropped with the window)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("attnviz")] == []


def test_shut_down_lets_every_job_go_and_starts_none_after_it(qtbot):
    worker = Worker(AppState())
    heard, ran = [], []
    job_id = worker.claim("probe")
    polled = threading.Event()

    def polling():  # a long job that stops once it is stale, as the engine's runs do
        while worker.is_newest("probe", job_id):
            polled.set()
            threading.Event().wait(0.01)
        return "stopped"
    job = worker.submit("probe", polling, lambda r, v, e: heard.append(v), None, THREAD, job_id=job_id)
    assert polled.wait(HOLD_S)
    assert worker.shut_down(WAIT) and not job.thread.is_alive()  # waited for, and it stopped
    worker.submit("probe", lambda: ran.append("late"), lambda r, v, e: heard.append(v), None, THREAD)
    worker.submit("other", lambda: ran.append("late"), lambda r, v, e: heard.append(v))
    assert worker.running("probe") is None and worker.running("other") is None
    assert worker.wait_idle(WAIT)
    drain_events()
    assert heard == [] and ran == []
