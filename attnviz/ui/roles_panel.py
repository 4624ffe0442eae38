"""The head-roles panel: the shell around the head scores. It picks what to score on (the typed text,
the repeat probe, a template probe; first-token and current-token exclusion), scores it, writes the
summary and the grid's role badges, and holds three tabs: the Overview and Scores views of the scores
(roles_views.py) and Find (find_panel.py, its own view of AppState).

Scores are computed off the main thread (the probe runs the model) as the job runner's 'roles' jobs
(Worker.submit, on the app's one background thread), after typing pauses; only the newest request's
scores reach the widgets. The grid's badges always follow; the panel's own tables are refilled only while
the panel is on screen (or when it comes back)."""

from __future__ import annotations

import html
import logging

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QTabWidget, QVBoxLayout, QWidget

from attnviz.engine import heads as H
from attnviz.engine import probes as P
from attnviz.engine.patterns import head_title
from attnviz.figures.style import WARNING
from attnviz.ui.find_panel import FindPanel
from attnviz.ui.roles_views import RolesOverview, ScoresTable
from attnviz.ui.worker import Worker, describe_error

log = logging.getLogger(__name__)

SOURCES = ("text", "probe") + P.KINDS  # typed text, the repeat probe, the template probes
RESCORE_DELAY_MS = 150  # after the last result while typing
JOB_KIND = "roles"  # the job runner's kind for head scores: the newest request wins


