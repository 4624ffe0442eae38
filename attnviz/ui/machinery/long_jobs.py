"""The runner's jobs for long texts and generation (state in ui/machinery/long_state.py):

- a text whose patterns at once would pass the engine's dense limit (longdoc.DENSE_LIMIT, the
  limit Model.run refuses over) runs as a long run (longdoc.run_long), with progress per layer and
  cancelled between layers once a newer run is asked for (`run_long`, called from the worker's
  compute job);
- the overviews the long view shows ('overview-pane': the focused head at the pane's size, first;
  'overview-tiles': every head of the layer), cells of the one display model (LongState.shown:
  figures/view.Shown.cells under the state's Hide first token and Value-weighted), newest wins,
  cancelled between row blocks when stale; the last good images stay until the new ones come;
- a generation ('generate', on a thread of its own: it streams its steps to the main thread as they
  come; Stop and an edit of the text end it after the step under way)."""

from __future__ import annotations

import bisect
import threading
import weakref

from PySide6.QtCore import QObject, QTimer

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.engine.computing.longdoc import DENSE_LIMIT
from attnviz.engine.errors import Cancelled
from attnviz.ui.machinery.loading import warm_the_rest
from attnviz.ui.machinery.runner import POOL, THREAD, describe_error, failure
from attnviz.ui.machinery.tuning import capped_blas

PANE_KIND, TILES_KIND, GENERATE_KIND = "overview-pane", "overview-tiles", "generate"
TOP_K = 10  # the predictions each step keeps (the panel lists them)
ROWS_LIMIT = 1 << 30  # bytes a generation may keep: its steps' attention rows, its K and V
OVERVIEW_DELAY_MS = 15  # view changes (a wheel turning) are gathered this long into one overview


def new_text(model, prompt_text: str, prompt_ids: list[int], new_ids: list[int]) -> str:
    """The sentence with the generated tokens: the prompt as typed and what the new tokens add to
    its decoding (special tokens such as the end of text left out). A model without a tokenizer
    types ids: they are appended as ids (Model.decode)."""
    before = model.decode(prompt_ids, skip_special=True)
    after = model.decode(list(prompt_ids) + list(new_ids), skip_special=True)
    return prompt_text + (after[len(before):] if after.startswith(before) else
                          model.decode(new_ids, skip_special=True))


