"""Runner.give_way, the pause of a long job on the pool (a template probe, Compare's induction
probe) while a keystroke's run goes first: a job made stale during the pause leaves it at once, and
one thread computes at a time."""

import threading

import pytest
from PySide6.QtCore import QObject, Signal

from attnviz.ui.machinery.runner import Runner
from jobs_in_turn import AtWork, long_then_short

WAIT = 20000
HOLD_S = 10  # a held job lets go after this at the latest (the test has failed by then)


def _paused_probe(qtbot, runner, kind):
    """A probe of `kind` paused in giving_way's stop() behind a keystroke's run that holds the pool
    until released. -> (the probe's job id, what it said, the keystroke's release event)."""
    started, k_running, k_release, k_done = (threading.Event() for _ in range(4))
    said = []
    probe = runner.claim(kind)
    stop = runner.giving_way(kind, probe)

    def work():  # a step, then stop() until it says stop
        started.set()
        while not stop():
            k_running.wait(0.001)
        said.append(("stopped", "after the keystroke" if k_done.is_set() else "during it"))
        return "stopped"

    def keystroke():
        k_running.set()
        k_release.wait(HOLD_S)
        k_done.set()
        return "k"
    runner.submit(kind, work, lambda *_: None, job_id=probe)
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    runner.submit("compute", keystroke, lambda *_: None)
    qtbot.waitUntil(k_running.is_set, timeout=WAIT)
    return probe, said, k_release


@pytest.mark.parametrize("made_stale", ["a new probe", "cancelled"])
def test_a_probe_made_stale_while_paused_stops_at_once(qtbot, made_stale):
    """The user picks another probe source (a new probe claimed and submitted), or closes Compare
    (its probe cancelled: "B is freed"): the paused probe stops while the keystroke's run still
    holds the pool, not after it and the new probe have run."""
    runner = Runner()
    _probe, said, k_release = _paused_probe(qtbot, runner, "probe")
    new_ran = []
    try:
        if made_stale == "a new probe":
            new = runner.claim("probe")
            runner.submit("probe", lambda: new_ran.append("new") or "new", lambda *_: None, job_id=new)
        else:
            runner.cancel("probe")
        qtbot.waitUntil(lambda: bool(said), timeout=WAIT)
    finally:
        k_release.set()
    assert said == [("stopped", "during it")] and new_ran == []
    assert runner.wait_idle()
    assert new_ran == (["new"] if made_stale == "a new probe" else [])
    assert runner.pool.maxThreadCount() == 1  # the room it was lent is given back


def _gives_way_in_turn(qtbot, runner, stale=None, hold_s=0.1):
    """A long job gives way (give_way(stale)) to a short one that holds the pool `hold_s`: -> what
    each did, in order (one thread at a time: the long job goes on only once the short one has
    ended)."""
    started, queued, order = threading.Event(), threading.Event(), []

    def long_job():
        started.set()
        queued.wait(HOLD_S)
        order.append("long pauses")
        runner.give_way(stale)
        order.append("long goes on")
        return "long"

    def short_job():
        order.append("short starts")
        queued.wait(HOLD_S)
        threading.Event().wait(hold_s)  # a keystroke's run
        order.append("short ends")
        return "short"
    long_then_short(qtbot, runner, long_job, short_job, started, queued)
    return order


def test_a_pause_that_fails_gives_its_room_back(qtbot):
    """An exception inside the pause (here its stale() raises) reaches the job as its error, and
    the pool's room and the next pause are as before: one thread computes at a time."""
    runner = Runner()
    started, queued, errors = threading.Event(), threading.Event(), []

    def boom():
        raise RuntimeError("stale() failed")

    def failing():
        started.set()
        queued.wait(HOLD_S)
        runner.give_way(boom)
    runner.submit("long", failing, lambda _r, _v, error: errors.append(error))
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    runner.submit("short", lambda: "short", lambda *_: None)
    queued.set()
    qtbot.waitUntil(lambda: bool(errors), timeout=WAIT)
    assert runner.wait_idle()
    assert str(errors[0]) == "stale() failed" and runner.pool.maxThreadCount() == 1
    assert _gives_way_in_turn(qtbot, runner) == ["long pauses", "short starts", "short ends", "long goes on"]


def test_a_job_the_pool_could_not_start_is_not_waited_for(qtbot, monkeypatch):
    """submit on a deleted pool raises, and a later job's give_way does not pause for that job
    (it would wait for a job that never comes)."""
    import shiboken6
    from PySide6.QtCore import QThreadPool

    runner = Runner()
    gone = QThreadPool()
    shiboken6.delete(gone)
    with monkeypatch.context() as m:
        m.setattr(runner, "pool", gone)
        with pytest.raises(RuntimeError):
            runner.submit("x", lambda: "x", lambda *_: None)
    assert runner.at_work("x") is False
    assert _gives_way_in_turn(qtbot, runner) == ["long pauses", "short starts", "short ends", "long goes on"]
    paused = []
    runner.submit("alone", lambda: paused.append(runner.give_way(lambda: True)), lambda *_: None)
    assert runner.wait_idle() and paused == [False]  # nothing waits: no pause


