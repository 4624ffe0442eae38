"""The runner's kinds of job for what heads do (the state's section is ui/machinery/effects_state.py): the
analysis of the query position (prediction, lens, DLA) after each run these views asked for, the
full lens grid on demand, and the ablation scan. All go through the app's one runner (Worker),
newest wins per kind; results are written into `state.effects`.

- analysis ('effects'): on the pool, ANALYSIS_DELAY_MS after a new run (typing on restarts the
  wait, and a keystroke makes a queued analysis stale, so a burst of typing costs the grid nothing),
  at once for a new query position or typed token. A model's first run (which keeps what prediction
  reads: Worker._prediction_read) is analysed even while the panel is hidden, so the panel, built
  after that run and shown then, has its result without waiting; once shown it analyses again only
  what it lacks. That first analysis starts as the result arrives, on a thread of its own below the
  main thread: not after the pause, which the main thread's first paint and the side panels' build
  would hold up, nor on the pool ahead of the first head scores.
- after an analysis (AFTER_ANALYSIS_MS later: its prediction is painted first), on threads of
  their own below the main thread: the model's tokenizer made whole where its load built it for
  the first text (ui/machinery/loading.py make_vocabulary_whole), the kernels' serial twins and
  one-row steps that its load left (loading.py warm_the_rest), and the unembedding packed
  for the kernels ('head-pack') where the model's head has a packed copy still to make
  (engine/computing/logits.py makes it when a few rows' logits first ask): a keystroke, a
  generation or a comparison's keystroke then finds them made, and the first analysis did not
  wait for them.
- lens grid ('lens-grid'): on the pool, when the user asks; asked while a newer run is on its way
  (a keystroke's, a changed ablation's), it follows that run (a grid of the run before would be
  cleared the moment the newer one arrives). A keystroke while one is made stops it at its next
  layer (the keystroke's run would queue behind it), and the keystroke's run gets it instead.
- scan ('scan'): a thread of its own, not the pool: 270 forward passes would hold the typing runs
  up for seconds. It reports progress from its first head, and checks between heads whether it is
  still the newest scan (cancel, or a new scan, stops it there)."""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import QObject, QTimer, Signal

from attnviz.engine.parallel import cores
from attnviz.engine.errors import InputError, ModelFileChanged, NoPrediction
from attnviz.ui.machinery.loading import make_vocabulary_whole, warm_the_rest
from attnviz.ui.machinery.runner import POOL, THREAD, describe_error, failure
from attnviz.ui.machinery.tuning import below_the_main_thread

log = logging.getLogger(__name__)

ANALYSIS_KIND, LENS_GRID_KIND, SCAN_KIND = "effects", "lens-grid", "scan"
PACK_KIND = "head-pack"
AFTER_ANALYSIS_MS = 200  # an analysis's background work (_after_analysis) waits for its paint this long
ANALYSIS_DELAY_MS = 50  # the analysis follows a new run once results pause this long (typing)
SCAN_SOURCES = ("text", "probe")
# The scan's threads (one BLAS thread each, the app's cap): every core but one, which stays free
# for the typing runs and the main thread (1 on a 2-core machine).
SCAN_THREADS = max(1, cores() - 1)  # the typed text (next-token loss) or the repeated-random probe


def analyse_typed(model, run, pos, target: str, alt: str, stop=None) -> tuple:
    """effects.analyse at query `pos` for the typed tokens -> (analysis, note); tokens that do not
    fit this model fall back to the top two, with the note saying why."""
    from attnviz.engine.analysing.effects import analyse

    try:
        return analyse(model, run, pos, target, alt, stop=stop), ""
    except InputError as exc:
        if not (target.strip() or alt.strip()):
            raise
        return analyse(model, run, pos, stop=stop), f"{exc}; showing the top two instead"


