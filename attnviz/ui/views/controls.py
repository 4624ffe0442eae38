"""The sentence box, the row of view controls over the grid (layer, all layers, colormap, scale,
hide first token, value weighting) and the load box in the status bar. Each is a
view of AppState: it gets the state, connects in one place and writes back only through its setters."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar, QSpinBox, QTextEdit,
    QToolButton, QWidget,
)

from attnviz.figures.data import COLORMAPS
from attnviz.ui.views.fields import plain_label, plain_tip

TEXT_MARK = QColor(255, 214, 102, 110)  # behind the state's text marks (a generation's new tokens)


def utf16_len(text: str) -> int:  # a Python string's length in a Qt document's positions
    return len(text.encode("utf-16-le")) // 2


class SentenceBox(QPlainTextEdit):
    """The sentence the model reads. Typing writes state.set_text; the state's text (a sample, a
    saved view, a generation's tokens) is written back; the state's text_marks are painted behind
    their characters."""

    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.setObjectName("sentence_box")
        self.setPlaceholderText("Type a sentence; every head updates as you type.")
        self.setToolTip("The sentence the model reads. Every edit is recomputed in the background.")
        self.setFixedHeight(self.fontMetrics().lineSpacing() * 3 + 12)
        self.textChanged.connect(lambda: state.set_text(self.toPlainText()))
        state.sigTextChanged.connect(self._on_text)
        state.sigTextMarksChanged.connect(self._paint_marks)
        self._on_text(state.text)

    def _on_text(self, text: str) -> None:
        if self.toPlainText() != text:
            self.setPlainText(text)
        self._paint_marks()

    def _paint_marks(self, *_) -> None:
        """The marks, while the box shows the state's text (they are ranges of that text)."""
        text, sels = self.state.text, []
        if self.toPlainText() == text:
            for a, b in self.state.text_marks:
                cur = QTextCursor(self.document())
                cur.setPosition(utf16_len(text[:a]))
                cur.setPosition(utf16_len(text[:b]), QTextCursor.MoveMode.KeepAnchor)
                sel = QTextEdit.ExtraSelection()
                sel.cursor = cur
                fmt = QTextCharFormat()
                fmt.setBackground(TEXT_MARK)
                sel.format = fmt
                sels.append(sel)
        self.setExtraSelections(sels)


