"""A job on the pool is the one the window waits for (Runner.running) from its first step: the pool
can start it before submit returns (Qt's start lets go of the GIL), and a job that asks from its
own thread whether it is still waited for (a long run, at each layer) would otherwise be told it was
replaced, and stop: its view never came."""

import threading

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
        job = runner.submit("long", first_step, lambda _r, value, error: heard.append((value, error)))
        assert seen == [job]  # (None: the job was told a newer one replaced it)
        qtbot.waitUntil(lambda: heard == [("done", None)], timeout=WAIT)
        assert not runner.at_work("long") and runner.running("long") is None and busy == [True, False]
    finally:
        pool.stepped.set()
        pool.waitForDone(int(WAIT))

