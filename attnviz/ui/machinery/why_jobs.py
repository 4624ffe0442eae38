"""The runner's jobs for Why here? and Circuits (the panels: ui/panels/why_panel.py,
ui/panels/circuits_panel.py), through the app's one runner (Worker), newest wins per kind.

- Why here? ('why'): one cell's QK attribution (engine/analysing/qk.py) on the pool, WHY_DELAY_MS
  after the result it reads (typing on restarts the wait; a keystroke makes a queued job stale, so
  typing never waits for it). It reads a trace that kept z and the residual stream: the What heads
  do run of the result where there is one, else a run of the result's own token ids made here and
  kept for the next cell of the same text. The cell is kept by position while the text has it.
- circuits ('circuits'): the weight-space scores of the model (engine/analysing/circuits.py) on a
  thread of their own, with progress, once per model or training step (kept while it lives); new
  weights (another model or step) stop the old one's at the next layer.
- ov top ('ov-top'): what the focused head writes for a picked token, on the pool."""

from __future__ import annotations

import logging
import weakref

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from attnviz.engine.reading.token_text import tokens
from attnviz.engine.errors import Cancelled, InputError
from attnviz.ui.machinery.runner import POOL, THREAD, describe_error, failure
from attnviz.engine.computing.request import RunRequest

log = logging.getLogger(__name__)

WHY_KIND, CIRCUITS_KIND, OV_KIND = "why", "circuits", "ov-top"
WHY_DELAY_MS = 50  # the attribution follows a new result once results pause this long (typing)
OV_TOP = 10


