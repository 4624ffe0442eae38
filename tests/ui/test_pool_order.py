"""The app's pool starts its jobs in the order they were submitted, also while a job paused in
give_way lends its room (a second thread): Compare's 'compare' job, queued right behind A's run,
reads the run A's job hands over, so it must never start first."""

from PySide6.QtCore import QThreadPool

from attnviz.ui.machinery.runner import Runner
from windows import WAIT


def test_two_jobs_submitted_in_turn_run_in_turn_where_the_pool_has_a_room_lent(qtbot):
    """Two threads of room (as while a probe is paused) and one of them idle: Qt's pool hands the
    first job to the idle thread and can start the second on a new thread before the idle one
    wakes. On a pool of the test's own, 60 times over."""
    runner = Runner()
    runner.pool = QThreadPool()
    runner.pool.setMaxThreadCount(2)  # (the room a paused job lends: Runner.give_way)
    orders = []
    try:
        for _ in range(60):
            runner.submit("warm", lambda: None, lambda *_: None)  # (a thread left idle in the pool)
            assert runner.wait_idle()
            order = []
            runner.submit("a", lambda: order.append("a"), lambda *_: None)
            runner.submit("b", lambda: order.append("b"), lambda *_: None)
            assert runner.wait_idle()
            orders.append("".join(order))
    finally:
        runner.pool.waitForDone(20000)
    assert orders == ["ab"] * 60, orders


class _Keeping(QThreadPool):
    """A pool that keeps the turns it is given (to take one back as Qt's tryTake does)."""

    def __init__(self):
        super().__init__()
        self.turns = []

    def start(self, task, priority=0):
        self.turns.append(task)
        super().start(task, priority)


def test_a_turn_the_pool_takes_back_leaves_its_job_to_the_next_turn(qtbot):
    """A job whose turn the pool gives up unrun (tryTake: the turn is never deleted from Python)
    runs in the next job's turn, in order: no later job waits a submission more for its turn."""
    import threading

    runner, hold, ran = Runner(), threading.Event(), []
    runner.pool = _Keeping()
    runner.pool.setMaxThreadCount(1)
    try:
        runner.submit("hold", lambda: hold.wait(10) and ran.append("hold"), lambda *_: None)
        for name in ("y", "z"):
            runner.submit(name, lambda name=name: ran.append(name), lambda *_: None)
        assert runner.pool.tryTake(runner.pool.turns[1])  # y's turn, queued behind hold's
        hold.set()
        assert runner.wait_idle()
        assert ran == ["hold", "y", "z"]
        runner.submit("p", lambda: ran.append("p"), lambda *_: None)
        assert runner.wait_idle() and ran[-1] == "p"
    finally:
        hold.set()
        runner.pool.waitForDone(20000)


def test_a_job_that_raises_systemexit_in_another_jobs_turn_fails_alone(qtbot):
    """A job that raises an exception beyond Exception (SystemExit, KeyboardInterrupt: a job's
    bug, never the app's end) is reported as its own failure, and the turn it ran in goes on:
    the jobs queued behind it run, each heard on the main thread, and the runner is idle after.
    The failing job runs in the next job's turn (its own taken back, as in the test above)."""
    import threading

    from attnviz.ui.machinery.runner import describe_error

    runner, hold, ran, heard = Runner(), threading.Event(), [], {}
    runner.pool = _Keeping()
    runner.pool.setMaxThreadCount(1)

    def done(name):
        return lambda _request, value, error: heard.setdefault(name, (value, error))

    def exits():
        raise SystemExit("a job's sys.exit")

    def interrupted():
        raise KeyboardInterrupt("a job's interrupt")
    try:
        runner.submit("hold", lambda: hold.wait(10) and ran.append("hold"), done("hold"))
        runner.submit("exits", exits, done("exits"))
        runner.submit("y", lambda: ran.append("y") or "y", done("y"))
        runner.submit("interrupted", interrupted, done("interrupted"))
        runner.submit("z", lambda: ran.append("z") or "z", done("z"))
        for i in (1, 3):  # the failing jobs' own turns: each runs in the turn behind it
            assert runner.pool.tryTake(runner.pool.turns[i])
        with qtbot.waitSignal(runner.sigBusy, timeout=WAIT, check_params_cb=lambda busy: not busy):
            hold.set()
        assert ran == ["hold", "y", "z"]
        assert set(heard) == {"hold", "exits", "y", "interrupted", "z"}
        assert heard["y"] == ("y", None) and heard["z"] == ("z", None)
        assert describe_error(heard["exits"][1]) == \
            "unexpected SystemExit: a job's sys.exit (details in the log)"
        assert describe_error(heard["interrupted"][1]) == \
            "unexpected KeyboardInterrupt: a job's interrupt (details in the log)"
        assert not any(runner.at_work(kind) for kind in heard)
    finally:
        hold.set()
        runner.pool.waitForDone(20000)