class ViewControls(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = st = state
        self.layer_spin = QSpinBox()
        self.layer_spin.setPrefix("Layer ")
        self.layer_spin.setToolTip("Layer shown in the grid (PgUp / PgDn or Ctrl+Up / Ctrl+Down)")
        self.layer_kind = plain_label(QLabel())  # "local (window 512)" / "global", on a model with a window
        self.layer_kind.setToolTip("Local layers attend through a sliding window of the last W "
                                   "tokens (and their own RoPE base); global layers see every "
                                   "earlier token")
        self.layer_kind.setFixedWidth(self.layer_kind.fontMetrics().horizontalAdvance(
            "local (window 999,999)"))
        self.layer_kind.hide()
        self.all_check = QCheckBox("All layers")
        self.all_check.setToolTip("Show every layer × head at once")
        self.cmap_combo = QComboBox()
        self.cmap_combo.addItems(COLORMAPS)
        self.cmap_combo.setToolTip("Colormap of the heatmaps")
        self.scale_combo = QComboBox()
        self.scale_combo.addItem("Shared scale", "shared")
        self.scale_combo.addItem("Per-head scale", "per-head")
        self.scale_combo.setToolTip("Shared: one colour scale for all heads (comparable). "
                                    "Per-head: each head scaled to its own maximum.")
        self.hide_first_check = QCheckBox("Hide first token")
        self.hide_first_check.setToolTip("Hide the first key column ([CLS] / BOS, often an "
                                         "attention sink) and rescale each row over the rest")
        self.value_check = QCheckBox("Value-weighted")
        self.value_check.setToolTip("Scale each weight by ||v_key W_O(head)||, what the key sends "
                                    "through the head, rows renormalised (defined in the Anatomy "
                                    "panel); titles give each head's share of the layer's summed "
                                    "head-output norms")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for name in ("layer_spin", "layer_kind", "all_check", "cmap_combo", "scale_combo",
                     "hide_first_check", "value_check"):
            w = getattr(self, name)
            w.setObjectName(name)  # (how tests find it, as a user finds it: by what it is)
            row.addWidget(w)
        row.addStretch(1)
        # view -> state
        self.layer_spin.valueChanged.connect(st.set_layer)
        self.all_check.toggled.connect(lambda on: st.set_view_mode("all" if on else "layer"))
        self.cmap_combo.currentTextChanged.connect(st.set_colormap)
        self.scale_combo.currentIndexChanged.connect(
            lambda i: st.set_scale_mode(self.scale_combo.itemData(i)))
        self.hide_first_check.toggled.connect(st.set_hide_first)
        self.value_check.toggled.connect(st.set_value_weighted)
        # state -> view
        st.sigModelChanged.connect(self._on_model)
        st.sigLayerChanged.connect(self._on_layer)
        st.sigDisplayChanged.connect(self._on_display)
        self._on_model(st.model)
        self._on_display()

    def _on_model(self, model) -> None:
        if model is None:
            return
        c = model.config
        self.layer_spin.blockSignals(True)
        self.layer_spin.setRange(0, c.n_layer - 1)
        # numbered from 0 like the head titles (L3 H1): the suffix gives the range, not a count
        self.layer_spin.setSuffix(f" (0–{c.n_layer - 1})")
        self.layer_spin.setToolTip(
            f"Layer shown in the grid, numbered from 0 as in the head titles (L3 H1): {c.n_layer} "
            f"layers, 0–{c.n_layer - 1} (PgUp / PgDn or Ctrl+Up / Ctrl+Down)")
        self.layer_spin.setValue(self.state.layer)
        self.layer_spin.blockSignals(False)
        self._show_kind(self.state.layer)

    def _on_layer(self, layer: int) -> None:
        if self.layer_spin.value() != layer:
            self.layer_spin.blockSignals(True)
            self.layer_spin.setValue(layer)
            self.layer_spin.blockSignals(False)
        self._show_kind(layer)

    def _show_kind(self, layer: int) -> None:
        """The layer's kind beside its number, on a model with a sliding window."""
        model = self.state.model
        kind = (model.config.layer_kind(min(layer, model.config.n_layer - 1))
                if model is not None else None)
        self.layer_kind.setText(kind or "")
        self.layer_kind.setVisible(kind is not None)

    def _on_display(self) -> None:
        st = self.state
        for w, value in ((self.all_check, st.view_mode == "all"),
                         (self.hide_first_check, st.hide_first),
                         (self.value_check, st.value_weighted)):
            if w.isChecked() != value:
                w.setChecked(value)
        if self.cmap_combo.currentText() != st.colormap:
            self.cmap_combo.setCurrentText(st.colormap)
        i = self.scale_combo.findData(st.scale_mode)
        if self.scale_combo.currentIndex() != i:
            self.scale_combo.setCurrentIndex(i)

class LoadBox(QWidget):
    """While a model loads (state.loading): what, for how long, a busy bar (loads give no fraction)
    and Cancel, which calls `cancel` (the window's cancel_load); the current model stays usable."""

    def __init__(self, state, cancel, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        box = QHBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        self.label = plain_label(QLabel())  # (it names the model's folder or file)
        self.label.setObjectName("load_label")
        self.label.setToolTip("The model being loaded; the current one stays usable meanwhile")
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumWidth(140)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.setObjectName("load_cancel")
        self.cancel_button.setToolTip("Stop waiting for this model (Esc); the current model stays")
        self.cancel_button.clicked.connect(lambda: cancel())
        for w in (self.label, self.progress, self.cancel_button):
            box.addWidget(w)
        self._started = 0.0  # monotonic time the shown load began
        self._clock = QTimer(self)  # the seconds in the label
        self._clock.setInterval(500)
        self._clock.timeout.connect(self._show_time)
        state.sigLoadingChanged.connect(self._on_loading)
        self._on_loading(state.loading)

    def _on_loading(self, source: str) -> None:
        if source:
            self._started = time.monotonic()
            self._show_time()
            self._clock.start()
            self.show()
        else:
            self._clock.stop()
            self.hide()

    def _show_time(self) -> None:
        name = self.state.loading
        short = name if len(name) <= 40 else "…" + name[-39:]
        seconds = int(time.monotonic() - self._started)
        self.label.setText(f"Loading {short}… {seconds} s" if seconds else f"Loading {short}…")
        self.label.setToolTip(plain_tip(f"Loading {name}; the current model stays usable meanwhile"))
