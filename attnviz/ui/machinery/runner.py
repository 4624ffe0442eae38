"""The app's one job runner, its machinery: every background job goes through Runner.submit,
newest-wins per kind of job (ui/machinery/worker.py's Worker is the runner with the app's kinds of job).

A job is an immutable request with an id. Submitting a job makes it the newest of its kind; a result
reaches the main thread only while its job is still the newest of its kind, so an older job's late
result, and the result of a job that was cancelled, are dropped. Two lanes:
- POOL: the app's background pool (`shared_pool`) for CPU work (runs, head scores). Its jobs
  start in the order they were submitted. A queued job that is already stale when a thread picks
  it up is skipped without running. A long job that
  does not depend on the typed text (a template probe) calls `give_way` between its steps: while
  other jobs wait on the pool (a keystroke's run), its thread pauses where it is and they run
  first, on a thread the pool lends for them; it then goes on from there, or stops at once if it
  went stale meanwhile. Paused GIVE_WAY_TURN_S, it takes one step before the next waiting job
  starts (typing whose runs leave the pool no gap would otherwise hold it until the typing
  stops). One thread computes at a time all along.
- THREAD: a daemon thread of its own per job, for work that reads files (loads, checkpoints,
  discovery). A read that blocks (a FIFO, a hung network mount) then holds only that thread: runs
  keep going on the pool, and the window can stop waiting for it. Python cannot kill a thread, so a
  cancelled job runs on in the background until its read returns; its result is dropped. Being a
  daemon, it never keeps the app from quitting. (A blocking read in code that holds the GIL, such
  as a native library's open(), still stalls every thread: refusing such files before opening them
  is the engine's job.)

The process's tuning the runner relies on (the BLAS-thread cap, garbage collection kept on the main
thread, the pool's thread below the main one) is ui/machinery/tuning.py's."""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal

from attnviz.engine.errors import AttnvizError, Cancelled
from attnviz.ui.machinery.tuning import below_the_main_thread, collect_garbage_on_the_main_thread, without_frames

log = logging.getLogger(__name__)

_POOL: QThreadPool | None = None

POOL, THREAD = "pool", "thread"  # the two lanes (module docstring)


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


def _wake_paused() -> None:  # the jobs paused in give_way look again (one may be stale now)
    if _PAUSED:  # (a job about to pause looks under the lock after it is in _PAUSED)
        with _PAUSE_CHANGED:
            _PAUSE_CHANGED.notify_all()


def _rooms() -> int:
    """The pool's room: one thread, and one more per paused job; none for the jobs that wait
    while a paused job has its turn (give_way: it goes on as the job at work ends)."""
    return 1 + len(_PAUSED) - len(_TURN)


SKIPPED = object()  # a stale request the thread did not compute


class Job:
    """One submitted job: what it runs, where, and who hears its result (main thread)."""

    __slots__ = ("id", "kind", "request", "fn", "on_done", "lane", "t_start", "thread", "owner")

    def __init__(self, id: int, kind: str, request: Any, fn: Callable[[], Any],
                 on_done: Callable[[Any, Any, BaseException | None], None], lane: str,
                 owner: "Runner"):
        self.id, self.kind, self.request, self.fn, self.on_done, self.lane = (
            id, kind, request, fn, on_done, lane)
        self.t_start = time.monotonic()
        self.thread: threading.Thread | None = None
        self.owner = owner  # a job may outlive its window (a blocked read): see Relay._deliver

    def __repr__(self):
        return f"Job({self.kind} #{self.id}, {self.request!r})"


class Relay(QObject):
    """The app's one relay: lives on the main thread for good, so a job that outlives its window
    never emits on a deleted object; signals emitted from other threads arrive queued."""

    done = Signal(object, object, object)  # job, value, error
    sent = Signal(object, object)  # slot (a QObject's method), args: a job's message on its way (Runner.post)

    def __init__(self):
        super().__init__()
        self.done.connect(self._deliver)
        self.sent.connect(self._send)

    def _deliver(self, job: Job, value, error) -> None:
        worker = job.owner
        if shiboken6.isValid(worker):  # else its window is gone, and nobody waits for this result
            worker._on_done(job, value, error)

    def _send(self, slot, args) -> None:
        if shiboken6.isValid(slot.__self__):  # else its window is gone, and nobody reads this
            slot(*args)


