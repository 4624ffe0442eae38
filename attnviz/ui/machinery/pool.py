"""The app's one background pool (`shared_pool`) and the order of its jobs, the runner's POOL lane
(runner.py): jobs start in the order they were submitted, each in a turn (_Task) that first runs
the jobs queued before its own, and a long job that calls `give_way` between its steps pauses while
others wait, lending its room on the pool to them, so one thread computes at a time."""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QRunnable, QThreadPool

from attnviz.engine.errors import Cancelled
from attnviz.ui.machinery.job import SKIPPED, Job, Relay, emit_from_job, run_job
from attnviz.ui.machinery.tuning import below_the_main_thread

_POOL: QThreadPool | None = None


def shared_pool() -> QThreadPool:
    """The app's background pool: one thread, and one more lent per job paused in give_way for the
    jobs that go ahead of it, so one thread computes at a time. The worker's runs and its head
    scores queue here, so background CPU work never competes with itself for the cores."""
    global _POOL
    if _POOL is None:
        _POOL = QThreadPool(QCoreApplication.instance())
        _POOL.setMaxThreadCount(1)
        _POOL.destroyed.connect(_forget_pool)
    return _POOL


def _forget_pool(*_):
    global _POOL
    with _PAUSE_CHANGED:  # its jobs that never ran never will: a later job gives way to none of them
        _QUEUES.pop(_POOL, None)
        _POOL = None
        _WAITING.clear()
        _TURN.clear()
        _PAUSE_CHANGED.notify_all()


# the pool's jobs submitted and not started yet (give_way waits while there are any; one the pool
# drops unrun leaves as its task goes: _Task.__del__); the number
# of them in their run, paused ones included; the jobs paused in give_way, the latest last, each
# lending its room on the pool to the jobs that wait. The condition, on their lock, is notified
# as a job leaves its run, and as a job may have gone stale (claim, cancel, shut_down)
_WAITING: set = set()
# each pool's jobs in the order submitted, not yet taken by a turn (_Task)
_QUEUES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_RUNNING = 0
_PAUSED: list = []
_PAUSE_CHANGED = threading.Condition(threading.Lock())
GIVE_WAY_WAIT_S = 0.25  # a paused job looks again after this at the latest (a wake-up missed)
# a job paused this long takes one step ahead of the jobs that wait (not of one at work): typing
# whose runs keep the pool busy without a gap would otherwise hold it until the typing stops
GIVE_WAY_TURN_S = 1.0
_TURN: list = []  # the paused job whose turn it is, at most one: the pool starts no waiting job


def wake_paused() -> None:  # the jobs paused in give_way look again (one may be stale now)
    if _PAUSED:  # (a job about to pause looks under the lock after it is in _PAUSED)
        with _PAUSE_CHANGED:
            _PAUSE_CHANGED.notify_all()


def _rooms() -> int:
    """The pool's room: one thread, and one more per paused job; none for the jobs that wait
    while a paused job has its turn (give_way: it goes on as the job at work ends)."""
    return 1 + len(_PAUSED) - len(_TURN)


class _Entry:
    """A job submitted to a pool, in its queue until a turn takes it (_Task)."""
    __slots__ = ("job", "relay", "is_stale")

    def __init__(self, job: Job, relay: Relay, is_stale: Callable[[], bool]):
        self.job, self.relay, self.is_stale = job, relay, is_stale


class _Task(QRunnable):
    """A job's turn on the pool: it runs, oldest first, the jobs submitted to its pool before its
    own and not yet taken, then its own (none where a turn before took it). Qt's pool can start a
    later turn first (a thread woken for the first is not at work yet when the next start makes a
    new thread), and a job queued behind another, Compare's behind A's run, reads what that one
    hands over. Qt deletes a turn after its run, or unrun where the pool drops it (clear): its job
    then leaves the queue and the waiting set, and ends for the runner as a skipped one."""

    def __init__(self, entry: _Entry, queue: deque):
        super().__init__()
        self.setAutoDelete(True)
        self.job = entry.job  # (the job this turn is for)
        self.entry, self.queue = entry, queue

    def __del__(self) -> None:
        entry, queue = self.entry, self.queue
        if queue is None:  # (it ran, or submit took it back)
            return
        self.job = self.entry = self.queue = None
        # (no lock: this may run where it is held, in whatever freed the task; a deque's remove and
        # a set's discard are one step each, and a paused job not woken here looks again within
        # GIVE_WAY_WAIT_S)
        try:
            queue.remove(entry)
        except ValueError:  # (a turn before ran it)
            return
        _WAITING.discard(entry.job)
        if _PAUSED and _PAUSE_CHANGED.acquire(blocking=False):
            try:
                _PAUSE_CHANGED.notify_all()
            finally:
                _PAUSE_CHANGED.release()
        emit_from_job(entry.relay, entry.relay.done, entry.job, None, SKIPPED)

    def run(self) -> None:
        own, queue = self.entry, self.queue
        self.queue = None
        try:
            ran = _run_next(own, queue)
            while ran is not None and ran is not own:  # (None: a turn before ran its job)
                ran = _run_next(own, queue)
        finally:  # the pool may keep this wrapper after the run: it must not keep the job's models
            self.job = self.entry = own = None