def test_a_job_cleared_from_the_pool_is_not_waited_for(qtbot):
    """A job queued on the pool that the pool drops unrun (its clear()) has ended for the runner
    (not at work, its kind's sigEnded heard), and a probe that gives way after it does not pause
    for it (it would wait for a job that never comes, until it went stale). On a pool of the
    test's own (the app's keeps other tests' jobs)."""
    import time

    from PySide6.QtCore import QThreadPool

    runner, hold, ended, paused = Runner(), threading.Event(), [], []
    runner.pool = QThreadPool()
    runner.pool.setMaxThreadCount(1)
    runner.sigEnded.connect(ended.append)
    try:
        runner.submit("a", lambda: hold.wait(HOLD_S), lambda *_: None)
        runner.submit("b", lambda: "b", lambda *_: None)  # queued behind a
        runner.pool.clear()  # b never runs
        hold.set()
        qtbot.waitUntil(lambda: "a" in ended, timeout=WAIT)
        assert "b" in ended and not runner.at_work("b") and runner.running("b") is None
        gone_stale = time.monotonic() + 5  # (a probe paused for b stops as stale then)
        runner.submit("probe", lambda: paused.append(runner.give_way(lambda: time.monotonic() > gone_stale)),
                      lambda *_: None)
        qtbot.waitUntil(lambda: bool(paused), timeout=WAIT)
        assert paused == [False]  # nothing waits: no pause
        assert runner.wait_idle() and runner.pool.maxThreadCount() == 1
    finally:
        hold.set()
        runner.pool.waitForDone(WAIT)


DESTROYED_POOL = """
import threading
import shiboken6
from PySide6.QtCore import QCoreApplication
from attnviz.ui.machinery.pool import shared_pool
from attnviz.ui.machinery.runner import Runner

app = QCoreApplication([])
runner, hold = Runner(), threading.Event()
runner.submit("a", lambda: hold.wait(10), lambda *_: None)
runner.submit("b", lambda: "b", lambda *_: None)  # queued behind a
runner.pool.clear()  # b never runs
hold.set()
shiboken6.delete(runner.pool)  # (waits for a)
paused = []
later = Runner()  # on a new pool
later.submit("c", lambda: paused.append(later.give_way(lambda: True)), lambda *_: None)
later.pool.waitForDone(10000)
print(later.pool is not runner.pool, paused)
"""


def test_a_job_of_a_destroyed_pool_is_not_waited_for():
    """The app's pool destroyed with a job that never ran: a job on the pool made after it does not
    pause for that job (in a process of its own: it destroys the app's pool)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", DESTROYED_POOL], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.stdout.split() == ["True", "[False]"], out.stderr


def test_a_paused_job_waits_without_polling_and_goes_on_as_the_job_ahead_ends(qtbot, monkeypatch):
    """While a keystroke's run holds the pool, the paused job looks again only when a job ends or
    may have made it stale (its stale() asked a few times, not every few ms); with the fallback
    wait longer than the test, it still goes on as the keystroke's run ends, and a cancel still
    stops a paused probe at once."""
    from attnviz.ui.machinery import pool as R

    monkeypatch.setattr(R, "GIVE_WAY_WAIT_S", 60.0)
    runner, asked = Runner(), []
    order = _gives_way_in_turn(qtbot, runner, stale=lambda: asked.append(1) and False, hold_s=0.5)
    assert order == ["long pauses", "short starts", "short ends", "long goes on"]
    assert 1 <= len(asked) <= 5, len(asked)
    _probe, said, k_release = _paused_probe(qtbot, runner, "probe")
    try:
        runner.cancel("probe")
        qtbot.waitUntil(lambda: bool(said), timeout=WAIT)
    finally:
        k_release.set()
    assert said == [("stopped", "during it")] and runner.wait_idle()


def test_a_job_giving_way_on_a_pool_qt_has_deleted_stops_as_cancelled(qtbot):
    """Python exiting with a probe on the pool: Qt deletes the pool under the job, whose next
    give_way must stop it as a stale job stops (Cancelled), not fail with a RuntimeError that is
    printed as a traceback on the way out; the live pool's jobs then go on as before."""
    import shiboken6
    from PySide6.QtCore import QThreadPool

    from attnviz.engine.errors import Cancelled

    runner, hold, got = Runner(), threading.Event(), []
    runner.submit("a", lambda: hold.wait(10), lambda *_: None)
    runner.submit("b", lambda: "b", lambda request, result, error: got.append(result))  # waits behind a
    gone = Runner()
    gone.pool = QThreadPool()
    shiboken6.delete(gone.pool)
    try:
        with pytest.raises(Cancelled, match="exiting"):
            gone.give_way()
    finally:
        hold.set()
    qtbot.waitUntil(lambda: got == ["b"], timeout=WAIT)
    assert runner.wait_idle()



