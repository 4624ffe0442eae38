"""CalcPanel: the calculator in the side panel. Presets or free fields in; shapes, parameters,
KV cache, the MHA / GQA / MQA comparison and a plot of cache size against context length out.

All numbers come from `attnviz.engine.calc`; this widget only edits inputs and shows results."""

from __future__ import annotations

import html
import logging
from dataclasses import replace

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QComboBox, QFormLayout, QFrame, QHeaderView, QLabel, QScrollArea, QSpinBox,
    QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from attnviz.engine.calc import (
    KV_DTYPE_BITS, CalcInputs, CalcResult, calc_inputs_from_config, calculate, context_lengths,
    format_bytes, format_count,
)
from attnviz.engine.errors import CalcError
from attnviz.engine.presets import load_presets

log = logging.getLogger(__name__)

LOADED, CUSTOM = "__loaded__", "__custom__"
DEFAULT_PRESET = "llama-2-7b"  # the lesson's 4096 / 32 heads
ERROR_COLOR = "#d93025"
BACKGROUND = "#202124"
COMPARE_NAMES = {"mha": "MHA", "gqa": "as given", "mqa": "MQA"}
CURVE_COLORS = {"mha": "#f28b82", "gqa": "#8ab4f8", "mqa": "#81c995"}
PLOT_POINTS = 200

# form field -> (label, tooltip, minimum, maximum)
FIELDS = {
    "d_model": ("d_model", "Model width: the size of each token's vector in the residual stream.",
                1, 1 << 20),
    "n_head": ("n_head", "Query heads per layer.", 1, 1 << 16),
    "n_kv_head": ("n_kv_head", "Key/value heads per layer: n_head for MHA, 1 for MQA, a divisor "
                  "of n_head in between for GQA (each KV head serves n_head / n_kv_head query "
                  "heads).", 1, 1 << 16),
    "d_head": ("d_head", "Width of one head. 'auto' = d_model / n_head; some models set it "
               "explicitly (Gemma-7B: 16 × 256 = 4096 ≠ 3072).", 0, 1 << 16),
    "n_layer": ("n_layer", "Transformer layers; each keeps its own K/V cache.", 1, 1 << 14),
    "seq_len": ("seq_len", "Tokens held in the KV cache for the totals and the comparison "
                "(defaults to the model's longest context).", 1, 2_000_000_000),
    "batch": ("batch", "Sequences cached at once; the cache grows linearly with it.", 1, 1 << 24),
}
RUN_FIELDS = ("seq_len", "batch")  # how a model is run, not which model it is


