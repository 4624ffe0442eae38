"""The head-roles panel: every head's scores beside their definitions, a roles overview of the whole
model, the detection-pattern overlay for the focused head, and Find (which heads send A to B).

Scores are computed off the main thread (the probe runs the model) as the job runner's 'roles' jobs
(Worker.submit, on the app's one background thread), after typing pauses; only the newest request's
scores reach the widgets. The grid's badges always follow; the panel's own tables are refilled only while
the panel is on screen (or when it comes back)."""

from __future__ import annotations

import html
import logging

import numpy as np
from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel,
    QTableWidget, QTableWidgetItem, QTabWidget, QTextBrowser, QVBoxLayout, QWidget,
)

from attnviz.engine import heads as H
from attnviz.engine import probes as P
from attnviz.engine import textbook
from attnviz.engine.errors import AttnvizError
from attnviz.engine.patterns import head_title
from attnviz.figures.style import ROLE_COLORS, ROLE_SHORT, role_text_color
from attnviz.ui.worker import Worker

log = logging.getLogger(__name__)

SOURCES = ("text", "probe") + P.KINDS  # typed text, the repeat probe, the template probes
COLUMNS = ("layer", "head", "role") + H.SCORE_NAMES
_ALL = "all roles"
RESCORE_DELAY_MS = 150  # after the last result while typing
JOB_KIND = "roles"  # the job runner's kind for head scores: the newest request wins


def _legend_text(role):  # "prev&nbsp;=&nbsp;previous", or the name alone where it is its own abbreviation
    short = ROLE_SHORT[role]
    return short if short == role else f"{short}&nbsp;=&nbsp;{role}"


def _num_item(value, digits=3):
    item = QTableWidgetItem()
    v = float(value)
    item.setData(Qt.ItemDataRole.DisplayRole, None if np.isnan(v) else round(v, digits))
    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _role_item(role):
    item = QTableWidgetItem(role)
    item.setBackground(QBrush(QColor(ROLE_COLORS[role])))
    item.setForeground(QBrush(QColor(role_text_color(role))))
    return item


