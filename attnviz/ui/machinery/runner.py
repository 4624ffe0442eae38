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

A job and how its outcome reaches the main thread are ui/machinery/job.py's; the pool, the order of
its jobs and give_way's pauses are ui/machinery/pool.py's. The process's tuning the runner relies
on (the BLAS-thread cap, garbage collection kept on the main thread, the pool's thread below the
main one) is ui/machinery/tuning.py's."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from attnviz.engine.errors import AttnvizError
from attnviz.engine.reading.validate import sentences
from attnviz.ui.machinery import pool as _pool
from attnviz.ui.machinery.job import SKIPPED, Job, emit_from_job, run_job, shared_relay
from attnviz.ui.machinery.pool import shared_pool
from attnviz.ui.machinery.tuning import collect_garbage_on_the_main_thread

log = logging.getLogger(__name__)

POOL, THREAD = "pool", "thread"  # the two lanes (module docstring)


def describe_error(exc: BaseException, writing=None) -> str:
    """A failure as the user reads it: the project's own errors as they are, an OSError as its
    file and reason in validate.os_reason's words ("<file>: permission denied"; "cannot write
    <writing>: <reason>" for one met writing file `writing`),
    anything else named as unexpected (its traceback is in the log)."""
    if isinstance(exc, AttnvizError):
        return str(exc)
    if isinstance(exc, OSError) and (writing is not None or exc.strerror):
        from attnviz.engine.reading.validate import os_reason  # the words every read and export uses

        if writing is not None:
            return f"cannot write {writing}: {os_reason(exc)}"
        # (a job may read or write: its file and reason, never a verb that may be wrong)
        return f"{exc.filename}: {os_reason(exc)}" if exc.filename else os_reason(exc)
    return f"unexpected {type(exc).__name__}: {exc} (details in the log)"


def failure(lead: str, why: str) -> str:
    """What could not be done and why, as two sentences ("Could not load model x. x/config.json
    sets ..."), never "lead: why" (engine/reading/validate.sentences, which the engine's own
    refusals use too)."""
    return sentences(lead, why)


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
        self._relay = shared_relay()

    # --- the runner ---------------------------------------------------------------------------
    def claim(self, kind: str) -> int:
        """A new job id, made the newest of its kind now: every older job of that kind is stale
        from here on, even before the new one is submitted (a debounced run)."""
        job_id = next(self._ids)
        self._newest[kind] = job_id
        _pool.wake_paused()
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
        is_stale = lambda: not self.is_current(job)  # noqa: E731
        self._live[job.id] = job  # (before it can start: its thread may ask running() at once)
        try:
            if lane == THREAD:
                job.thread = threading.Thread(target=run_job, args=(job, self._relay, is_stale),
                                              name=f"attnviz-{kind}-{job.id}", daemon=True)
                job.thread.start()
            else:  # (waiting on the pool before it is running(): a job that gives way sees it so)
                _pool.enqueue(self.pool, job, self._relay, is_stale)
        except BaseException:  # (no thread, or the pool deleted): it never runs, none waits for it
            self._live.pop(job.id, None)
            self._update_busy()  # (claim made the running job of its kind stale: none is waited for)
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
        return _pool.give_way(self.pool, stale)

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
            _pool.wake_paused()
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
        _pool.wake_paused()
        self._update_busy()
        return self._wait_for(awaited, msecs)

    def _wait_for(self, jobs, msecs: int) -> bool:  # the jobs' own threads, then the pool
        deadline = time.monotonic() + msecs / 1000
        for job in jobs:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
        return self.pool.waitForDone(max(0, int((deadline - time.monotonic()) * 1000)))
