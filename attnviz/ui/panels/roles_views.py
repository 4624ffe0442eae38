"""The head-roles panel's two views of the head scores: the Overview tab (the layers x heads map
coloured by role, its legend, the detection-pattern overlay on the focused head and the focused
head's note) and the Scores tab (every head's scores, sortable and filterable, beside their
definitions); with the table items and the click-to-focus they share with Find.

Both are views of AppState's head scores (`scores` reads `state.head_scores`, HeadScores | None);
the roles panel calls `refresh()` when new ones arrive while it is on screen. Clicking a head writes
the focus back to AppState."""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QFontMetricsF
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel, QStackedWidget,
    QStyledItemDelegate, QTableWidget, QTableWidgetItem, QTextBrowser, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.probes import KINDS as PROBE_KINDS
from attnviz.engine.reading import textbook
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.numbers import minus_signs
from attnviz.figures.roles import BADGE_SHORT, SHORT_PROBE_NOTE
from attnviz.figures.style import ROLE_COLORS, ROLE_SHORT, role_text_color
from attnviz.ui.views.column_fit import ColumnFit, text_margins
from attnviz.ui.views.fields import plain_label, rich_label

COLUMNS = ("layer", "head", "role") + H.SCORE_NAMES
# the Scores tab's headers, short so its eleven columns fit a 440 px dock (the full names and
# definitions in their tooltips); the role scores as the map's cells abbreviate them
HEADERS = {"layer": "L", "head": "H", "role": "role", **{r: ROLE_SHORT[r] for r in H.ROLES},
           "distance": "dist", "entropy": "ent"}
# decimals shown: the role scores (shares, 0 to 1) to 3, distance (tokens) and entropy (bits) to 2;
# each cell's tooltip gives its number to 3
DIGITS = {**{r: 3 for r in H.ROLES}, "distance": 2, "entropy": 2}
_ALL = "all roles"


def _legend_text(role):  # "prev&nbsp;=&nbsp;previous", or the name alone where it is its own abbreviation
    # the map's abbreviation and the grid titles' (short_badge) where they differ: "·/mix = mixed"
    shorts = dict.fromkeys(s for s in (ROLE_SHORT[role], BADGE_SHORT[role]) if s != role)
    return "/".join(shorts) + f"&nbsp;=&nbsp;{role}" if shorts else role


def _legend_tail():  # what else a grid title abbreviates: the template probes' kinds, a probe's note
    terms = [f"{BADGE_SHORT[k]}&nbsp;=&nbsp;{k}" for k in PROBE_KINDS if BADGE_SHORT[k] != k]
    return ", ".join(terms + [f"{SHORT_PROBE_NOTE.strip()}&nbsp;=&nbsp;from&nbsp;the&nbsp;probe"])


class Decimals(QStyledItemDelegate):
    """A table's numbers as it paints them: every float with the same number of decimals (0.800 beside
    0.876, never 0.8), the minus as "−" as the window writes it, ints as they are; the items keep the
    numbers, so columns sort as numbers (and Ctrl+C copies a number a program reads back)."""

    def __init__(self, digits: int = 3, parent=None):
        super().__init__(parent)
        self.digits = digits

    def displayText(self, value, locale):
        if isinstance(value, float):
            return minus_signs(f"{value:.{self.digits}f}")
        return super().displayText(value, locale)


class Compact(Decimals):
    """Decimals without the leading zero of a number below 1 (.099 beside 1.000, as tables of
    shares print them): a column a digit narrower."""

    def displayText(self, value, locale):
        text = super().displayText(value, locale)
        if isinstance(value, float):
            return text.replace("0.", ".", 1) if text.startswith("0.") else \
                text.replace("\u22120.", "\u2212.", 1) if text.startswith("\u22120.") else text
        return text


