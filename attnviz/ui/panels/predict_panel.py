"""The "What heads do" panel: the next-token prediction at the query token (the last one unless the
token strip picks another), the logit lens, DLA and the ablation controls with the scan. A view of
AppState (`state.effects`): it shows what the runner computed and writes back only the typed
tokens, the ablation and its own visibility (`set_shown`: hidden, runs keep nothing for it)."""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView, QFormLayout, QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPushButton,
    QScrollArea, QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.predict import ALT_RULE, dla_tokens
from attnviz.engine.reading.token_text import quoted
from attnviz.figures.effects import lens_ranks
from attnviz.figures.numbers import minus_signs, signed
from attnviz.figures.style import WARNING, axis_label
from attnviz.ui.panels.ablation_panel import AblationPanel
from attnviz.ui.panels.dla_view import HeadMapView, dla_map
from attnviz.ui.views.fields import fill, plain_label, plain_tip, rich_label

LENS_LABEL = "logit lens (raw: the final norm applied to each layer)"
TOKEN_CHARS = 25  # characters of a target token in the panel's lines (whole in their tooltips)


def _cut(token: str) -> str:
    """A token as the panel's wrapped lines name it: a word-wrapped label is never narrower than its
    longest word, so a long token (a run of 80 '#' is one) is cut with an ellipsis."""
    return axis_label(token, TOKEN_CHARS)


def _table(columns: list[str]) -> QTableWidget:
    t = QTableWidget(0, len(columns))
    t.setHorizontalHeaderLabels(columns)
    t.verticalHeader().setVisible(False)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    t.horizontalHeader().setStretchLastSection(True)
    return t


def _fill(table: QTableWidget, rows: list[list[str]], numbers=()) -> None:
    """Rows of text into `table`; the columns in `numbers` right-aligned. The header sizes its
    columns to their contents once, after the fill: with ResizeToContents on while filling, every
    setText would measure the whole column again, on the main thread."""
    header = table.horizontalHeader()
    modes = [header.sectionResizeMode(c) for c in range(table.columnCount())]
    header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
    table.setUpdatesEnabled(False)
    try:
        table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = table.item(r, c)
                if item is None:
                    item = QTableWidgetItem()
                    if c in numbers:
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    table.setItem(r, c, item)
                if item.text() != text:
                    item.setText(text)
    finally:
        for c, mode in enumerate(modes):
            header.setSectionResizeMode(c, mode)
        table.setUpdatesEnabled(True)


def _alt_default(a) -> str:
    """The alt box's placeholder: the token an empty box compares with the target, and which of the
    clean run's tokens it is (predict.dla_tokens' rule, for the target the analysis used)."""
    top = a.clean.top_ids
    if len(top) < 2:
        return ""
    alt = dla_tokens(top, a.target)[1]
    return f"{'second' if alt == top[1] else 'top-1'}: {a.label(alt)}"


def _p(logprob: float) -> str:
    return f"{np.exp(logprob):.3f}"