_RELAY: Relay | None = None


def _shared_relay() -> Relay:
    global _RELAY
    if _RELAY is None:
        assert threading.current_thread() is threading.main_thread(), "made on the main thread"
        _RELAY = Relay()
    return _RELAY


def run_job(job: Job, relay: Relay, is_stale: Callable[[], bool]) -> None:
    """Run a job on whichever thread calls this and send the outcome to the main thread."""
    if is_stale():
        outcome = (None, SKIPPED)
    else:
        try:
            outcome = (job.fn(), None)
        except Exception as exc:  # reported on the main thread, never lost in a thread
            if not isinstance(exc, AttnvizError):
                log.warning("%r failed unexpectedly", job, exc_info=True)
            outcome = (None, without_frames(exc))
    emit_from_job(relay, relay.done, job, *outcome)


def emit_from_job(relay: Relay, signal, *args) -> None:
    """Emit one of `relay`'s signals from a job's thread, unless the relay was deleted: Python is
    closing down with this job still running (nobody waits for it any more); a job finished then
    printed "Signal source has been deleted" on the way out."""
    try:
        signal.emit(*args)
    except RuntimeError:
        if shiboken6.isValid(relay):
            raise


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


def describe_error(exc: BaseException, writing=None) -> str:
    """A failure as the user reads it: the project's own errors as they are, an OSError as its
    reason and file ("cannot write <writing>: <reason>" for one met writing file `writing`),
    anything else named as unexpected (its traceback is in the log)."""
    if isinstance(exc, AttnvizError):
        return str(exc)
    if isinstance(exc, OSError) and writing is not None:
        from attnviz.figures.data import os_reason  # the words the export writer uses

        return f"cannot write {writing}: {os_reason(exc)}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return f"unexpected {type(exc).__name__}: {exc} (details in the log)"