class ShrinkToFit(QStyledItemDelegate):
    """A cell whose text is wider than the cell (less the style's margins) drawn in a font small
    enough to show it whole, down to MIN_POINT ("sink", not "si…", in a narrow dock's map); only
    below that cut with "…"."""

    MIN_POINT = 6.5

    def initStyleOption(self, option, index):
        super().initStyleOption(option, index)
        room = option.rect.width() - text_margins(self.parent()) - 1  # (-1: a text's fractional width)
        if room <= 0 or not option.text:  # (a size hint's option has no cell yet)
            return
        font, point = option.font, option.font.pointSizeF()
        need = QFontMetricsF(font).horizontalAdvance(option.text)
        if need <= room or point <= 0:
            return
        point = max(self.MIN_POINT, point * room / need)
        font.setPointSizeF(point)
        while QFontMetricsF(font).horizontalAdvance(option.text) > room and point > self.MIN_POINT:
            point = max(self.MIN_POINT, point - 0.25)  # (hinting: a size's text may round wider)
            font.setPointSizeF(point)
        option.font, option.fontMetrics = font, QFontMetrics(font)


def num_item(value, digits=3):
    item = QTableWidgetItem()
    v = float(value)
    # rounded once, to the digits shown (the delegate's text adds none); + 0.0: no "-.000" for -0.0
    shown = None if np.isnan(v) else int(round(v)) if digits == 0 else round(v, digits) + 0.0
    item.setData(Qt.ItemDataRole.DisplayRole, shown)  # an int reads "3", a float "0.800" (Decimals)
    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _role_item(role):
    item = QTableWidgetItem(role)
    item.setBackground(QBrush(QColor(ROLE_COLORS[role])))
    item.setForeground(QBrush(QColor(role_text_color(role))))
    return item


