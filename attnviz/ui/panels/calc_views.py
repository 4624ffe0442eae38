"""The calculator's result views, each given a `CalcResult`: the shapes table, the MHA / as given / MQA
table, the KV-cache-vs-context plot, and the text lines (summary, parameters, KV cache, FLOPs, this
sentence's cache, and the engine's live cache after a run); its notes are typeset in calc_notes.py.

They only show numbers `attnviz.engine.calc` computed; CalcPanel (ui/panels/calc_panel.py) owns the inputs and
decides when to show a result."""

from __future__ import annotations

import html

import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QGraphicsItem, QHeaderView, QLabel, QTableWidget, QTableWidgetItem,
)

from attnviz.engine.calc import (
    BINARY_UNITS, CalcResult, compare_cells, context_lengths, exact_bytes, format_bytes, format_count,
    kv_cache_needed, latent_readers, per_token_header, plural, shown_variants, tokens,
)
from attnviz.engine.calc.format import window_keep, window_split
from attnviz.engine.calc.flops import heads_vs_text, parts
from attnviz.engine.calc.inputs import CalcInputs, resolve
from attnviz.engine.errors import CalcError
from attnviz.figures.style import BACKGROUND, ERROR, TEXT
from attnviz.ui.views.fields import rich_label

CURVE_COLORS = {"mha": "#f28b82", "gqa": "#8ab4f8", "mqa": "#81c995"}
DISABLED = "#808080"  # the plot's curves and legend while the inputs are invalid
PLOT_POINTS = 200
MLA_SET = ("n_kv_head", "d_head")  # the fields MLA sets from the model's ranks, greyed


# -- tables ----------------------------------------------------------------------------------------


class ResultTable(QTableWidget):
    """A read-only table as tall as its rows; column `stretch` takes the spare width."""

    RIGHT_ALIGNED: tuple[int, ...] = ()  # columns of numbers

    def __init__(self, headers: list[str], stretch: int = -1) -> None:
        super().__init__(0, len(headers))
        self.setHorizontalHeaderLabels(headers)
        self.verticalHeader().hide()
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrap(True)
        self.setTextElideMode(Qt.TextElideMode.ElideNone)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch % len(headers), QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setDefaultSectionSize(22)
        # wrapped cells change height with the panel's width: refit once the layout settles
        refit = QTimer(self)
        refit.setSingleShot(True)
        refit.setInterval(0)
        refit.timeout.connect(self.fit_height)
        header.sectionResized.connect(lambda *_: refit.start())

    def fit_height(self) -> None:
        self.resizeRowsToContents()
        rows = sum(self.rowHeight(r) for r in range(self.rowCount()))
        header = self.horizontalHeader()  # (its hint: a header text given more lines grows it at the next layout)
        self.setFixedHeight(max(header.height(), header.sizeHint().height()) + rows + 2 * self.frameWidth())

    def fill(self, rows: list[tuple[str, ...]], tooltips: list[str] | None = None) -> None:
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(text)
                if c in self.RIGHT_ALIGNED:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if tooltips:
                    item.setToolTip(tooltips[r])
                self.setItem(r, c, item)
        self.fit_height()


