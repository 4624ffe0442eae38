"""The app's one job runner, its machinery: every background job goes through Runner.submit,
newest-wins per kind of job (ui/machinery/worker.py's Worker is the runner with the app's kinds of job).

A job is an immutable request with an id. Submitting a job makes it the newest of its kind; a result
reaches the main thread only while its job is still the newest of its kind, so an older job's late
result, and the result of a job that was cancelled, are dropped. Two lanes:
- POOL: the app's one background thread (`shared_pool`) for CPU work (runs, head scores). A queued
  job that is already stale when the thread picks it up is skipped without running.
- THREAD: a daemon thread of its own per job, for work that reads files (loads, checkpoints,
  discovery). A read that blocks (a FIFO, a hung network mount) then holds only that thread: runs
  keep going on the pool, and the window can stop waiting for it. Python cannot kill a thread, so a
  cancelled job runs on in the background until its read returns; its result is dropped. Being a
  daemon, it never keeps the app from quitting. (A blocking read in code that holds the GIL, such
  as a native library's open(), still stalls every thread: refusing such files before opening them
  is the engine's job.)

Here too: the BLAS-thread cap (app.assemble sets it) and Python's garbage collection kept on the
main thread, with what start-up made frozen out of its way (freeze_start_up_objects)."""

from __future__ import annotations

import gc
import itertools
import os
import logging
import threading
import time
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, QTimer, Signal

from threadpoolctl import ThreadpoolController, threadpool_limits

from attnviz.engine.parallel import cores
from attnviz.engine.errors import AttnvizError

log = logging.getLogger(__name__)

_POOL: QThreadPool | None = None

POOL, THREAD = "pool", "thread"  # the two lanes (module docstring)


def shared_pool() -> QThreadPool:
    """The app's one background thread. The worker's runs and its head scores
    queue here, so background CPU work never competes with itself for the 2 cores."""
    global _POOL
    if _POOL is None:
        _POOL = QThreadPool(QCoreApplication.instance())
        _POOL.setMaxThreadCount(1)
        _POOL.destroyed.connect(_forget_pool)
    return _POOL


BLAS_THREADS = 1
_BLAS_LIMIT = None


def limit_blas_threads(n: int = BLAS_THREADS):
    """Cap this process's BLAS thread pools at `n` (kept for the app's life). The runner's jobs
    are small matrices (T up to a few hundred), where more BLAS threads cost more than they give,
    and on 2 cores their spinning takes the core the UI thread needs (stalls of 100-200 ms)."""
    global _BLAS_LIMIT
    if _BLAS_LIMIT is None:
        _BLAS_LIMIT = threadpool_limits(limits=n, user_api="blas")
        # Raise the cap once here, on the main thread, and lower it again. Measured with the
        # OpenBLAS NumPy ships (0.3.31, pthreads): unless the main thread has raised it once after
        # lowering it, a raise made on another thread (wide_blas in a pool job) is not taken: the
        # job reads 1 thread back and runs on one core (a pasted paragraph took twice as long).
        with threadpool_limits(limits=cores(), user_api="blas"):
            pass
    return _BLAS_LIMIT


def wide_blas(on: bool = True):
    """A context in which BLAS uses every core (a long run: a pasted paragraph's [400, 576] x
    [576, 1536] products are big enough to gain from it, and the window waits for that run);
    otherwise nothing changes. Back to the cap after."""
    import contextlib

    if not on or cores() <= BLAS_THREADS:
        return contextlib.nullcontext()
    return _controller().limit(limits=cores(), user_api="blas")


_CONTROLLER: ThreadpoolController | None = None


