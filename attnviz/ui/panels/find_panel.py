"""Find: which heads send the query token A to the key token B, every head ranked by specificity.

A view of AppState, placed as a tab of the head-roles panel: it keeps its own token lists (the
result's tokens), follows the result and the query (a query row picked elsewhere moves its A) and
writes back the focus and the query when a head is clicked. The search itself (find.find) is a
few NumPy reductions, run at once on the main thread; `set_find` and `run_find` return its hits.
A long text (state.long: no dense patterns) is searched with find.find_long, which computes the key's
column of every head only.

While Find is not on screen (`shown()`, asked of its host: its tab and dock), a new result only
marks its token lists stale; they are refilled when it is shown (`catch_up`) or used (`set_find`)."""

from __future__ import annotations

from typing import Callable

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QFormLayout, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout,
    QWidget,
)

from attnviz.engine.analysing import find as F
from attnviz.engine.errors import AttnvizError
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures.view import same_prefix
from attnviz.ui.panels.roles_views import Decimals, num_item
from attnviz.ui.views.column_fit import ColumnFit
from attnviz.ui.views.fields import plain_label


SPECIFICITY = ("specificity: the head's weight from the query to the key minus the mean weight that "
               "the other queries able to see the key give it (in a decoder, those at or after the "
               "key). A head where every token attends to the key scores near 0, however large its "
               "weight: it says nothing about this query.")


def same_token(result, text: str, before=None) -> int | None:
    """Where the token a box holds ('are', or 'are@6' as the lists write it) is in `result`: at its
    position while that is the same token after the same tokens as in `before` (the result the box
    was filled from: a text changed before it may have moved another occurrence there), else where
    it occurs once; None where it is not (or more than once)."""
    label, at, pos = text.rpartition("@")
    if at and pos.isascii() and pos.isdigit():  # (str.isdigit alone takes '²', which int() refuses)
        if (int(pos) < len(result.labels) and result.labels[int(pos)] == label
                and same_prefix(before, result, int(pos) + 1)):
            return int(pos)
        text = label
    try:
        return F.resolve_token(result, text) if text else None
    except AttnvizError:
        return None