class RolesOverview(QWidget):
    """The Overview tab: a view of AppState's focus and result (overlay, note) and of the scores."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self._build()
        self._connect()
        self._write_empty_note()
        self.map_or_note.setCurrentWidget(self.empty_note if state.head_scores is None else self.map)

    def _build(self):
        # the map: layers x heads coloured by role
        self.map = QTableWidget(0, 0)
        self.map.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.map.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        # the map fills its box: rows share the height (scrolling only below a line's height),
        # columns as wide as their labels plus a share of the spare width (ColumnFit)
        self.map.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.map.verticalHeader().setMinimumSectionSize(self.map.fontMetrics().height() + 6)
        self.map_fit = ColumnFit(self.map, cut=True)  # (all heads in sight; a cell's colour is its role)
        self.map.setItemDelegate(ShrinkToFit(self.map))  # (a role's name whole in a narrow column)
        self.map.setToolTip("Rows: layers, columns: heads, coloured by role. Click to focus.")
        # one swatch per role, never broken inside ("dup = / duplicate"); "prev = previous" only
        # where the cell's abbreviation differs from the name; then the rest a grid title abbreviates
        self.legend = rich_label(QLabel(" ".join(
            f'<span style="background:{c}; color:{role_text_color(r)}">'
            f"&nbsp;{_legend_text(r)}&nbsp;</span>"
            for r, c in ROLE_COLORS.items()) + f" &nbsp;{_legend_tail()}"))
        self.legend.setWordWrap(True)
        self.overlay_role = QComboBox()
        self.overlay_role.addItem("none", None)
        for role in H.ROLES:
            self.overlay_role.addItem(H.TITLES[role], role)
        self.overlay_role.setToolTip("Draw this role's detection pattern D on the focused head: "
                                     "the cells its score counts")
        self.focus_note = plain_label(QLabel(""))
        self.focus_note.setWordWrap(True)
        # in the map's place while there are no role scores: what fills it, and when
        self.empty_note = plain_label(QLabel(""))
        self.empty_note.setWordWrap(True)
        self.empty_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_note.setMargin(12)
        self.map_or_note = QStackedWidget()
        self.map_or_note.addWidget(self.map)
        self.map_or_note.addWidget(self.empty_note)
        ovl = QVBoxLayout(self)
        margins = ovl.contentsMargins()  # (the tab's frame is the map's margin at the sides)
        ovl.setContentsMargins(2, margins.top(), 2, margins.bottom())
        ovl.addWidget(self.map_or_note, 1)
        ovl.addWidget(self.legend)
        form = QFormLayout()
        form.addRow("Overlay on focused head", self.overlay_role)
        ovl.addLayout(form)
        ovl.addWidget(self.focus_note)

    def _connect(self):
        st = self.state
        st.sigResultChanged.connect(lambda *_: self._update_overlay())
        st.sigFocusChanged.connect(self._on_focus_changed)
        self.overlay_role.currentIndexChanged.connect(lambda *_: self._update_overlay())
        self.map.cellClicked.connect(self.state.show_head)
        st.sigRoleOptionsChanged.connect(lambda *_: self._write_empty_note())

    def refresh(self):
        self._fill_map()
        self._update_focus_note()

    def _fill_map(self):
        hs = self.state.head_scores
        ov = self.map
        ov.clear()
        self._write_empty_note()
        if hs is None:
            ov.setRowCount(0)
            ov.setColumnCount(0)
            self.map_or_note.setCurrentWidget(self.empty_note)
            return
        self.map_or_note.setCurrentWidget(self.map)
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
        self.map_fit.measure()

    def _write_empty_note(self) -> None:
        """What the map will show, for the note in its place while there are no role scores (the
        summary above says what is under way, and how far it is)."""
        st = self.state
        source = st.role_options.source
        if st.model is None:
            text = "Each head's role shows here once a model is open and its heads are scored."
        elif source == "text":
            text = "Each head's role on the typed text shows here once its heads are scored."
        elif source == "probe":
            text = "Each head's role on the probe shows here once the probe's heads are scored."
        else:
            text = ("A template probe scores each head on one question, not by role: once it has "
                    "run, the heads it labels are listed above and badged on the grid. This map "
                    "shows roles on the typed text or the random probe.")
        self.empty_note.setText(text)

    def _head_tooltip(self, l, h):
        hs = self.state.head_scores
        lines = [f"{head_title(l, h)}: {hs.labels[l][h]}"]
        for name in H.SCORE_NAMES:
            v = float(hs.scores[name][l, h]) + 0.0  # (-0.0, an entropy of one-hot rows, reads 0.000)
            c = float(hs.chance[name][l, h]) if name in hs.chance else np.nan
            v_text, c_text = H.chance_texts(v, c)  # (the score's lead over chance on its true side)
            text = f"{H.TITLES[name]}: {'—' if np.isnan(v) else v_text}"
            if name in hs.chance:
                v = float(hs.strength[name][l, h])
                text += f"  (chance {'—' if np.isnan(c) else c_text}, strength {'—' if np.isnan(v) else H.strength_text(name, v)})"
            lines.append(text)
        built = self._built(l, h)
        if built:
            lines.append(built)
        return "\n".join(lines)

    def _built(self, l, h):
        if self.state.model is not None and self.state.model.name == textbook.TEXTBOOK_NAME:
            return textbook.describe_head(l, h)
        return None

    # --- focus, overlay -----------------------------------------------------------------------
    def set_overlay_role(self, role):
        """Pick the role whose detection pattern is drawn on the focused head (None: no overlay)."""
        self.overlay_role.setCurrentIndex(self.overlay_role.findData(role))

    def _update_overlay(self):
        st = self.state
        role = self.overlay_role.currentData()
        if role is None or st.result is None or st.focus is None:
            st.set_overlay(None)
            return
        ids = np.asarray(st.result.input_ids)
        unknown = H.unknown_mask(ids, H.unknown_token_ids(st.model)) if st.model is not None else None
        st.set_overlay(H.detection_pattern(role, ids, unknown))  # [T, T] bool: the cells the score counts

    def _update_focus_note(self):
        st = self.state
        hs = self.state.head_scores
        if st.focus is None or hs is None:
            self.focus_note.setText("")
            return
        l, h = st.focus
        if l >= hs.n_layer or h >= hs.n_head:
            self.focus_note.setText("")
            return
        text = f"{focus_label(hs, l, h)}\nscores: " + ", ".join(
            f"{name} {hs.scores[name][l, h]:.3f}" for name in H.ROLES)
        built = self._built(l, h)
        if built:
            text += f"\n{built}"
        self.focus_note.setText(text)

    def _on_focus_changed(self, focus):
        if focus is not None and self.map.rowCount() > focus[0]:
            self.map.setCurrentCell(*focus)
        self._update_overlay()
        self._update_focus_note()


class ScoresTable(QWidget):
    """The Scores tab: per-head scores, sortable and filterable, with the definitions beside them."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self._build()
        self.filter.currentIndexChanged.connect(lambda *_: self._apply_filter())
        self.table.cellClicked.connect(self._on_table_clicked)

    def _build(self):
        self.filter = QComboBox()
        self.filter.addItem(_ALL, None)
        for role in H.ROLES + (H.MIXED,):
            self.filter.addItem(role, role)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([HEADERS[c] for c in COLUMNS])
        for i, c in enumerate(COLUMNS):
            self.table.horizontalHeaderItem(i).setToolTip(_header_tooltip(c))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSortIndicator(0, Qt.SortOrder.AscendingOrder)
        self.table.setSortingEnabled(True)
        for i, c in enumerate(COLUMNS):
            self.table.setItemDelegateForColumn(i, Compact(DIGITS.get(c, 3), self.table))
        self.table.verticalHeader().setDefaultSectionSize(22)
        # the columns fill the table's width, each as wide as its texts, fitted again as the width
        # or the sorted column (its header's arrow, its rows' order) changes
        self.table_fit = ColumnFit(self.table)
        header.sortIndicatorChanged.connect(lambda *_: self.table_fit.measure(texts=False))
        self.definitions = QTextBrowser()
        self.definitions.setOpenLinks(False)
        scl = QVBoxLayout(self)
        fl = QHBoxLayout()
        fl.addWidget(plain_label(QLabel("Show")))
        fl.addWidget(self.filter, 1)
        scl.addLayout(fl)
        scl.addWidget(self.table, 3)
        scl.addWidget(plain_label(QLabel("What the numbers mean")))
        scl.addWidget(self.definitions, 2)
        self._show_definitions()

    def refresh(self):
        hs = self.state.head_scores
        t = self.table
        t.setSortingEnabled(False)
        t.setRowCount(0)
        if hs is not None:
            t.setRowCount(hs.n_layer * hs.n_head)
            row = 0
            for l in range(hs.n_layer):
                for h in range(hs.n_head):
                    for c, item in enumerate((num_item(l, 0), num_item(h, 0), _role_item(hs.labels[l][h]))):
                        item.setToolTip(f"{head_title(l, h)}: {hs.labels[l][h]}")
                        t.setItem(row, c, item)
                    for j, name in enumerate(H.SCORE_NAMES):
                        item = num_item(hs.scores[name][l, h], DIGITS[name])
                        item.setToolTip(_score_tooltip(hs, name, l, h))
                        t.setItem(row, 3 + j, item)
                    row += 1
        t.setSortingEnabled(True)
        self.table_fit.measure()
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

    def _on_table_clicked(self, row, _col):
        item_l, item_h = self.table.item(row, 0), self.table.item(row, 1)
        if item_l is not None and item_h is not None:
            self.state.show_head(int(item_l.data(Qt.ItemDataRole.DisplayRole)),
                                 int(item_h.data(Qt.ItemDataRole.DisplayRole)))


