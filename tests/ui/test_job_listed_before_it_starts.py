"""A job on the pool is the one the window waits for (Runner.running) from its first step: the pool
can start it before submit returns (Qt's start lets go of the GIL), and a job that asks from its
own thread whether it is still waited for would otherwise be told it was replaced (a long run that
asked so at each layer stopped at its first: its view never came). A long run asks whether its
text is still the newest instead, which does not hang on when the runner lists its job."""

import threading

import pytest
from PySide6.QtCore import QThreadPool

from attnviz.ui.machinery.runner import Runner
from windows import WAIT

WAIT_S = WAIT / 1000


class _RunsBeforeStartReturns(QThreadPool):
    """A pool whose start returns only once the job it was given has taken its first step (`stepped`
    set from the job's thread): the worst the thread that submits can be held up."""

    def __init__(self):
        super().__init__()
        self.setMaxThreadCount(1)
        self.stepped = threading.Event()

    def start(self, task, priority=0):
        super().start(task, priority)
        assert self.stepped.wait(WAIT_S), "the job never took its first step"


def test_a_pool_job_that_asks_before_submit_returns_is_the_one_waited_for(qtbot):
    runner = Runner()
    runner.pool = pool = _RunsBeforeStartReturns()
    seen, heard, busy = [], [], []
    runner.sigBusy.connect(busy.append)

    def first_step():
        seen.append(runner.running("long"))
        pool.stepped.set()
        return "done"
    try:
        job = runner.submit("long", first_step, lambda _r, value, err: heard.append((value, err)))
        assert seen == [job]  # (None: the job was told a newer one replaced it)
        qtbot.waitUntil(lambda: heard == [("done", None)], timeout=WAIT)
        assert not runner.at_work("long") and runner.running("long") is None
        assert busy == [True, False]
    finally:
        pool.stepped.set()
        pool.waitForDone(int(WAIT))


def test_a_long_run_goes_on_while_its_text_is_the_newest_listed_by_the_runner_or_not(qtbot, minilm):
    """A long run asks at each layer whether its text is still the newest asked for: the runner
    not listing its job yet (run here before any submit) is no newer text; a claim is."""
    from attnviz.engine.computing.longdoc import LongRun
    from attnviz.engine.errors import Cancelled
    from attnviz.ui.machinery.long_jobs import LongJobs
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.machinery.worker import ComputeRequest, Worker
    from windows import PARAGRAPH

    worker = Worker(AppState())
    jobs = LongJobs(worker)
    req = ComputeRequest(worker.claim("compute"), minilm, PARAGRAPH, 0.0)
    assert worker.running("compute") is None
    run = jobs.run_long(req)
    assert isinstance(run, LongRun) and run.result.text == PARAGRAPH
    worker.claim("compute")  # a newer text
    with pytest.raises(Cancelled):
        jobs.run_long(req)


def test_a_job_whose_thread_cannot_start_is_not_waited_for(qtbot, monkeypatch):
    """A THREAD job whose thread the system refuses: submit raises, as on a pool that cannot take
    the job, and the runner does not count it at work (whoever waits for its kind to end would
    wait for good)."""
    from attnviz.ui.machinery.runner import THREAD

    def refused(_thread):
        raise RuntimeError("can't start new thread")
    runner, busy, done = Runner(), [], []
    runner.sigBusy.connect(busy.append)
    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", refused)
        with pytest.raises(RuntimeError):
            runner.submit("load", lambda: "read", lambda *_: None, lane=THREAD)
    assert not runner.at_work("load") and runner.running("load") is None
    runner.when_none_running("load", lambda: done.append(1))
    assert done == [1] and busy == []


def test_a_refused_job_after_a_running_one_leaves_the_runner_not_busy(qtbot, monkeypatch):
    """A job that cannot start makes the running one of its kind stale (claim) all the same: the
    window then waits for nothing, and says so (sigBusy False), though the stale job runs on."""
    from attnviz.ui.machinery.runner import THREAD

    def refused(_thread):
        raise RuntimeError("can't start new thread")
    release = threading.Event()
    runner, busy = Runner(), []
    runner.sigBusy.connect(busy.append)
    runner.submit("load", lambda: release.wait(30), lambda *_: None, lane=THREAD)
    assert busy == [True]
    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", refused)
        with pytest.raises(RuntimeError):
            runner.submit("load", lambda: "read", lambda *_: None, lane=THREAD)
    assert busy == [True, False] and runner.running("load") is None
    release.set()
    qtbot.waitUntil(lambda: not runner.at_work("load"), timeout=10_000)
