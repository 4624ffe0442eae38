"""The status bar's two figures of the last run: how many tokens the sentence is, and how long the
engine took (while a run's first layers are shown: which layers are still on their way; for a
text whose every token came from the KV cache, typed back to one computed before: that it was
kept from before)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

TIME_TIP = "Time the engine took for the last result"
KEPT_TIP = ("This text was computed before: every token's rows came from the model's KV cache, "
            "and nothing was computed again")


def compute_text(seconds: float) -> str:
    """'compute 12 ms'; a time that rounds to 0 ms reads 'compute <1 ms' (the run took some)."""
    ms = f"{seconds * 1000:.0f}"
    return f"compute {'<1' if ms == '0' else ms} ms"


def time_text(result) -> tuple[str, str]:
    """(the status bar's time for `result`, its tooltip): the engine's compute time, or, where the
    run took every token from the KV cache (nothing switched off in it), that it was kept."""
    changed = bool(getattr(getattr(result, "trace", None), "edits", None))  # (a changed run: computed)
    if result.cache_used and result.n_tokens and result.cache_computed == 0 and not changed:
        return "kept from before", KEPT_TIP
    return compute_text(result.compute_s), TIME_TIP


class ComputeFigures:
    """Two status-bar labels that follow the state's result and preview."""

    def __init__(self, state):
        self.state = state
        self.tokens_label = QLabel()
        self.time_label = QLabel()
        self.tokens_label.setObjectName("tokens_label")
        self.time_label.setObjectName("time_label")
        self.tokens_label.setToolTip("Tokens in the sentence, as the model reads them")
        self.time_label.setToolTip(TIME_TIP)
        state.sigResultChanged.connect(self._on_result)
        # a long run after a long run leaves the result None (no signal): its count follows the run
        state.long.sigRunChanged.connect(lambda run: run is not None and self._on_result(None))
        state.sigPreviewChanged.connect(self._on_preview)

    def _on_result(self, result) -> None:
        if result is None:
            run = self.state.long.run  # a long text: its tokens are in the long view
            self.tokens_label.setText(f"{run.patterns.T:,} tokens" if run is not None else "0 tokens")
            # (no result: no time either, not the last text's or the last model's)
            self.time_label.setText(compute_text(run.result.compute_s) if run is not None else "")
            self.time_label.setToolTip(TIME_TIP)
            return
        self.tokens_label.setText(f"{len(result.tokens)} tokens")
        text, tip = time_text(result)
        self.time_label.setText(text)
        self.time_label.setToolTip(tip)

    def _on_preview(self, _partial) -> None:
        """The grid shows the running text's first layers: the status bar counts that text's tokens
        and says the rest is on its way (the result's figures replace both)."""
        p = self.state.shown_preview()
        if p is None or self.state.model is None:
            return
        k, n = p.result.attentions.shape[0], self.state.model.config.n_layer
        self.tokens_label.setText(f"{len(p.result.tokens)} tokens")
        rest = f"layer {k}" if k == n - 1 else f"layers {k}\u2013{n - 1}"
        self.time_label.setText(f"computing {rest}\u2026")
        self.time_label.setToolTip(TIME_TIP)
