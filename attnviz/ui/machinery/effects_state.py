"""AppState's section on what heads do (`state.effects`): which heads are switched off and which
edges knocked out (the ablation the grid, the prediction, the lens and DLA then show), the tokens
DLA compares, and what the runner computed for them: the run (clean and changed traces), the
analysis of the query position, the full lens grid and the ablation scan. Widgets read it and
write back only through its setters; the runner (ui/machinery/effects_jobs.py, ui/machinery/worker.py) fills it.
A setter that changes nothing emits nothing."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from attnviz.engine.analysing.effects import CLEAN, Ablation, is_changed


class Effects(QObject):
    sigAblationChanged = Signal(object)  # Ablation
    sigWantedChanged = Signal(bool)  # whether a view shows prediction, lens or DLA
    sigTokensChanged = Signal()  # the typed target / alternative
    sigRunChanged = Signal(object)  # WindowRun or None
    sigAnalysisChanged = Signal()  # analysis or its note
    sigLensGridChanged = Signal()
    sigScanChanged = Signal()  # scan result, note or running
    sigScanProgress = Signal(int, int)  # heads done, heads in all
    # what a view asks of the runner (ui/machinery/effects_jobs.py answers in the setters below)
    sigLensGridWanted = Signal()
    sigScanWanted = Signal(str)  # "text" (the typed text) or "probe" (the repeated-random probe)
    sigScanStopWanted = Signal()

    def __init__(self, state):
        super().__init__(state)
        self.state = state
        self.ablation: Ablation = CLEAN
        self.wanted = False
        self.target = ""  # typed target token ("" = the clean top-1)
        self.alt = ""  # typed alternative ("" = predict.dla_tokens' default)
        self.run = None  # WindowRun of state.result (when it was run for these views)
        self.analysis = None  # effects.Analysis of the query position
        self.analysed = None  # (run, query, target, alt) that `analysis` was computed for
        self.note = ""  # why there is no analysis, or what is wrong with the typed tokens
        self.lens_grid = None  # (top ids [n_layer, T], log-probs [n_layer, T], labels) of `run`
        self.scan = None  # ablation.Scan
        self.scan_what = ""  # what the scan ran on, one line
        self.scan_note = ""  # why the scan failed
        self.scan_running = False
        self._query_wanted = None  # (text, position): a saved view's query, set once its result is in
        state.sigModelChanged.connect(self._on_model)
        state.sigWeightsChanged.connect(self._on_weights)
        state.sigResultChanged.connect(self._query_follows)
        state.sigResultChanged.connect(self._on_no_tokens)

    # --- setters --------------------------------------------------------------------------------
    def set_wanted(self, on: bool) -> None:
        on = bool(on)
        if on != self.wanted:
            self.wanted = on
            self.sigWantedChanged.emit(on)

    def set_ablation(self, ablation: Ablation) -> None:
        if ablation == self.ablation:
            return
        self.ablation = ablation
        self.sigAblationChanged.emit(ablation)

    def toggle_head(self, layer: int, head: int) -> None:
        """Switch head (layer, head) off, or back on (a modifier-click, the context menu, the list)."""
        st = self.state
        if st.model is None or not (0 <= layer < st.n_layer and 0 <= head < st.n_head):
            return
        self.set_ablation(self.ablation.toggled(layer, head))

    def toggle_knockout(self, layers, q: int, k: int) -> None:
        self.set_ablation(self.ablation.with_knockout(layers, q, k))

    def set_mode(self, mode: str) -> None:
        from dataclasses import replace

        self.set_ablation(replace(self.ablation, mode=mode))

    def restore_clean(self) -> None:
        """Switch everything back on: the clean run is shown again."""
        self.set_ablation(CLEAN)

    def set_tokens(self, target: str | None = None, alt: str | None = None) -> None:
        target = self.target if target is None else str(target)
        alt = self.alt if alt is None else str(alt)
        if (target, alt) != (self.target, self.alt):
            self.target, self.alt = target, alt
            self.sigTokensChanged.emit()

    def query_when(self, text: str, pos: int) -> None:
        """Pick token `pos` as the query once the result of `text` is shown (a saved view's)."""
        r = self.state.result
        if r is not None and r.text == text:
            self._query_wanted = None
            if pos < r.n_tokens:
                self.state.set_query(pos)
        else:
            self._query_wanted = (text, int(pos))

    def _query_follows(self, result) -> None:
        wanted = self._query_wanted
        if wanted is None or result is None or result.text != wanted[0]:
            return
        self._query_wanted = None
        if wanted[1] < result.n_tokens:
            self.state.set_query(wanted[1])

    # --- the runner's results -------------------------------------------------------------------
    def set_run(self, run) -> None:
        if run is self.run:
            return
        self.run = run
        if self.lens_grid is not None:
            self.lens_grid = None
            self.sigLensGridChanged.emit()
        self.sigRunChanged.emit(run)

    def set_analysis(self, analysis, note: str = "", of=None) -> None:
        """`of`: the (run, query, target, alt) the analysis was computed for (analysis_of)."""
        self.analysis, self.note, self.analysed = analysis, str(note), of if analysis is not None else None
        self.sigAnalysisChanged.emit()

    def set_note(self, note: str) -> None:
        """A message about the typed tokens; the last good analysis stays."""
        self.note = str(note)
        self.sigAnalysisChanged.emit()

    def want_lens_grid(self) -> None:
        """Ask for the lens's top-1 at every layer and position of the run shown (lens_grid)."""
        self.sigLensGridWanted.emit()

    def want_scan(self, source: str = "text") -> None:
        """Ask for the ablation scan of every head on `source` ("text" or "probe")."""
        self.sigScanWanted.emit(str(source))

    def stop_scan(self) -> None:
        """Stop the scan under way (the Cancel button); the last scan stays."""
        self.sigScanStopWanted.emit()

    def set_lens_grid(self, grid) -> None:
        self.lens_grid = grid
        self.sigLensGridChanged.emit()

    def set_scan(self, scan, what: str = "", note: str = "", running: bool = False) -> None:
        self.scan, self.scan_what, self.scan_note, self.scan_running = scan, what, note, running
        self.sigScanChanged.emit()

    # --- derived ----------------------------------------------------------------------------
    def run_of(self, result):
        """The run behind `result` when the runner made it for these views, else None."""
        run = self.run
        return run if run is not None and run.result is result else None

    def changed_by(self, result):
        """The Ablation `result` is a changed run of (heads switched off, edges knocked out), or
        None for a clean run: what the grid marks "off" on and an export names, alike."""
        run = self.run_of(result)
        if run is not None:
            return run.ablation if run.changed is not None else None
        return self.ablation if is_changed(result) else None

    def analysis_of(self, result):
        """The analysis when it is of `result` at the query, typed tokens and ablation the window
        has now, else None (the panel was hidden while the text, query or tokens changed)."""
        run = self.run_of(result)
        if self.analysis is None or run is None or run.ablation != self.ablation:
            return None
        # the run by identity: two runs' == compares their arrays, which has no single truth value
        of = self.analysed
        fresh = of is not None and of[0] is run and of[1:] == (self.state.query_pos, self.target, self.alt)
        return self.analysis if fresh else None

    def lacks(self, result) -> bool:
        """Whether `result` is not what these views need: a run that kept what prediction reads
        while they are shown, and the current ablation applied."""
        if result is None or self.state.model is None:
            return False
        run = self.run_of(result)
        if run is None:
            return self.ablation.active or (self.wanted and self.state.model.config.causal)
        return run.ablation != self.ablation

    def _on_model(self, _model) -> None:
        self.set_run(None)
        self.set_ablation(CLEAN)  # heads of another shape
        if self.analysis is not None or self.note:
            self.set_analysis(None)

    def _on_weights(self, _model) -> None:
        """Another model or training step: the scan was of the old weights."""
        if self.scan is not None or self.scan_note or self.scan_running:
            self.set_scan(None)

    def _on_no_tokens(self, result) -> None:
        """An empty text (a decoder without BOS runs no tokens): the grid is empty, and so is what
        the last text's run predicted, rather than a prediction after a token no longer there."""
        if result is None and not self.state.text.strip() and self.state.long.run is None:
            self.set_run(None)
            if self.analysis is not None or self.note:
                self.set_analysis(None)
