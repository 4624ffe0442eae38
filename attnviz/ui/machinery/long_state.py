"""The window's state of a long text and of a generation (AppState.long and AppState.generation):
what the runner computed (a long run, its overview images, the generated steps) and what the views
ask for (the region, the reduction, the log scale, the step shown). The runner's jobs for them are
ui/machinery/long_jobs.py; the views are ui/views/long_view.py and ui/panels/generate_panel.py."""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QObject, Signal

from attnviz.engine.reading.token_text import tokens
from attnviz.figures.overview import WHEEL_STEP, full_region, rect_region, zoom_region
from attnviz.figures.view import REDUCES, Shown


class LongState(QObject):
    """A long text's run (engine/computing/longdoc.LongRun: its patterns are computed on demand)
    while one is shown instead of the dense grid, and how it is looked at."""

    sigRunChanged = Signal(object)  # LongRun or None (the dense grid shows the text)
    sigViewChanged = Signal()  # region, reduction, log scale or the screen sizes
    sigImagesChanged = Signal()  # a new overview of the tiles or the pane arrived
    sigProgress = Signal(int, int)  # a long run under way: layer i of n (n = 0: none under way)

    def __init__(self, state):
        super().__init__(state)
        self.state = state
        self.run = None  # longdoc.LongRun
        self.region: tuple[int, int, int, int] | None = None  # rows r0..r1-1 x keys c0..c1-1
        self.reduce = REDUCES[0]
        self.log = False
        self.tile_px = 96  # cells a side of each head's tile, and of the large pane (the screen's)
        self.pane_px = (512, 512)
        self.tiles = None  # figures.view.Overview of the layer's heads (Shown.cells)
        self.pane = None  # Overview of the focused head at the pane's size
        self.progress = (0, 0)
        self._shown: dict = {}  # (hide_first, value_weighted) -> Shown of `run`
        state.sigModelChanged.connect(lambda _m: self.set_run(None))  # the run was the old model's

    @property
    def patterns(self):
        return None if self.run is None else self.run.patterns

    @property
    def T(self) -> int:
        return 0 if self.run is None else self.run.patterns.T

    def shown(self) -> Shown | None:
        """The long run as the long view shows it (figures/view.Shown: the state's Hide first token
        and Value-weighted applied as in the dense grid), one per (run, options), so the overview
        jobs and the hover read-out share the rows' totals once computed (kept while the run is
        shown: turning an option off and on again computes nothing twice)."""
        if self.run is None:
            return None
        options = (self.state.hide_first, self.state.value_weighted)
        s = self._shown.get(options)
        if s is None or s.result is not self.run:
            s = self._shown[options] = Shown(self.run, *options)
        return s

    def head(self) -> int:
        """The head the large pane shows: the focused one when it is on the layer shown, else 0."""
        f = self.state.focus
        return f[1] if f is not None and f[0] == self.state.layer else 0

    # --- setters ------------------------------------------------------------------------------
    def set_run(self, run) -> None:
        """A new long run (None: the text is shown densely). A view of the whole pattern shows the
        whole new one (a longer paste reaches its end); a zoomed region stays while it fits the new
        text (typing on at the end), else the whole pattern is shown."""
        if run is self.run:
            return
        whole = self.region is None or self.region == full_region(self.T)
        self.run = run
        self._shown = {}
        T = self.T
        if run is None:
            self.region, self.tiles, self.pane = None, None, None
        elif whole or self.region[1] > T or self.region[3] > T:
            self.region = full_region(T)
        self.sigRunChanged.emit(run)

    def set_region(self, region) -> None:
        region = tuple(int(v) for v in region)
        if self.run is None or region == self.region:
            return
        r0, r1, c0, c1 = region
        if not (0 <= r0 < r1 <= self.T and 0 <= c0 < c1 <= self.T):
            raise ValueError(f"region {region} is not inside the {tokens(self.T)}")
        self.region = region
        self.sigViewChanged.emit()

    def zoom(self, notches: float, at: tuple[float, float]) -> None:
        """Zoom in (notches > 0) or out about token coordinates at = (q, k)."""
        if self.run is not None:
            self.set_region(zoom_region(self.region, self.T, WHEEL_STEP ** notches, at))

    def zoom_to(self, a: tuple[float, float], b: tuple[float, float]) -> None:
        """Show the tokens of a rectangle dragged from a to b (token coordinates)."""
        if self.run is not None:
            self.set_region(rect_region(self.T, a, b))

    def reset_zoom(self) -> None:
        if self.run is not None:
            self.set_region(full_region(self.T))

    def set_reduce(self, reduce: str) -> None:
        if reduce not in REDUCES:
            raise ValueError(f"an overview cell is one of {REDUCES}, not {reduce!r}")
        if reduce != self.reduce:
            self.reduce = reduce
            self.sigViewChanged.emit()

    def set_log(self, on: bool) -> None:
        if bool(on) != self.log:
            self.log = bool(on)
            self.sigViewChanged.emit()

    def set_screen(self, tile_px: int, pane_px: tuple[int, int]) -> None:
        """The cells the views have room for (their pixels), so overviews come at screen resolution."""
        tile_px, pane_px = max(8, int(tile_px)), (max(8, int(pane_px[0])), max(8, int(pane_px[1])))
        if (tile_px, pane_px) != (self.tile_px, self.pane_px):
            self.tile_px, self.pane_px = tile_px, pane_px
            self.sigViewChanged.emit()

    def set_images(self, tiles=None, pane=None) -> None:
        """The runner's overviews (each for this run; the last good one stays until the next)."""
        if tiles is not None:
            self.tiles = tiles
        if pane is not None:
            self.pane = pane
        self.sigImagesChanged.emit()

    def set_progress(self, i: int, n: int) -> None:
        if (i, n) != self.progress:
            self.progress = (i, n)
            self.sigProgress.emit(i, n)