class FindPanel(QWidget):
    sigFound = Signal(object)  # list[HeadHit] | None

    def __init__(self, state, shown: Callable[[], bool], parent: QWidget | None = None):
        """`shown`: whether Find is on screen now (its host knows: the tab it sits in, the dock)."""
        super().__init__(parent)
        self.state = state
        self._filled_from = None  # the result the token lists were last filled from
        self.shown = shown
        self.hits: list[F.HeadHit] = []
        self._find_q = None  # the query position of the hits shown
        self._stale = True  # the token lists lag the result (built empty, or Find not on screen)
        self._build()
        self._connect()

    def _build(self):
        self.find_from = QComboBox()
        self.find_to = QComboBox()
        for box, tip in ((self.find_from, "query token (the row): pick, or type e.g. are or the@4"),
                         (self.find_to, "key token (the column): pick, or type e.g. keys or the@4")):
            box.setEditable(True)
            box.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
            box.setToolTip(tip)
        self.find_status = plain_label(QLabel(""))  # (it quotes token labels)
        self.find_status.setWordWrap(True)
        self.find_table = QTableWidget(0, 4)
        self.find_table.setHorizontalHeaderLabels(["rank", "head", "specificity", "weight"])
        self.find_table.horizontalHeaderItem(2).setToolTip(SPECIFICITY)
        self.find_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.find_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.find_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.find_table.verticalHeader().setVisible(False)
        self.find_table.verticalHeader().setDefaultSectionSize(22)
        self.find_table.setItemDelegate(Decimals(3, self.find_table))
        self.find_fit = ColumnFit(self.find_table)  # each column its numbers whole, the spare width shared
        fdl = QVBoxLayout(self)
        ff = QFormLayout()
        ff.addRow("from (query)", self.find_from)
        ff.addRow("to (key)", self.find_to)
        fdl.addLayout(ff)
        fdl.addWidget(self.find_status)
        fdl.addWidget(self.find_table, 1)

    def _connect(self):
        st = self.state
        st.sigTextResultChanged.connect(self._on_result_changed)  # a dense result or a long run's
        st.sigQueryChanged.connect(self._on_query_changed)
        self.find_from.activated.connect(lambda *_: self.run_find())
        self.find_to.activated.connect(lambda *_: self.run_find())
        for box in (self.find_from, self.find_to):  # (what the user typed there keeps its cursor)
            box.lineEdit().editingFinished.connect(lambda box=box: self.run_find(typed_in=box))
        self.find_table.cellClicked.connect(self._on_find_clicked)

    def catch_up(self):
        """Catch Find up with the current result (it waits while it is not on screen)."""
        if self._stale:
            self._fill_find_tokens()

    def _fill_find_tokens(self):
        """The result's tokens in both lists; each box keeps its token where the new text has it
        (at the same place, else where it occurs once), else Find proposes anew: the query token,
        or the last, from the first token. A token typed for another text never opens on an error."""
        self._stale = False
        r, before = self.state.text_result, self._filled_from
        self._filled_from = r
        old = (self.find_from.currentText(), self.find_to.currentText())
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
        q = self.state.query_pos if self.state.query_pos is not None else same_token(r, old[0], before)
        q = q if q is not None and 0 <= q < T else T - 1
        k = same_token(r, old[1], before)
        model = self.state.model
        if k is None or (k > q and (model is None or model.config.causal)):  # (a key the query sees)
            k = 0
        self.find_from.setCurrentIndex(q)
        self.find_to.setCurrentIndex(k)
        self.run_find()

    def set_find(self, from_token, to_token):
        """Type both tokens (display text, or text@pos) and run Find."""
        self.catch_up()
        self.find_from.setEditText(str(from_token))
        self.find_to.setEditText(str(to_token))
        return self.run_find()

    def run_find(self, typed_in=None):
        """Find's ranking for the tokens in its two boxes; each box shows its token from its start
        (fields.py), except the box the user just typed in (`typed_in`) while Find kept its text."""
        r = self.state.text_result
        if r is None:
            self._show_hits(None)
            return None
        patterns = self.state.long.patterns  # a long text's, computed on demand
        try:
            q = F.resolve_token(r, self.find_from.currentText())
            k = F.resolve_token(r, self.find_to.currentText())
            for box, pos in ((self.find_from, q), (self.find_to, k)):
                typed = box.currentText()
                box.blockSignals(True)
                box.setCurrentIndex(pos)
                box.blockSignals(False)
                if box is not typed_in or box.currentText() != typed:
                    box.lineEdit().setCursorPosition(0)
            hits = F.find(r, q, k) if patterns is None else F.find_long(patterns, q, k)
        except AttnvizError as exc:  # (a token not in the text; a key a decoder's query cannot see)
            self.find_status.setText(str(exc))
            self._show_hits(None)
            return None
        # (the definition is the line's and the column's tooltip: five lines of it were cut where
        # a long summary leaves the tab its least height)
        self.find_status.setText(f"From {quoted(isolated(r.labels[q]))}@{q} (query) to {quoted(isolated(r.labels[k]))}@{k} "
                                 "(key): every head ranked by specificity. Click one to focus it.")
        self.find_status.setToolTip(SPECIFICITY)
        self._find_q = q
        self._show_hits(hits)
        return hits

    def _show_hits(self, hits):
        self.hits = list(hits or [])
        t = self.find_table
        t.setRowCount(len(self.hits))
        for i, hit in enumerate(self.hits):
            if t.item(i, 0) is None:  # rows keep their items: refilling only sets their values
                t.setItem(i, 0, num_item(i + 1, 0))
                t.setItem(i, 1, QTableWidgetItem())
                t.setItem(i, 2, num_item(0.0))
                t.setItem(i, 3, num_item(0.0))
            head = t.item(i, 1)
            head.setText(head_title(hit.layer, hit.head))
            head.setToolTip(self.state.badge(hit.layer, hit.head))  # the grid's badge of that head
            for col, value in ((2, float(hit.specificity)), (3, float(hit.weight))):
                # rounded once, to the 3 digits shown, as num_item does; + 0.0: no "-0.000"
                t.item(i, col).setData(Qt.ItemDataRole.DisplayRole,
                                       None if np.isnan(value) else round(value, 3) + 0.0)
        self.find_fit.measure()
        if hits is None:
            if self.state.text_result is None:
                self.find_status.setText("")
        self.sigFound.emit(hits)

    def _on_find_clicked(self, row, _col):
        if 0 <= row < len(self.hits):
            hit = self.hits[row]
            self.state.show_head(hit.layer, hit.head)
            self.state.set_query(self._find_q)

    # --- state changes ------------------------------------------------------------------------
    def _on_result_changed(self, result):
        if result is None or self.shown():
            self._fill_find_tokens()
        else:
            self._stale = True  # filled when Find is shown or used

    def _on_query_changed(self, pos):
        r = self.state.text_result
        if pos is None or r is None or not 0 <= pos < len(r.labels) or self._stale:
            return  # (a stale Find starts from the query when it catches up)
        if self.find_from.currentIndex() != pos:
            self.find_from.setCurrentIndex(pos)
            self.run_find()
