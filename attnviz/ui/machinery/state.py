"""AppState: the single source of truth of the window. Widgets read it, connect to its signals in one
place, and write back only through its setters. A setter that does not change anything emits nothing."""

from __future__ import annotations


import numpy as np
from PySide6.QtCore import QObject, Signal

from attnviz.engine.computing.text_input import clean_text
from attnviz.engine.computing.patterns import DEFAULT_SCALE, SCALE_MODES
from attnviz.engine.reading.registry import opened_path
from attnviz.figures.data import DEFAULT_COLORMAP
from attnviz.figures.view import Shown, same_prefix
from attnviz.ui.machinery.effects_state import Effects
from attnviz.ui.machinery.long_state import GenerationState, LongState
from attnviz.ui.machinery.scores_state import HeadScoresState

VIEW_MODES = ("layer", "all")
# the display options of a first start (settings.restore falls back to these): the one place
DISPLAY_DEFAULTS = {"colormap": DEFAULT_COLORMAP, "scale_mode": DEFAULT_SCALE, "view_mode": VIEW_MODES[0],
                    "hide_first": False, "value_weighted": False, "layer": 0}


class AppState(QObject, HeadScoresState):
    sigModelChanged = Signal(object)
    sigTextChanged = Signal(str)
    sigResultChanged = Signal(object)
    sigLayerChanged = Signal(int)
    sigFocusChanged = Signal(object)
    sigQueryChanged = Signal(object)
    sigDisplayChanged = Signal()
    sigHeadLabelsChanged = Signal(object)
    sigOverlayChanged = Signal(object)
    sigStatus = Signal(str)
    sigLoadingChanged = Signal(str)  # the model source being loaded, "" when none is
    sigCheckpointsChanged = Signal(object)  # the model's CheckpointSet (engine.computing.checkpoints) or None
    sigCheckpointChanged = Signal(int)  # index of the training checkpoint `model` now is
    # `model` is another object: a new model (after sigModelChanged) or another training step of it
    # (after sigCheckpointChanged). What is computed from the weights (circuit scores, a scan, a
    # patching map, generated steps) follows this one signal.
    sigWeightsChanged = Signal(object)
    sigInputsWantedChanged = Signal(bool)  # whether runs keep every layer's input (Anatomy shown)
    # source, outcome ("loaded", "failed", "budget": failed, the memory budget chosen below one
    # layer, "cancelled"), message
    sigLoadReported = Signal(str, str, str)
    sigGuideChanged = Signal(object, object, str, object)  # sample, its Guide (or None), why not, its result
    sigGuideWanted = Signal(object, object, object)  # sample, result, its head scores (or None)
    sigGuideDropped = Signal()  # the guide asked for last is wanted no more
    sigComputeReported = Signal(object, str)  # the runner's request, "" (its result is in) or why it failed
    sigTextResultChanged = Signal(object)  # text_result: the dense result's or the long run's RunResult
    sigPreviewChanged = Signal(object)  # the running text's first layers, before its result (or None)
    sigTextMarksChanged = Signal(object)  # text_marks: character ranges of the text to mark
    sigOutlinedChanged = Signal(object)  # outlined: heads the grid outlines (a hovered Why here? row)
    sigMarkedCellChanged = Signal(object)  # marked_cell: the cell the focus view frames, or None

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.model = None
        self.model_name = ""
        self.model_source = ""  # what `model` was opened from (a name, folder or file), as asked
        self.loading = ""  # a model being loaded in the background; `model` stays usable meanwhile
        self.text = ""
        self.text_notice: str | None = None  # what set_text changed in the text given (lone surrogates)
        # (start, end) character ranges of `text` that a generation wrote (the sentence box marks
        # them); they belong to this text: a new text drops them
        self.text_marks: tuple[tuple[int, int], ...] = ()
        self.result = None
        # a run's first layers (a RunResult of layers 0..k-1), handed over before the run ends so
        # the grid shows the layer on screen while the layers after it are computed (preview_depth)
        self.preview = None
        self._preview_shown: Shown | None = None
        self.layer = DISPLAY_DEFAULTS["layer"]
        self.focus: tuple[int, int] | None = None
        self.query_pos: int | None = None
        self.colormap = DISPLAY_DEFAULTS["colormap"]  # one of COLORMAPS
        self.scale_mode = DISPLAY_DEFAULTS["scale_mode"]  # one of SCALE_MODES
        self.hide_first = DISPLAY_DEFAULTS["hide_first"]
        self.value_weighted = DISPLAY_DEFAULTS["value_weighted"]  # heatmaps show a_qk * ||v_k W_O(h)||, rows renormalised
        self.inputs_wanted = False  # runs keep every layer's input (the Anatomy panel is shown)
        self.view_mode = DISPLAY_DEFAULTS["view_mode"]  # one of VIEW_MODES
        self.head_labels: list[list[str]] | None = None
        self.outlined: tuple[tuple[int, int], ...] = ()  # (layer, head) the grid outlines
        self.marked_cell: tuple[int, int, int, int] | None = None  # (layer, head, q, k) explained
        self.overlay: np.ndarray | None = None
        self.checkpoints = None  # CheckpointSet of the loaded model when it has training checkpoints
        self.checkpoint: int | None = None  # the checkpoint `model` is (an index into checkpoints)
        self._wanted_checkpoint: int | None = None  # asked for before the checkpoints were loaded
        self._shown: Shown | None = None
        self._text_result = None  # text_result as last announced (sigTextResultChanged)
        self.sigResultChanged.connect(self._follow_text_result)  # first: the scores go stale first
        self._init_head_scores()
        self.effects = Effects(self)  # what heads do: ablation, prediction, lens, DLA (effects_state.py)
        # a long text's run and view, and a generation from the sentence (long_state.py)
        self.long, self.generation = LongState(self), GenerationState(self)
        self.long.sigRunChanged.connect(self._follow_text_result)

    def shown(self) -> Shown | None:
        """The current result as the heatmaps show it (figures/view.Shown: value weighting, the
        hidden first key, colour levels), one per (result, hide_first, value weighting), so the grid,
        the focus view and the read-outs share one computation. Value weighting needs a result with
        value_norms (a run with values=True); until it comes the weights are shown as they are."""
        if self.result is None:
            return None
        weighted = self.value_weighted and self.result.value_norms is not None
        s = self._shown
        # compared by identity: an id() could be reused by a later result once this one is freed
        if s is None or s.result is not self.result or s.options != (self.hide_first, weighted):
            self._shown = Shown(self.result, self.hide_first, weighted)
        return self._shown

    def preview_depth(self) -> int | None:
        """Layers a run hands over early (RunRequest(early=...)) for the grid to paint before the
        run ends: the layer on screen and those before it. Only where what the grid paints from
        them is what it paints from the whole run: one layer on screen (not the last), weights as
        they are (value weighting needs every layer's values), and a colour scale known without
        the other layers (per head, or the shared top of a causal model, which is 1: its first
        query sees only the first key; with that key hidden the top is every layer's). None:
        no early hand-over (the worker asks for one only where it is worth it: preview_timing.py).
        A causal model only: an encoder's queries all see every key, so its shared top is every
        layer's; and a decoder's runs are where the time goes (a keystroke's step streams every
        weight)."""
        m = self.model
        if (m is None or not self._preview_allowed()
                or self.layer >= m.config.n_layer - 1):
            return None
        return self.layer + 1

    def _preview_allowed(self) -> bool:
        m = self.model
        return (m is not None and m.config.causal and self.view_mode == "layer"
                and not self.value_weighted and not (self.hide_first and self.scale_mode == "shared"))

    def shown_preview(self) -> Shown | None:
        """The preview as the grid shows it, while it holds the layer on screen and the options
        still allow it (preview_depth); else None (the grid shows `result`)."""
        p = self.preview
        if p is None or not self._preview_allowed() or self.layer >= p.attentions.shape[0]:
            return None
        s = self._preview_shown
        if s is None or s.result is not p or s.options != (self.hide_first, False):
            self._preview_shown = Shown(p, self.hide_first, False)
        return self._preview_shown

    def on_screen(self) -> tuple[Shown | None, bool]:
        """(Shown, previewing): what the grid paints, and the views beside it follow: the preview
        while the grid shows one (shown_preview), else the result (shown; None without one)."""
        p = self.shown_preview()
        return (p, True) if p is not None else (self.shown(), False)

    def preview_query(self) -> int | None:
        """The query as it stands over the preview on screen: kept where set_result would keep it
        for that text (the same token after the same tokens), else None."""
        p, q = self.shown_preview(), self.query_pos
        if p is None or q is None or not same_prefix(self.result, p.result, q + 1):
            return None
        return q

    def set_preview(self, partial) -> None:
        """The running text's first layers (the runner calls it between the run's start and its
        result); set_result, a failed run and a new model drop it."""
        if partial is self.preview:
            return
        self.preview, self._preview_shown = partial, None
        self.sigPreviewChanged.emit(partial)

    # --- derived, read-only -------------------------------------------------------------------
    @property
    def text_result(self):
        """The RunResult of the text shown: the long run's while a long text is shown (its
        `attentions` is None: its patterns are long.patterns, computed on demand), else `result`.
        What the head scores, Find and the calculator read."""
        run = self.long.run
        return run.result if run is not None else self.result

    def _follow_text_result(self, *_) -> None:
        r = self.text_result
        if r is not self._text_result:
            self._text_result = r
            self.sigTextResultChanged.emit(r)

    @property
    def n_layer(self) -> int:
        return self.model.config.n_layer if self.model is not None else 0

    @property
    def n_head(self) -> int:
        return self.model.config.n_head if self.model is not None else 0

    def badge(self, layer: int, head: int) -> str:
        """The role badge of one head ('' when there is none): the grid, focus view and read-outs."""
        labels = self.head_labels
        if labels and 0 <= layer < len(labels) and 0 <= head < len(labels[layer]):
            return labels[layer][head]
        return ""

    # --- setters ----------------------------------------------------------------------------
    @property
    def model_path(self) -> str | None:
        """Where the model was opened by path, absolute (None: by name): what an export's sidecar
        reopens it by."""
        return opened_path(self.model_source)

    def set_model(self, model, source: str = "") -> None:
        """A new model invalidates everything tied to the old one's shape; the text stays.
        `source`: what it was opened from (the runner's load request), else its name."""
        if model is self.model:
            return
        self.model = model
        self.model_name = model.name if model is not None else ""
        self.model_source = str(source) if source and model is not None else self.model_name
        self._wanted_checkpoint = None
        if self.checkpoints is not None:
            self.checkpoints, self.checkpoint = None, None
            self.sigCheckpointsChanged.emit(None)
        # The old model's result goes and the layer is clamped to the new model's range before
        # any view hears of the new model: a redraw on its signal must not read a layer it lacks.
        self.set_result(None)
        clamped = model is not None and self.layer >= model.config.n_layer
        if clamped:
            self.layer = model.config.n_layer - 1
        self.sigModelChanged.emit(model)
        self.sigWeightsChanged.emit(model)
        self.set_head_labels(None)
        self.set_overlay(None)
        self.set_focus(None)
        self.set_query(None)
        if clamped:
            self.sigLayerChanged.emit(self.layer)

    def set_checkpoints(self, checkpoints) -> None:
        """The training checkpoints of the current model (a CheckpointSet whose `base` is `model`);
        the model shown stays the one loaded, the last checkpoint."""
        if checkpoints is self.checkpoints or (checkpoints is not None
                                               and checkpoints.base is not self.model):
            return
        self.checkpoints = checkpoints
        self.checkpoint = None if checkpoints is None else checkpoints.last
        self.sigCheckpointsChanged.emit(checkpoints)
        wanted, self._wanted_checkpoint = self._wanted_checkpoint, None
        if checkpoints is not None and wanted is not None:
            self.request_checkpoint(wanted)

    def request_checkpoint(self, index: int) -> None:
        """Show checkpoint `index` (a saved view's step) now, or once the model's checkpoints
        have loaded; an index this model does not have is ignored with a status line."""
        if self.checkpoints is None:
            self._wanted_checkpoint = int(index)
            return
        n = len(self.checkpoints)
        if not -n <= int(index) < n:
            self.show_status(f"This model has {n} checkpoints; checkpoint {index} is not one of them.")
            return
        self.set_checkpoint(index)

    def set_checkpoint(self, index: int) -> None:
        """Show the model at training checkpoint `index`: same shape, so layer, focus, query and
        text stay; the next result is computed on that checkpoint's weights."""
        if self.checkpoints is None:
            return
        index = self.checkpoints.index(int(index))
        if index == self.checkpoint:
            return
        self.checkpoint = index
        self.model = self.checkpoints.model(index)
        self.sigCheckpointChanged.emit(index)
        self.sigWeightsChanged.emit(self.model)

    def checkpoint_info(self):
        """The CheckpointInfo shown (step, scores), or None for a model without checkpoints."""
        if self.checkpoints is None or self.checkpoint is None:
            return None
        return self.checkpoints.infos[self.checkpoint]

    def set_loading(self, source: str) -> None:
        source = str(source or "")
        if source == self.loading:
            return
        self.loading = source
        self.sigLoadingChanged.emit(source)

    def set_text(self, text: str) -> None:
        """The sentence, as the box shows it and the model reads it: a lone surrogate (not a
        character; Qt shows U+FFFD for it) becomes U+FFFD here too, and `text_notice` says so
        (the text's notice under the token strip shows it with the result of this text)."""
        text, notice = clean_text(text)
        if text == self.text:
            return
        self.text, self.text_notice = text, notice
        self.set_text_marks(())
        self.sigTextChanged.emit(text)

    def set_text_marks(self, marks) -> None:
        """Character ranges (start, end) of the text to mark as generated (GenerationState sets
        them as the tokens arrive); each clipped to the text."""
        n = len(self.text)
        marks = tuple((max(0, min(int(a), n)), max(0, min(int(b), n))) for a, b in marks)
        marks = tuple((a, b) for a, b in marks if a < b)
        if marks == self.text_marks:
            return
        self.text_marks = marks
        self.sigTextMarksChanged.emit(marks)

    def set_result(self, result) -> None:
        if result is self.result:
            return
        self.preview, self._preview_shown = None, None  # (the grid redraws for the result anyway)
        old, self.result = self.result, result
        n_tok = len(result.tokens) if result is not None else 0
        # the query stays only where it is the same token after the same tokens (typing on at the
        # end); another text, or an edit at or before it, clears it rather than pick another word
        if self.query_pos is not None and not same_prefix(old, result, self.query_pos + 1):
            self.query_pos = None
            self.sigQueryChanged.emit(None)
        if self.overlay is not None and self.overlay.shape != (n_tok, n_tok):
            self.overlay = None
            self.sigOverlayChanged.emit(None)
        self.sigResultChanged.emit(result)

    def set_layer(self, layer: int) -> None:
        layer = int(layer)
        if self.model is not None:
            layer = max(0, min(layer, self.model.config.n_layer - 1))
        if layer == self.layer:
            return
        self.layer = layer
        self.sigLayerChanged.emit(layer)
        if self.view_mode == "layer" and self.focus is not None and self.focus[0] != layer:
            self.set_focus(layer, self.focus[1])  # the focus follows the one layer on screen

    def set_focus(self, layer_or_none, head: int | None = None) -> None:
        focus = None if layer_or_none is None else (int(layer_or_none), int(head))
        if focus == self.focus:
            return
        self.focus = focus
        self.sigFocusChanged.emit(focus)

    def show_head(self, layer: int, head: int) -> None:
        """Show head (layer, head) and focus it: its layer on screen, the focus on it (a click on a
        head anywhere: grid, roles, Find, guide, a saved view). A head the model has not is ignored."""
        if self.model is None or not (0 <= layer < self.n_layer and 0 <= head < self.n_head):
            return
        self.set_layer(layer)
        self.set_focus(layer, head)

    def toggle_query(self, pos: int) -> None:
        """Pick token `pos` as the query row of every head, or clear it when it is the one picked
        (a click on a token in the strip, a row in the grid or the focus view)."""
        self.set_query(None if self.query_pos == pos else pos)

    def set_query(self, pos: int | None) -> None:
        pos = None if pos is None else int(pos)
        if pos == self.query_pos:
            return
        self.query_pos = pos
        self.sigQueryChanged.emit(pos)

    def set_colormap(self, name: str) -> None:
        if name == self.colormap:
            return
        self.colormap = name
        self.sigDisplayChanged.emit()

    def set_scale_mode(self, mode: str) -> None:
        if mode not in SCALE_MODES:
            raise ValueError(f"scale mode {mode!r} is not one of {SCALE_MODES}")
        if mode == self.scale_mode:
            return
        self.scale_mode = mode
        self.sigDisplayChanged.emit()

    def set_hide_first(self, hide: bool) -> None:
        hide = bool(hide)
        if hide == self.hide_first:
            return
        self.hide_first = hide
        self.sigDisplayChanged.emit()

    def set_value_weighted(self, on: bool) -> None:
        on = bool(on)
        if on == self.value_weighted:
            return
        self.value_weighted = on
        self.sigDisplayChanged.emit()

    def set_inputs_wanted(self, on: bool) -> None:
        """Whether runs keep every layer's input (what the Anatomy panel draws): it changes what
        the runner computes, not what is shown."""
        on = bool(on)
        if on == self.inputs_wanted:
            return
        self.inputs_wanted = on
        self.sigInputsWantedChanged.emit(on)

    def set_view_mode(self, mode: str) -> None:
        if mode not in VIEW_MODES:
            raise ValueError(f"view mode {mode!r} is not one of {VIEW_MODES}")
        if mode == self.view_mode:
            return
        self.view_mode = mode
        self.sigDisplayChanged.emit()

    def set_head_labels(self, labels: list[list[str]] | None) -> None:
        if labels is None and self.head_labels is None:
            return
        self.head_labels = labels
        self.sigHeadLabelsChanged.emit(labels)

    def set_outlined(self, heads) -> None:
        """Heads the grid outlines, (layer, head) each: those a hovered Why here? row names."""
        heads = tuple((int(l), int(h)) for l, h in heads)
        if heads != self.outlined:
            self.outlined = heads
            self.sigOutlinedChanged.emit(heads)

    def set_marked_cell(self, cell) -> None:
        """The cell (layer, head, q, k) that Why here? explains, framed by the focus view while it
        shows that head; None: no frame."""
        cell = None if cell is None else tuple(int(v) for v in cell)
        if cell != self.marked_cell:
            self.marked_cell = cell
            self.sigMarkedCellChanged.emit(cell)

    def set_overlay(self, mask: np.ndarray | None) -> None:
        if mask is None and self.overlay is None:
            return
        self.overlay = None if mask is None else np.asarray(mask, dtype=bool)
        self.sigOverlayChanged.emit(self.overlay)

    def show_status(self, message: str) -> None:
        self.sigStatus.emit(message)

    def want_guide(self, sample, result, scores=None) -> None:
        """Ask for the head of the model that shows `sample` best in `result` (the guide bar); the
        runner answers in set_guide."""
        self.sigGuideWanted.emit(sample, result, scores)

    def drop_guide(self) -> None:
        """The guide asked for is no longer wanted (the text or the weights changed)."""
        self.sigGuideDropped.emit()

    def set_guide(self, sample, guide, message: str = "", result=None) -> None:
        """The runner's guide for a sample text (engine.analysing.samples.Guide: which head shows it best), or
        None with why; the guide bar shows it while that sample is the text. `result`: the run it
        was found on (the clean run or a changed one, whichever the grid shows by now)."""
        self.sigGuideChanged.emit(sample, guide, str(message), result)

    def report_load(self, source: str, outcome: str, message: str = "") -> None:
        """The runner's word on a load it was asked for: "loaded" (the model is set already),
        "failed" (with why), "budget" (failed: the memory budget chosen is below one of its layers)
        or "cancelled"; the window says so."""
        assert outcome in ("loaded", "failed", "budget", "cancelled"), outcome
        self.sigLoadReported.emit(str(source), outcome, str(message))

    def report_compute(self, request, message: str = "") -> None:
        """The runner's word on a run: "" once its result is set, else why it failed (the result
        shown stays the last good one)."""
        if message:
            self.set_preview(None)  # the failed run's first layers are not shown either
        self.sigComputeReported.emit(request, str(message))


    # === head scores: the roles panel's options and the runner's scores ========================
    # The typed text's scores are always held (the guide and the grid's badges read them), scored
    # with the panel's exclusion options; a probe source's scores beside them. The runner computes
    # both (Worker.follow_scores) and writes them here; the badges (head_labels) follow them
    # (the methods: ui/machinery/scores_state.py).
    sigRoleOptionsChanged = Signal(object)  # RoleOptions
    sigHeadScoresChanged = Signal()  # text or probe scores, their notes, staleness or the source changed
    sigProbeProgress = Signal(int, int)  # a template probe under way: steps done, steps (probe_progress)
    sigTextProgress = Signal(int, int)  # a long text's scores under way: layers done, layers