class GenerateRequest(NamedTuple):
    """What the Generate panel asks for (engine/computing/generate.generate's options)."""
    max_new: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False


class GenerationState(QObject):
    """A generation from the sentence (engine/computing/generate.py): its steps as they arrive,
    the text they make, and the step shown. Editing the text ends it (sigStopWanted)."""

    sigChanged = Signal()  # a step arrived, a generation began or ended
    sigStepShown = Signal(int)  # the step the views show (-1: none)
    sigStopWanted = Signal()  # the user pressed Stop or edited the text
    sigStartWanted = Signal(object)  # a GenerateRequest from the sentence (the runner starts it)

    def __init__(self, state):
        super().__init__(state)
        self.state = state
        self.prompt_text = ""  # the sentence generated from
        self.prompt_ids: list[int] = []
        self.steps: list = []  # generate.Step, in order
        self.text = ""  # the sentence with the new tokens, as written into the box
        self.running = False
        self.stopped = ""  # generate.Generation.stopped, "edited", or why it failed once it ended
        self.shown = -1
        self.refused = ""  # why the last request started nothing (the runner's one-line message)
        state.sigTextChanged.connect(self._on_text)
        state.sigWeightsChanged.connect(self._on_model)  # (another training step's steps differ too)

    def begin(self, prompt_text: str) -> None:
        self.prompt_text, self.prompt_ids, self.steps = prompt_text, [], []
        self.text, self.running, self.stopped, self.shown = prompt_text, True, "", -1
        self.refused = ""
        self._show_marks()
        self.sigChanged.emit()
        self.sigStepShown.emit(-1)

    def request(self, max_new: int, temperature: float = 0.0, top_p: float = 1.0,
                seed: int | None = None, ignore_eos: bool = False) -> None:
        """Ask for up to max_new tokens after the sentence: the runner begins it, or refuses."""
        self.sigStartWanted.emit(GenerateRequest(int(max_new), float(temperature), float(top_p),
                                                 seed, bool(ignore_eos)))

    def refuse(self, message: str) -> None:
        """The runner's word on a request it did not start (bad options, too many rows)."""
        self.refused = str(message)
        self.sigChanged.emit()

    def add_step(self, step, prompt_ids, text: str) -> None:
        """A new token: the step, and the sentence with it (written into the box, the heatmaps follow)."""
        self.prompt_ids = list(prompt_ids)
        self.steps.append(step)
        self.text = text
        self.state.set_text(text)
        self._show_marks()
        self.sigChanged.emit()
        self.show_step(len(self.steps) - 1)

    def finish(self, why: str) -> None:
        if self.running:
            self.running, self.stopped = False, why
            self.sigChanged.emit()

    def stop(self) -> None:
        """The Stop button: the generation ends after the step under way."""
        if self.running:
            self.sigStopWanted.emit()
            self.finish("stopped")

    def show_step(self, s: int) -> None:
        s = max(-1, min(int(s), len(self.steps) - 1))
        if s != self.shown:
            self.shown = s
            self.sigStepShown.emit(s)

    def marked(self) -> tuple[int, int] | None:
        """The new tokens' characters (start, end) in the sentence while it is the generated one."""
        if not self.steps or self.state.text != self.text or len(self.text) <= len(self.prompt_text):
            return None
        return len(self.prompt_text), len(self.text)

    def _show_marks(self) -> None:
        """The state's text marks: the new tokens while the text is the generated one."""
        span = self.marked()
        self.state.set_text_marks(() if span is None else (span,))

    def _on_model(self, _model) -> None:
        """Another model or training step: a generation under way ends, and the steps go (they
        are the old weights')."""
        if self.running:
            self.sigStopWanted.emit()
        had = self.running or self.steps
        self.prompt_text, self.prompt_ids, self.steps, self.text = "", [], [], ""
        self.running, self.stopped, self.shown = False, "", -1
        self._show_marks()
        if had:
            self.sigChanged.emit()
            self.sigStepShown.emit(-1)

    def _on_text(self, text: str) -> None:
        if self.running and text != self.text:  # the user edited the sentence: generation ends
            self.sigStopWanted.emit()
            self.finish("edited")
        elif not self.running and self.steps:
            self._show_marks()  # (back to the generated text, as by undo: marked again)
            self.sigChanged.emit()
