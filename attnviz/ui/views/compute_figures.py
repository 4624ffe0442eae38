"""The status bar's figures of the result shown: the query token and its position, how many tokens
the sentence is, and how long the engine took (while a run's first layers are shown: which layers
are still on their way; for a text whose every token came from the KV cache, typed back to one
computed before: that it was kept from before). The query read-out is here, not in the row of
controls over the grid: that row leaves it no room in a 1024-pixel window."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel

from attnviz.engine.reading.token_text import isolated, tokens
from attnviz.ui.views.fields import plain_label, plain_tip

TIME_TIP = "Time the engine took for the last result"
KEPT_TIP = ("This text was computed before: every token's rows came from the model's KV cache, "
            "and nothing was computed again")
QUERY_CHARS = 10  # the query label's room for the token, in wide letters


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


class QueryLabel(QLabel):
    """A one-line label that, narrower than its text (`set_query`: "Query: " + token + " (#q)"),
    paints a shorter one: first without the "Query: " prefix, then with the token cut by an
    ellipsis; the whole text is in its tooltip."""

    TIP = "Query token whose row is highlighted (Esc clears)"

    def __init__(self):
        super().__init__()
        plain_label(self)  # (a token such as '<s>' is text, not a tag: fields.py)
        self.setToolTip(self.TIP)
        self._parts = ("", "", "")  # prefix, token, suffix of the text

    def set_query(self, token: str, q: int | None, whole: str = "") -> None:
        """Show query token `token` (as cut to the label's width) at position q (None: no query);
        `whole`: the token uncut, for the tooltip."""
        self._parts = ("", "", "") if q is None else ("Query: ", isolated(token), f" (#{q})")
        self.setText("".join(self._parts))
        self.setToolTip(self.TIP if q is None else plain_tip(f"Query: {isolated(whole or token)} (#{q}): {self.TIP}"))

    def painted_text(self) -> str:
        """The text as painted at the label's width."""
        fm, width = self.fontMetrics(), self.contentsRect().width()
        if fm.horizontalAdvance(self.text()) <= width:
            return self.text()
        _prefix, token, suffix = self._parts
        if fm.horizontalAdvance(token + suffix) <= width:
            return token + suffix
        room = width - fm.horizontalAdvance(suffix)
        cut = fm.elidedText(token, Qt.TextElideMode.ElideRight, room) if room > 0 else ""
        if cut and fm.horizontalAdvance(cut + suffix) <= width:
            return cut + suffix
        return fm.elidedText(token + suffix, Qt.TextElideMode.ElideRight, width)

    def paintEvent(self, event) -> None:
        text = self.painted_text()
        if text == self.text():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        painter.drawText(self.contentsRect(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                         text)


class ComputeFigures:
    """Three status-bar labels that follow the state's result, query and preview."""

    def __init__(self, state):
        self.state = state
        self.query_label = QueryLabel()
        # a width of its own, whatever the token: picking one never widens the window; on a
        # narrow screen it gives way first, its prefix dropped, then its token ending in an ellipsis
        self.query_label.setMaximumWidth(self.query_label.fontMetrics().horizontalAdvance(
            "Query: " + "M" * QUERY_CHARS + " (#9999)"))
        self.query_label.setMinimumWidth(self.query_label.fontMetrics().horizontalAdvance("Qu…"))
        self.query_label.setObjectName("query_label")
        self.tokens_label = plain_label(QLabel())
        self.time_label = plain_label(QLabel())
        self.tokens_label.setObjectName("tokens_label")
        self.time_label.setObjectName("time_label")
        self.tokens_label.setToolTip("Tokens in the sentence, as the model reads them")
        self.time_label.setToolTip(TIME_TIP)
        state.sigResultChanged.connect(self._on_result)
        # a long run after a long run leaves the result None (no signal): its count follows the run
        state.long.sigRunChanged.connect(lambda run: run is not None and self._on_result(None))
        state.sigPreviewChanged.connect(self._on_preview)
        state.sigQueryChanged.connect(self._on_query)
        state.sigResultChanged.connect(self._on_query)
        state.sigPreviewChanged.connect(self._on_query)
        # (whether the grid shows a preview depends on the layer and the display options too)
        state.sigLayerChanged.connect(self._on_query)
        state.sigDisplayChanged.connect(self._on_query)
        self._on_query()

    def _on_query(self, *_) -> None:
        """The query as the grid shows it: over a preview, the preview's (none where the text
        changed before it), else the result's."""
        p = self.state.shown_preview()
        r, q = (p.result, self.state.preview_query()) if p is not None else \
            (self.state.result, self.state.query_pos)
        if r is None or q is None:
            self.query_label.set_query("", None)
            return
        fm = self.query_label.fontMetrics()
        token = fm.elidedText(r.labels[q], Qt.TextElideMode.ElideRight,
                              fm.horizontalAdvance("M" * QUERY_CHARS))
        self.query_label.set_query(token, q, r.labels[q])

    def _on_result(self, result) -> None:
        if result is None:
            run = self.state.long.run  # a long text: its tokens are in the long view
            self.tokens_label.setText(tokens(run.patterns.T if run is not None else 0))
            # (no result: no time either, not the last text's or the last model's)
            self.time_label.setText(compute_text(run.result.compute_s) if run is not None else "")
            self.time_label.setToolTip(TIME_TIP)
            return
        self.tokens_label.setText(tokens(len(result.tokens)))
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
        self.tokens_label.setText(tokens(len(p.result.tokens)))
        rest = f"layer {k}" if k == n - 1 else f"layers {k}\u2013{n - 1}"
        self.time_label.setText(f"computing {rest}\u2026")
        self.time_label.setToolTip(TIME_TIP)