class RolesPanel(QWidget):
    sigScored = Signal(object)  # HeadScores | None, after the widgets show it

    def __init__(self, state, parent: QWidget | None = None, worker: Worker | None = None):
        """`worker`: the window's job runner (scores are its 'roles' jobs); a panel on its own
        makes one of the same kind."""
        super().__init__(parent)
        self.state = state
        self.worker = worker if worker is not None else Worker(state, parent=self)
        self.scores: H.HeadScores | None = None
        self.probe_note = ""
        self._probe_cache = {}  # (id(model), seed) -> (RunResult, note)
        self._updating = False  # the scores shown are an older text's, new ones are on their way
        self.template = None  # the last template probe's scores (agreement / coreference)
        self._rescore_timer = QTimer(self)  # typing: score once the text has settled
        self._rescore_timer.setSingleShot(True)
        self._rescore_timer.setInterval(RESCORE_DELAY_MS)
        self._rescore_timer.timeout.connect(self.rescore)
        self._view_stale = False
        self._build()
        self._connect()
        self._on_model_changed(state.model)

    # --- widgets ------------------------------------------------------------------------------
    def _build(self):
        self.source = QComboBox()
        self.source.addItem("typed text", "text")
        self.source.addItem("probe: random tokens, repeated twice", "probe")
        self.source.addItem("probe: subject-verb agreement (60 sentences)", "agreement")
        self.source.addItem("probe: pronoun -> antecedent (60 sentences)", "coreference")
        self.source.setToolTip("Score the heads on the typed text, or on a seeded random token "
                               "sequence repeated twice (duplicate and induction heads need repeats)")
        self.exclude_bos = QCheckBox("exclude first token")
        self.exclude_bos.setToolTip("Zero the first key column before scoring (TransformerLens "
                                    "exclude_bos); previous, next, duplicate and induction only")
        self.exclude_current = QCheckBox("exclude current token")
        self.exclude_current.setToolTip("Zero the diagonal before scoring (TransformerLens "
                                        "exclude_current_token); previous, next, duplicate, induction")
        opts = QHBoxLayout()
        opts.addWidget(QLabel("Score on"))
        opts.addWidget(self.source, 1)
        opts2 = QHBoxLayout()
        opts2.addWidget(self.exclude_bos)
        opts2.addWidget(self.exclude_current)
        opts2.addStretch(1)

        self.summary = QLabel("Open a model to score its heads.")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
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
        lay.addWidget(self.summary)
        lay.addWidget(self.tabs, 1)

    def _connect(self):
        st = self.state
        st.sigModelChanged.connect(self._on_model_changed)
        # another training step: a probe is scored anew (typed text is rescored with its new
        # result, as after an edit)
        st.sigCheckpointChanged.connect(
            lambda _i: self.source.currentData() != "text" and self._on_model_changed(st.model))
        st.sigResultChanged.connect(self._on_result_changed)
        self.source.currentIndexChanged.connect(lambda *_: self.rescore())
        self.exclude_bos.toggled.connect(lambda *_: self.rescore())
        self.exclude_current.toggled.connect(lambda *_: self.rescore())
        self.tabs.currentChanged.connect(lambda *_: self._find_shown() and self.find.catch_up())

    # --- scoring ------------------------------------------------------------------------------
    def set_source(self, source):
        """'text' or 'probe'."""
        self.source.setCurrentIndex(SOURCES.index(source))

    def rescore(self):
        """Score the current source off the main thread; the newest request wins."""
        st = self.state
        self.worker.cancel(JOB_KIND)  # whatever is scored from here on is for this request
        opts = dict(exclude_bos=self.exclude_bos.isChecked(),
                    exclude_current_token=self.exclude_current.isChecked())
        model = st.model
        if model is None:
            self._show_scores(None)
            return
        unknown = H.unknown_token_ids(model)  # [UNK] ids: never repeats of each other
        if self.source.currentData() in P.KINDS:
            kind = self.source.currentData()

            def work():
                return P.run_template_probe(model, kind), None, None
            self.template = None
            self._show_scores(None, f"Running the {kind} probe ({P.N_ITEMS} sentences)…")
        elif self.source.currentData() == "probe":
            key = (id(model), H.PROBE_SEED)
            cached = self._probe_cache.get(key)

            def work():
                probe = cached or H.run_probe(model)
                return H.score_result(probe[0], unknown_ids=unknown, **opts), probe, key
            self.summary.setText("Running the probe…")
        else:
            result = st.result
            if result is None:
                self._show_scores(None)
                return
            if result.attentions.shape[-1] < 2:
                self._show_scores(None, "Head scores need at least 2 tokens.")
                return

            def work():
                return H.score_result(result, unknown_ids=unknown, **opts), None, None
        self.worker.submit(JOB_KIND, work, self._on_done)

    def _on_done(self, _request, value, error):
        if error is not None:
            msg = describe_error(error)
            log.warning("head scores failed: %s", msg)
            self._show_scores(None, f"Scores unavailable: {html.escape(msg)}")
            return
        hs, probe, key = value
        st = self.state
        shape = hs.score.shape if isinstance(hs, P.TemplateScores) else (hs.n_layer, hs.n_head)
        if st.model is None or shape != (st.n_layer, st.n_head):
            return  # scored for another model's shape: never show them
        if isinstance(hs, P.TemplateScores):
            self._show_template(hs)
            return
        if probe is not None:
            self._probe_cache = {key: probe}
            self.probe_note = probe[1]
        self._show_scores(hs)

    def wait_idle(self, msecs=30000):
        if self._rescore_timer.isActive():
            self._rescore_timer.stop()
            self.rescore()
        return self.worker.wait_idle(msecs)

    # --- showing scores -----------------------------------------------------------------------
    def _on_screen(self):
        """False while the panel sits in a hidden dock tab of a window: its tables can wait. (Qt
        keeps a dock behind another tab 'visible', moved off screen: its visible region is empty.)"""
        return self.window() is self or (self.isVisible() and not self.visibleRegion().isEmpty())

    def _show_scores(self, hs, message=None):
        self._updating = False
        self.score_table.table.setEnabled(True)
        self.overview.map.setEnabled(True)
        self.scores = hs
        for view in (self.overview, self.score_table, self.find):
            view.scores = hs  # each reads them when it next draws
        self._message = message
        if self._on_screen():
            self._refresh_view()
        else:
            self._view_stale = True
        self.state.set_head_labels(self._badges(hs))
        self.sigScored.emit(hs)

    def _show_template(self, ts):
        """A template probe's result: its labelled heads as badges, the numbers in the summary."""
        self.template = ts
        self._show_scores(None, self._template_summary(ts))

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
            lines.append(html.escape(f"No head passes. The best is {head_title(l, h)}: score {sc:.2f}, "
                                     f"accuracy {acc:.2f} (farther {ts.far[l, h]:+.2f}, nearer "
                                     f"{ts.near[l, h]:+.2f})."))
        lines.append(f"<i>{html.escape(P.LABEL_RULE)}</i>")
        return "<br>".join(lines)

    def _badges(self, hs):
        """The grid's role badges. Labels from a probe are about the probe's sentences, not the
        typed sentence under them: each badge says so."""
        ts = self.template
        if hs is None and ts is not None and self.source.currentData() == ts.kind:
            labels = [["" for _ in range(ts.score.shape[1])] for _ in range(ts.score.shape[0])]
            for l, h, *_ in ts.labelled():
                labels[l][h] = f"{ts.kind} (probe)"
            return labels
        if hs is None:
            return None
        if self.source.currentData() != "probe":
            return hs.labels
        return [[f"{label} (probe)" for label in row] for row in hs.labels]

    def _refresh_view(self):
        self._view_stale = False
        self.overview.refresh()
        self.score_table.refresh()
        self._write_summary(self._message)

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

    def _write_summary(self, message=None):
        hs = self.scores
        st = self.state
        if hs is None:
            self.summary.setText(message or ("Open a model to score its heads." if st.model is None
                                             else "Type a text to score the heads."))
            return
        probe = self.source.currentData() == "probe"
        where = "the probe" if probe else "this text"
        parts = []
        if probe:
            parts.append(html.escape(self.probe_note))
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
            l, h, strength = hs.best_strength(role)
            plain.append(f"No head of this model clears the {H.TITLES[role]} threshold "
                         f"({H.THRESHOLDS[role]:g}, and chance + {H.CHANCE_MARGIN:g}) on {where}: "
                         f"the strongest is {head_title(l, h)} at strength {strength:.3f} (score "
                         f"{hs.scores[role][l, h]:.3f}, chance {hs.chance[role][l, h]:.3f}).")
        if plain:
            parts.append("<br>".join(html.escape(p) for p in plain))
        self.summary.setText("<br>".join(parts))

    # --- state changes ------------------------------------------------------------------------
    def _on_model_changed(self, model):
        self._probe_cache = {}
        self.template = None
        self._rescore_timer.stop()
        if self.scores is not None:
            self._show_scores(None)  # the old model's scores must not outlive it, even while rescoring
        self.rescore()

    def _on_result_changed(self, result):
        if self.source.currentData() == "text":
            if result is None:
                self._rescore_timer.stop()
                self.rescore()  # clearing is immediate
            else:
                self._rescore_timer.start()  # restarts while results keep coming
                self._mark_stale()

    def _mark_stale(self):
        """Scores of the previous text are not this text's: the grid's badges go at once, and the
        tables stay greyed until the new scores arrive."""
        if self.scores is None or self._updating:
            return
        self._updating = True
        self.state.set_head_labels(None)
        self.score_table.table.setEnabled(False)
        self.overview.map.setEnabled(False)
        self.summary.setText("Updating: scoring the new text…")
