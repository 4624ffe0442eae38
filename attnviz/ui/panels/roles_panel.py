"""The head-roles panel: a view of AppState's head scores. Its controls write what to score on
(the typed text, the repeat probe, a template probe; first-token and current-token exclusion) into
the state (set_role_options); the job runner scores it (Worker.follow_scores: 'roles' jobs for the
text right after each result, or once typing pauses when its scores are slow; probe jobs when the options, model or training step change) and writes
the scores into the state, which keeps the grid's role badges in step with them. The panel writes
the summary and holds three tabs: the Overview and Scores views of the state's scores
(roles_views.py) and Find (find_panel.py, its own view of AppState).

The panel's own tables are refilled only while the panel is on screen (or when it comes back)."""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QTabWidget, QVBoxLayout, QWidget,
)

from attnviz.engine.reading.token_text import plural
from attnviz.engine.analysing import heads as H, probes as P
from attnviz.engine.analysing.effects import is_changed
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.style import WARNING
from attnviz.figures.numbers import minus_signs, signed
from attnviz.ui.panels.find_panel import FindPanel
from attnviz.ui.panels.roles_views import RolesOverview, ScoresTable
from attnviz.figures.roles import ROLE_SOURCES as SOURCES
from attnviz.ui.views.fields import plain_label, rich_label


class SummaryBox(QScrollArea):
    """The summary, whole where the panel has room for it, else scrollable: never cut mid-sentence.
    It asks for the height its text needs at its width (the tabs below take what is left, down to
    their minimum), and gives it up down to MIN_LINES lines (the dock's least height sets the
    window's: with four lines, a summary's arrival made a 480 px window grow to 497 px)."""

    MIN_LINES = 2

    def __init__(self, label: QLabel):
        super().__init__()
        self.setWidget(label)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)

    def _text_height(self) -> int:
        label = self.widget()
        return label.heightForWidth(max(self.viewport().width(), 50)) + 2

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self._text_height())

    def minimumSizeHint(self) -> QSize:
        lines = self.widget().fontMetrics().lineSpacing() * self.MIN_LINES
        return QSize(super().minimumSizeHint().width(), min(lines, self._text_height()))

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if ev.size().width() != ev.oldSize().width():
            self.updateGeometry()  # another width wraps the text to another height


