"""The runner says a kind's jobs have ended (sigEnded, when_none_running) only once their work has
returned: a job a newer one made stale, or one cancelled, runs on until its next check, and whoever
waits for the kind to be done (What heads do's first analysis, at start-up) waits for it too."""

import threading

from attnviz.ui.machinery.runner import THREAD
from attnviz.ui.machinery.state import AppState
from attnviz.ui.machinery.worker import Worker
from windows import WAIT, drain_events

HOLD_S = 30
KIND = "effects"


def _held_job(w, gate):
    return w.submit(KIND, lambda: gate.wait(HOLD_S), lambda *_: None, None, THREAD)


def test_a_stale_job_is_done_only_when_its_thread_is(qtbot):
    w = Worker(AppState())
    gate, done, ended = threading.Event(), [], []
    w.sigEnded.connect(ended.append)
    job = _held_job(w, gate)
    try:
        w.claim(KIND)  # a keystroke: the job is stale, its thread runs on
        assert w.running(KIND) is None  # (the window waits for it no more)
        w.when_none_running(KIND, lambda: done.append(1))
        drain_events()
        assert done == [] and ended == []
    finally:
        gate.set()
    with qtbot.waitSignal(w.sigEnded, timeout=WAIT):
        pass
    assert not job.thread.is_alive() and done == [1] and ended == [KIND]


def test_a_cancelled_job_is_not_told_ended_while_it_runs(qtbot):
    w = Worker(AppState())
    gate, done, ended = threading.Event(), [], []
    w.sigEnded.connect(ended.append)
    job = _held_job(w, gate)
    try:
        w.when_none_running(KIND, lambda: done.append(1))
        assert w.cancel(KIND) is job and w.running(KIND) is None
        drain_events()
        assert done == [] and ended == []  # let go, not ended
    finally:
        gate.set()
    qtbot.waitUntil(lambda: done == [1], timeout=WAIT)
    assert not job.thread.is_alive() and ended == [KIND]
    w.when_none_running(KIND, lambda: done.append(2))  # none at work: at once
    assert done == [1, 2]