def _controller() -> ThreadpoolController:
    """The process's thread pools, found once: threadpool_limits looks them up again at each call
    (0.3 ms, on a keystroke's run)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


_GC_TIMER: QTimer | None = None
GC_INTERVAL_MS = 500


def collect_garbage_on_the_main_thread() -> None:
    """Python's cyclic garbage collector runs in whichever thread happens to allocate. Run on a job
    thread, it can free a Qt object left in a reference cycle (a closed window's widgets), whose
    destructor takes a Qt lock and then waits for the GIL, while the main thread holds the GIL and
    waits for that lock: the window freezes for good (seen in the test suite: a model load thread
    in gc_collect_main -> QObject::~QObject, the main thread in QMetaObject::disconnect). So, as
    pyqtgraph's GarbageCollector does, automatic collection is switched off and a timer on the
    main thread collects each generation once it passes its usual threshold."""
    global _GC_TIMER
    if _GC_TIMER is not None:
        return
    app = QCoreApplication.instance()
    assert app is not None, "the job runner needs the QApplication"
    _GC_TIMER = QTimer(app)
    _GC_TIMER.timeout.connect(_collect)
    _GC_TIMER.destroyed.connect(_gc_timer_gone)
    gc.disable()
    _GC_TIMER.start(GC_INTERVAL_MS)


def _collect() -> None:  # on the main thread: generation g once its count passes its threshold
    counts, limits = gc.get_count(), gc.get_threshold()
    for g in range(3):
        if counts[g] <= limits[g]:
            break
        gc.collect(g)


def freeze_start_up_objects() -> None:
    """One full collection, then every object alive (the modules, the window's widgets and
    pyqtgraph's items: about 85,000) moves to the collector's permanent generation, which no
    collection walks: a full collection then takes a few ms where it took 40-50 ms on the main
    thread (the longest stall while typing). Called once a window's start-up is done; a window
    that closes calls thaw_objects(), so its own reference cycles are collected after all."""
    gc.collect()
    gc.freeze()


def thaw_objects() -> None:
    """Objects frozen at start-up are collected again like any other (a window closed)."""
    gc.unfreeze()


def _gc_timer_gone(*_):  # the application is gone: Python collects on its own again
    global _GC_TIMER
    _GC_TIMER = None
    gc.enable()


def _forget_pool(*_):
    global _POOL
    _POOL = None


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
        self.owner = owner  # a job may outlive its window (a blocked read): see _Relay._deliver

    def __repr__(self):
        return f"Job({self.kind} #{self.id}, {self.request!r})"


class _Relay(QObject):
    """The app's one relay: lives on the main thread for good, so a job that outlives its window
    never emits on a deleted object; signals emitted from other threads arrive queued."""

    done = Signal(object, object, object)  # job, value, error

    def __init__(self):
        super().__init__()
        self.done.connect(self._deliver)

    def _deliver(self, job: Job, value, error) -> None:
        worker = job.owner
        if shiboken6.isValid(worker):  # else its window is gone, and nobody waits for this result
            worker._on_done(job, value, error)


_RELAY: _Relay | None = None


def _shared_relay() -> _Relay:
    global _RELAY
    if _RELAY is None:
        assert threading.current_thread() is threading.main_thread(), "made on the main thread"
        _RELAY = _Relay()
    return _RELAY


def _execute(job: Job, relay: _Relay, is_stale: Callable[[], bool]) -> None:
    """Run a job on whichever thread calls this and send the outcome to the main thread."""
    if is_stale():
        outcome = (None, SKIPPED)
    else:
        try:
            outcome = (job.fn(), None)
        except Exception as exc:  # reported on the main thread, never lost in a thread
            if not isinstance(exc, AttnvizError):
                log.warning("%r failed unexpectedly", job, exc_info=True)
            outcome = (None, exc)
    try:
        relay.done.emit(job, *outcome)
    except RuntimeError:  # the relay was deleted: Python is closing down with this job still
        if shiboken6.isValid(relay):  # running (nobody waits for its outcome any more); a job
            raise  # finished then printed "Signal source has been deleted" on the way out


class _Task(QRunnable):
    def __init__(self, job: Job, relay: _Relay, is_stale: Callable[[], bool]):
        super().__init__()
        self.setAutoDelete(True)
        self.job, self.relay, self.is_stale = job, relay, is_stale

    def run(self) -> None:
        below_the_main_thread()
        _execute(self.job, self.relay, self.is_stale)


_NICED = threading.local()
POOL_NICE = 5  # the pool's threads run this much nicer than the thread that imported this module


def _own_nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return None


_MAIN_NICE = _own_nice()  # (imported on the main thread, before any pool thread exists)


def below_the_main_thread() -> None:
    """Lower this pool thread's scheduling priority once (Linux: a thread's own nice value, +5),
    so the main thread, woken to paint a result while a run goes on, gets a core at once. On 2
    cores a decoder's run keeps both busy (BLAS on both); at equal priority the main thread waited
    for one: SmolLM2 typing's longest stall 13-18 ms, 9-11 ms with this (benchmarks/typing.py)."""
    if getattr(_NICED, "done", False) or _MAIN_NICE is None:
        return
    _NICED.done = True
    try:  # (absolute: a pool thread started from another one inherits its value)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, _MAIN_NICE + POOL_NICE))
    except OSError:  # not allowed here: the order stays the OS's
        pass


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

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        collect_garbage_on_the_main_thread()  # before any job thread runs
        self.pool = shared_pool()
        self._ids = itertools.count(1)
        self._newest: dict[str, int | None] = {}  # kind -> id of its newest job (None: cancelled)
        self._live: dict[int, Job] = {}  # submitted, not finished (cancelled ones included)
        self._busy = False
        self._relay = _shared_relay()

    # --- the runner ---------------------------------------------------------------------------
    def claim(self, kind: str) -> int:
        """A new job id, made the newest of its kind now: every older job of that kind is stale
        from here on, even before the new one is submitted (a debounced run)."""
        job_id = next(self._ids)
        self._newest[kind] = job_id
        return job_id

    def submit(self, kind: str, fn: Callable[[], Any],
               on_done: Callable[[Any, Any, BaseException | None], None], request: Any = None,
               lane: str = POOL, job_id: int | None = None) -> Job:
        """Run fn() in the background; on_done(request, value, error) is called on the main thread
        if this job is still the newest of its kind when it finishes. job_id: one from claim()."""
        if job_id is None:
            job_id = self.claim(kind)
        job = Job(job_id, kind, request, fn, on_done, lane, self)
        self._live[job.id] = job
        is_stale = lambda: not self.is_current(job)  # noqa: E731
        if lane == THREAD:
            job.thread = threading.Thread(target=_execute, args=(job, self._relay, is_stale),
                                          name=f"attnviz-{kind}-{job.id}", daemon=True)
            job.thread.start()
        else:
            self.pool.start(_Task(job, self._relay, is_stale))
        self._update_busy()
        return job

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
        THREAD lane runs on until its work returns (a Python thread cannot be stopped)."""
        job = self.running(kind)
        if job is not None:
            self._newest[kind] = None
            log.info("stopped waiting for %r; it finishes in the background, unheard", job)
            self._update_busy()
        return job

    def _on_done(self, job: Job, value, error) -> None:
        self._live.pop(job.id, None)
        self._update_busy()
        if error is SKIPPED or not self.is_current(job):
            return
        job.on_done(job.request, value, error)

    def _update_busy(self) -> None:
        busy = any(self.is_current(job) for job in self._live.values())
        if busy != self._busy:
            self._busy = busy
            self.sigBusy.emit(busy)

    def wait_idle(self, msecs: int = 30000) -> bool:
        """Block until the jobs the window still waits for are done (tests, shutdown). Cancelled
        jobs are not waited for: one may be blocked for good."""
        deadline = time.monotonic() + msecs / 1000
        for job in list(self._live.values()):
            if job.thread is not None and self.is_current(job):
                job.thread.join(max(0.0, deadline - time.monotonic()))
        return self.pool.waitForDone(max(0, int((deadline - time.monotonic()) * 1000)))