class RolesPanel(QWidget):
    sigScored = Signal(object)  # HeadScores | None, after the widgets show it
    sigFound = Signal(object)  # list[HeadHit] | None

    def __init__(self, state, parent: QWidget | None = None, worker: Worker | None = None):
        """`worker`: the window's job runner (scores are its 'roles' jobs); a panel on its own
        makes one of the same kind."""
        super().__init__(parent)
        self.state = state
        self.worker = worker if worker is not None else Worker(state, parent=self)
        self.scores: H.HeadScores | None = None
        self.hits: list[H.HeadHit] = []
        self.probe_note = ""
        self._probe_cache = {}  # (id(model), seed) -> (RunResult, note)
        self._updating = False  # the scores shown are an older text's, new ones are on their way
        self.template = None  # the last template probe's scores (agreement / coreference)
        self._rescore_timer = QTimer(self)  # typing: score once the text has settled
        self._rescore_timer.setSingleShot(True)
        self._rescore_timer.setInterval(RESCORE_DELAY_MS)
        self._rescore_timer.timeout.connect(self.rescore)
        self._view_stale = False
        self._find_stale = False  # Find's token lists lag the result while its tab is not shown
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

        # overview: layers x heads coloured by role
        self.overview = QTableWidget(0, 0)
        self.overview.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.overview.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        # the map fills its box: rows share the height (scrolling only below a line's height),
        # columns as wide as their labels plus a share of the spare width (_fit_overview)
        self.overview.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.overview.verticalHeader().setMinimumSectionSize(self.overview.fontMetrics().height() + 6)
        self.overview.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.overview.viewport().installEventFilter(self)
        self.overview.setToolTip("Rows: layers, columns: heads, coloured by role. Click to focus.")
        # one swatch per role, never broken inside ("dup = / duplicate"); "prev = previous" only
        # where the cell's abbreviation differs from the name
        self.legend = QLabel(" ".join(
            f'<span style="background:{c}; color:{role_text_color(r)}">'
            f"&nbsp;{_legend_text(r)}&nbsp;</span>"
            for r, c in ROLE_COLORS.items()))
        self.legend.setWordWrap(True)
        self.overlay_role = QComboBox()
        self.overlay_role.addItem("none", None)
        for role in H.ROLES:
            self.overlay_role.addItem(H.TITLES[role], role)
        self.overlay_role.setToolTip("Draw this role's detection pattern D on the focused head: "
                                     "the cells its score counts")
        self.focus_note = QLabel("")
        self.focus_note.setWordWrap(True)
        ov = QWidget()
        ovl = QVBoxLayout(ov)
        ovl.addWidget(self.overview, 1)
        ovl.addWidget(self.legend)
        form = QFormLayout()
        form.addRow("Overlay on focused head", self.overlay_role)
        ovl.addLayout(form)
        ovl.addWidget(self.focus_note)

        # per-head scores, sortable and filterable, with the definitions beside them
        self.filter = QComboBox()
        self.filter.addItem(_ALL, None)
        for role in H.ROLES + (H.MIXED,):
            self.filter.addItem(role, role)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([H.TITLES.get(c, c) if c in H.SCORE_NAMES else c
                                              for c in COLUMNS])
        for i, c in enumerate(COLUMNS):
            if c in H.DEFINITIONS:
                self.table.horizontalHeaderItem(i).setToolTip(H.DEFINITIONS[c])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        self.table.setSortingEnabled(True)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.definitions = QTextBrowser()
        self.definitions.setOpenLinks(False)
        sc = QWidget()
        scl = QVBoxLayout(sc)
        fl = QHBoxLayout()
        fl.addWidget(QLabel("Show"))
        fl.addWidget(self.filter, 1)
        scl.addLayout(fl)
        scl.addWidget(self.table, 3)
        scl.addWidget(QLabel("What the numbers mean"))
        scl.addWidget(self.definitions, 2)

        # find: which heads send the query token to the key token
        self.find_from = QComboBox()
        self.find_to = QComboBox()
        for box, tip in ((self.find_from, "query token (the row): pick, or type e.g. are or the@4"),
                         (self.find_to, "key token (the column): pick, or type e.g. keys or the@4")):
            box.setEditable(True)
            box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
            box.setToolTip(tip)
        self.find_status = QLabel("")
        self.find_status.setWordWrap(True)
        self.find_table = QTableWidget(0, 4)
        self.find_table.setHorizontalHeaderLabels(["rank", "head", "specificity", "weight"])
        self.find_table.horizontalHeaderItem(2).setToolTip(
            "weight minus the mean weight the other queries give the same key: a head where every "
            "token attends to the key scores near 0, however large its weight")
        self.find_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.find_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.find_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.find_table.verticalHeader().setVisible(False)
        self.find_table.horizontalHeader().setStretchLastSection(True)
        self.find_table.verticalHeader().setDefaultSectionSize(22)
        fd = QWidget()
        fdl = QVBoxLayout(fd)
        ff = QFormLayout()
        ff.addRow("from (query)", self.find_from)
        ff.addRow("to (key)", self.find_to)
        fdl.addLayout(ff)
        fdl.addWidget(self.find_status)
        fdl.addWidget(self.find_table, 1)
        self._find_page = fd

        self.tabs = QTabWidget()
        self.tabs.addTab(ov, "Overview")
        self.tabs.addTab(sc, "Scores")
        self.tabs.addTab(fd, "Find")

        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(opts)
        lay.addLayout(opts2)
        lay.addWidget(self.summary)
        lay.addWidget(self.tabs, 1)
        self._show_definitions()

    def _connect(self):
        st = self.state
        st.sigModelChanged.connect(self._on_model_changed)
        if hasattr(st, "sigCheckpointChanged"):  # another training step: a probe is scored anew
            # (typed text is rescored with its new result, as after an edit)
            st.sigCheckpointChanged.connect(
                lambda _i: self.source.currentData() != "text" and self._on_model_changed(st.model))
        st.sigResultChanged.connect(self._on_result_changed)
        st.sigFocusChanged.connect(self._on_focus_changed)
        st.sigQueryChanged.connect(self._on_query_changed)
        self.source.currentIndexChanged.connect(lambda *_: self.rescore())
        self.exclude_bos.toggled.connect(lambda *_: self.rescore())
        self.exclude_current.toggled.connect(lambda *_: self.rescore())
        self.filter.currentIndexChanged.connect(lambda *_: self._apply_filter())
        self.overlay_role.currentIndexChanged.connect(lambda *_: self._update_overlay())
        self.overview.cellClicked.connect(lambda r, c: self._focus(r, c))
        self.table.cellClicked.connect(self._on_table_clicked)
        self.find_from.activated.connect(lambda *_: self.run_find())
        self.find_to.activated.connect(lambda *_: self.run_find())
        self.find_from.lineEdit().editingFinished.connect(self.run_find)
        self.find_to.lineEdit().editingFinished.connect(self.run_find)
        self.find_table.cellClicked.connect(self._on_find_clicked)
        self.tabs.currentChanged.connect(lambda *_: self._find_shown() and self._ensure_find())

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
            msg = str(error) if isinstance(error, AttnvizError) else f"{type(error).__name__}: {error}"
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
        self.table.setEnabled(True)
        self.overview.setEnabled(True)
        self.scores = hs
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
        self._fill_overview()
        self._fill_table()
        self._write_summary(self._message)
        self._show_definitions()
        self._update_focus_note()

    def showEvent(self, event):
        super().showEvent(event)
        self.catch_up()

    def catch_up(self):
        """Show what waited while the panel was off screen (the window calls this when the panel's
        dock tab is selected: Qt sends no show event then)."""
        if self._view_stale:
            self._refresh_view()
        if self.tabs.currentWidget() is self._find_page:
            self._ensure_find()

    def _fill_overview(self):
        hs = self.scores
        ov = self.overview
        ov.clear()
        if hs is None:
            ov.setRowCount(0)
            ov.setColumnCount(0)
            return
        ov.setRowCount(hs.n_layer)
        ov.setColumnCount(hs.n_head)
        ov.setHorizontalHeaderLabels([f"H{h}" for h in range(hs.n_head)])
        ov.setVerticalHeaderLabels([f"L{l}" for l in range(hs.n_layer)])
        for l in range(hs.n_layer):
            for h in range(hs.n_head):
                role = hs.labels[l][h]
                item = _role_item(role)
                item.setText(ROLE_SHORT[role])
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setToolTip(self._head_tooltip(l, h))
                ov.setItem(l, h, item)
        self._fit_overview()

    def _fit_overview(self):
        """Each overview column as wide as its labels need, the spare width shared out evenly."""
        ov = self.overview
        n = ov.columnCount()
        if n == 0:
            return
        need = [max(ov.horizontalHeader().sectionSizeHint(c), ov.sizeHintForColumn(c))
                for c in range(n)]
        spare = max(0, ov.viewport().width() - sum(need))
        for c in range(n):
            ov.horizontalHeader().resizeSection(c, need[c] + spare // n + (c < spare % n))

    def eventFilter(self, obj, event):
        if obj is self.overview.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_overview()
        return super().eventFilter(obj, event)

    def _head_tooltip(self, l, h):
        hs = self.scores
        lines = [f"{head_title(l, h)}: {hs.labels[l][h]}"]
        for name in H.SCORE_NAMES:
            v = float(hs.scores[name][l, h])
            text = f"{H.TITLES[name]}: {'—' if np.isnan(v) else f'{v:.3f}'}"
            if name in hs.chance:
                c = float(hs.chance[name][l, h])
                text += f"  (chance {'—' if np.isnan(c) else f'{c:.3f}'}, strength {hs.strength[name][l, h]:.3f})"
            lines.append(text)
        built = self._built(l, h)
        if built:
            lines.append(built)
        return "\n".join(lines)

    def _built(self, l, h):
        if self.state.model is not None and self.state.model.name == textbook.TEXTBOOK_NAME:
            return textbook.describe_head(l, h)
        return None

    def _fill_table(self):
        hs = self.scores
        t = self.table
        t.setSortingEnabled(False)
        t.setRowCount(0)
        if hs is not None:
            t.setRowCount(hs.n_layer * hs.n_head)
            row = 0
            for l in range(hs.n_layer):
                for h in range(hs.n_head):
                    t.setItem(row, 0, _num_item(l, 0))
                    t.setItem(row, 1, _num_item(h, 0))
                    t.setItem(row, 2, _role_item(hs.labels[l][h]))
                    for j, name in enumerate(H.SCORE_NAMES):
                        item = _num_item(hs.scores[name][l, h])
                        if name in hs.chance:
                            item.setToolTip(f"chance {float(hs.chance[name][l, h]):.3f}: the score "
                                            "if this head spread its attention evenly")
                        t.setItem(row, 3 + j, item)
                    row += 1
        t.setSortingEnabled(True)
        t.resizeColumnsToContents()
        self._apply_filter()

    def _apply_filter(self):
        role = self.filter.currentData()
        t = self.table
        for row in range(t.rowCount()):
            item = t.item(row, 2)
            t.setRowHidden(row, role is not None and (item is None or item.text() != role))
        self._show_definitions()

    def visible_heads(self):
        """(layer, head) of the table rows shown now, top to bottom (tests, keyboard users)."""
        out = []
        for row in range(self.table.rowCount()):
            if not self.table.isRowHidden(row):
                out.append((int(self.table.item(row, 0).data(Qt.ItemDataRole.DisplayRole)),
                            int(self.table.item(row, 1).data(Qt.ItemDataRole.DisplayRole))))
        return out

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
            parts.append(f"<b style='color:#b35c00'>{html.escape(hs.notice)}.</b>")
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

    def _show_definitions(self):
        role = self.filter.currentData()
        names = [role] if role in H.DEFINITIONS else list(H.SCORE_NAMES)
        body = []
        for name in names:
            body.append(f"<p><b>{html.escape(H.TITLES[name])}</b>: {html.escape(H.DEFINITIONS[name])}"
                        + (f" Threshold {H.THRESHOLDS[name]:g}." if name in H.THRESHOLDS else "")
                        + "</p>")
        body.append(f"<p><i>{html.escape(H.LABEL_RULE)}</i></p>")
        body.append(f"<p><i>{html.escape(H.CHANCE_RULE)}</i></p>")
        self.definitions.setHtml("".join(body))

    # --- focus, overlay -----------------------------------------------------------------------
    def _focus(self, layer, head):
        st = self.state
        if st.model is None or not (0 <= layer < st.n_layer and 0 <= head < st.n_head):
            return
        st.set_layer(layer)
        st.set_focus(layer, head)

    def _on_table_clicked(self, row, _col):
        item_l, item_h = self.table.item(row, 0), self.table.item(row, 1)
        if item_l is not None and item_h is not None:
            self._focus(int(item_l.data(Qt.ItemDataRole.DisplayRole)),
                        int(item_h.data(Qt.ItemDataRole.DisplayRole)))

    def set_overlay_role(self, role):
        """Pick the role whose detection pattern is drawn on the focused head (None: no overlay)."""
        self.overlay_role.setCurrentIndex(self.overlay_role.findData(role))

    def _update_overlay(self):
        st = self.state
        role = self.overlay_role.currentData()
        if role is None or st.result is None or st.focus is None:
            st.set_overlay(None)
            return
        st.set_overlay(H.detection_pattern(role, np.asarray(st.result.input_ids)))

    def _update_focus_note(self):
        st = self.state
        hs = self.scores
        if st.focus is None or hs is None:
            self.focus_note.setText("")
            return
        l, h = st.focus
        if l >= hs.n_layer or h >= hs.n_head:
            self.focus_note.setText("")
            return
        vals = ", ".join(f"{name} {hs.scores[name][l, h]:.3f}" for name in H.ROLES)
        text = f"{head_title(l, h)}: {hs.labels[l][h]} ({vals})"
        built = self._built(l, h)
        if built:
            text += f"\n{built}"
        self.focus_note.setText(text)

    def _on_focus_changed(self, focus):
        if focus is not None and self.overview.rowCount() > focus[0]:
            self.overview.setCurrentCell(*focus)
        self._update_overlay()
        self._update_focus_note()

    # --- find ---------------------------------------------------------------------------------
    def _find_shown(self):
        return self._on_screen() and self.tabs.currentWidget() is self._find_page

    def _ensure_find(self):
        """Catch Find up with the current result (it waits while its tab is not shown)."""
        if self._find_stale:
            self._fill_find_tokens()

    def _fill_find_tokens(self):
        self._find_stale = False
        r = self.state.result
        old = (self.find_from.currentIndex(), self.find_to.currentIndex())
        for box in (self.find_from, self.find_to):
            box.blockSignals(True)
            box.clear()
            if r is not None:
                box.addItems([f"{lab}@{i}" for i, lab in enumerate(r.labels)])
            box.blockSignals(False)
        if r is None:
            self._show_hits(None)
            return
        T = len(r.labels)
        q = self.state.query_pos if self.state.query_pos is not None else old[0]
        k = old[1]
        self.find_from.setCurrentIndex(q if 0 <= q < T else T - 1)
        self.find_to.setCurrentIndex(k if 0 <= k < T else 0)
        self.run_find()

    def set_find(self, from_token, to_token):
        """Type both tokens (display text, or text@pos) and run Find."""
        self._ensure_find()
        self.find_from.setEditText(str(from_token))
        self.find_to.setEditText(str(to_token))
        return self.run_find()

    def run_find(self):
        r = self.state.result
        if r is None:
            self._show_hits(None)
            return None
        try:
            q = H.resolve_token(r, self.find_from.currentText())
            k = H.resolve_token(r, self.find_to.currentText())
        except AttnvizError as exc:
            self.find_status.setText(str(exc))
            self._show_hits(None)
            return None
        for box, pos in ((self.find_from, q), (self.find_to, k)):
            box.blockSignals(True)
            box.setCurrentIndex(pos)
            box.blockSignals(False)
        hits = H.find(r, q, k)
        self.find_status.setText(
            f"From {r.labels[q]!r}@{q} (query) to {r.labels[k]!r}@{k} (key), every head ranked by "
            "specificity: its weight minus the mean weight the other queries give that key (a head "
            "where every token attends to the key says nothing about this query). Click one to "
            "focus it.")
        self._find_q = q
        self._show_hits(hits)
        return hits

    def _show_hits(self, hits):
        self.hits = list(hits or [])
        t = self.find_table
        t.setRowCount(len(self.hits))
        for i, hit in enumerate(self.hits):
            if t.item(i, 0) is None:  # rows keep their items: refilling only sets their values
                t.setItem(i, 0, _num_item(i + 1, 0))
                t.setItem(i, 1, QTableWidgetItem())
                t.setItem(i, 2, _num_item(0.0, 4))
                t.setItem(i, 3, _num_item(0.0, 4))
            head = t.item(i, 1)
            head.setText(head_title(hit.layer, hit.head))
            head.setToolTip(self._label(hit.layer, hit.head))
            for col, value in ((2, float(hit.specificity)), (3, float(hit.weight))):
                t.item(i, col).setData(Qt.ItemDataRole.DisplayRole,
                                       None if np.isnan(value) else round(value, 4))
        if hits is None:
            if self.state.result is None:
                self.find_status.setText("")
        self.sigFound.emit(hits)

    def _label(self, l, h):
        """The role label of head (l, h), or "" while no scores of this shape are shown."""
        hs = self.scores
        return hs.labels[l][h] if hs is not None and l < hs.n_layer and h < hs.n_head else ""

    def _on_find_clicked(self, row, _col):
        if 0 <= row < len(self.hits):
            hit = self.hits[row]
            self._focus(hit.layer, hit.head)
            self.state.set_query(getattr(self, "_find_q", None))

    def _on_query_changed(self, pos):
        r = self.state.result
        if pos is None or r is None or not 0 <= pos < len(r.labels) or self._find_stale:
            return  # (a stale Find starts from the query when it catches up)
        if self.find_from.currentIndex() != pos:
            self.find_from.setCurrentIndex(pos)
            self.run_find()

    # --- state changes ------------------------------------------------------------------------
    def _on_model_changed(self, model):
        self._probe_cache = {}
        self.template = None
        self._rescore_timer.stop()
        if self.scores is not None:
            self._show_scores(None)  # the old model's scores must not outlive it, even while rescoring
        self.rescore()

    def _on_result_changed(self, result):
        if result is None or self._find_shown():
            self._fill_find_tokens()
        else:
            self._find_stale = True  # filled when the Find tab is shown or used
        if self.source.currentData() == "text":
            if result is None:
                self._rescore_timer.stop()
                self.rescore()  # clearing is immediate
            else:
                self._rescore_timer.start()  # restarts while results keep coming
                self._mark_stale()
        self._update_overlay()

    def _mark_stale(self):
        """Scores of the previous text are not this text's: the grid's badges go at once, and the
        tables stay greyed until the new scores arrive."""
        if self.scores is None or self._updating:
            return
        self._updating = True
        self.state.set_head_labels(None)
        self.table.setEnabled(False)
        self.overview.setEnabled(False)
        self.summary.setText("Updating: scoring the new text…")