class EffectsJobs(QObject):
    _sigProgress = Signal(int, int, int)  # job id, done, total (emitted from the scan's thread)

    def __init__(self, worker):
        super().__init__(worker)
        self.worker = worker
        self.state = st = worker.state
        eff = st.effects
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(ANALYSIS_DELAY_MS)
        self._timer.timeout.connect(self.request_analysis)
        self._after = QTimer(self)  # an analysis in: the work that waits for its paint (_after_analysis)
        self._after.setSingleShot(True)
        self._after.setInterval(AFTER_ANALYSIS_MS)
        self._after.timeout.connect(self._after_analysis)
        self._scan_id = None  # the newest scan's job id (None: none running)
        self.last_analysis_s = 0.0  # the last analysis job's own time (benchmarks)
        self._ahead = True  # the model's first run is still to be analysed, the panel shown or not
        self._grid_wanted = False  # the lens grid was asked for while a newer run was on its way
        self._sigProgress.connect(self._on_progress)
        eff.sigRunChanged.connect(self._on_run)
        eff.sigLensGridWanted.connect(self.request_lens_grid)
        eff.sigScanWanted.connect(self.request_scan)
        eff.sigScanStopWanted.connect(self.cancel_scan)
        eff.sigTokensChanged.connect(self.request_analysis)
        eff.sigWantedChanged.connect(lambda on: on and self._on_shown())
        st.sigQueryChanged.connect(lambda _q: self.request_analysis())
        st.sigTextChanged.connect(self._on_text)
        st.sigModelChanged.connect(self._on_model)
        st.sigWeightsChanged.connect(lambda _m: self.cancel_scan())  # (another training step too)
        st.sigResultChanged.connect(self._on_result)  # (connected before the views: called first)

    def _on_model(self, _model) -> None:
        self.worker.cancel(ANALYSIS_KIND)
        self._ahead = True
        self._grid_wanted = False

    def _on_shown(self) -> None:
        """The panel shown: analysed now, unless the analysis of what it shows is there already
        or on its way (made ahead, from the model's first run)."""
        st = self.state
        if st.effects.analysis_of(st.result) is None and not self._on_its_way():
            self.request_analysis()

    def _on_its_way(self) -> bool:
        """Whether the newest analysis job is still running and is of what the window shows now
        (its run, query position and typed tokens)."""
        st, eff = self.state, self.state.effects
        job = self.worker.running(ANALYSIS_KIND)
        run = eff.run_of(st.result)
        if job is None or run is None or run.ablation != eff.ablation:
            return False
        model, of_run, pos, target, alt = job.request
        return model is st.model and of_run is run and (pos, target, alt) == (st.query_pos, eff.target, eff.alt)

    def _on_text(self, _text) -> None:
        """A keystroke: a queued or running analysis is stale, and one waiting for results to pause
        is not started (it would analyse the run of the text before the keystroke, holding up the
        keystroke's own run on the pool); a lens grid being made stops at its next layer and is
        made for the keystroke's run instead."""
        self.worker.claim(ANALYSIS_KIND)
        self._timer.stop()
        if self.worker.cancel(LENS_GRID_KIND) is not None:  # asked for the text shown: for the new one
            self._grid_wanted = True

    def _on_run(self, run) -> None:
        """A new run: an analysis of the previous one still running is stale (it stops at its next
        check), and this run's follows once results pause; a lens grid asked for meanwhile is
        this run's when it is of the text and ablation the window has now."""
        self.worker.claim(ANALYSIS_KIND)
        self._timer.start()
        if self._grid_wanted and run is not None and self._is_current(run):
            self._grid_wanted = False
            self._lens_grid_of(run)

    def _on_result(self, result) -> None:
        """The model's first run shown: its analysis (ahead) starts now, before the views paint."""
        if self._ahead and result is not None and self.state.effects.run_of(result) is not None:
            self.request_analysis()

    def _is_current(self, run) -> bool:
        """Whether `run` is of the window's text and ablation (no newer run is on its way for it)."""
        st = self.state
        return run.result.text == st.text and run.ablation == st.effects.ablation

    def flush(self) -> None:
        """Analyse now if the analysis waits for results to pause (tests, before wait_idle)."""
        if self._timer.isActive():
            self.request_analysis()

    # --- the analysis of the query position ------------------------------------------------------
    def request_analysis(self) -> None:
        self._timer.stop()
        st, eff = self.state, self.state.effects
        run = eff.run_of(st.result)
        if not (eff.wanted or self._ahead) or run is None or st.result.text != st.text:  # (a newer text is on its way)
            self.worker.cancel(ANALYSIS_KIND)
            return
        lane = THREAD if self._ahead else POOL  # (the first: module docstring)
        self._ahead = False
        model, pos, target, alt = st.model, st.query_pos, eff.target, eff.alt
        job_id = self.worker.claim(ANALYSIS_KIND)
        stale = lambda: not self.worker.is_newest(ANALYSIS_KIND, job_id)  # noqa: E731  (a keystroke)

        def work():  # stops between blocks of the unembedding once stale (Cancelled, unheard)
            if lane == THREAD:
                below_the_main_thread()
            t0 = time.perf_counter()
            return (*analyse_typed(model, run, pos, target, alt, stop=stale), time.perf_counter() - t0)
        self.worker.submit(ANALYSIS_KIND, work, self._on_analysis, (model, run, pos, target, alt), lane,
                           job_id=job_id)

    def _on_analysis(self, request, value, error) -> None:
        model, run = request[:2]
        st, eff = self.state, self.state.effects
        if model is not st.model or run is not eff.run:
            return
        self._after.start()  # (the first prediction painted before the background work starts)
        if error is not None:
            eff.set_analysis(None, describe_error(error))
            if not isinstance(error, (NoPrediction, InputError)):
                log.warning("analysis failed: %s", describe_error(error))
            return
        analysis, note, self.last_analysis_s = value
        eff.set_analysis(analysis, note, of=request[1:])

    def _after_analysis(self) -> None:
        """What an analysis's model still has to make, on threads of their own: its tokenizer for
        every text (a load built it for one: loading.py), the rest of its kernels' warm-up and its
        head's copy for the kernels."""
        model = self.state.model
        if model is None:
            return
        make_vocabulary_whole(self.worker, model)
        warm_the_rest(self.worker, model)
        self._pack_head(model)

    def _pack_head(self, model) -> None:
        """The head's copy packed for the kernels made now, where it is still to make (module
        docstring)."""
        try:
            pack = model.lm_head().pack
        except (NoPrediction, ModelFileChanged):  # (an analysis of this model said so already)
            return
        if pack is None or pack.made or self.worker.running(PACK_KIND) is not None:
            return

        def work():
            below_the_main_thread()
            pack.get()
        self.worker.submit(PACK_KIND, work, lambda *_: None, model, THREAD)

    # --- the full lens grid, on demand -------------------------------------------------------------
    def request_lens_grid(self) -> None:
        """The lens grid of the run shown, or, while a newer text's or ablation's run is on its way,
        of that run once it arrives (_on_run)."""
        st, eff = self.state, self.state.effects
        run = eff.run_of(st.result)
        if st.model is None or st.result is None and (not st.text.strip() or st.long.run is not None):
            return  # (no run of these views will come: no text, or a long text's run)
        if run is None or not self._is_current(run):
            self._grid_wanted = True
            return
        self._grid_wanted = False
        self._lens_grid_of(run)

    def _lens_grid_of(self, run) -> None:
        from attnviz.engine.analysing.predict import lens_grid
        from attnviz.engine.computing.model import token_text

        model = self.state.model
        job_id = self.worker.claim(LENS_GRID_KIND)
        stale = lambda: not self.worker.is_newest(LENS_GRID_KIND, job_id)  # noqa: E731  (a keystroke)

        def work():
            ids, lps = lens_grid(model.lm_head(), run.shown, stop=stale)
            labels = {int(i): token_text(model, int(i)) for i in set(ids.reshape(-1).tolist())}
            return ids, lps, labels
        self.worker.submit(LENS_GRID_KIND, work, self._on_lens_grid, run, POOL, job_id=job_id)

    def _on_lens_grid(self, run, value, error) -> None:
        eff = self.state.effects
        if run is not eff.run:
            return
        if error is not None:
            eff.set_note(failure("Could not compute the lens grid", describe_error(error)))
            return
        eff.set_lens_grid(value)

    # --- the scan -------------------------------------------------------------------------------
    def request_scan(self, source: str = "text") -> None:
        """Zero-ablate every head in turn on the typed text (loss: -log p(target) at the query
        position) or on the repeated-random probe (loss: the repeat loss), on a thread of its own."""
        from attnviz.engine.analysing.ablation import ablation_scan
        from attnviz.engine.errors import Cancelled
        from attnviz.engine.analysing.effects import token_id
        from attnviz.engine.analysing.probes import probe_ids

        st, eff = self.state, self.state.effects
        model = st.model
        if model is None:
            return
        if source == "text" and st.result is None:
            eff.set_scan(None, note="Nothing to scan yet: type a text")
            return
        ids = None if source == "probe" else st.result.input_ids.copy()
        pos, target = st.query_pos, eff.target
        job_id = self._scan_id = self.worker.claim(SCAN_KIND)  # before the thread starts: it reads it

        def work():
            try:
                return scan()
            except Cancelled:  # stopped between heads: nothing to report (its result is dropped)
                return None

        def scan():
            head = model.lm_head()
            if source == "probe":
                probe, _note = probe_ids(model)
                what = "the repeated-random probe, repeat loss (mean −log p over the second copy)"
                return ablation_scan(model, head, probe, "repeat", progress=progress,
                                     cancelled=cancelled, threads=SCAN_THREADS), what
            t = token_id(model, target) if target.strip() else None
            scan = ablation_scan(model, head, ids, "next", pos, t, progress=progress, cancelled=cancelled,
                                 threads=SCAN_THREADS)
            return scan, "the typed text, −log p(target) after the query token"

        def progress(done, total):
            self._sigProgress.emit(job_id, done, total)

        def cancelled():  # (read on the scan's thread: one attribute)
            return self._scan_id != job_id

        eff.set_scan(eff.scan, eff.scan_what, running=True)
        self.worker.submit(SCAN_KIND, work, self._on_scan, model, THREAD, job_id=job_id)

    def cancel_scan(self) -> None:
        self._scan_id = None
        if self.worker.cancel(SCAN_KIND) is not None:
            eff = self.state.effects
            eff.set_scan(eff.scan, eff.scan_what, note="Scan cancelled")

    def _on_progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self._scan_id:
            self.state.effects.sigScanProgress.emit(done, total)

    def _on_scan(self, model, value, error) -> None:
        eff = self.state.effects
        if model is not self.state.model or (error is None and value is None):
            return
        self._scan_id = None
        if error is not None:
            eff.set_scan(None, note=failure("The scan failed", describe_error(error)))
            return
        scan, what = value
        eff.set_scan(scan, what)