class RolesPanel(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        """A view of `state`: the app's runner computes its scores (Worker.follow_scores)."""
        super().__init__(parent)
        self.state = state
        self._view_stale = False  # the tables wait for the panel to come on screen
        self._drawn = None  # the scores the tables show (they are refilled only for new ones)
        self._build()
        self._connect()
        self._show_options(state.role_options)
        self._on_scores()

    # --- widgets ------------------------------------------------------------------------------
    def _build(self):
        self.source = QComboBox()
        self.source.addItem("typed text", "text")
        self.source.addItem("probe: random tokens, repeated twice", "probe")
        self.source.addItem("probe: subject-verb agreement (60 sentences)", "agreement")
        self.source.addItem("probe: pronoun -> antecedent (60 sentences)", "coreference")
        self.source.setToolTip("Score the heads on the typed text, or on a seeded random token "
                               "sequence repeated twice (duplicate and induction heads need repeats)")
        # narrower than its longest item on a small screen (the open list shows every item whole)
        self.source.setMinimumWidth(150)
        self.exclude_bos = QCheckBox("exclude first token")
        self.exclude_bos.setToolTip("Zero the first key column before scoring (TransformerLens "
                                    "exclude_bos); previous, next, duplicate and induction only")
        self.exclude_current = QCheckBox("exclude current token")
        self.exclude_current.setToolTip("Zero the diagonal before scoring (TransformerLens "
                                        "exclude_current_token); previous, next, duplicate, induction")
        opts = QHBoxLayout()
        opts.addWidget(plain_label(QLabel("Score on")))
        opts.addWidget(self.source, 1)
        opts2 = QHBoxLayout()
        opts2.addWidget(self.exclude_bos)
        opts2.addWidget(self.exclude_current)
        opts2.addStretch(1)

        self.summary = rich_label(QLabel("Open a model to score its heads."))
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.overview = RolesOverview(self.state)  # layers x heads map, legend, overlay, focus note
        self.score_table = ScoresTable(self.state)  # sortable, filterable scores and definitions
        self.find = FindPanel(self.state, shown=self._find_shown)  # which heads send A to B
        self.tabs = QTabWidget()
        self.tabs.addTab(self.overview, "Overview")
        self.tabs.addTab(self.score_table, "Scores")
        self.tabs.addTab(self.find, "Find")

        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(opts)
        lay.addLayout(opts2)
        self.summary_box = SummaryBox(self.summary)
        lay.addWidget(self.summary_box)
        # the tabs take the height the summary leaves (their size hint, e.g. a 30-layer map, would
        # otherwise squeeze the summary to its minimum), down to their own minimum
        self.tabs.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)
        self.tabs.setMinimumHeight(self.tabs.minimumSizeHint().height())
        lay.addWidget(self.tabs, 1)

    def _connect(self):
        st = self.state
        st.sigHeadScoresChanged.connect(self._on_scores)
        st.sigProbeProgress.connect(lambda *_: self._on_screen() and self._write_summary())
        st.sigTextProgress.connect(lambda *_: self._on_screen() and self._write_summary())
        st.sigModelChanged.connect(lambda _m: self._on_scores())
        st.sigRoleOptionsChanged.connect(self._show_options)
        self.source.currentIndexChanged.connect(lambda *_: self._write_options())
        self.exclude_bos.toggled.connect(lambda *_: self._write_options())
        self.exclude_current.toggled.connect(lambda *_: self._write_options())
        self.tabs.currentChanged.connect(lambda *_: self._find_shown() and self.find.catch_up())

    # --- options: view -> state -> view -------------------------------------------------------
    def set_source(self, source):
        """What to score on: one of SOURCES ('text', 'probe' or a template probe)."""
        self.state.set_role_options(source=source)

    def _write_options(self):
        self.state.set_role_options(self.source.currentData(), self.exclude_bos.isChecked(),
                                    self.exclude_current.isChecked())

    def _show_options(self, opts):
        for w in (self.source, self.exclude_bos, self.exclude_current):
            w.blockSignals(True)
        self.source.setCurrentIndex(SOURCES.index(opts.source))
        self.exclude_bos.setChecked(opts.exclude_bos)
        self.exclude_current.setChecked(opts.exclude_current)
        for w in (self.source, self.exclude_bos, self.exclude_current):
            w.blockSignals(False)

    # --- showing scores -----------------------------------------------------------------------
    def _on_screen(self):
        """False while the panel sits in a hidden dock tab of a window: its tables can wait. (Qt
        keeps a dock behind another tab 'visible', moved off screen: its visible region is empty.)"""
        return self.window() is self or (self.isVisible() and not self.visibleRegion().isEmpty())

    def _on_scores(self, *_):
        """The state's scores changed: the tables grey while the text's are an older text's."""
        st = self.state
        stale = st.scores_stale and st.role_options.source == "text"
        self.score_table.table.setEnabled(not stale)
        self.overview.map.setEnabled(not stale)
        if self._on_screen():
            self._refresh_view()
        else:
            self._view_stale = True

    @staticmethod
    def _template_summary(ts):
        hits = ts.labelled()
        lines = [f"<b>{html.escape(P.DEFINITIONS[ts.kind])}</b>",
                 html.escape(f"{ts.n_items} sentences scored, {ts.n_skipped} skipped (a key word is "
                             f"not one known token), e.g. “{ts.examples[0]}”." if ts.examples else "")]
        if hits:
            shown = ", ".join(f"{head_title(l, h)} (score {sc:.2f}, accuracy {acc:.2f})" for l, h, sc, acc in hits[:8])
            more = f" and {len(hits) - 8} more" if len(hits) > 8 else ""
            lines.append(f"{len(hits)} head(s) pass: {html.escape(shown)}{more}.")
        else:
            l, h, sc, acc = ts.best()
            lines.append(html.escape(f"No head passes. The best is {head_title(l, h)}: score {minus_signs(f'{sc:.2f}')}, "
                                     f"accuracy {acc:.2f} (farther {signed(ts.far[l, h], 2)}, nearer "
                                     f"{signed(ts.near[l, h], 2)})."))
        lines.append(f"<i>{html.escape(P.LABEL_RULE)}</i>")
        return "<br>".join(lines)

    def _refresh_view(self):
        self._view_stale = False
        if self.state.head_scores is not self._drawn:
            self._drawn = self.state.head_scores
            self.overview.refresh()
            self.score_table.refresh()
        self._write_summary()

    def showEvent(self, event):
        super().showEvent(event)
        self.catch_up()

    def catch_up(self):
        """Show what waited while the panel was off screen (the window calls this when the panel's
        dock tab is selected: Qt sends no show event then)."""
        if self._view_stale:
            self._refresh_view()
        if self.tabs.currentWidget() is self.find:
            self.find.catch_up()

    def _find_shown(self):
        return self._on_screen() and self.tabs.currentWidget() is self.find

    def _set_summary(self, text: str) -> None:
        self.summary.setText(text)
        self._fit_summary()

    def _fit_summary(self) -> None:
        """The summary box's height: its whole text where the panel has room beside the options
        and the tabs' minimum, else what is left (it scrolls), MIN_LINES lines at least. The tabs
        are capped at what the summary leaves them; the summary's own least height stays
        MIN_LINES lines, so the panel, and the window, can still be made smaller."""
        box, lay = self.summary_box, self.layout()
        m = lay.contentsMargins()
        others = sum(lay.itemAt(i).sizeHint().height() for i in range(lay.count())
                     if lay.itemAt(i).widget() not in (box, self.tabs))
        room = self.height() - m.top() - m.bottom() - lay.spacing() * (lay.count() - 1) - others
        least = self.tabs.minimumHeight()
        want = max(box.minimumSizeHint().height(), min(box.sizeHint().height(), room - least))
        self.tabs.setMaximumHeight(max(least, room - want))

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._fit_summary()

    def _write_summary(self):
        st = self.state
        source = st.role_options.source
        hs = st.head_scores
        if st.template_scores is not None:
            self._set_summary(self._template_summary(st.template_scores))
            return
        if hs is None or st.model is None:
            self._set_summary(self._waiting())
            return
        if source == "text" and st.scores_stale:
            self._set_summary("Updating: scoring the new text" + self._layers_done() + "…")
            return
        probe = source == "probe"
        # heads switched off: the text's scores are of the changed run the grid shows
        changed = not probe and is_changed(st.scores_result)
        where = "the probe" if probe else "this text's changed run" if changed else "this text"
        parts = []
        if probe:
            parts.append(html.escape(st.probe_note))
        if hs.notice:
            parts.append(f"<b style='color:{WARNING}'>{html.escape(hs.notice)}.</b>")
        causal = bool(st.model.config.causal) if st.model is not None else False
        counts = []
        for role in H.ROLES:
            n = sum(row.count(role) for row in hs.labels)
            if n:
                counts.append(f"{n} {role}")
        mixed = sum(row.count(H.MIXED) for row in hs.labels)
        parts.append("Labels on " + where + ": " + (", ".join(counts) or "none")
                     + f"; {mixed} mixed.")
        plain = []
        for role in hs.unclaimed_roles():
            if role == "next" and causal:
                plain.append("A causal model cannot attend to the next token.")
                continue
            if role in ("duplicate", "induction") and hs.coverage[role] * len(hs.tokens or [0]) < H.MIN_ROWS \
                    and not probe:
                plain.append(f"{H.TITLES[role].capitalize()}: this text repeats too few tokens to "
                             "score it; use the probe.")
                continue
            if role in H.IDENTITY_ROLES and hs.notice:
                continue  # said once above
            plain.append(H.no_head_clears(hs, role, where))
        if plain:
            parts.append("<br>".join(html.escape(p) for p in plain))
        self._set_summary("<br>".join(parts))

    def _waiting(self):
        """The summary while there are no scores to show: why, or what is on its way."""
        st = self.state
        source, note, r = st.role_options.source, st.scores_note, st.text_result
        if st.model is None:
            return "Open a model to score its heads."
        if note:
            return html.escape(note)
        if source == "probe":
            return "Running the probe…"
        if source != "text":
            p = st.probe_progress  # (None: its sentences are being made and tokenised)
            if p is None:
                return f"Running the {source} probe on {P.N_ITEMS} sentences…"
            return f"Running the {source} probe: {p.words} ({100 * p.done // max(p.total, 1)}%)…"
        if r is None:
            return "Type a text to score the heads."
        return ("Head scores need at least 2 tokens." if r.n_tokens < 2
                else "Scoring the heads" + self._layers_done() + "…")

    def _layers_done(self) -> str:
        """A long text's scores under way: how far they are (its rows are streamed layer by layer,
        the layers shared out to the cores)."""
        p = self.state.text_progress
        return "" if p is None else f" (a long text: {p[0]} of {plural(p[1], 'layer')} done)"
