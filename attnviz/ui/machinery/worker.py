"""The app's job runner with its kinds of job (the machinery, newest-wins per kind and the lanes, is
ui/machinery/runner.py): attention runs, model loads, training checkpoints and model discovery; head
scores (ui/machinery/score_jobs.py) and the other *_jobs.py are its jobs objects, made by follow_state.
`follow_state` connects it to what the state asks for (app.assemble calls it); it writes its results
into the state itself (set_model, set_result, set_checkpoints, the head scores).

Compute requests are debounced by a restartable QTimer, or (no debounce, the default) a call the
worker posts itself: the edits of one pass of the event loop (a replace's remove and insert) make
one run, and a keystroke's run starts at once (benchmarks/typing_latency.py measures it). Each is
a snapshot (id, model, text, what the views want computed); Model.run refuses non-finite weights,
so the window never receives NaN heatmaps."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from attnviz.engine.computing.longdoc import LongRun
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import BudgetTooSmall
from attnviz.ui.machinery.compare_jobs import compare_lacks
from attnviz.ui.machinery.loading import LoadRequest, checkpoints_of, load_checked, make_vocabulary_whole
from attnviz.ui.machinery.preview_timing import PreviewTiming
from attnviz.ui.machinery.runner import POOL, THREAD, Job, Runner, describe_error, failure
from attnviz.ui.machinery.tuning import wide_blas

log = logging.getLogger(__name__)

DISCOVERY_RESTART_S = 5.0  # a model scan still running after this long is started afresh
GUIDE_KIND = "guide"  # the guide bar's head for a sample text
LONG_RUN_CHARS = 600  # more new text than this (a paste: about 150 tokens) runs on every core


@dataclass(frozen=True)
class ComputeRequest:
    id: int
    model: Any
    text: str
    t_request: float  # perf_counter at the edit, for latency measurements
    values: bool = False  # also value norms and head shares (value-weighted heatmaps)
    inputs: bool = False  # also every layer's input (the Anatomy panel)
    trace: bool = False  # keep what prediction reads (z, the residual stream): effects.window_run
    ablation: Any = None  # effects.Ablation to apply (the grid then shows the changed run)


class Worker(Runner):
    sigModelsFound = Signal(object)  # list[ModelInfo] from find_models (empty when the scan failed)
    _sigSubmit = Signal()  # queued to itself (Qt posts a repaint at a lower priority, runs timers after)

    def __init__(self, state, debounce_ms: int = 0, parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(debounce_ms)
        self._timer.timeout.connect(self._submit_compute)
        self._sigSubmit.connect(self._submit_compute, Qt.ConnectionType.QueuedConnection)
        self._pending: ComputeRequest | None = None
        self._last_text = ""  # the text of the last run submitted (what the model's cache holds)
        self._first_run = True  # no result of the state's model shown yet: its runs keep a trace
        self.preview_timing = PreviewTiming()  # whether a run's first layers are worth handing over early

    # --- attention runs -----------------------------------------------------------------------
    def follow_state(self) -> None:
        """Run what the state asks for, connected here once (app.assemble): a new text after the
        debounce; a new model or training step at once; and at once when a view wants what the
        result lacks (value norms for Value-weighted, layer inputs for the Anatomy tab)."""
        st = self.state
        st.sigTextChanged.connect(lambda _text: self.request_compute())
        st.sigModelChanged.connect(self._on_model)
        st.sigCheckpointChanged.connect(self._on_checkpoint)
        st.sigModelChanged.connect(self._load_checkpoints)
        st.sigDisplayChanged.connect(self._compute_what_is_missing)
        st.sigInputsWantedChanged.connect(self._compute_what_is_missing)
        st.effects.sigAblationChanged.connect(self._compute_what_is_missing)
        st.effects.sigWantedChanged.connect(self._compute_what_is_missing)
        st.sigGuideWanted.connect(self.request_guide)
        st.sigGuideDropped.connect(self.cancel_guide)
        self.follow_scores()
        from attnviz.ui.machinery.effects_jobs import EffectsJobs

        self.effects_jobs = EffectsJobs(self)  # prediction, lens, DLA, the scan: what heads do
        from attnviz.ui.machinery.long_jobs import LongJobs

        self.long_jobs = LongJobs(self)  # long texts (overviews) and generation
        from attnviz.ui.machinery.compare_jobs import CompareJobs

        self.compare_jobs = CompareJobs(self)  # model B beside A, per keystroke

    def _on_checkpoint(self, _index) -> None:
        """Another training step of A: an open Compare follows the new A from the run asked for
        here (B's first of it), so that run and its comparison are the new A's alone."""
        compare = getattr(self, "compare_jobs", None)
        if compare is not None:
            compare.a_changed()
        self.request_compute(immediate=True)

    def _on_model(self, model) -> None:
        self._first_run = True
        if model is not None:
            self.request_compute(immediate=True)

    def _compute_what_is_missing(self, *_) -> None:
        st, r = self.state, self.state.result
        if r is not None and ((st.value_weighted and r.value_norms is None)
                              or (st.inputs_wanted and r.layer_inputs is None) or st.effects.lacks(r)
                              or compare_lacks(self, r)):
            self.request_compute(immediate=True)

    def request_compute(self, immediate: bool = False) -> ComputeRequest | None:
        """Snapshot the state's model and text now; run it after the debounce interval."""
        if self.state.model is None:
            return None
        st = self.state
        eff = st.effects
        req = ComputeRequest(self.claim("compute"), st.model, st.text, time.perf_counter(),
                             values=st.value_weighted, inputs=st.inputs_wanted,
                             trace=eff.ablation.active or self._prediction_read(st.model, eff.wanted)
                             or compare_lacks(self, None),
                             ablation=eff.ablation)
        self._pending = req
        if immediate:
            self._timer.stop()
            self._submit_compute()
        elif self._timer.interval() > 0:
            self._timer.start()
        else:  # (a later call of this pass finds the newest request taken: it does nothing)
            self._sigSubmit.emit()
        return req

    def _prediction_read(self, model, wanted: bool) -> bool:
        """Whether a run of causal `model` keeps what prediction reads (z, the residual stream):
        while What heads do is shown, and until the model's first result is in. The side panels
        are built after that first result, and What heads do, shown then (restored as the open tab,
        or picked), analyses that run instead of running the text again."""
        return model.config.causal and (wanted or self._first_run)

    def _submit_compute(self) -> None:
        req, self._pending = self._pending, None
        if req is None:
            return
        long_jobs = getattr(self, "long_jobs", None)  # (a runner that does not follow the state: none)
        self._last_text = req.text
        depth = self.preview_timing.depth(req.model, self.state.preview_depth())  # early hand-over
        early = None if depth is None else (depth, lambda part: self.post(self._on_preview, req, part))

        # a run that a newer keystroke replaced stops at its next layer (its result would be
        # dropped): on a large model the newest text's run starts a layer later, not a run later
        stale = lambda: not self.is_newest("compute", req.id)  # noqa: E731

        # the engine tokenises the text once and decides there whether it is long: a long text
        # runs as long_jobs.long_run says (a longdoc.LongRun: patterns on demand)
        request = RunRequest(truncate=True, values=req.values, inputs=req.inputs, stop=stale,
                             long=None if long_jobs is None else long_jobs.long_run(req),
                             dense_limit=None if long_jobs is None else long_jobs.dense_limit)
        compare = getattr(self, "compare_jobs", None)  # B's run queued behind this one (or kept for a B)
        # (an encoder's run is whole: its model's first is kept for a B, the residual stream with
        # it; the runs typed after it keep none, which would cost each its last layer's rest)
        kept = compare is not None and (req.trace or (self._first_run and not req.model.config.causal))
        handoff = compare.handoff(req.id, request.dense_limit, req.model) if kept else None

        def run():  # Model.run refuses non-finite weights itself, naming the layer
            # BLAS on every core for the window's runs: a causal model's keystroke streams every
            # weight, and two cores read memory faster than one; an encoder's run is shorter too
            # (benchmarks/typing_latency.py measures both, in turns of 1 and 2 threads)
            with wide_blas():
                if req.trace:  # clean and changed runs (engine/analysing/effects.py): a WindowRun
                    from attnviz.engine.analysing.effects import window_run

                    # the clean run's first layers are what the grid shows unless heads are off
                    shown = request if req.ablation.active else replace(request, early=early)
                    out = window_run(req.model, req.text, request=shown, ablation=req.ablation,
                                     ran=None if handoff is None else handoff.ran)
                    return out if handoff is None else handoff.keep(out)
                if handoff is not None:  # (an encoder's run)
                    return handoff.kept_run(req.model, req.text, replace(request, early=early))
                return req.model.run(req.text, request=replace(request, early=early))
        self.submit("compute", run, self._on_computed, req, POOL, job_id=req.id)
        if handoff is not None:  # (its job on the pool's one thread, after this one)
            compare.follow(handoff)

    def _on_preview(self, req: ComputeRequest, partial) -> None:
        """A run's first layers, on the main thread: shown while it is still the newest run of the
        state's model and text (its result replaces them)."""
        st = self.state
        if self.is_newest("compute", req.id) and req.model is st.model and req.text == st.text:
            st.set_preview(partial)

    def _on_computed(self, req: ComputeRequest, result, error) -> None:
        if req.model is not self.state.model:
            return  # another model is already on its way
        if error is not None:
            if not req.text.strip():
                self.state.set_result(None)  # an empty sentence is a valid, empty state
            self.state.report_compute(req, describe_error(error))
            return
        from attnviz.engine.analysing.effects import WindowRun

        if not req.trace:  # (a run kept for the analysis: after it, effects_jobs)
            make_vocabulary_whole(self, req.model)
        if isinstance(result, LongRun):  # shown by the long view; the dense views show none
            self.state.long.set_run(result)
            self.state.set_result(None)
            self.state.report_compute(req)
            return
        self._first_run = False
        self.state.long.set_run(None)
        changed = False
        if isinstance(result, WindowRun):  # the run the effects views asked for (clean and changed)
            self.state.effects.set_run(result)
            changed, result = result.changed is not None, result.result
        if not changed:  # (a changed run's time counts both runs: no preview is made of those)
            self.preview_timing.note(req.model, result.compute_s)
        self.state.set_result(result)  # the runner feeds the state; the widgets watch it
        self.state.report_compute(req)
        self._compute_what_is_missing()  # a view may have asked for more while this run was on its way

    # === head scores ('roles' jobs: ui/machinery/score_jobs.py) ================================
    def follow_scores(self) -> None:
        """Score what the state's roles options ask for (follow_state connects it)."""
        from attnviz.ui.machinery.score_jobs import ScoreJobs

        self.score_jobs = ScoreJobs(self)

    def scores_after_frame(self) -> None:
        """The frame that follows a result is painted (Compare's comparison): the quick text
        scores that wait for it follow (ScoreJobs.scores_after_frame)."""
        jobs = getattr(self, "score_jobs", None)  # None: a runner that does not follow the state
        if jobs is not None:
            jobs.scores_after_frame()

    def flush_scores(self) -> None:
        """Score the text now if it waits for typing to pause (tests, before wait_idle)."""
        jobs = getattr(self, "score_jobs", None)  # None: a runner that does not follow the state
        if jobs is not None:
            jobs.flush_scores()

    # --- the guide bar's head ('guide' jobs) ---------------------------------------------------
    def request_guide(self, sample, result, scores=None) -> None:
        """Find the head of the state's model that shows `sample` best in `result` (engine.analysing.samples
        .guide, with the state's head scores of that result for a roles sample) on the pool; the
        newest wins, and its guide lands in the state (set_guide)."""
        from attnviz.engine.analysing.samples import guide

        self.submit(GUIDE_KIND, lambda: guide(sample, result, scores=scores), self._on_guide,
                    (sample, result, self.state.model))

    def cancel_guide(self) -> None:
        self.cancel(GUIDE_KIND)

    def _on_guide(self, request, value, error) -> None:
        sample, result, model = request
        if model is not self.state.model:
            return  # found for a model no longer shown
        self.state.set_guide(sample, None if error is not None else value,
                             "" if error is None else describe_error(error), result)

    # --- model loads --------------------------------------------------------------------------
    def load(self, source: str, text: str | None = None) -> LoadRequest:
        """Load a model (name, folder or file) on a thread of its own; the newest load wins. The
        model shown until then stays usable: runs on it go on in the pool. `text`: the text the
        window will run first (default: the state's), which its tokenizer is built for first
        (ui/machinery/loading.py)."""
        req = LoadRequest(self.claim("load"), str(source), self.state.text if text is None else str(text))
        self.state.set_loading(req.source)
        self.submit("load", lambda: load_checked(req.source, req.text), self._on_load_done, req, THREAD,
                    job_id=req.id)
        return req

    def cancel_load(self) -> str | None:
        """Stop waiting for the running load (see cancel); returns its source, or None when no
        load was running. The current model stays."""
        job = self.cancel("load")
        if job is None:
            return None
        self.state.set_loading("")
        self.state.report_load(job.request.source, "cancelled")
        return job.request.source

    def _on_load_done(self, req: LoadRequest, model, error) -> None:
        self.state.set_loading("")
        if error is not None:
            outcome = "budget" if isinstance(error, BudgetTooSmall) else "failed"
            self.state.report_load(req.source, outcome, describe_error(error))
            return
        self.state.set_model(model, source=req.source)
        self.state.report_load(req.source, "loaded")

    # --- training checkpoints -----------------------------------------------------------------
    def _load_checkpoints(self, model) -> None:
        """A model with training checkpoints (a checkpoints.json in its folder: engine/checkpoints)
        gets them loaded and every checkpoint's weights preloaded on a thread of its own (it reads
        files); the runner hands them to the state, for the model they belong to only."""
        from attnviz.engine.computing.checkpoints import CHECKPOINTS_FILE

        path = getattr(model, "path", None)
        if model is None or path is None or not (path / CHECKPOINTS_FILE).is_file():
            self.cancel("checkpoints")
            return
        self.submit("checkpoints", lambda: checkpoints_of(model), self._on_checkpoints, model, THREAD)

    def _on_checkpoints(self, model, ckpts, error) -> None:
        if model is not self.state.model:
            return  # another model is shown now: its checkpoints, if any, are loading
        if error is not None:
            log.warning("checkpoints of %s unavailable: %s", model.name, error)
            self.state.show_status(failure("Could not read the training checkpoints", describe_error(error)))
        else:
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
