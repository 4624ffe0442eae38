"""The one background worker: model loads and attention runs go to a one-thread pool.

Compute requests are debounced by a single restartable QTimer. Each request is an immutable snapshot
(id, model, text); ids increase, and only the newest id's result reaches the state. A queued request
that is already stale when the thread picks it up is skipped without computing."""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, QTimer, Signal

log = logging.getLogger(__name__)

_POOL: QThreadPool | None = None


def shared_pool() -> QThreadPool:
    """The app's one background thread. The worker's loads and runs and the head-roles panel's
    scoring all queue here, so background work never competes with itself for the 2 cores."""
    global _POOL
    if _POOL is None:
        _POOL = QThreadPool(QCoreApplication.instance())
        _POOL.setMaxThreadCount(1)
        _POOL.destroyed.connect(_forget_pool)
    return _POOL


def _forget_pool(*_):
    global _POOL
    _POOL = None


@dataclass(frozen=True)
class ComputeRequest:
    id: int
    model: Any
    text: str
    t_request: float  # perf_counter at the edit, for latency measurements


@dataclass(frozen=True)
class LoadRequest:
    id: int
    source: str  # a model name or a folder


SKIPPED = object()  # a stale request the thread did not compute


class _Relay(QObject):
    """Lives on the main thread; signals emitted from the pool thread arrive queued."""

    done = Signal(object, object, object)  # request, value, error


class _Task(QRunnable):
    def __init__(self, request, fn: Callable[[], Any], relay: _Relay, is_stale: Callable[[], bool]):
        super().__init__()
        self.setAutoDelete(True)
        self.request, self.fn, self.relay, self.is_stale = request, fn, relay, is_stale

    def run(self) -> None:
        if self.is_stale():
            self.relay.done.emit(self.request, None, SKIPPED)
            return
        try:
            value = self.fn()
        except Exception as exc:  # reported on the main thread, never lost in the pool
            log.debug("task %s failed: %s", self.request, exc)
            self.relay.done.emit(self.request, None, exc)
            return
        self.relay.done.emit(self.request, value, None)


class Worker(QObject):
    sigLoading = Signal(str)  # source being loaded
    sigLoaded = Signal(object)  # model
    sigLoadFailed = Signal(str, str)  # source, message
    sigComputed = Signal(object, object)  # ComputeRequest, RunResult (newest only)
    sigComputeFailed = Signal(object, str)  # ComputeRequest, message
    sigBusy = Signal(bool)

    def __init__(self, state, debounce_ms: int = 2, parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self.pool = shared_pool()
        self._ids = itertools.count(1)
        self._relay = _Relay(self)
        self._relay.done.connect(self._on_done)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(debounce_ms)
        self._timer.timeout.connect(self._submit_compute)
        self._pending: ComputeRequest | None = None
        self.newest_compute = 0
        self.newest_load = 0
        self._in_flight = 0
        self.last_compute_s = 0.0

    # --- requests (main thread) ---------------------------------------------------------------
    def request_compute(self, immediate: bool = False) -> ComputeRequest | None:
        """Snapshot the state's model and text now; run it after the debounce interval."""
        if self.state.model is None:
            return None
        req = ComputeRequest(next(self._ids), self.state.model, self.state.text, time.perf_counter())
        self.newest_compute = req.id
        self._pending = req
        if immediate:
            self._timer.stop()
            self._submit_compute()
        else:
            self._timer.start()
        return req

    def _submit_compute(self) -> None:
        req, self._pending = self._pending, None
        if req is None:
            return
        self._start(req, lambda: req.model.run(req.text, truncate=True),
                    lambda: req.id != self.newest_compute)

    def load(self, source: str) -> LoadRequest:
        """Load a model (name or folder) off the main thread; the newest load wins."""
        from attnviz.engine import load_model

        req = LoadRequest(next(self._ids), str(source))
        self.newest_load = req.id
        self.sigLoading.emit(req.source)
        self._start(req, lambda: load_model(req.source), lambda: req.id != self.newest_load)
        return req

    def _start(self, req, fn, is_stale) -> None:
        self._in_flight += 1
        if self._in_flight == 1:
            self.sigBusy.emit(True)
        self.pool.start(_Task(req, fn, self._relay, is_stale))

    # --- results (main thread) ----------------------------------------------------------------
    def _on_done(self, req, value, error) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self.sigBusy.emit(False)
        if error is SKIPPED:
            return
        if isinstance(req, LoadRequest):
            if req.id != self.newest_load:
                return
            if error is not None:
                self.sigLoadFailed.emit(req.source, str(error))
                return
            self.sigLoaded.emit(value)
            return
        if req.id != self.newest_compute or req.model is not self.state.model:
            return  # stale: a newer edit or another model is already on its way
        if error is not None:
            self.sigComputeFailed.emit(req, str(error))
            return
        self.last_compute_s = value.compute_s
        self.sigComputed.emit(req, value)

    def wait_idle(self, msecs: int = 30000) -> bool:
        """Block until the background thread is idle (tests, shutdown)."""
        return self.pool.waitForDone(msecs)