def _run_next(own: _Entry, queue: deque) -> _Entry | None:
    """Run the oldest job of `queue` where `own` is still in it -> the entry run (None: none)."""
    global _RUNNING
    with _PAUSE_CHANGED:
        # (the pool can take a job off its queue just before a paused job goes on, on its turn
        # or where the room is lowered after it: counted only once none computes, it waits)
        while _TURN or _RUNNING > len(_PAUSED):
            _PAUSE_CHANGED.wait(GIVE_WAY_WAIT_S)
        if own not in queue:
            return None
        entry = queue.popleft()
        _WAITING.discard(entry.job)
        _RUNNING += 1
    try:
        below_the_main_thread()
        run_job(entry.job, entry.relay, entry.is_stale)
        return entry
    finally:
        with _PAUSE_CHANGED:
            _RUNNING -= 1
            _PAUSE_CHANGED.notify_all()


def enqueue(pool: QThreadPool, job: Job, relay: Relay, is_stale: Callable[[], bool]) -> None:
    """Queue `job` on `pool` behind the jobs submitted before it, and give the pool its turn;
    it waits (give_way sees it) until a turn runs it."""
    _WAITING.add(job)
    entry = _Entry(job, relay, is_stale)
    with _PAUSE_CHANGED:
        queue = _QUEUES.setdefault(pool, deque())
        queue.append(entry)
    task = _Task(entry, queue)
    try:
        pool.start(task)
    except BaseException:  # (the pool deleted): it never runs, and no job gives way to it
        task.queue = None  # (taken back here: not ended as a job the pool dropped)
        with _PAUSE_CHANGED:
            queue.remove(entry)
            _WAITING.discard(job)
            _PAUSE_CHANGED.notify_all()
        raise


def give_way(pool: QThreadPool, stale: Callable[[], bool] | None = None) -> bool:
    """Runner.give_way on `pool` (its docstring)."""
    if not _WAITING:
        return False
    me, turn_at = object(), time.monotonic() + GIVE_WAY_TURN_S
    with _PAUSE_CHANGED:
        _PAUSED.append(me)
    try:
        with _PAUSE_CHANGED:
            _room(pool)
            _PAUSE_CHANGED.notify_all()  # (a job started, not yet counted, may wait for this)
        with _PAUSE_CHANGED:  # (the jobs' starts and ends change the counts under this lock)
            while not (stale is not None and stale()):  # (stale: leaves the pause below)
                mine = me in _TURN
                if _RUNNING <= len(_PAUSED) and (mine or (_PAUSED[-1] is me and not _WAITING)):
                    _PAUSED.remove(me)  # only paused jobs are in their run, and none waits
                    if mine:  # (or its turn has come)
                        _TURN.clear()
                    _room(pool)
                    return True
                wait = turn_at - time.monotonic()
                if wait <= 0 and not _TURN and _PAUSED[0] is me:  # (the longest paused first)
                    _TURN.append(me)
                    _room(pool)
                    continue
                _PAUSE_CHANGED.wait(GIVE_WAY_WAIT_S if wait <= 0 else min(wait, GIVE_WAY_WAIT_S))
            return True
    finally:  # stale, or an exception: its room given back, the jobs paused after it unaffected
        with _PAUSE_CHANGED:
            if me in _TURN:
                _TURN.clear()
            if me in _PAUSED:
                _PAUSED.remove(me)
                if shiboken6.isValid(pool):  # (else Python is exiting: nothing to give back)
                    pool.setMaxThreadCount(_rooms())
                _PAUSE_CHANGED.notify_all()


def _room(pool: QThreadPool) -> None:
    """The pool's room (_rooms). A pool Qt has deleted (Python exiting with a job on it) stops
    the job, as a stale one stops, not with an error."""
    if not shiboken6.isValid(pool):
        raise Cancelled("the app's thread pool is gone: the app is exiting")
    pool.setMaxThreadCount(_rooms())