class _Said(QObject):
    said = Signal(str, int)  # what a job did (and the number of an event it waits on, or -1)


def test_a_paused_probe_takes_a_step_while_keystrokes_keep_the_pool_busy(qtbot, monkeypatch):
    """Typing whose runs leave the pool no idle moment (each keystroke's run queued before the one
    ahead of it ends: a long text, a slow machine): the paused probe still takes a step once it
    has waited GIVE_WAY_TURN_S, one step between two runs (a run at work is not stopped for it),
    then gives way again; before, it waited for the typing to stop."""
    from attnviz.ui.machinery import pool as R

    monkeypatch.setattr(R, "GIVE_WAY_TURN_S", 0.2, raising=False)
    runner, said, order, typing_ends, queued = Runner(), _Said(), [], threading.Event(), []
    probe = runner.claim("probe")
    stop = runner.giving_way("probe", probe)

    def work():  # a step, then stop(), until the typing ends
        while not typing_ends.is_set():
            threading.Event().wait(0.005)  # (a step's work)
            runner.post(said.said.emit, "probe steps", -1)
            stop()
        return "probe"

    def key():  # a keystroke's run, at work until the next keystroke's run is queued
        queued.append(threading.Event())
        runner.post(said.said.emit, "key starts", len(queued) - 1)
        queued[-1].wait(HOLD_S)
        threading.Event().wait(0.02)  # (its work)
        return "k"

    def heard(what: str, k: int) -> None:  # on the main thread
        order.append(what)
        if k >= 0:
            if not typing_ends.is_set():
                runner.submit("compute", key, lambda *_: None)
            queued[k].set()
    said.said.connect(heard)
    is_step = lambda what, _queued: what == "probe steps"  # noqa: E731
    with qtbot.waitSignal(said.said, check_params_cb=is_step, timeout=WAIT):
        runner.submit("probe", work, lambda *_: None, job_id=probe)
    with qtbot.waitSignal(said.said, check_params_cb=lambda what, _q: what == "key starts", timeout=WAIT):
        runner.submit("compute", key, lambda *_: None)  # the first keystroke: the typing begins
    try:
        with qtbot.waitSignal(said.said, check_params_cb=is_step, timeout=5000):
            pass  # (never, before: the typing never stops here)
        assert order.count("key starts") >= 2
        with qtbot.waitSignal(said.said, check_params_cb=is_step, timeout=5000):
            pass  # and again, a turn later
    finally:
        typing_ends.set()
    qtbot.waitUntil(lambda: not runner.at_work("compute") and not runner.at_work("probe"), timeout=WAIT)
    during = order[order.index("key starts"):]
    steps = [i for i, what in enumerate(during) if what == "probe steps"]
    assert len(steps) >= 2 and all(b - a > 1 for a, b in zip(steps, steps[1:3])), during  # one step a turn
    assert runner.pool.maxThreadCount() == 1


def test_a_paused_probe_on_its_turn_never_computes_beside_a_job_the_pool_has_just_started(
        qtbot, monkeypatch):
    """The pool can take a keystroke's run off its queue (a thread lent as the probe paused) a
    moment before the run counts itself at work; the probe's turn comes in that moment. Held there
    (its start delayed by the test), the run waits until the probe's step is done: the two never
    compute at once. Before, the probe's step and the run computed side by side."""
    from attnviz.ui.machinery import pool as R

    monkeypatch.setattr(R, "GIVE_WAY_TURN_S", 0.05)
    runner = Runner()
    started, queued, stepping, decided = (threading.Event() for _ in range(4))
    work, key_thread = AtWork(), []
    real_run, real_wait = R._Task.run, R._PAUSE_CHANGED.wait

    def held_run(task):  # the keystroke's run, taken by a pool thread, held before it counts in
        if task.job is not None and task.job.kind == "key":
            key_thread.append(threading.get_ident())
            stepping.wait(HOLD_S)  # until the probe, on its turn, is at its step
        real_run(task)

    def watched_wait(timeout=None):  # the held run waiting to count itself in: it will not compute
        if key_thread and threading.get_ident() == key_thread[0]:
            decided.set()
        return real_wait(timeout)
    monkeypatch.setattr(R._Task, "run", held_run)
    monkeypatch.setattr(R._PAUSE_CHANGED, "wait", watched_wait)

    def probe():
        started.set()
        queued.wait(HOLD_S)  # the keystroke's run is submitted meanwhile
        runner.give_way()  # the pool takes the run, held; the probe's turn comes
        work.step("probe's turn", lambda: stepping.set() or decided.wait(HOLD_S))
        runner.give_way()
        work.step("probe goes on")
        return "probe"

    def key():
        work.step("key", decided.set)
        return "key"
    long_then_short(qtbot, runner, probe, key, started, queued, kinds=("probe", "key"))
    steps = work.steps
    assert key_thread and steps[0] == "probe's turn" and sorted(steps) == ["key", "probe goes on", "probe's turn"]
    assert work.most == 1, steps
    assert runner.wait_idle() and runner.pool.maxThreadCount() == 1