class Runner(QObject):
    """Newest-wins background jobs per kind, on the POOL or a THREAD of their own (module docstring)."""

    sigBusy = Signal(bool)  # whether any job the window still waits for is running
    # kind: a job of this kind ended, its work returned (a stale one's too: let go, it runs on until
    # then) or skipped on the pool; its result delivered, or dropped
    sigEnded = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        collect_garbage_on_the_main_thread()  # before any job thread runs
        self.pool = shared_pool()
        self._ids = itertools.count(1)
        self._newest: dict[str, int | None] = {}  # kind -> id of its newest job (None: cancelled)
        self._live: dict[int, Job] = {}  # submitted, not finished (cancelled ones included)
        self._busy = False
        self._closed = False  # shut_down: nothing submitted from then on starts
        self._relay = _shared_relay()

    # --- the runner ---------------------------------------------------------------------------
    def claim(self, kind: str) -> int:
        """A new job id, made the newest of its kind now: every older job of that kind is stale
        from here on, even before the new one is submitted (a debounced run)."""
        job_id = next(self._ids)
        self._newest[kind] = job_id
        _wake_paused()
        return job_id

    def submit(self, kind: str, fn: Callable[[], Any],
               on_done: Callable[[Any, Any, BaseException | None], None], request: Any = None,
               lane: str = POOL, job_id: int | None = None) -> Job:
        """Run fn() in the background; on_done(request, value, error) is called on the main thread
        if this job is still the newest of its kind when it finishes. job_id: one from claim()."""
        if job_id is None:
            job_id = self.claim(kind)
        job = Job(job_id, kind, request, fn, on_done, lane, self)
        if self._closed:  # (its window is gone: a result it asks for would reach nobody)
            log.debug("%r not started: the runner is shut down", job)
            return job
        if lane != THREAD:  # (waiting before it is running(): a job that gives way sees it so)
            _WAITING.add(job)
        self._live[job.id] = job
        is_stale = lambda: not self.is_current(job)  # noqa: E731
        if lane == THREAD:
            job.thread = threading.Thread(target=run_job, args=(job, self._relay, is_stale),
                                          name=f"attnviz-{kind}-{job.id}", daemon=True)
            job.thread.start()
        else:
            entry = _Entry(job, self._relay, is_stale)
            with _PAUSE_CHANGED:
                queue = _QUEUES.setdefault(self.pool, deque())
                queue.append(entry)
            task = _Task(entry, queue)
            try:
                self.pool.start(task)
            except BaseException:  # (the pool deleted): it never runs, and no job gives way to it
                task.queue = None  # (taken back here: not ended as a job the pool dropped)
                with _PAUSE_CHANGED:
                    queue.remove(entry)
                    _WAITING.discard(job)
                    _PAUSE_CHANGED.notify_all()
                self._live.pop(job.id, None)
                raise
        self._update_busy()
        return job

    def give_way(self, stale: Callable[[], bool] | None = None) -> bool:
        """Called by a job on the pool between its steps (from its thread): while other jobs wait
        on the pool, this thread pauses and they run first, on a thread the pool lends for them
        (its room raised by one per paused job); it returns once none waits and none but paused
        jobs is at work, so one thread computes at a time. The latest paused job goes on first.
        A job paused GIVE_WAY_TURN_S goes on once the job at work ends, ahead of those waiting
        (the pool starts none of them meanwhile), for one step: its next give_way pauses again.
        stale(): asked all along the pause; once True the job leaves the pause at once, its room
        given back (it is to stop: its model and arrays are not held behind the jobs that replace
        it, nor for as long as keystrokes keep coming).
        -> whether it paused (the job may have gone stale meanwhile: ask is_newest after)."""
        if not _WAITING:
            return False
        me, turn_at = object(), time.monotonic() + GIVE_WAY_TURN_S
        with _PAUSE_CHANGED:
            _PAUSED.append(me)
        try:
            with _PAUSE_CHANGED:
                self._room()
                _PAUSE_CHANGED.notify_all()  # (a job started, not yet counted, may wait for this)
            with _PAUSE_CHANGED:  # (the jobs' starts and ends change the counts under this lock)
                while not (stale is not None and stale()):  # (stale: leaves the pause below)
                    mine = me in _TURN
                    if _RUNNING <= len(_PAUSED) and (mine or (_PAUSED[-1] is me and not _WAITING)):
                        _PAUSED.remove(me)  # only paused jobs are in their run, and none waits
                        if mine:  # (or its turn has come)
                            _TURN.clear()
                        self._room()
                        return True
                    wait = turn_at - time.monotonic()
                    if wait <= 0 and not _TURN and _PAUSED[0] is me:  # (the longest paused first)
                        _TURN.append(me)
                        self._room()
                        continue
                    _PAUSE_CHANGED.wait(GIVE_WAY_WAIT_S if wait <= 0 else min(wait, GIVE_WAY_WAIT_S))
                return True
        finally:  # stale, or an exception: its room given back, the jobs paused after it unaffected
            with _PAUSE_CHANGED:
                if me in _TURN:
                    _TURN.clear()
                if me in _PAUSED:
                    _PAUSED.remove(me)
                    if shiboken6.isValid(self.pool):  # (else Python is exiting: nothing to give back)
                        self.pool.setMaxThreadCount(_rooms())
                    _PAUSE_CHANGED.notify_all()

    def _room(self) -> None:
        """The pool's room (_rooms). A pool Qt has deleted (Python exiting with a job on it) stops
        the job, as a stale one stops, not with an error."""
        if not shiboken6.isValid(self.pool):
            raise Cancelled("the app's thread pool is gone: the app is exiting")
        self.pool.setMaxThreadCount(_rooms())

    def giving_way(self, kind: str, job_id: int) -> Callable[[], bool]:
        """The stop() of a long job on the pool that does not depend on the text (job `job_id`
        from claim): True once the job is no longer the newest of its kind (it stops there, not
        paused first, nor kept paused: give_way's stale); else the job gives way (give_way), and
        is asked again after."""
        stale = lambda: not self.is_newest(kind, job_id)  # noqa: E731

        def stop() -> bool:
            if stale():
                return True
            self.give_way(stale)
            return stale()
        return stop

    def post(self, slot, *args) -> None:
        """slot(*args) on the main thread, asked from a job's thread (a preview, a count of the work
        done): `slot` a method of this runner or of another QObject that lives there. Sent through
        the app's relay, never deleted, and dropped once the slot's object is gone: a job still
        running when its window closed (and deleted its runner) would otherwise raise "Signal
        source has been deleted" inside the job, emitting a signal of the runner's."""
        emit_from_job(self._relay, self._relay.sent, slot, args)

    def is_current(self, job: Job) -> bool:
        return self.is_newest(job.kind, job.id)

    def is_newest(self, kind: str, job_id: int) -> bool:
        """Whether job `job_id` (from claim) is still the newest of its kind: a long job asks this
        between its steps and stops once it is stale (read from any thread: one dict lookup)."""
        return self._newest.get(kind) == job_id

    def running(self, kind: str) -> Job | None:
        """The job of this kind the window still waits for, if one is running."""
        job = self._live.get(self._newest.get(kind) or 0)
        return job if job is not None and job.kind == kind else None

    def cancel(self, kind: str) -> Job | None:
        """Stop waiting for the running job of this kind: its result will be dropped. A job on a
        THREAD lane runs on until its work returns (a Python thread cannot be stopped), a job that
        asks whether it is stale until its next check: sigEnded comes then, not now."""
        job = self.running(kind)
        if job is not None:
            self._newest[kind] = None
            _wake_paused()
            log.info("stopped waiting for %r; it finishes in the background, unheard", job)
            self._update_busy()
        return job

    def at_work(self, kind: str) -> bool:
        """Whether a job of this kind is still at work: the one the window waits for, or one let
        go (stale or cancelled) whose work has not returned yet."""
        return any(job.kind == kind for job in self._live.values())

    def when_none_running(self, kind: str, then: Callable[[], None]) -> None:
        """then() once no job of `kind` is at work (at_work), stale ones included: now if none is,
        else as the last one ends, its result delivered first (sigEnded, never a poll)."""
        if not self.at_work(kind):
            then()
            return

        def ended(ended_kind: str) -> None:
            if ended_kind == kind and not self.at_work(kind):
                self.sigEnded.disconnect(ended)
                then()
        self.sigEnded.connect(ended)

    def _on_done(self, job: Job, value, error) -> None:
        self._live.pop(job.id, None)
        self._update_busy()
        try:
            if error is not SKIPPED and self.is_current(job):
                job.on_done(job.request, value, error)
        finally:  # (a slot's exception goes to the guard: who waits for the kind hears it ended)
            self.sigEnded.emit(job.kind)

    def _update_busy(self) -> None:
        busy = any(self.is_current(job) for job in self._live.values())
        if busy != self._busy:
            self._busy = busy
            self.sigBusy.emit(busy)

    def wait_idle(self, msecs: int = 30000) -> bool:
        """Block until the jobs the window still waits for are done (tests). Cancelled jobs are
        not waited for: one may be blocked for good."""
        return self._wait_for([job for job in self._live.values() if self.is_current(job)], msecs)

    def shut_down(self, msecs: int = 10000) -> bool:
        """Stop for good (the window closes): nothing submitted from now on starts, and every job
        is let go, its result dropped (a job that asks whether it is stale stops at its next
        check). The jobs the window still waited for are waited for, up to `msecs`, so none runs
        on into Python's own shutdown (where a job's thread pool refuses new work); those let go
        before (a load blocked on a file) are not. True when they ended in time."""
        awaited = [job for job in self._live.values() if self.is_current(job)]
        self._closed = True
        for kind in list(self._newest):
            self._newest[kind] = None
        _wake_paused()
        self._update_busy()
        return self._wait_for(awaited, msecs)

    def _wait_for(self, jobs, msecs: int) -> bool:  # the jobs' own threads, then the pool
        deadline = time.monotonic() + msecs / 1000
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
        return self.pool.waitForDone(max(0, int((deadline - time.monotonic()) * 1000)))
