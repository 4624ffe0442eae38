"""Whether a keystroke's run hands the grid its first layers early (RunRequest(early=...)): only
where the layers after the one on screen are expected to take long enough for an earlier paint to
be worth its cost. The hand-over splits the run's one compiled call in two and the preview's paint
competes with the rest of the run for the cores, so on a model whose whole keystroke takes about a
frame the preview makes the result later while painting first only a few ms sooner
(benchmarks/typing_latency.py measures both)."""

from __future__ import annotations

import weakref

PREVIEW_SAVES_S = 0.02  # the layers after the preview expected to take at least this (above a frame)
RECENT_RUNS = 3  # the model's last runs that decide (their median: one odd run decides nothing)


class PreviewTiming:
    """The worker's rule for when a run hands over its first layers (Worker._submit_compute)."""

    def __init__(self):
        self.model = lambda: None  # a weak reference to the model the recorded runs are of (a
        # model let go is not kept for its timings)
        self.recent: list[float] = []  # its last runs' seconds (RunResult.compute_s), oldest first

    def note(self, model, seconds: float) -> None:
        """Take `seconds` as the time of `model`'s latest run (the worker notes each result's
        compute_s; a test notes chosen ones to check the rule on any machine)."""
        if model is not self.model():
            self.model, self.recent = weakref.ref(model), []
        self.recent = [*self.recent, float(seconds)][-RECENT_RUNS:]

    def depth(self, model, depth: int | None) -> int | None:
        """The early hand-over's depth for `model`'s next run: `depth` (state.preview_depth, the
        layers up to the one on screen; None: none) where the layers after them are expected to
        take at least PREVIEW_SAVES_S, else None. Expected from the median of the model's recent
        runs (the lower one of two) times the share of the layers left: a run's time is mostly its
        layers', and a long text's runs, slower, raise it as they come. With no run of the model
        timed yet (its first run after a load: the whole text, no cache) the preview is kept; that
        run's time decides the first keystroke, and the keystrokes' own times the ones after."""
        if depth is None or model is not self.model() or not self.recent:
            return depth
        runs = sorted(self.recent)
        n_layer = model.config.n_layer
        left = runs[(len(runs) - 1) // 2] * (n_layer - depth) / n_layer
        return depth if left >= PREVIEW_SAVES_S else None
