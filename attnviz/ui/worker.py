"""The window's one job runner: every background job (attention runs, model loads, model discovery)
goes through Worker.submit, newest-wins per kind of job.

A job is an immutable request with an id. Submitting a job makes it the newest of its kind; a result
reaches the main thread only while its job is still the newest of its kind, so an older job's late
result, and the result of a job that was cancelled, are dropped. Two lanes:
- POOL: the app's one background thread (`shared_pool`) for CPU work (runs; the head scores queue
  there too). A queued job that is already stale when the thread picks it up is
  skipped without running.
- THREAD: a daemon thread of its own per job, for work that reads files (loads, discovery). A read
  that blocks (a FIFO, a hung network mount) then holds only that thread: runs keep going on the
  pool, and the window can stop waiting for it. Python cannot kill a thread, so a cancelled job runs
  on in the background until its read returns; its result is dropped. Being a daemon, it never
  keeps the app from quitting. (A blocking read in code that holds the GIL, such as a native
  library's open(), still stalls every thread: refusing such files before opening them is the
  engine's job.)

Compute requests are debounced by a single restartable QTimer. Each is a snapshot (id, model,
text, what the views want computed); Model.run refuses non-finite weights, so the window never
receives NaN heatmaps. `follow_state` connects the runner to what the state asks for; the runner
writes its results into the state itself (set_model, set_result)."""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, QTimer, Signal

from threadpoolctl import threadpool_limits

from attnviz.engine.errors import AttnvizError

log = logging.getLogger(__name__)

_POOL: QThreadPool | None = None

POOL, THREAD = "pool", "thread"  # the two lanes (module docstring)
DISCOVERY_RESTART_S = 5.0  # a model scan still running after this long is started afresh
# head scores (the "head scores" section below): the typed text's and a probe source's, newest of each wins
SCORES_KIND, PROBE_KIND = "roles", "roles-probe"
RESCORE_DELAY_MS = 150  # the text is scored once results have paused this long (typing)


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
    return _BLAS_LIMIT


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


def _gc_timer_gone(*_):  # the application is gone: Python collects on its own again
    global _GC_TIMER
    _GC_TIMER = None
    gc.enable()


def _forget_pool(*_):
    global _POOL
    _POOL = None


@dataclass(frozen=True)
class ComputeRequest:
    id: int
    model: Any
    text: str
    t_request: float  # perf_counter at the edit, for latency measurements
    values: bool = False  # also value norms and head shares (value-weighted heatmaps)
    inputs: bool = False  # also every layer's input (the Anatomy panel)


@dataclass(frozen=True)
class LoadRequest:
    id: int
    source: str  # a model name or a folder


SKIPPED = object()  # a stale request the thread did not compute


class Job:
    """One submitted job: what it runs, where, and who hears its result (main thread)."""

    __slots__ = ("id", "kind", "request", "fn", "on_done", "lane", "t_start", "thread", "owner")

    def __init__(self, id: int, kind: str, request: Any, fn: Callable[[], Any],
                 on_done: Callable[[Any, Any, BaseException | None], None], lane: str,
                 owner: "Worker"):
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
    relay.done.emit(job, *outcome)


class _Task(QRunnable):
    def __init__(self, job: Job, relay: _Relay, is_stale: Callable[[], bool]):
        super().__init__()
        self.setAutoDelete(True)
        self.job, self.relay, self.is_stale = job, relay, is_stale

    def run(self) -> None:
        _execute(self.job, self.relay, self.is_stale)


def _checkpoints_of(model):  # -> CheckpointSet | None, every checkpoint's weights loaded
    from attnviz.engine.checkpoints import load_checkpoints

    ckpts = load_checkpoints(model)
    if ckpts is not None:
        ckpts.preload()
    return ckpts


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