class ShapesTable(ResultTable):
    """Weight shapes [out, in] and activation shapes, each with its formula's left-hand side."""

    def __init__(self) -> None:
        super().__init__(["", "shape", "formula"])
        self.setToolTip("Weights are [out, in], as nn.Linear stores them and the lesson "
                        "writes them (the Anatomy tab draws them [in, out], as x @ W multiplies "
                        "them); activations are [T, width]. T = seq_len.")

        self._rows: list[tuple[str, str, str]] = []
        self._tips: list[str] = []

    def show_result(self, r: CalcResult) -> None:
        f = r.formulas
        rows = [(name, shape, f.get(name, "")) for name, shape in r.shapes.items()]
        rows += [(name, r.activation_shapes[name], f.get(name, ""))
                 for name in ("head_output", "concat", "scores")]
        # no thousands commas inside a shape: "[4,096, 4,096]" reads as four numbers
        self._rows = [(name, "[" + ", ".join(str(n) for n in shape) + "]", formula.split(" = ")[0])
                      for name, shape, formula in rows]
        self._tips = [f"{name}: {formula}" for name, _, formula in rows]
        self._fill()

    def _stacked(self) -> bool:
        """Whether a formula's longest word is wider than the room its column would have (a narrow
        dock): then each formula goes under its shape, in the wider column, rather than cut."""
        fm, pad = self.fontMetrics(), 2 * (self.style().pixelMetric(self.style().PixelMetric.PM_FocusFrameHMargin) + 1)
        width = [max(fm.horizontalAdvance(row[c]) + pad for row in self._rows) for c in (0, 1)]
        longest = max(fm.horizontalAdvance(w) for row in self._rows for w in row[2].split())
        return self.viewport().width() - sum(width) < longest + pad

    def _fill(self) -> None:
        stacked = self._stacked()
        self.setColumnHidden(2, stacked)
        self.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch if stacked else
                                                     QHeaderView.ResizeMode.ResizeToContents)
        self.horizontalHeaderItem(1).setText("shape, formula" if stacked else "shape")
        self.fill([(n, f"{shape}\n{formula}", "") if stacked else (n, shape, formula) for n, shape, formula in self._rows],
                  tooltips=self._tips)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self._rows and self._stacked() != self.isColumnHidden(2):
            self._fill()


class CompareTable(ResultTable):
    """The model's KV cache with one K/V head per query head (MHA), as given, and with one (MQA); a model
    that is MHA or MQA as given has that row once, as given."""

    RIGHT_ALIGNED = (1, 2, 3, 4)

    def __init__(self) -> None:
        # (headers broken onto lines: their one-line widths cut the last column at a 300-px dock)
        super().__init__(["", "KV\nheads", "per\ntoken", "at seq_len\n× batch", "reduction\nvs MHA"], stretch=0)
        self.setToolTip("The same model with one K/V head per query head (MHA), as "
                        "given, and with a single shared K/V head (MQA).")
        self._keys: list[str] = []  # the shown variants, row by row

    def show_result(self, r: CalcResult) -> None:
        # the cache column is the whole batch's, as the KV cache line says
        T = r.inputs.seq_len
        b = r.inputs.batch  # (a batch of 1,000 or more on a line of its own: it cut the column at 300 px)
        batch = f"× batch {b:,}" if b < 1000 else f"× batch\n{b:,}"
        self.horizontalHeaderItem(3).setText(f"at {T:,}\n{'token' if T == 1 else 'tokens'}\n{batch}")
        # past a sliding window, per token as the full and the window layers' parts (compare_note)
        self.horizontalHeaderItem(2).setText("per\ntoken" if per_token_header(r) == "per token" else
                                             "per token:\nfull\n+ window")
        self._keys = shown_variants(r)
        variants = [r.compare[key] for key in self._keys]
        # a row's name is the plot's and the command line's label less the KV heads its next column
        # counts; its tooltip is the whole label
        self.fill([(v.name, *compare_cells(v, r, "\n+ ")) for v in variants], tooltips=[v.label for v in variants])
        self._colour_names()

    def _colour_names(self) -> None:
        """Each row's name in its curve's colour; grey while disabled (the inputs invalid), as the
        rest of the table is (an item's own colour would stay)."""
        for row, key in enumerate(self._keys):
            on = self.isEnabled()
            self.item(row, 0).setForeground(pg.mkColor(CURVE_COLORS[key] if on else DISABLED).darker(130 if on else 100))

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == QEvent.Type.EnabledChange:
            self._colour_names()


# -- plot ------------------------------------------------------------------------------------------