def generation_bytes(cfg, T: int, n: int) -> tuple[int, int]:
    """(bytes of the attention rows n steps after a prompt of T tokens keep, [n_layer, n_head, t]
    float32 for t = T..T+n-1; the most bytes their K and V arrays hold at once, room and copies
    counted: generate.kv_positions)."""
    from attnviz.engine.computing.generate import kv_bytes_per_position, kv_positions

    rows = 4 * cfg.n_layer * cfg.n_head * (n * T + n * (n - 1) // 2)
    kv = kv_bytes_per_position(cfg) * kv_positions(T, T + n - 1)[1] if n else 0
    return rows, kv


class LongJobs(QObject):
    """The long text's and the generation's jobs on the worker (ui/machinery/worker.py), following its state."""

    def __init__(self, worker):
        super().__init__(worker)
        self.worker = worker
        self.state = worker.state
        self.long, self.gen = self.state.long, self.state.generation
        self.dense_limit = DENSE_LIMIT  # bytes of patterns over which the window runs a text as long
        self._stop = threading.Event()  # the running generation's Stop
        self._gen: dict | None = None  # the running generation: job id, model, prompt, its ids
        self._asked = None  # the figures.view.Shown the last overviews were asked of
        self._last_long = None  # (model, weakref to longdoc.LongRun): the pool's last long run,
        # the next one's prefix while the window still holds it (a dropped run is not kept alive)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(OVERVIEW_DELAY_MS)
        self._timer.timeout.connect(self.request_overviews)
        st, lg = self.state, self.long
        lg.sigRunChanged.connect(self._on_run)
        lg.sigViewChanged.connect(self._timer.start)
        st.sigLayerChanged.connect(lambda _l: lg.run is not None and self._timer.start())
        st.sigFocusChanged.connect(lambda _f: lg.run is not None and self._timer.start())
        st.sigDisplayChanged.connect(self._on_display)  # Hide first token, Value-weighted
        self.gen.sigStopWanted.connect(self._stop_generation)
        self.gen.sigStartWanted.connect(self._on_start_wanted)
        st.sigComputeReported.connect(  # a run that failed or gave way: no progress under way
            lambda *_: self.worker.running("compute") is None and lg.set_progress(0, 0))
        self._progress_said = False  # the status bar shows a long run's line ("computing layer i of n", "every layer computed")
        st.sigTextChanged.connect(self._unsay_progress)

    def _unsay_progress(self, *_) -> None:
        """The text changed (a short text replaced the long one, whose run gives way): the status
        bar no longer speaks of the long run (a layer being computed, or all of them done, while
        the grid shows the short text); a new long run says its own."""
        if self._progress_said:
            self._progress_said = False
            self.state.show_status("")

    # --- long runs ----------------------------------------------------------------------------
    def long_run(self, req):
        """What the worker's compute request runs as when the engine finds its text long
        (RunRequest.long): prepared -> run_long(req, prepared), BLAS back at its cap (the long
        run shares its rows out to threads of one BLAS thread each)."""
        def long(prepared):
            with capped_blas():
                return self.run_long(req, prepared)
        return long

    def run_long(self, req, text=None):
        """The worker's compute request (or `text`: its text already prepared) as a long run (on
        the pool): progress per layer, and Cancelled once a newer run is asked for. The tokens it
        shares at the start with the last long run of the same model are not computed again (a
        keystroke at the end of a long text runs its last tokens only)."""
        from attnviz.engine.computing.longdoc import run_long

        def progress(i, n):  # (is_newest, not running(): the pool may start it before submit lists it)
            if not self.worker.is_newest("compute", req.id):
                raise Cancelled("a newer text is being computed")
            self.worker.post(self._on_layer, req.id, i, n)
        last = self._last_long  # (read and written on the pool's one thread)
        reuse = last[1]() if last is not None and last[0] is req.model else None
        run = run_long(req.model, req.text if text is None else text, truncate=True,
                       progress=progress, reuse=reuse)
        self._last_long = (req.model, weakref.ref(run))
        return run

    def _on_layer(self, job_id: int, i: int, n: int) -> None:
        job = self.worker.running("compute")
        if job is not None and job.id == job_id:
            self.long.set_progress(i, 0 if i >= n else n)
            if i < n:  # (the status bar says it too while the grid still shows a dense text)
                self.state.show_status(f"Long text: computing layer {i + 1} of {n}…")
                self._progress_said = True

    def _on_run(self, run) -> None:
        self.long.set_progress(0, 0)
        if run is None:
            self.worker.cancel(PANE_KIND)
            self.worker.cancel(TILES_KIND)
        else:
            self.state.show_status(f"Long text: {tokens(run.patterns.T)}, every layer computed.")
            self._progress_said = True
            self.request_overviews()

    # --- overviews ----------------------------------------------------------------------------
    def request_overviews(self) -> None:
        """The focused head at the pane's size, then every head of the layer at the tiles' size,
        for the state's region, reduction and layer."""
        self._timer.stop()
        lg, st = self.long, self.state
        run = lg.run
        if run is None:
            return
        shown = self._asked = lg.shown()  # the state's Hide first token and Value-weighted
        layer, region, reduce = min(st.layer, shown.n_layer - 1), lg.region, lg.reduce
        head = lg.head()
        def job(kind, shape, heads):  # one overview, stopped between row blocks once stale
            job_id = self.worker.claim(kind)

            def stale():
                return not self.worker.is_newest(kind, job_id)

            def work():
                return shown.cells(layer, region, shape, reduce, heads, stale)
            self.worker.submit(kind, work, self._on_overview, (kind, run), POOL, job_id=job_id)
        job(PANE_KIND, lg.pane_px, [head])
        job(TILES_KIND, (lg.tile_px, lg.tile_px), None)

    def _on_display(self) -> None:
        """New overviews when the options change what is shown (not for a colormap or a scale)."""
        if self.long.run is not None and self.long.shown() is not self._asked:
            self._timer.start()

    def _on_overview(self, request, value, error) -> None:
        kind, run = request
        if run is not self.long.run:
            return
        if error is not None:
            if not isinstance(error, Cancelled):
                self.state.show_status(failure("Could not draw the overview", describe_error(error)))
            return
        self.long.set_images(**({"pane": value} if kind == PANE_KIND else {"tiles": value}))

    # --- generation ---------------------------------------------------------------------------
    def _on_start_wanted(self, req) -> None:
        from attnviz.engine.errors import AttnvizError

        try:
            self.generate(*req)
        except AttnvizError as exc:  # refused before anything started: the panel says why
            self.gen.refuse(str(exc))

    def generate(self, max_new: int, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, ignore_eos: bool = False) -> None:
        """Generate up to max_new tokens after the state's sentence on a thread of its own; each step
        reaches the state as it comes (GenerationState.add_step writes the text)."""
        from attnviz.engine.computing.generate import check_sampling, generate

        st, model = self.state, self.state.model
        if model is None:
            return
        check_sampling(temperature, top_p, max_new)  # InputError before anything starts
        prompt = st.text
        prepared = model.prepare(prompt)  # tokenised once: the rows' check, the run and the steps read it
        self.check_rows(model, len(prepared.ids), max_new)
        self._stop_generation()
        stop = self._stop = threading.Event()
        job_id = self.worker.claim(GENERATE_KIND)
        self.gen.begin(prompt)
        warm_the_rest(self.worker, model, steps=True)  # (where the first analysis has not: its later steps take them)

        def work():
            return generate(model, prepared, max_new=max_new, temperature=temperature, top_p=top_p,
                            seed=seed, ignore_eos=ignore_eos, rows=True, k=TOP_K,
                            on_step=lambda s: self.worker.post(self._on_step, job_id, s),
                            should_stop=lambda: stop.is_set() or not self.worker.is_newest(GENERATE_KIND, job_id))
        self._gen = {"job": job_id, "model": model, "prompt": prompt, "ids": prepared.ids.tolist()}
        self.worker.submit(GENERATE_KIND, work, self._on_generated, (job_id, model, prompt), THREAD,
                           job_id=job_id)

    def check_rows(self, model, T: int, max_new: int) -> None:
        """An InputError, before anything runs, when max_new steps after a prompt of T tokens would
        keep more than ROWS_LIMIT bytes at once: each step's row in every head, [n_layer, n_head,
        T] float32 (the slider shows them), and the K and V arrays as allocated, with the room they
        keep for next positions and, while a step copies them into larger ones, the old beside
        the new (generate.kv_positions)."""
        from attnviz.engine.errors import InputError
        from attnviz.engine.reading.byte_sizes import format_bytes

        cfg = model.config
        n = max(0, min(max_new, cfg.max_positions - T))
        rows, kv = generation_bytes(cfg, T, n)
        if rows + kv > ROWS_LIMIT:
            fit = bisect.bisect_left(range(n), True, key=lambda m: sum(generation_bytes(cfg, T, m)) > ROWS_LIMIT) - 1
            advice = f"ask for at most about {plural(fit, 'new token')}" if fit >= 1 else "give a shorter text"
            raise InputError(f"{max_new} steps after {tokens(T)} would keep {format_bytes(rows, 'up')} "
                             f"of attention rows (every head's row at every step) and up to "
                             f"{format_bytes(kv, 'up')} of keys and values (their arrays' room for the "
                             f"next positions and a copy into larger ones counted), over the "
                             f"{format_bytes(ROWS_LIMIT)} limit: {advice}")

    def _on_step(self, job_id: int, step) -> None:
        g = self._gen
        if g is None or g["job"] != job_id or not self.gen.running:
            return
        model, ids = g["model"], g["ids"]  # the prompt's ids: the tokens the first step read
        new = [s.id for s in self.gen.steps] + [step.id]
        self.gen.add_step(step, ids, new_text(model, g["prompt"], ids, new))

    def _on_generated(self, request, gen, error) -> None:
        job_id, _model, _prompt = request
        g = self._gen
        if g is None or g["job"] != job_id:
            return
        if error is not None:
            self.gen.finish(failure("The generation failed", describe_error(error)))
            return
        self.gen.finish(gen.stopped)

    def _stop_generation(self) -> None:
        self._stop.set()
        self.worker.cancel(GENERATE_KIND)