class Worker(QObject):
    sigLoading = Signal(str)  # source being loaded
    sigLoaded = Signal(object)  # model
    sigLoadFailed = Signal(str, str)  # source, message
    sigLoadCancelled = Signal(str)  # source the window stopped waiting for
    sigComputed = Signal(object, object)  # ComputeRequest, RunResult (newest only; already in state)
    sigComputeFailed = Signal(object, str)  # ComputeRequest, message
    sigModelsFound = Signal(object)  # list[ModelInfo] from find_models (empty when the scan failed)
    sigBusy = Signal(bool)  # whether any job the window still waits for is running

    def __init__(self, state, debounce_ms: int = 2, parent: QObject | None = None):
        super().__init__(parent)
        collect_garbage_on_the_main_thread()  # before any job thread runs
        self.state = state
        self.pool = shared_pool()
        self._ids = itertools.count(1)
        self._newest: dict[str, int | None] = {}  # kind -> id of its newest job (None: cancelled)
        self._live: dict[int, Job] = {}  # submitted, not finished (cancelled ones included)
        self._busy = False
        self._relay = _shared_relay()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(debounce_ms)
        self._timer.timeout.connect(self._submit_compute)
        self._pending: ComputeRequest | None = None
        self.last_compute_s = 0.0

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
        return self._newest.get(job.kind) == job.id

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

    # --- attention runs -----------------------------------------------------------------------
    def follow_state(self) -> None:
        """Run what the state asks for, connected here once (app.assemble): a new text after the
        debounce; a new model or training step at once; and at once when a view wants what the
        result lacks (value norms for Value-weighted, layer inputs for the Anatomy tab)."""
        st = self.state
        st.sigTextChanged.connect(lambda _text: self.request_compute())
        st.sigModelChanged.connect(lambda model: model is not None and self.request_compute(immediate=True))
        st.sigCheckpointChanged.connect(lambda _index: self.request_compute(immediate=True))
        st.sigModelChanged.connect(self._load_checkpoints)
        st.sigDisplayChanged.connect(self._compute_what_is_missing)
        st.sigInputsWantedChanged.connect(self._compute_what_is_missing)
        self.follow_scores()

    def _compute_what_is_missing(self, *_) -> None:
        st, r = self.state, self.state.result
        if r is not None and ((st.value_weighted and r.value_norms is None)
                              or (st.inputs_wanted and r.layer_inputs is None)):
            self.request_compute(immediate=True)

    def request_compute(self, immediate: bool = False) -> ComputeRequest | None:
        """Snapshot the state's model and text now; run it after the debounce interval."""
        if self.state.model is None:
            return None
        st = self.state
        req = ComputeRequest(self.claim("compute"), st.model, st.text, time.perf_counter(),
                             values=st.value_weighted, inputs=st.inputs_wanted)
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

        def run():  # Model.run refuses non-finite weights itself, naming the layer
            return req.model.run(req.text, truncate=True, values=req.values, inputs=req.inputs)
        self.submit("compute", run, self._on_computed, req, POOL, job_id=req.id)

    def _on_computed(self, req: ComputeRequest, result, error) -> None:
        if req.model is not self.state.model:
            return  # another model is already on its way
        if error is not None:
            if not req.text.strip():
                self.state.set_result(None)  # an empty sentence is a valid, empty state
            self.sigComputeFailed.emit(req, describe_error(error))
            return
        self.last_compute_s = result.compute_s
        self.state.set_result(result)  # the runner feeds the state; the widgets watch it
        self.sigComputed.emit(req, result)

    # === head scores ('roles' jobs) ============================================================
    # The typed text's scores follow each result (after RESCORE_DELAY_MS of quiet while typing) and
    # the exclusion options; a probe source's scores follow the options, the model and the training
    # step, never the text (typing must not restart a 60-sentence probe). Both are pure engine calls
    # on the pool, written into the state (set_text_scores, set_probe_scores); the newest of each wins.
    def follow_scores(self) -> None:
        """Score what the state's roles options ask for (follow_state connects it)."""
        st = self.state
        self._scores_timer = QTimer(self)
        self._scores_timer.setSingleShot(True)
        self._scores_timer.setInterval(RESCORE_DELAY_MS)
        self._scores_timer.timeout.connect(self.request_text_scores)
        self._probe_cache = None  # (model, seed, (RunResult, note)): the random probe's last run
        self._text_flags = (st.role_options.exclude_bos, st.role_options.exclude_current)  # newest text request's
        st.sigResultChanged.connect(self._scores_on_result)
        st.sigRoleOptionsChanged.connect(self._scores_on_options)
        st.sigModelChanged.connect(self._scores_on_model)
        st.sigCheckpointChanged.connect(lambda _i: self.request_probe_scores())

    def _scores_on_result(self, result) -> None:
        if result is None:  # the state drops the text's scores itself
            self._scores_timer.stop()
            self.cancel(SCORES_KIND)
        else:
            self._scores_timer.start()  # restarts while results keep coming

    def _scores_on_options(self, opts) -> None:
        if (opts.exclude_bos, opts.exclude_current) != self._text_flags:
            self.request_text_scores()
        self.request_probe_scores()

    def _scores_on_model(self, _model) -> None:
        self._probe_cache = None
        self.cancel(PROBE_KIND)
        self.request_probe_scores()

    def flush_scores(self) -> None:
        """Score the text now if it waits for typing to pause (tests, before wait_idle)."""
        timer = getattr(self, "_scores_timer", None)  # None: a runner that does not follow the state
        if timer is not None and timer.isActive():
            self.request_text_scores()

    def request_text_scores(self) -> None:
        """Score the state's result with the roles options on the pool; the state holds them after."""
        st = self.state
        self._scores_timer.stop()
        model, result, opts = st.model, st.result, st.role_options
        self._text_flags = (opts.exclude_bos, opts.exclude_current)
        if model is None or result is None:
            self.cancel(SCORES_KIND)
            return
        if result.n_tokens < 2:  # nothing to score: the panel says why
            self.cancel(SCORES_KIND)
            st.set_text_scores(None, result)
            return
        H = _heads()

        def work():
            return H.score_result(result, exclude_bos=opts.exclude_bos, exclude_current_token=opts.exclude_current,
                                  unknown_ids=H.unknown_token_ids(model))
        self.submit(SCORES_KIND, work, self._on_text_scores, (model, result, opts))

    def _on_text_scores(self, request, scores, error) -> None:
        model, result, opts = request
        st = self.state
        if model is not st.model or result is not st.result or opts != st.role_options:
            return  # another result or options are on their way
        if error is not None:
            log.warning("head scores failed: %s", describe_error(error))
            st.set_text_scores(None, result, f"Scores unavailable: {describe_error(error)}")
            return
        st.set_text_scores(scores, result)

    def request_probe_scores(self) -> None:
        """Score the probe source on the pool when the state has no scores of it (the random probe's
        run is cached per model and seed)."""
        from attnviz.engine.heads import PROBE_SEED
        from attnviz.engine.probes import score_probe

        st = self.state
        model, opts = st.model, st.role_options
        if model is None or opts.source == "text" or st.probe_scores is not None or st.probe_note:
            if model is None or opts.source == "text":
                self.cancel(PROBE_KIND)
            return
        job = self.running(PROBE_KIND)
        if job is not None and job.request[0] is model and job.request[1] == opts:
            return  # already on its way
        cache = self._probe_cache
        cached = cache[2] if cache is not None and cache[0] is model and cache[1] == PROBE_SEED else None
        work = lambda: score_probe(model, opts.source, opts.exclude_bos, opts.exclude_current,  # noqa: E731
                                   probe=cached)
        self.submit(PROBE_KIND, work, self._on_probe_scores, (model, opts))

    def _on_probe_scores(self, request, value, error) -> None:
        from attnviz.engine.heads import PROBE_SEED

        model, opts = request
        st = self.state
        if model is not st.model or opts != st.role_options:
            return  # scored for another model or options: never shown
        if error is not None:
            log.warning("probe scores failed: %s", describe_error(error))
            st.set_probe_scores(None, f"Scores unavailable: {describe_error(error)}")
            return
        scores, probe = value
        if probe is not None:
            self._probe_cache = (model, PROBE_SEED, probe)
        st.set_probe_scores(scores, probe[1] if probe is not None else "")

    # --- model loads --------------------------------------------------------------------------
    def load(self, source: str) -> LoadRequest:
        """Load a model (name, folder or file) on a thread of its own; the newest load wins. The
        model shown until then stays usable: runs on it go on in the pool."""
        from attnviz.engine import load_model

        req = LoadRequest(self.claim("load"), str(source))
        self.state.set_loading(req.source)
        self.sigLoading.emit(req.source)
        self.submit("load", lambda: load_model(req.source), self._on_load_done, req, THREAD,
                    job_id=req.id)
        return req

    def cancel_load(self) -> str | None:
        """Stop waiting for the running load (see cancel); returns its source, or None when no
        load was running. The current model stays."""
        job = self.cancel("load")
        if job is None:
            return None
        self.state.set_loading("")
        self.sigLoadCancelled.emit(job.request.source)
        return job.request.source

    def _on_load_done(self, req: LoadRequest, model, error) -> None:
        self.state.set_loading("")
        if error is not None:
            self.sigLoadFailed.emit(req.source, describe_error(error))
            return
        self.state.set_model(model, source=req.source)
        self.sigLoaded.emit(model)

    # --- training checkpoints -----------------------------------------------------------------
    def _load_checkpoints(self, model) -> None:
        """A model with training checkpoints (a checkpoints.json in its folder: engine/checkpoints)
        gets them loaded and every checkpoint's weights preloaded on a thread of its own (it reads
        files); the runner hands them to the state, for the model they belong to only."""
        from attnviz.engine.checkpoints import CHECKPOINTS_FILE

        path = getattr(model, "path", None)
        if model is None or path is None or not (path / CHECKPOINTS_FILE).is_file():
            self.cancel("checkpoints")
            return
        self.submit("checkpoints", lambda: _checkpoints_of(model), self._on_checkpoints, model, THREAD)

    def _on_checkpoints(self, model, ckpts, error) -> None:
        if error is not None:
            log.warning("checkpoints of %s unavailable: %s", model.name, error)
            self.state.show_status(f"Training checkpoints unavailable: {describe_error(error)}")
        elif model is self.state.model:
            self.state.set_checkpoints(ckpts)

    # --- model discovery ----------------------------------------------------------------------
    def discover(self) -> Job:
        """Scan for models (find_models: the Hugging Face cache, GGUF stores) on a thread of its own;
        the list arrives as sigModelsFound. A scan already under way is reused unless it has run
        for DISCOVERY_RESTART_S (it may be stuck on a file that blocks)."""
        from attnviz.engine import find_models

        job = self.running("discover")
        if job is not None and time.monotonic() - job.t_start < DISCOVERY_RESTART_S:
            return job
        return self.submit("discover", find_models, self._on_discovered, None, THREAD)

    def _on_discovered(self, _req, infos, error) -> None:
        if error is not None:  # a broken cache folder must not take the menu down
            log.warning("looking for models failed: %s", describe_error(error))
            infos = []
        self.sigModelsFound.emit(list(infos))


def _heads():  # the engine's head scores, imported when first scored (not at the window's start)
    from attnviz.engine import heads

    return heads