class PredictPanel(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.effects = eff = state.effects
        self.shown = False
        self.tabs = QTabWidget()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.header = rich_label(QLabel())
        self.header.setWordWrap(True)
        lay.addWidget(self.header)
        form = QFormLayout()
        self.target_edit, self.alt_edit = QLineEdit(), QLineEdit()
        for edit, which in ((self.target_edit, "target"), (self.alt_edit, "alt")):
            edit.setClearButtonEnabled(True)
            edit.setToolTip("A token as the vocabulary spells it (ĠParis), text that is one token, or "
                            "#id; empty: " + ("the clean run's top-1" if which == "target" else ALT_RULE))
            edit.editingFinished.connect(self._tokens_typed)
        row = QHBoxLayout()
        row.addWidget(self.target_edit)
        row.addWidget(plain_label(QLabel("vs")))
        row.addWidget(self.alt_edit)
        form.addRow("Target:", row)
        lay.addLayout(form)
        lay.addWidget(self.tabs, 1)

        # next token: top-k of the clean run (and the changed one beside it), then the lens
        page = QWidget()
        col = QVBoxLayout(page)
        col.setContentsMargins(0, 0, 0, 0)
        self.top_table = _table(["token", "p", "changed: token", "p"])
        col.addWidget(self.top_table, 2)
        self.delta_label = plain_label(QLabel())  # (it and the lens's title quote the target token)
        self.delta_label.setWordWrap(True)
        col.addWidget(self.delta_label)
        self.lens_title = plain_label(QLabel(LENS_LABEL))
        self.lens_title.setWordWrap(True)  # (a long target token is cut: it never widens the dock)
        col.addWidget(self.lens_title)
        self.lens_table = _table(["layer", "top-1", "p", "p(target)", "rank"])
        col.addWidget(self.lens_table, 3)
        self.grid_button = QPushButton("Full layer × position grid")
        self.grid_button.setToolTip("The lens's top-1 token at every layer and every position "
                                    "(computed when asked)")
        self.grid_button.clicked.connect(state.effects.want_lens_grid)
        col.addWidget(self.grid_button)
        self.grid_table = _table([])
        self.grid_table.hide()
        col.addWidget(self.grid_table, 3)
        self.tabs.addTab(page, "Next token")

        self.dla_view = HeadMapView(state, "DLA needs a prediction: see above.")
        self.dla_view.setToolTip("Hover: a part's direct contribution; click a head to focus it in "
                                 "the grid; Alt+click switches it off")
        self.tabs.addTab(self.dla_view, "DLA")
        self.ablation_panel = AblationPanel(state)
        scroll = QScrollArea()  # its controls, map and table need more height than a small window has
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.ablation_panel)
        self.tabs.addTab(scroll, "Ablation")

        eff.sigAnalysisChanged.connect(self._show)
        eff.sigLensGridChanged.connect(self._show_grid)
        eff.sigTokensChanged.connect(self._tokens_follow)
        state.sigResultChanged.connect(self._on_result)
        self._show()

    def set_shown(self, shown: bool) -> None:
        self.shown = bool(shown)
        self.effects.set_wanted(shown)

    # --- state -> widgets -------------------------------------------------------------------------
    def _tokens_follow(self) -> None:
        for edit, text in ((self.target_edit, self.effects.target), (self.alt_edit, self.effects.alt)):
            if edit.text() != text:
                fill(edit, text)

    def _tokens_typed(self) -> None:
        self.effects.set_tokens(self.target_edit.text(), self.alt_edit.text())

    def _on_result(self, _result) -> None:
        if self.state.model is not None and not self.state.model.config.causal:
            self._show()

    def _show(self) -> None:
        st, eff, a = self.state, self.effects, self.effects.analysis
        note = (f"<br><span style='color:{WARNING}'>{html.escape(eff.note)}</span>" if eff.note else "")
        model = st.model
        if a is None or model is None:
            if model is not None and not model.config.causal and not eff.note:
                note = (f"<span style='color:{WARNING}'>{html.escape(model.name)} is an encoder, "
                        "so it predicts no next token.</span>")
            self.header.setText(note.removeprefix("<br>") or "The prediction follows each result.")
            _fill(self.top_table, [])
            _fill(self.lens_table, [])
            self.delta_label.setText("")
            for label in (self.header, self.delta_label, self.lens_title):
                label.setToolTip("")
            self.dla_view.set_map(None)
            return
        r = st.result
        after = (html.escape(quoted(r.labels[a.position])) if r is not None and a.position < len(r.labels)
                 else str(a.position))
        changed = a.changed is not None
        what = (f"<br><b style='color:{WARNING}'>Changed run: {html.escape(a.ablation.describe())}"
                "</b>" if changed else "")
        target, alt = a.label(a.target), a.label(a.alt)
        self.header.setText(f"Next token after {after} (token {a.position}); target "
                            f"<b>‘{html.escape(_cut(target))}’</b> vs "
                            f"<b>‘{html.escape(_cut(alt))}’</b>{what}{note}")
        whole = f"target ‘{target}’ vs ‘{alt}’" if max(len(target), len(alt)) > TOKEN_CHARS else ""
        for label in (self.header, self.delta_label, self.lens_title):
            label.setToolTip(plain_tip(whole))
        self.target_edit.setPlaceholderText(f"top-1: {a.label(a.clean.top_ids[0])}")
        self.alt_edit.setPlaceholderText(_alt_default(a))
        rows = []
        for i in range(len(a.clean.top_ids)):
            row = [a.label(a.clean.top_ids[i]), _p(a.clean.top_logprobs[i])]
            if changed:
                row += [a.label(a.changed.top_ids[i]), _p(a.changed.top_logprobs[i])]
            rows.append(row)
        self.top_table.setColumnHidden(2, not changed)
        self.top_table.setColumnHidden(3, not changed)
        self.top_table.setHorizontalHeaderLabels(["clean: token" if changed else "token", "p",
                                                  "changed: token", "p"])
        _fill(self.top_table, rows, numbers=(1, 3))
        d = a.delta_target()
        self.delta_label.setText(
            "" if d is None else
            f"Δ log p(‘{_cut(target)}’) = {signed(d, 3)} nats (clean {minus_signs(f'{a.clean.logprobs[a.target]:.3f}')} → "
            f"changed {minus_signs(f'{a.changed.logprobs[a.target]:.3f}')})")
        lens = a.lens
        self.lens_title.setText(f"{LENS_LABEL}, p and rank of ‘{_cut(target)}’"
                                + (" — changed run" if changed else ""))
        _fill(self.lens_table, [[str(l), a.label(lens.top_ids[l]), _p(lens.top_logprobs[l]),
                                 _p(lens.target_logprobs[l]), str(int(lens_ranks(lens)[l]))]
                                for l in range(len(lens.top_ids))], numbers=(0, 2, 3, 4))
        self.dla_view.set_map(dla_map(st, a))

    def _show_grid(self) -> None:
        g, r = self.effects.lens_grid, self.state.result
        if g is None or r is None:
            self.grid_table.hide()
            return
        ids, lps, labels = g
        n_layer, T = ids.shape
        self.grid_table.setColumnCount(T)
        self.grid_table.setHorizontalHeaderLabels([f"{t} {r.labels[t]}" for t in range(T)])
        _fill(self.grid_table, [[f"{labels[int(ids[l, t])]} {np.exp(lps[l, t]):.2f}" for t in range(T)]
                                for l in range(n_layer)])
        self.grid_table.setVerticalHeaderLabels([f"L{l}" for l in range(n_layer)])
        self.grid_table.verticalHeader().setVisible(True)
        self.grid_table.show()
