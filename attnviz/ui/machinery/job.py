"""One background job of the runner (runner.py) and how its outcome reaches the main thread: a
job runs on whichever thread calls run_job, and its value or error goes to the app's one relay,
which hands it to the job's runner there (SKIPPED: a stale job that was not computed)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal

from attnviz.engine.errors import AttnvizError
from attnviz.ui.machinery.tuning import without_frames

log = logging.getLogger(__name__)

SKIPPED = object()  # a stale request the thread did not compute


class Job:
    """One submitted job: what it runs, where, and who hears its result (main thread)."""

    __slots__ = ("id", "kind", "request", "fn", "on_done", "lane", "t_start", "thread", "owner")

    def __init__(self, id: int, kind: str, request: Any, fn: Callable[[], Any],
                 on_done: Callable[[Any, Any, BaseException | None], None], lane: str,
                 owner: QObject):  # (the Runner that made it: runner.py imports this module)
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
    called = Signal(object)  # a plain function, held by nothing else, on its way (call_soon)

    def __init__(self):
        super().__init__()
        self.done.connect(self._deliver)
        self.sent.connect(self._send)
        # queued even from the main thread: a caller amid a finalizer runs before the object's
        # arrays are freed, and what it asks for must come after
        self.called.connect(self._call, Qt.ConnectionType.QueuedConnection)

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """fn() on the main thread once its event loop next turns, asked from any thread (a
        finalizer's included); nothing once Python is closing down and the relay is deleted."""
        if shiboken6.isValid(self):
            emit_from_job(self, self.called, fn)

    def _call(self, fn) -> None:
        fn()

    def _deliver(self, job: Job, value, error) -> None:
        worker = job.owner
        if shiboken6.isValid(worker):  # else its window is gone, and nobody waits for this result
            worker._on_done(job, value, error)

    def _send(self, slot, args) -> None:
        if shiboken6.isValid(slot.__self__):  # else its window is gone, and nobody reads this
            slot(*args)


_RELAY: Relay | None = None


def shared_relay() -> Relay:
    global _RELAY
    if _RELAY is None:
        assert threading.current_thread() is threading.main_thread(), "made on the main thread"
        _RELAY = Relay()
    return _RELAY


def run_job(job: Job, relay: Relay, is_stale: Callable[[], bool]) -> None:
    """Run a job on whichever thread calls this and send the outcome to the main thread. Whatever
    the job raises is its failure, SystemExit and KeyboardInterrupt too (a job's bug, not the
    app's end: raised on, it ended the pool's turn before the jobs queued behind it, and its
    own result never came, so the window waited for it for good)."""
    if is_stale():
        outcome = (None, SKIPPED)
    else:
        try:
            outcome = (job.fn(), None)
        except BaseException as exc:  # noqa: BLE001 - reported on the main thread, never lost in a thread
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