class WhyJobs(QObject):
    """The Why here? cell (layer, head, query, key), its attribution and why there is none."""

    sigChanged = Signal()  # cell, attribution, note or busy changed

    def __init__(self, state, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.cell: tuple[int, int, int, int] | None = None
        self.attribution = None  # qk.QKAttribution of `cell` on the state's result
        self.attributed = None  # the RunResult `attribution` is of (an older one until the rerun)
        self.attributed_by = None  # the model (training step) `attribution` was computed with
        self.note = "Click a cell of the focused head (or right-click it: Why here?)."
        self.busy = False
        self.shown = False
        self._trace = None  # (model, input ids, Trace): the last run made here
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(WHY_DELAY_MS)
        self._timer.timeout.connect(self.request)
        state.sigResultChanged.connect(self._on_result)
        state.sigTextChanged.connect(self._on_text)
        state.sigModelChanged.connect(self._on_model)

    # --- what the panel sets -------------------------------------------------------------------
    def set_shown(self, shown: bool) -> None:
        """The panel in sight or not; shown, it computes what it lacks: an attribution, or one of
        the weights shown (the training step moved while it was hidden)."""
        self.shown = bool(shown)
        if self.shown and self.cell is not None and not self.busy and (
                self.attribution is None or self.attributed_by is not self.state.model):
            self.request()

    def set_cell(self, layer: int, head: int, query: int, key: int) -> None:
        cell = (int(layer), int(head), int(query), int(key))
        if cell == self.cell and self.attribution is not None:
            return
        self.cell, self.attribution = cell, None
        self.request()

    # --- following the state -------------------------------------------------------------------
    def _on_text(self, _text) -> None:
        self.worker.claim(WHY_KIND)  # a queued or running attribution is of the old text
        self._timer.stop()

    def _on_model(self, _model) -> None:
        self.worker.cancel(WHY_KIND)
        self._trace = None
        self.cell, self.attribution, self.busy = None, None, False
        self.note = "Click a cell of the focused head (or right-click it: Why here?)."
        self.sigChanged.emit()

    def _on_result(self, result) -> None:
        """A new result: the cell stays where it was while the text still has those positions."""
        if result is None or self.cell is None:
            return
        layer, head, q, k = self.cell
        T = len(result.tokens)
        if max(q, k) >= T or layer >= result.attentions.shape[0]:
            self.cell, self.attribution = None, None
            self.note = (f"The cell (query {q}, key {k}) is gone: the text has {tokens(T)}. "
                         "Click a cell of the focused head.")
            self.sigChanged.emit()
            return
        self._timer.start()

    # --- the job ------------------------------------------------------------------------------
    def _trace_of(self, result):
        """A held trace with z and the residual stream of exactly `result`'s run, or None."""
        st = self.state
        run = st.effects.run_of(result)
        if run is not None:
            return run.shown
        held = self._trace
        if held is not None and held[0] is st.model and np.array_equal(held[1], result.input_ids):
            return held[2]
        return None

    def request(self) -> None:
        from attnviz.engine.analysing.qk import check_cell, qk_attribution, qk_trace

        self._timer.stop()
        st, r = self.state, self.state.result
        if not self.shown or self.cell is None or r is None or st.model is None or r.text != st.text:
            return
        model = st.model
        try:
            check_cell(model.config, len(r.tokens), *self.cell)
        except InputError as exc:
            self.worker.cancel(WHY_KIND)
            self.attribution, self.busy, self.note = None, False, str(exc)
            self.sigChanged.emit()
            return
        cell, held = self.cell, self._trace_of(r)
        ids = np.asarray(r.input_ids).copy()
        job_id = self.worker.claim(WHY_KIND)

        def work():
            trace = held
            if trace is None:  # the run as the window made it, keeping z and the stream
                trace = qk_trace()
                stale = lambda: not self.worker.is_newest(WHY_KIND, job_id)  # noqa: E731
                model.run(ids=ids, trace=trace, request=RunRequest(truncate=True, stop=stale))
            return trace, qk_attribution(model, trace, *cell)

        self.busy = True
        self.sigChanged.emit()
        self.worker.submit(WHY_KIND, work, self._on_done, (model, r, cell, ids), POOL, job_id=job_id)

    def _on_done(self, request, value, error) -> None:
        model, result, cell, ids = request
        st = self.state
        if model is not st.model or result is not st.result or cell != self.cell:
            return
        self.busy = False
        if error is not None:
            self.attribution, self.note = None, describe_error(error)
        else:
            trace, self.attribution = value
            self.attributed, self.attributed_by = result, model
            if st.effects.run_of(result) is None:
                self._trace = (model, ids, trace)
            self.note = ""
        self.sigChanged.emit()


class CircuitsJobs(QObject):
    """The model's circuit scores, computed once per model; the OV top tokens of a head."""

    sigChanged = Signal()  # scores, note or running changed
    sigProgress = Signal(int, int)  # steps done, steps in all
    sigOvChanged = Signal()
    _sigProgress = Signal(int, int, int)  # job id, done, total (from the job's thread)

    def __init__(self, state, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self._cache: list[tuple[weakref.ref, object]] = []  # (model, Circuits), newest last
        self.circuits = None  # the state's model's, once computed
        self.note = ""
        self.running = False
        # (layer, head, token id, token text, [(id, text, logit)], at): `at` (query, its label,
        # key, weight) where the token is the head's top key at a picked query, else None
        self.ov = None
        self.ov_note = ""
        self._job_id = None
        self._sigProgress.connect(self._on_progress)
        state.sigWeightsChanged.connect(self._on_model)  # (a training step's scores are its own)

    def cached(self, model):
        for ref, c in self._cache:
            if ref() is model:
                return c
        return None

    def _on_model(self, model) -> None:
        self.ov, self.ov_note = None, ""
        self.worker.cancel(OV_KIND)
        self.circuits = None if model is None else self.cached(model)
        self.note = ""
        if self.running:
            self._job_id = None
            self.worker.cancel(CIRCUITS_KIND)
            self.running = False
        self.sigChanged.emit()
        self.sigOvChanged.emit()

    def request(self) -> None:
        """Compute the state's model's scores unless they are held or under way."""
        from attnviz.engine.analysing.circuits import circuits

        model = self.state.model
        if model is None or self.circuits is not None or self.running:
            return
        job_id = self._job_id = self.worker.claim(CIRCUITS_KIND)

        def progress(done, total):  # (on the job's thread) stops at the next layer once stale
            if self._job_id != job_id:
                raise Cancelled("circuits of another model")
            self._sigProgress.emit(job_id, done, total)

        def work():
            try:
                return circuits(model, progress=progress)
            except Cancelled:
                return None

        self.running, self.note = True, ""
        self.sigChanged.emit()
        self.worker.submit(CIRCUITS_KIND, work, self._on_done, weakref.ref(model), THREAD, job_id=job_id)

    def _on_progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self._job_id:
            self.sigProgress.emit(done, total)

    def _on_done(self, model_ref, value, error) -> None:
        model = model_ref()
        if model is None or model is not self.state.model or (error is None and value is None):
            return
        self.running, self._job_id = False, None
        if error is not None:
            self.note = failure("Could not compute the circuit scores", describe_error(error))
            if not isinstance(error, InputError):
                log.warning("circuits failed: %s", self.note)
        else:
            self._cache = [(r, c) for r, c in self._cache if r() is not None][-3:]
            self._cache.append((model_ref, value))
            self.circuits = value
        self.sigChanged.emit()

    def request_ov(self, layer: int, head: int, token: int, text: str, at=None) -> None:
        """What (layer, head) writes when it attends to `token`, once the model's scores say it has
        an unembedding (an encoder has none: ov_top would refuse it); `at`: (query, its label, key,
        weight) where `token` is the head's top key at that query."""
        from attnviz.engine.analysing.circuits import ov_top

        model = self.state.model
        if model is None or self.circuits is None or self.circuits.copying is None:
            return
        self.worker.submit(OV_KIND, lambda: ov_top(model, layer, head, token, OV_TOP), self._on_ov,
                           (model, layer, head, token, text, at), POOL)

    def _on_ov(self, request, value, error) -> None:
        model, layer, head, token, text, at = request
        if model is not self.state.model:
            return
        if error is not None:
            self.ov, self.ov_note = None, describe_error(error)
        else:
            self.ov, self.ov_note = (layer, head, token, text, value, at), ""
        self.sigOvChanged.emit()