def focus_label(hs, l: int, h: int) -> str:
    """The focused head's label with the number it was given on: its role's strength (a label
    goes by strength, not by the scores listed after it), or why it is mixed."""
    role = hs.labels[l][h]
    if role in H.ROLES:
        return f"{head_title(l, h)}: {role}, strength {H.strength_text(role, hs.strength[role][l, h])}"
    return f"{head_title(l, h)}: {role} (no role's strength clears its bar with a score above chance)"


def _header_tooltip(column: str) -> str:
    if column in H.DEFINITIONS:
        return f"{H.TITLES[column]}: {H.DEFINITIONS[column]}"
    return {"layer": "Layer", "head": "Head", "role": "Role: " + H.LABEL_RULE.removeprefix("Label: ")}[column]


def _score_tooltip(hs, name: str, l: int, h: int) -> str:
    """A Scores cell's tooltip: the head, the score's full name and its value to 3 decimals, and a
    role score's chance (the score if the head spread its attention evenly), both with more where
    3 would put the score's lead over chance on the wrong side of its margin (heads.chance_texts)."""
    v = float(hs.scores[name][l, h]) + 0.0  # (-0.0 reads 0.000)
    c = float(hs.chance[name][l, h]) if name in hs.chance else np.nan
    v_text, c_text = H.chance_texts(v, c)  # (the score's lead over chance on its true side)
    text = f"{head_title(l, h)}, {H.TITLES[name]}: {'—' if np.isnan(v) else v_text}"
    if name in hs.chance:
        text += (f"\nchance {'—' if np.isnan(c) else c_text}: the score if this head spread its "
                 "attention evenly")
    return text