class CalcPanel(QWidget):
    """The shapes / parameters / KV-cache calculator as a side-panel widget.

    Public API (the window calls these):
      set_model_config(raw_config_dict, name)  fill from a loaded model, select "loaded model"
      set_seq_len(T)                            the current sentence's length (line + plot marker)
      set_live_cache(result, model)             what the engine's KV cache holds after this run
    """

    def __init__(self, state=None, parent: QWidget | None = None) -> None:
        """With `state` (AppState) the panel follows the loaded model and the current result by
        itself; while it is not shown (set_shown(False): a dock behind another tab) it lets results
        pass and catches up when shown again."""
        super().__init__(parent)
        self.state = state
        self._shown = True
        self.presets = load_presets()
        self.result: CalcResult | None = None
        self.sentence_len: int | None = None
        self._base: CalcInputs = self.presets[DEFAULT_PRESET].inputs
        self._loaded: CalcInputs | None = None
        self._loaded_name = ""
        self._x_max = 0
        self._build()
        self._connect()
        self._select(DEFAULT_PRESET)
        if state is not None:
            state.sigModelChanged.connect(self._follow_model)
            state.sigResultChanged.connect(self._follow_result)
            self._follow_model(state.model)
            self._follow_result(state.result)

    # -- a view of AppState ----------------------------------------------------------------------

    def _follow_model(self, model) -> None:
        if model is not None:
            self.set_model_config(model.config.raw, model.name)

    def _follow_result(self, result) -> None:
        if result is not None and self._shown:
            self.set_seq_len(len(result.tokens))
            self.set_live_cache(result, self.state.model)

    def set_shown(self, shown: bool) -> None:
        """Whether the panel is on screen; a hidden calculator catches up when shown."""
        self._shown = bool(shown)
        if self._shown and self.state is not None:
            self._follow_result(self.state.result)

    # -- public API ------------------------------------------------------------------------------

    def set_model_config(self, raw_config: dict, name: str) -> None:
        """Fill the calculator from a loaded model's config.json and select it."""
        try:
            self._loaded = calc_inputs_from_config(raw_config)
        except CalcError as exc:
            self._loaded = None
            self.general_error.setText(f"{name}: {exc}")
            self.general_error.show()
            return
        self._loaded_name = name
        self.preset_combo.setItemText(0, f"Loaded model: {name}")
        self._set_item_enabled(0, True)
        self._select(LOADED)

    def set_seq_len(self, T: int) -> None:
        """The current sentence's token count: updates its KV line and the plot marker only."""
        self.sentence_len = int(T)
        self._show_sentence()

    def set_live_cache(self, result, model) -> None:
        """The engine's own KV cache after `result`: its bytes as the arrays hold them, the
        calculator's factors beside them, and what this edit reused."""
        held = getattr(result, "cache_bytes", 0) if result is not None else 0
        if result is None or model is None or not model.config.causal:
            text = ("live KV cache: none (a bidirectional encoder recomputes every token and keeps "
                    "no cache)") if model is not None and not model.config.causal else ""
            self.live_label.setText(text)
            self.live_label.setVisible(bool(text))
            return
        c = model.config
        T = result.n_tokens
        if held == 0:
            self.live_label.setText("live KV cache: not kept for this run")
        else:
            self.live_label.setText(
                f"live KV cache held (engine, float32): <b>{T:,} tokens × {c.n_layer} layers × "
                f"{c.n_kv_head} KV heads × {c.d_head} × 2 (K, V) × 4 B = {_bytes(held)}</b>; "
                f"this edit reused {result.cache_reused:,} tokens and computed "
                f"{result.cache_computed:,}")
        self.live_label.show()

    # -- layout ----------------------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer.addWidget(scroll)
        body = QWidget()
        scroll.setWidget(body)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.setSpacing(6)

        self.preset_combo = QComboBox()
        self.preset_combo.setToolTip(
            "Fill the fields from the loaded model's config.json or from a real model (each "
            "preset keeps its source). Editing the model's shape switches to 'Custom'; seq_len, "
            "batch and the KV dtype keep the preset.")
        self.preset_combo.addItem("Loaded model (none yet)", LOADED)
        self._set_item_enabled(0, False)
        self.preset_combo.addItem("Custom", CUSTOM)
        for p in self.presets.values():
            self.preset_combo.addItem(p.name, p.id)
            self.preset_combo.setItemData(self.preset_combo.count() - 1,
                                          f"{p.attention_type}\nsource: {p.source}",
                                          Qt.ItemDataRole.ToolTipRole)
        lay.addWidget(self.preset_combo)

        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setVerticalSpacing(3)
        self.spins: dict[str, QSpinBox] = {}
        self.error_labels: dict[str, QLabel] = {}
        for key, (label, tip, lo, hi) in FIELDS.items():
            spin = QSpinBox()
            spin.setRange(lo, hi)
            spin.setGroupSeparatorShown(True)
            spin.setToolTip(tip)
            spin.setKeyboardTracking(True)
            if key == "d_head":
                spin.setSpecialValueText("auto")
            self.spins[key] = spin
            form.addRow(label, self._with_error(key, spin))
        self.dtype_combo = QComboBox()
        for name, bits in KV_DTYPE_BITS.items():
            self.dtype_combo.addItem(f"{name} ({bits} bits)", name)
        self.dtype_combo.setCurrentIndex(list(KV_DTYPE_BITS).index("fp16"))
        self.dtype_combo.setToolTip("Data type of the cached keys and values. Quantised caches "
                                    "(fp8, int8, int4) are counted without their scales.")
        form.addRow("KV dtype", self._with_error("kv_dtype", self.dtype_combo))
        lay.addLayout(form)

        self.general_error = self._error_label()
        lay.addWidget(self.general_error)

        self.results = QWidget()
        res = QVBoxLayout(self.results)
        res.setContentsMargins(0, 0, 0, 0)
        res.setSpacing(6)
        lay.addWidget(self.results)

        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextFormat(Qt.TextFormat.RichText)
        res.addWidget(self.summary_label)

        res.addWidget(self._heading("Shapes [out, in]"))
        self.shapes_table = self._table(["", "shape", "formula"])
        self.shapes_table.setToolTip("Weights are [out, in], as nn.Linear stores them and the lesson "
                                     "writes them; activations are [T, width]. T = seq_len.")
        res.addWidget(self.shapes_table)

        res.addWidget(self._heading("Parameters"))
        self.params_label = QLabel()
        self.params_label.setWordWrap(True)
        self.params_label.setTextFormat(Qt.TextFormat.RichText)
        res.addWidget(self.params_label)

        res.addWidget(self._heading("KV cache"))
        self.kv_label = QLabel()
        self.kv_label.setWordWrap(True)
        self.kv_label.setTextFormat(Qt.TextFormat.RichText)
        res.addWidget(self.kv_label)
        self.sentence_label = QLabel()
        self.sentence_label.setWordWrap(True)
        self.sentence_label.setTextFormat(Qt.TextFormat.RichText)
        self.sentence_label.setToolTip("The sentence in the text box, cached by this model layout.")
        res.addWidget(self.sentence_label)
        self.live_label = QLabel()
        self.live_label.setWordWrap(True)
        self.live_label.setTextFormat(Qt.TextFormat.RichText)
        self.live_label.setToolTip(
            "The keys and values (after RoPE) that attnviz's own engine keeps from the last run, in "
            "float32, measured from its arrays. An edit reuses the longest unchanged token prefix: "
            "under the causal mask earlier rows cannot change, so only the new tokens are computed.")
        res.addWidget(self.live_label)

        res.addWidget(self._heading("MHA / as given / MQA"))
        self.compare_table = self._table(["", "KV heads", "per token", "at seq_len", "vs MHA"],
                                         stretch=0)
        self.compare_table.setToolTip("The same model with one K/V head per query head (MHA), as "
                                      "configured, and with a single shared K/V head (MQA).")
        res.addWidget(self.compare_table)

        self.plot = pg.PlotWidget()
        self.plot.setBackground(BACKGROUND)
        self.plot.setFixedHeight(270)
        self.plot.setMenuEnabled(False)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", "context length (tokens)")
        self.plot.getPlotItem().getViewBox().setMouseEnabled(x=False, y=False)
        self.plot.setToolTip("KV-cache size of the batch against context length, for MHA, the model "
                             "as configured, and MQA. Markers: the current sentence and the model's "
                             "longest context.")
        self.plot.addLegend(offset=(8, 8), labelTextColor="#e8eaed")
        self.curves = {key: self.plot.plot([], [], pen=pg.mkPen(color, width=2), name=key)
                       for key, color in CURVE_COLORS.items()}
        self.sentence_marker = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#fdd663", width=1.5),
            label="sentence", labelOpts={"position": 0.12, "color": "#fdd663", "anchors": [(0, 1), (0, 1)]})
        self.max_marker = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#e8eaed", width=1, style=Qt.PenStyle.DashLine),
            label="max", labelOpts={"position": 0.6, "color": "#e8eaed", "anchors": [(1, 0), (1, 0)]})
        self.plot.addItem(self.sentence_marker, ignoreBounds=True)
        self.plot.addItem(self.max_marker, ignoreBounds=True)
        res.addWidget(self.plot)

        self.flops_label = QLabel()
        self.flops_label.setWordWrap(True)
        self.flops_label.setTextFormat(Qt.TextFormat.RichText)
        res.addWidget(self.flops_label)

        self.notes_label = QLabel()
        self.notes_label.setWordWrap(True)
        self.notes_label.setStyleSheet("color: gray;")
        self.notes_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        res.addWidget(self.notes_label)
        lay.addStretch(1)

    def _with_error(self, key: str, field: QWidget) -> QWidget:
        box = QWidget()
        v = QVBoxLayout(box)
        v.setContentsMargins(0, 0, 0, 0)
        v.setSpacing(1)
        v.addWidget(field)
        self.error_labels[key] = self._error_label()
        v.addWidget(self.error_labels[key])
        return box

    @staticmethod
    def _error_label() -> QLabel:
        label = QLabel()
        label.setWordWrap(True)
        label.setStyleSheet(f"color: {ERROR_COLOR};")
        label.hide()
        return label

    @staticmethod
    def _heading(text: str) -> QLabel:
        label = QLabel(f"<b>{html.escape(text)}</b>")
        label.setContentsMargins(0, 4, 0, 0)
        return label

    def _table(self, headers: list[str], stretch: int = -1) -> QTableWidget:
        """A read-only table as tall as its rows; column `stretch` takes the spare width."""
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.verticalHeader().hide()
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        table.setWordWrap(True)
        table.setTextElideMode(Qt.TextElideMode.ElideNone)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch % len(headers), QHeaderView.ResizeMode.Stretch)
        table.verticalHeader().setDefaultSectionSize(22)
        # wrapped cells change height with the panel's width: refit once the layout settles
        refit = QTimer(table)
        refit.setSingleShot(True)
        refit.setInterval(0)
        refit.timeout.connect(lambda: self._fit_height(table))
        header.sectionResized.connect(lambda *_: refit.start())
        return table

    @staticmethod
    def _fit_height(table: QTableWidget) -> None:
        table.resizeRowsToContents()
        rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
        table.setFixedHeight(table.horizontalHeader().height() + rows + 2 * table.frameWidth())

    def _set_item_enabled(self, index: int, enabled: bool) -> None:
        item = self.preset_combo.model().item(index)
        if item is not None:
            item.setEnabled(enabled)

    # -- signals ---------------------------------------------------------------------------------

    def _connect(self) -> None:
        self.preset_combo.currentIndexChanged.connect(self._on_preset)
        for key, spin in self.spins.items():
            # the model's own numbers make it another model; how it is run (context, batch,
            # cache dtype) does not, so the preset's name stays
            spin.valueChanged.connect(self._recompute if key in RUN_FIELDS else self._on_edit)
        self.dtype_combo.currentIndexChanged.connect(self._recompute)

    def _select(self, key: str) -> None:
        index = self.preset_combo.findData(key)
        if index == self.preset_combo.currentIndex():
            self._on_preset(index)
        else:
            self.preset_combo.setCurrentIndex(index)

    def _on_preset(self, index: int) -> None:
        key = self.preset_combo.itemData(index)
        if key == CUSTOM:
            self._recompute()
            return
        if key == LOADED:
            if self._loaded is None:
                return
            base = self._loaded
        else:
            base = self.presets[key].inputs
        self._base = base
        self._fill_fields(base)
        self._recompute()

    def _on_edit(self, *_args) -> None:
        if self.preset_combo.currentData() != CUSTOM:
            self.preset_combo.blockSignals(True)
            self.preset_combo.setCurrentIndex(self.preset_combo.findData(CUSTOM))
            self.preset_combo.blockSignals(False)
        self._recompute()

    def _fill_fields(self, inp: CalcInputs) -> None:
        """Show a model's numbers in the fields without treating it as an edit."""
        n_kv = inp.n_kv_head or inp.n_head
        auto = inp.d_head is None or (inp.d_model % inp.n_head == 0
                                      and inp.d_head == inp.d_model // inp.n_head)
        values = {"d_model": inp.d_model, "n_head": inp.n_head, "n_kv_head": n_kv,
                  "d_head": 0 if auto else inp.d_head, "n_layer": inp.n_layer,
                  "seq_len": inp.seq_len or inp.max_positions or 4096, "batch": inp.batch}
        for key, spin in self.spins.items():
            spin.blockSignals(True)
            spin.setValue(min(max(int(values[key]), spin.minimum()), spin.maximum()))
            spin.blockSignals(False)
        mla = inp.mla is not None
        for key in ("n_kv_head", "d_head"):
            self.spins[key].setEnabled(not mla)
        self.spins["n_kv_head"].setSpecialValueText("")
        self.dtype_combo.blockSignals(True)
        self.dtype_combo.setCurrentIndex(max(0, self.dtype_combo.findData(inp.kv_dtype)))
        self.dtype_combo.blockSignals(False)

    def _inputs(self) -> CalcInputs:
        s = {key: spin.value() for key, spin in self.spins.items()}
        mla = self._base.mla is not None
        return replace(
            self._base, d_model=s["d_model"], n_head=s["n_head"],
            n_kv_head=None if mla else s["n_kv_head"],
            d_head=self._base.d_head if mla else (s["d_head"] or None),
            n_layer=s["n_layer"], seq_len=s["seq_len"], batch=s["batch"],
            kv_dtype=self.dtype_combo.currentData())

    # -- results ---------------------------------------------------------------------------------

    def _recompute(self, *_args) -> None:
        for label in (*self.error_labels.values(), self.general_error):
            label.hide()
        try:
            result = calculate(self._inputs())
        except CalcError as exc:
            label = self.error_labels.get(getattr(exc, "field", None), self.general_error)
            label.setText(str(exc))
            label.show()
            self.results.setEnabled(False)  # the last good result stays, greyed
            return
        self.results.setEnabled(True)
        self.result = result
        self._show(result)

    def _show(self, r: CalcResult) -> None:
        i, f = r.inputs, r.formulas
        kind = r.attention_kind
        groups = (f" · {r.group_size} query heads per KV head" if kind in ("GQA", "MQA") else "")
        self.summary_label.setText(
            f"<b>{kind}</b> · d_head = {html.escape(f['d_head'])}{groups}")

        rows = [(name, shape, f.get(name, "")) for name, shape in r.shapes.items()]
        rows += [(name, r.activation_shapes[name], f.get(name, ""))
                 for name in ("head_output", "concat", "scores")]
        self._fill_table(self.shapes_table, [
            (name, "[" + ", ".join(f"{n:,}" for n in shape) + "]", formula.split(" = ")[0])
            for name, shape, formula in rows], tooltips=[f"{name}: {formula}" for name, _, formula in rows])

        mp = r.model_params
        lines = [f"attention per layer: <b>{r.attn_params_per_layer:,}</b> "
                 f"({format_count(r.attn_params_per_layer)}) = {html.escape(f['attn_params_per_layer'])}",
                 f"attention, {i.n_layer} layers: {r.attn_params_total:,} "
                 f"({format_count(r.attn_params_total)})"]
        if mp:
            line = f"whole model: <b>{mp['total']:,}</b> ({format_count(mp['total'])})"
            if "active" in mp:
                line += f", active per token {format_count(mp['active'])}"
            lines.append(line)
        self.params_label.setText("<br>".join(lines))

        self.kv_label.setText("<br>".join([
            f"per token per layer: {_bytes(r.kv_bytes_per_token_per_layer)} = "
            f"{html.escape(f['kv_bytes_per_token_per_layer'])}",
            f"per token: <b>{_bytes(r.kv_bytes_per_token)}</b>",
            f"{i.seq_len:,} tokens × batch {i.batch}: <b>{_bytes(r.kv_bytes_total)}</b>",
        ]))

        self._fill_table(self.compare_table, [
            (COMPARE_NAMES[key] + (f" ({kind})" if key == "gqa" else ""), "latent" if v.n_kv_head is None else str(v.n_kv_head),
             format_bytes(v.kv_bytes_per_token), format_bytes(v.kv_bytes_total),
             f"{v.reduction_vs_mha:.3g}×")
            for key, v in r.compare.items()], tooltips=[v.label for v in r.compare.values()])
        for row, key in enumerate(r.compare):
            self.compare_table.item(row, 0).setForeground(pg.mkColor(CURVE_COLORS[key]).darker(130))

        fl = r.flops
        hv = fl["heads_vs_one_head"]
        self.flops_label.setText(
            f"FLOPs per new token at {i.seq_len:,} tokens: projections "
            f"{format_count(fl['projections_per_token'])}, Q·Kᵀ {format_count(fl['qk_per_token'])}, "
            f"weights·V {format_count(fl['av_per_token'])}. {i.n_head} heads of {r.d_head} cost "
            f"the same matrix FLOPs as one head of {i.n_head * r.d_head} "
            f"(ratio {hv['ratio']:.3g}); only the softmax runs over {i.n_head}× more scores.")

        notes = list(r.warnings)
        key = self.preset_combo.currentData()
        if key in self.presets:
            p = self.presets[key]
            if p.notes:
                notes.append(p.notes)
            notes.append(f"source: {p.source}")
        notes.append("Shapes [out, in]; KiB/MiB/GiB = 1024-based.")
        self.notes_label.setText("\n".join(notes))
        self._plot(r)
        self._show_sentence()

    def _fill_table(self, table: QTableWidget, rows: list[tuple[str, ...]],
                    tooltips: list[str] | None = None) -> None:
        table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(text)
                if c in (1, 2, 3, 4) and table is self.compare_table:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if tooltips:
                    item.setToolTip(tooltips[r])
                table.setItem(r, c, item)
        self._fit_height(table)

    def _plot_range(self, r: CalcResult) -> int:
        i = r.inputs
        return max(i.max_positions or 0, i.seq_len, self.sentence_len or 0, 2)

    def _plot(self, r: CalcResult) -> None:
        x_max = self._plot_range(r)
        extra = [r.inputs.sliding_window] if r.inputs.sliding_window else []
        xs = context_lengths(x_max, n=PLOT_POINTS, extra=extra)
        series = r.kv_series(xs)
        top = max(max(v) for v in series.values())
        scale, name = _unit_for(top)
        self._x_max = x_max
        # a model that is MHA (or MQA) as given would hide that curve under its own: draw it once
        given = r.compare["gqa"].n_kv_head
        shown = [k for k in series if k == "gqa" or r.compare[k].n_kv_head != given]
        for key, ys in series.items():
            self.curves[key].setData(*((xs, [y / scale for y in ys]) if key in shown else ([], [])))
        legend = self.plot.getPlotItem().legend
        if [sample.item for sample, _ in legend.items] != [self.curves[k] for k in shown]:
            legend.clear()
            for key in shown:
                legend.addItem(self.curves[key], r.compare[key].label)
        for sample, label in legend.items:
            key = next(k for k, c in self.curves.items() if c is sample.item)
            label.setText(r.compare[key].label, color="#e8eaed")
        self.plot.setLabel("left", f"KV cache ({name})")
        self.plot.setXRange(0, x_max, padding=0.02)
        self.plot.setYRange(0, top / scale, padding=0.05)
        if r.inputs.max_positions:
            self.max_marker.show()
            self.max_marker.setValue(r.inputs.max_positions)
            self.max_marker.label.setFormat(f"max {r.inputs.max_positions:,}")
        else:
            self.max_marker.hide()

    def _show_sentence(self) -> None:
        r = self.result
        T = self.sentence_len
        if r is None or T is None:
            self.sentence_label.setText("this sentence: (no sentence yet)")
            self.sentence_marker.hide()
            return
        size = r.kv_series([T])["gqa"][0] if T > 0 else 0
        self.sentence_label.setText(
            f"this sentence: <b>{T:,} tokens → {size:,} bytes</b> ({format_bytes(size)}) "
            f"of KV cache" + (f" (batch {r.inputs.batch})" if r.inputs.batch > 1 else ""))
        if T > self._x_max:
            self._plot(r)  # a sentence longer than the plotted range widens it
        self.sentence_marker.show()  # a hidden label ignores setFormat
        self.sentence_marker.setValue(T)
        self.sentence_marker.label.setFormat(f"sentence: {T:,}")


def _bytes(n: int) -> str:
    return f"{n:,} bytes" + (f" ({format_bytes(n)})" if n >= 1024 else "")


def _unit_for(top: float) -> tuple[int, str]:
    """The binary unit that keeps the plot's largest value between 1 and 1024."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    k = 0
    while k < len(units) - 1 and top >= 1024 ** (k + 1):
        k += 1
    return 1024 ** k, units[k]
