"""Switching heads off and edges out, and which heads matter: views of `state.effects`.

- AblationBar: above the grid while a changed run is shown, naming what is switched off, with the
  one button that restores the clean run.
- AblationPanel: the switched-off heads (a list; add one by name, remove, zero or mean), knockout
  of an edge q -> k in chosen layers, and the scan (progress, cancel, a layer x head map and a
  ranked table with each head's role badge)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QGridLayout, QHBoxLayout, QLabel, QLineEdit, QListWidget,
    QListWidgetItem, QProgressBar, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.engine.analysing.ablation import (
    MODES, knockout_layers, layer_runs, layer_span, narrowed_note)
from attnviz.engine.analysing.effects import layers_text
from attnviz.engine.analysing.samples import sample_for_text
from attnviz.engine.errors import InputError
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures.style import WARNING
from attnviz.ui.machinery.compare_jobs import MODE_TITLES
from attnviz.ui.panels.dla_view import HeadMapView, scan_map
from attnviz.figures.numbers import plain_signed
from attnviz.ui.views.fields import menu_text, plain_label, rich_label
from attnviz.ui.views.grid_compare import grid_mode

RANKED_ROWS = 20


class AblationBar(QWidget):
    """One line above the grid while heads are switched off: what, and Restore clean run."""

    def __init__(self, state, compare=None, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.compare = compare  # the Compare session: its B or A − B grid shows the clean runs
        self.label = rich_label(QLabel())
        self.label.setWordWrap(True)
        self.restore_button = QPushButton("Restore clean run")
        self.restore_button.clicked.connect(state.effects.restore_clean)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 2, 6, 2)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.restore_button)
        self.setStyleSheet(f"AblationBar {{ background: {WARNING}; }} QLabel {{ color: white; }}")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        state.effects.sigAblationChanged.connect(self._follow)
        state.effects.sigRunChanged.connect(self._follow)
        state.sigRoleOptionsChanged.connect(self._follow)  # Head roles on the text, or on a probe
        state.sigTextChanged.connect(self._follow)  # the guide shows for a sample text only
        if compare is not None:
            compare.sigChanged.connect(self._follow)  # the grid's A | B | A − B
        self._follow()

    def _follow(self, *_) -> None:
        eff = self.state.effects
        ab = eff.ablation
        self.setVisible(ab.active)
        if not ab.active:
            return
        run = eff.run
        note = f" ({run.note})" if run is not None and run.note else ""
        if run is not None and run.ablation == ab and run.changed is None:  # (not applied: the note says why)
            shown = "The clean run is shown."
        else:
            mode = "A" if self.compare is None else grid_mode(self.compare)  # (what the grid shows)
            views = changed_views(self.state)[mode != "A":]  # (its first: the grid)
            shown = f"{', '.join(views[:-1])} and {views[-1]}"
            shown = f"{shown[0].upper()}{shown[1:]} show it."
            if mode != "A":
                shown += f" The grid shows {MODE_TITLES[mode]} of both models' clean runs."
        self.label.setText(f"<b>Changed run</b>: {html.escape(ab.describe())}{html.escape(note)}. {shown}")


def changed_views(state) -> list[str]:
    """The views that show the changed run: Head roles only while it scores the typed text (a
    probe's labels come from probe runs without the edits), the guide only while it shows (the
    text is a sample), prediction, lens and DLA only for a model that predicts a next token."""
    roles = ["head roles"] if state.role_options.source == "text" else []
    guide = ["the guide"] if sample_for_text(state.text or "") is not None else []
    nexts = ["prediction", "lens", "DLA"] if state.model is not None and _predicts(state.model) else []
    return ["the grid", *roles, *guide, *nexts, "Anatomy", "Why here?"]


def _predicts(model) -> bool:
    """Whether the model has a head (Model.lm_head: the one its analyses build and keep; not
    compare_tokens.predicts, which checks every row of a quantised unembedding, on this thread)."""
    from attnviz.engine.errors import ModelFileChanged, NoPrediction

    try:
        model.lm_head()
    except NoPrediction:
        return False
    except ModelFileChanged:  # (it has one: each run says its file changed)
        return True
    return True


class AblationPanel(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        eff = self.effects = state.effects
        col = QVBoxLayout(self)
        col.setContentsMargins(2, 2, 2, 2)
        switched = plain_label(QLabel("Switched off (Alt+click a head in the grid or DLA, or its context menu):"))
        switched.setWordWrap(True)  # (the dock's first-start width is narrower than the line)
        col.addWidget(switched)
        self.head_list = QListWidget()
        self.head_list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.head_list.setMaximumHeight(90)
        col.addWidget(self.head_list)
        g = QGridLayout()
        self.head_edit = QLineEdit()
        self.head_edit.setPlaceholderText("heads, e.g. L18 H6 or 18.6, comma-separated")
        self.head_edit.returnPressed.connect(self._add_head)
        add = QPushButton("Switch off")
        add.clicked.connect(self._add_head)
        self.remove_button = QPushButton("Switch back on")
        self.remove_button.clicked.connect(self._remove_selected)
        self.mode_combo = QComboBox()
        for m in MODES:
            self.mode_combo.addItem({"zero": "zero (z = 0)", "mean": "mean over this text (clean run)"}[m], m)
        self.mode_combo.currentIndexChanged.connect(lambda _i: eff.set_mode(self.mode_combo.currentData()))
        g.addWidget(self.head_edit, 0, 0)
        g.addWidget(add, 0, 1)
        g.addWidget(self.remove_button, 0, 2)
        g.addWidget(plain_label(QLabel("Ablation:")), 1, 0)
        g.addWidget(self.mode_combo, 1, 1, 1, 2)
        self.knock_edit = QLineEdit()
        self.knock_edit.setPlaceholderText("knock out Q-K in layers A-B, e.g. 44-33 in 0-29")
        self.knock_edit.returnPressed.connect(self._add_knockout)
        knock = QPushButton("Knock out")
        knock.clicked.connect(self._add_knockout)
        g.addWidget(self.knock_edit, 2, 0, 1, 2)
        g.addWidget(knock, 2, 2)
        col.addLayout(g)
        self.message = plain_label(QLabel())  # (it quotes what was typed)
        self.message.setWordWrap(True)
        self._said_for = None  # the ablation the message is about: another one clears it (_follow)
        col.addWidget(self.message)
        self.restore_button = QPushButton("Restore clean run")
        self.restore_button.clicked.connect(eff.restore_clean)
        col.addWidget(self.restore_button)

        # the scan
        row = QHBoxLayout()
        self.source_combo = QComboBox()
        self.source_combo.addItem("typed text: −log p(target) after the query", "text")
        self.source_combo.addItem("repeated-random probe: repeat loss", "probe")
        self.scan_button = QPushButton("Scan every head")
        self.scan_button.setToolTip("Zero-ablate each head alone and measure how much the loss rises")
        self.scan_button.clicked.connect(lambda: eff.want_scan(self.source_combo.currentData()))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(eff.stop_scan)
        col.addWidget(self.source_combo)  # its own row: beside the buttons it ran off the dock's edge
        row.addWidget(self.scan_button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        col.addLayout(row)
        self.progress = QProgressBar()
        col.addWidget(self.progress)
        self.scan_label = rich_label(QLabel())
        self.scan_label.setWordWrap(True)
        col.addWidget(self.scan_label)
        self.scan_view = HeadMapView(state, "No scan yet.")
        self.scan_view.setMinimumHeight(320)  # (the tab scrolls)
        col.addWidget(self.scan_view, 2)
        self.ranked = QTableWidget(0, 3)
        self.ranked.setHorizontalHeaderLabels(["head", "Δ loss (nats)", "role"])
        self.ranked.verticalHeader().setVisible(False)
        self.ranked.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.ranked.horizontalHeader().setStretchLastSection(True)
        self.ranked.cellClicked.connect(self._ranked_clicked)
        col.addWidget(self.ranked, 2)

        eff.sigAblationChanged.connect(self._follow)
        state.sigTextChanged.connect(lambda *_: self._say(""))  # (a refusal or an edge of the text before)
        eff.sigScanChanged.connect(self._show_scan)
        eff.sigScanProgress.connect(self._on_progress)
        state.sigHeadLabelsChanged.connect(self._show_scan)
        self._follow()
        self._show_scan()

    # --- widgets -> state -------------------------------------------------------------------------
    def _say(self, text: str, refused: bool = True, about=None) -> None:
        """The line under the edits: a refusal in the warning colour, what was done in the text's
        own; about the ablation `about` (the one on now where None), and gone once another is."""
        self._said_for = self.effects.ablation if about is None else about
        self.message.setStyleSheet(f"color: {WARNING}" if refused else "")
        self.message.setText(text)

    def _add_head(self) -> None:
        from attnviz.engine.analysing.ablation import parse_heads

        st = self.state
        if st.model is None:
            return
        try:
            heads = parse_heads(self.head_edit.text(), st.n_layer, st.n_head)
        except InputError as exc:
            self._say(str(exc))
            return
        self._say("")
        ab = self.effects.ablation
        for l, h in heads:
            if (l, h) not in ab.heads:
                ab = ab.toggled(l, h)
        self.effects.set_ablation(ab)
        self.head_edit.clear()

    def _remove_selected(self) -> None:
        ab = self.effects.ablation
        for item in self.head_list.selectedItems():
            kind, *key = item.data(Qt.ItemDataRole.UserRole)
            ab = ab.toggled(*key) if kind == "head" else ab.with_knockout(*key)
        self.effects.set_ablation(ab)

    def _add_knockout(self) -> None:
        """"Q-K in A-B" (or "Q-K in L", or "Q-K" for every layer)."""
        st = self.state
        if st.model is None:
            return
        text = self.knock_edit.text().strip()
        edge, _, layers = text.partition(" in ")
        try:
            q, k = (int(x) for x in edge.replace("→", "-").split("-"))
            span = layer_span(layers, st.n_layer) if layers.strip() else list(range(st.n_layer))
        except ValueError:
            self._say(f"{text!r} is not Q-K in A-B, e.g. 44-33 in 0-29")
            return
        except InputError as exc:
            self._say(str(exc))
            return
        if st.result is None:  # (no text run yet: no edge to name)
            return
        T, cfg = st.result.n_tokens, st.model.config
        if not (0 <= q < T and 0 <= k < T):
            self._say(f"the edge {q}→{k} is outside this text's {tokens(T)} (0..{T - 1})")
            return
        seen, unseen = knockout_layers(cfg, span, q, k)  # (the engine's rule, as --knockout's)
        seen = tuple(seen)
        if not seen:
            where = "" if len(span) == st.n_layer else f"'s {layers_text(span)}"
            seeing = knockout_layers(cfg, range(st.n_layer), q, k)[0]  # (as --knockout's refusal)
            hint = (f"; {layer_runs(seeing)} {'sees' if len(seeing) == 1 else 'see'} it: type "
                    f"{q}-{k} alone to knock it out where a query sees it") if seeing else ""
            self._say(f"the edge {q}→{k} is not one a query sees in {st.model.name}{where} "
                      f"(keys at or before the query{_within(cfg, span)}){hint}")
            return
        ab = self.effects.ablation
        if set(seen) <= knocked_out(ab, q, k):  # (with_knockout would take it back out)
            self._say(f"the edge {q}→{k} is already knocked out in {layers_text(seen)}: "
                                 "to restore it, select it above and press Switch back on")
            return
        ab = ab.with_knockout(seen, q, k)
        self._say(narrowed_note(cfg, q, k, seen, unseen, "→") if unseen else "", False, ab)
        self.effects.set_ablation(ab)
        self.knock_edit.clear()

    def _ranked_clicked(self, row: int, _col: int) -> None:
        item = self.ranked.item(row, 0)
        if item is not None:
            self.state.show_head(*item.data(Qt.ItemDataRole.UserRole))

    # --- state -> widgets -------------------------------------------------------------------------
    def _follow(self, *_) -> None:
        ab = self.effects.ablation
        if ab is not self._said_for:  # (switched back on, restored, the grid's menu: not what it says)
            self._say("")
        self.head_list.clear()
        for l, h in ab.heads:
            item = QListWidgetItem(f"{head_title(l, h)}  ({ab.mode})")
            item.setData(Qt.ItemDataRole.UserRole, ("head", l, h))
            self.head_list.addItem(item)
        for layers, q, k in ab.knockouts:
            item = QListWidgetItem(f"edge {q}→{k} knocked out in {layers_text(layers)}")
            item.setData(Qt.ItemDataRole.UserRole, ("edge", layers, q, k))
            self.head_list.addItem(item)
        i = self.mode_combo.findData(ab.mode)
        if i != self.mode_combo.currentIndex():
            self.mode_combo.blockSignals(True)
            self.mode_combo.setCurrentIndex(i)
            self.mode_combo.blockSignals(False)
        self.restore_button.setEnabled(ab.active)

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat(f"{done} / {plural(total, 'head')}")

    def _show_scan(self, *_) -> None:
        eff, st = self.effects, self.state
        self.cancel_button.setEnabled(eff.scan_running)
        self.scan_button.setText("Scan again" if eff.scan is not None else "Scan every head")
        if eff.scan_running:
            self.progress.setRange(0, 0)  # busy until the first head is counted
        scan = eff.scan
        if scan is None:
            self.scan_label.setText(html.escape(eff.scan_note))
            self.scan_view.set_map(None)
            self.ranked.setRowCount(0)
            if not eff.scan_running:
                self.progress.setRange(0, 1)
                self.progress.setValue(0)
            return
        if not eff.scan_running:
            n = scan.effect.size
            self.progress.setRange(0, n)
            self.progress.setValue(n)
            self.progress.setFormat(f"{n} / {plural(n, 'head')}")
        secs = scan.seconds.get("total", 0.0)
        self.scan_label.setText(f"Scanned {html.escape(eff.scan_what)}: baseline loss "
                                f"{scan.baseline_loss:.3f} nats, {secs:.1f} s. "
                                + (f"<span style='color:{WARNING}'>{html.escape(eff.scan_note)}</span>"
                                   if eff.scan_note else ""))
        self.scan_view.set_map(scan_map(st, scan, eff.scan_what))
        ranked = scan.ranked()[:RANKED_ROWS]
        self.ranked.setRowCount(len(ranked))
        for r, (l, h, e) in enumerate(ranked):
            # (Ctrl+C copies a cell's text: the ASCII minus reads back as a number)
            cells = [head_title(l, h), plain_signed(e), st.badge(l, h)]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 0:
                    item.setData(Qt.ItemDataRole.UserRole, (l, h))
                self.ranked.setItem(r, c, item)


def _within(cfg, layers) -> str:
    """', within W' where one of `layers` has a sliding window, else ''."""
    windows = {cfg.window(i) for i in layers} if cfg.causal else {None}
    window = max(windows - {None}, default=None)
    return "" if window is None else f", within {window}" + (" in local layers" if None in windows else "")


def knocked_out(ab, q: int, k: int) -> set[int]:
    """The layers in which the edge q -> k is knocked out under `ab` (any of its entries)."""
    return {i for layers, q2, k2 in ab.knockouts if (q2, k2) == (q, k) for i in layers}


def head_menu(state, layer: int, head: int, q: int, k: int, parent: QWidget | None = None):
    """The grid's context menu on head (layer, head) at cell q -> k: switch the head off (zero or
    mean) or back on, knock out the edge q -> k in this layer or in every layer, each where its query
    sees the key (any edge in an encoder; in Gemma 3 a key past the window only in the global
    layers, then named) or restore that knockout, restore the clean run. Returns
    the QMenu (the grid pops it up; tests trigger its actions)."""
    from PySide6.QtWidgets import QMenu

    eff = state.effects
    ab = eff.ablation
    menu = QMenu(parent)
    if (layer, head) in ab.heads:
        menu.addAction(f"Switch {head_title(layer, head)} back on").triggered.connect(
            lambda: eff.toggle_head(layer, head))
    else:
        for mode in MODES:
            def off(_=False, mode=mode):
                from dataclasses import replace

                eff.set_ablation(replace(ab.toggled(layer, head), mode=mode))
            menu.addAction(f"Switch {head_title(layer, head)} off ({mode}"
                           + (", every head switched off follows" if ab.heads and mode != ab.mode
                              else "") + ")").triggered.connect(off)
    r = state.result
    seen = (tuple(knockout_layers(state.model.config, range(state.n_layer), q, k)[0])
            if r is not None and state.model is not None and 0 <= q < r.n_tokens and 0 <= k < r.n_tokens
            else ())
    if seen:
        edge = menu_text(f"{q} {quoted(r.labels[q])} → {k} {quoted(r.labels[k])}")  # (a token '&')
        done = knocked_out(ab, q, k)
        spans = [(f"layer {layer}", (layer,))] if layer in seen else []
        if len(seen) == state.n_layer:
            spans.append(("every layer", seen))
        elif seen != (layer,):  # the layers that see it (Gemma 3: past the window, its global ones)
            spans.append((layers_text(seen), seen))
        for where, span in spans:
            if (span, q, k) in ab.knockouts:  # exactly this knockout: the item takes it back out
                menu.addAction(f"Restore {edge} in {where}").triggered.connect(
                    lambda _=False, span=span: eff.toggle_knockout(span, q, k))
            elif not set(span) <= done:  # (knocked out there already, by other entries: no item)
                menu.addAction(f"Knock out {edge} in {where}").triggered.connect(
                    lambda _=False, span=span: eff.toggle_knockout(span, q, k))
    if ab.active:
        menu.addSeparator()
        menu.addAction("Restore clean run").triggered.connect(eff.restore_clean)
    return menu
