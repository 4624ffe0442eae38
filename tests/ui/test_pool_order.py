"""The app's pool starts its jobs in the order they were submitted, also while a job paused in
give_way lends its room (a second thread): Compare's 'compare' job, queued right behind A's run,
reads the run A's job hands over, so it must never start first."""

from PySide6.QtCore import QThreadPool

from attnviz.ui.machinery.runner import Runner


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