class KVPlot(pg.PlotWidget):
    """KV-cache size of the batch against context length, one curve per shown variant; markers at the
    current sentence's length and the model's longest context."""

    def __init__(self) -> None:
        super().__init__()
        self.setBackground(BACKGROUND)
        self.setFixedHeight(270)
        self.setMenuEnabled(False)
        self.showGrid(x=True, y=True, alpha=0.25)
        self.setLabel("bottom", "context length (tokens)")
        self.getPlotItem().getViewBox().setMouseEnabled(x=False, y=False)
        self.setToolTip("KV-cache size of the batch against context length, for MHA, the model "
                        "as configured, and MQA. Markers: the current sentence and the model's "
                        "longest context.")
        self.addLegend(offset=(8, 8), labelTextColor=TEXT)
        self.curves = {key: self.plot([], [], pen=pg.mkPen(color, width=2), name=key)
                       for key, color in CURVE_COLORS.items()}
        # the label on the plot's background: near 0 the steepest curve climbs through its room
        self.sentence_marker = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen("#fdd663", width=1.5),
            label="sentence", labelOpts={"position": 0.12, "color": "#fdd663", "anchors": [(0, 1), (0, 1)],
                                         "fill": BACKGROUND})
        # (its line over its background, still above the curves: the line stays whole beside it)
        self.sentence_marker.label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemStacksBehindParent)
        self.max_marker = pg.InfiniteLine(
            angle=90, movable=False, pen=pg.mkPen(TEXT, width=1, style=Qt.PenStyle.DashLine),
            label="max", labelOpts={"position": 0.6, "color": TEXT, "anchors": [(1, 0), (1, 0)]})
        self.addItem(self.sentence_marker, ignoreBounds=True)
        self.addItem(self.max_marker, ignoreBounds=True)
        self.x_max = 0  # the plotted context range, tokens

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Disabled (the panel's inputs invalid), the last good curves and their legend stay in
        grey, as the text figures do; enabled, in their colours again."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.EnabledChange:
            on = self.isEnabled()
            for key, curve in self.curves.items():
                curve.setPen(pg.mkPen(CURVE_COLORS[key] if on else DISABLED, width=2))
            for _, label in self.getPlotItem().legend.items:
                label.setText(label.text, color=TEXT if on else DISABLED)

    @staticmethod
    def _plot_range(r: CalcResult, sentence_len: int | None) -> int:
        i = r.inputs
        return max(i.max_positions or 0, i.seq_len, sentence_len or 0, 2)

    def show_result(self, r: CalcResult, sentence_len: int | None) -> None:
        """Plot `r` from 0 to its longest context, its seq_len or `sentence_len`, whichever is longest."""
        x_max = self._plot_range(r, sentence_len)
        extra = [r.inputs.sliding_window] if r.inputs.sliding_window else []
        xs = context_lengths(x_max, n=PLOT_POINTS, extra=extra)
        series = r.kv_series(xs)
        top = max(max(v) for v in series.values())
        scale, name = _unit_for(top)
        self.x_max = x_max
        shown = shown_variants(r)
        for key, ys in series.items():
            self.curves[key].setData(*((xs, [y / scale for y in ys]) if key in shown else ([], [])))
        legend = self.getPlotItem().legend
        if [sample.item for sample, _ in legend.items] != [self.curves[k] for k in shown]:
            legend.clear()
            for key in shown:
                legend.addItem(self.curves[key], r.compare[key].label)
        for sample, label in legend.items:
            key = next(k for k, c in self.curves.items() if c is sample.item)
            label.setText(r.compare[key].label, color=TEXT if self.isEnabled() else DISABLED)
        self.setLabel("left", f"KV cache of batch {r.inputs.batch:,} ({name})")
        self.setXRange(0, x_max, padding=0.02)
        self.setYRange(0, top / scale, padding=0.05)
        if r.inputs.max_positions:
            self.max_marker.show()
            self.max_marker.setValue(r.inputs.max_positions)
            self.max_marker.label.setFormat(f"max {r.inputs.max_positions:,}")
        else:
            self.max_marker.hide()

    def show_sentence(self, r: CalcResult | None, T: int | None, counted_by: str = "",
                      layout_of: str = "") -> None:
        """The sentence marker at `T` tokens (hidden without a result or a sentence), naming whose
        tokenizer counted them under another model's layout (sentence_text's rule)."""
        if r is None or not T:
            self.sentence_marker.hide()
            return
        if T > self.x_max:
            self.show_result(r, T)  # a sentence longer than the plotted range widens it
        self.sentence_marker.show()  # a hidden label ignores setFormat
        self.sentence_marker.setValue(T)
        name = counted_by if len(counted_by) <= MARKER_NAME else counted_by[:MARKER_NAME - 1] + "\u2026"
        whose = f" ({name}'s tokenizer)" if counted_by and counted_by != layout_of else ""
        # (setFormat runs str.format on its text: a name's braces doubled, shown as typed)
        self.sentence_marker.label.setFormat(f"sentence: {T:,}{whose}".replace("{", "{{").replace("}", "}}"))


MARKER_NAME = 24  # characters of a model's name the plot's sentence marker shows (the plot is narrow)


def _unit_for(top: float) -> tuple[int, str]:
    """The binary unit that keeps the plot's largest value between 1 and 1024."""
    k = 0
    while k < len(BINARY_UNITS) - 1 and top >= 1024 ** (k + 1):
        k += 1
    return 1024 ** k, BINARY_UNITS[k]


# -- text lines ------------------------------------------------------------------------------------


def summary_text(r: CalcResult) -> str:
    """The attention kind, d_head and the query heads per KV head (rich text)."""
    kind = r.attention_kind
    groups = (f" · {r.group_size} query heads per KV head" if kind in ("GQA", "MQA") else
              f" · {latent_readers(r.inputs.n_head)} one shared latent" if kind == "MLA" else "")
    return f"<b>{kind}</b> · d_head = {html.escape(r.formulas['d_head'])}{groups}"


def mla_fields(inp: CalcInputs) -> dict[str, tuple[int, str]]:
    """What the n_kv_head and d_head fields show under MLA, which sets both, as (value, tooltip): no
    KV heads (the field's minimum, shown as 'latent'), and d_head = qk_nope + qk_rope (0 if unknown)."""
    kv_tip = ("No KV heads under MLA (multi-head latent attention): every query head reads one shared latent of "
              "kv_lora_rank + qk_rope elements per token per layer.")
    try:
        d = resolve(inp)
    except CalcError:
        return {"n_kv_head": (1, kv_tip), "d_head": (0, "Under MLA, set by the model's ranks.")}
    m = d.mla
    return {"n_kv_head": (1, kv_tip),
            "d_head": (d.d_head, f"Under MLA, set by the model: query and key heads are qk_nope + "
                                 f"qk_rope = {m.qk_nope_head_dim} + {m.qk_rope_head_dim} = {d.d_head} "
                                 f"wide, values v_head_dim = {d.d_v}.")}


def params_text(r: CalcResult) -> str:
    """Attention parameters per layer and in all layers, and the whole model's where known (rich text)."""
    i, f = r.inputs, r.formulas
    mp = r.model_params
    lines = [f"attention per layer: <b>{r.attn_params_per_layer:,}</b> "
             f"({format_count(r.attn_params_per_layer)}) = {html.escape(f['attn_params_per_layer'])}",
             f"attention, {plural(i.n_layer, 'layer')}: {r.attn_params_total:,} "
             f"({format_count(r.attn_params_total)})"]
    if mp:
        line = f"whole model: <b>{mp['total']:,}</b> ({format_count(mp['total'])})"
        if "active" in mp:
            line += f", active per token {format_count(mp['active'])}"
        lines.append(line)
    return "<br>".join(lines)


def kv_text(r: CalcResult) -> str:
    """The KV cache per token per layer, per token, and at seq_len × batch (rich text); past a
    sliding window, the total as the full and the window layers make it, so that it multiplies out."""
    i, f = r.inputs, r.formulas
    T, w, split = i.seq_len, i.sliding_window, window_split(r)
    per = f"per token: <b>{exact_bytes(r.kv_bytes_per_token)}</b>"
    total = f"{tokens(T)} × batch {i.batch:,}: <b>{exact_bytes(r.kv_bytes_total)}</b>"
    if split is not None:
        (n_full, n_win), layer = split, r.kv_bytes_per_token_per_layer
        parts = [f"{layer * n_win:,} bytes × {w:,}"]
        if n_full:
            per += (f" = {layer * n_full:,} bytes on the {plural(n_full, 'full layer')} + {layer * n_win:,} "
                    f"on the {plural(n_win, 'window layer')}")
            parts.insert(0, f"{layer * n_full:,} bytes × {T:,}")
        sum_ = " + ".join(parts)
        total += (f" = ({sum_}) × batch {i.batch:,}" if i.batch > 1 else f" = {sum_}") + f" ({window_keep(*split, w)})"
    return "<br>".join([f"per token per layer: {exact_bytes(r.kv_bytes_per_token_per_layer)} = "
                        f"{html.escape(f['kv_bytes_per_token_per_layer'])}", per, total])


def flops_text(r: CalcResult) -> str:
    """Attention FLOPs of one decode step, part by part, and why many heads cost what one wide head
    does (rich text)."""
    fl = r.flops
    form = ", MLA absorbed form" if r.attention_kind == "MLA" else ""
    lines = [f"<b>Attention FLOPs of one decode step{form}</b>: {html.escape(fl['scope'])}"]
    lines += [f"{html.escape(label)}: {format_count(n)}" for label, n in parts(fl, r.inputs.n_head)]
    lines.append(f"softmax: {format_count(fl['softmax_elements_per_token'])} scores")
    if "mla_form" in fl:
        lines.append(html.escape(fl["mla_form"]))
    lines.append(html.escape(heads_vs_text(fl, r.inputs.n_head, r.inputs.n_kv_head, r.d_head)))
    return "<br>".join(lines)


def sentence_text(r: CalcResult | None, T: int | None, counted_by: str = "", layout_of: str = "") -> str:
    """What the current sentence of `T` tokens takes in the KV cache of `r`'s layout (rich text).
    Its tokens were counted by `counted_by`'s tokenizer: under another model's layout (`layout_of`
    another name, or a preset's: "") the line names it, as that model's tokenizer may count otherwise."""
    if r is None or T is None:
        return "this sentence: (no sentence yet)"
    if T == 0:
        return "this sentence: <b>0 tokens</b> (the sentence box is empty)"
    size = r.kv_series([T])["gqa"][0] if T > 0 else 0
    batch = f" (batch {r.inputs.batch:,})" if r.inputs.batch > 1 else ""
    whose = f" ({html.escape(counted_by)}'s tokenizer)" if counted_by and counted_by != layout_of else ""
    if not r.inputs.arch.causal:  # an encoder reads every token at once: what a decoder would keep
        return (f"this sentence: <b>{tokens(T)}</b>{whose}; an encoder keeps no KV cache (a decoder of "
                f"this shape would keep {size:,} bytes ({format_bytes(size)}){batch})")
    # (the tokenizer's name, where given, between the count and its bytes, out of the bold)
    counted = f"<b>{tokens(T)}</b>{whose} <b>→" if whose else f"<b>{tokens(T)} →"
    return f"this sentence: {counted} {size:,} bytes</b> ({format_bytes(size)}) of KV cache" + batch


def live_text(result, model) -> str:
    """The engine's own KV cache after `result` (a run of `model`): its tokens' K and V bytes with
    the calculator's factors, the memory the arrays holding them take (room for the next positions
    included) where the run measured it, and what this edit reused; "" where there is nothing to
    say."""
    held = getattr(result, "cache_bytes", 0) if result is not None else 0
    if result is None or model is None or not model.config.causal:
        return ("live KV cache: none (a bidirectional encoder recomputes every token and keeps "
                "no cache)") if model is not None and not model.config.causal else ""
    c = model.config
    T = result.n_tokens
    if held == 0:
        return "live KV cache: not kept for this run"
    arrays = _arrays_text(held, getattr(result, "cache_allocated", 0))
    changed = bool(getattr(getattr(result, "trace", None), "edits", None))  # (heads switched off: the run shown)
    if not result.cache_used or changed:  # (another run held the cache, or this one changed heads)
        return (f"live KV cache: this run computed its {tokens(T)} without the cache; the cache "
                f"holds {exact_bytes(held)} of K and V that another run left" + arrays)
    line = (f"live KV cache (engine, float32), its tokens' K and V: <b>{tokens(T)} × "
            f"{plural(c.n_layer, 'layer')} × {plural(c.n_kv_head, 'KV head')} × {c.d_head} × 2 (K, V) × 4 B = {exact_bytes(held)}"
            f"</b>{arrays}; this edit reused {tokens(result.cache_reused)} and computed "
            f"{result.cache_computed:,}")
    n_earlier, earlier_bytes = getattr(result, "cache_earlier", (0, 0))
    if n_earlier:
        line += (f"; beside it, the K and V of {n_earlier} earlier "
                 f"{'text' if n_earlier == 1 else 'texts'}, {exact_bytes(earlier_bytes)}, "
                 f"kept so that a word the tokenizer splits anew or a letter typed again "
                 f"starts from the longest prefix already computed")
    local = sum(c.is_local(i) for i in range(c.n_layer))
    if not local or T <= c.sliding_window:
        return line
    needed = kv_cache_needed(c, T, "fp32")
    return (f"KV cache needed (the model, as llama.cpp and transformers allocate it; the "
            f"calculator's count, float32): <b>({c.n_layer - local}·{T:,} + {local}·"
            f"min({T:,}, {c.sliding_window:,})) tokens × {plural(c.n_kv_head, 'KV head')} × {c.d_head} × 2 "
            f"(K, V) × 4 B = {exact_bytes(needed)}</b><br>{line}<br>The tokens' K and V are more "
            f"than needed: on local layers attnviz keeps every token's K and V, not only the last "
            f"{c.sliding_window:,}, so an edit in the middle of the text can reuse the prefix "
            f"before it")


def _arrays_text(held: int, allocated: int) -> str:
    """The memory the engine's K and V arrays take beside their tokens' `held` bytes, where the run
    measured it (`allocated` > 0): the arrays keep room for the next positions, so an edit that
    adds tokens writes them in place."""
    if allocated <= 0:
        return ""
    if allocated == held:
        return "; the arrays holding them: the same, no room for more positions"
    return (f"; the arrays holding them, with room for the next positions: "
            f"<b>{exact_bytes(allocated)}</b>")


# -- messages --------------------------------------------------------------------------------------

def result_label() -> QLabel:
    """A wrapping label of the panel's results, in rich text (fields.rich_label: what it quotes is
    escaped where it is written)."""
    label = rich_label(QLabel())
    label.setWordWrap(True)
    return label


def error_label() -> QLabel:
    """A wrapping label in the error colour under a field, hidden until a message."""
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {ERROR};")
    label.hide()
    return label


def note_label() -> QLabel:
    """A wrapping plain-text note under the preset box, hidden until there is something to say."""
    label = QLabel()
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.hide()
    return label


def footnote_label() -> QLabel:
    """The grey, selectable plain-text notes under the results."""
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setStyleSheet("color: gray;")
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def heading(text: str) -> QLabel:
    """A bold section heading of the results."""
    label = QLabel(f"<b>{html.escape(text)}</b>")
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setContentsMargins(0, 4, 0, 0)
    return label
