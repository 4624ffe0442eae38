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
