"""The Generate panel (a causal model): N new tokens from the sentence, one KV-cached step each
(engine/computing/generate.py, run by the runner's 'generate' job, ui/machinery/long_jobs.py). Greedy by
default; a temperature above 0 draws from the top-p set with a seed, so a run can be repeated. It
stops at the model's end of text unless told to go on, or at Stop; editing the sentence ends it.
The sentence grows in the box as tokens arrive (the state marks the new ones: state.text_marks,
painted by the sentence box) and the heatmaps follow it.

The step slider shows step s of n (counted from 1, as the label and the plot's axis read): the
generated token's row in every head of the layer shown (what the position that chose it read), the
model's top-10 (with each one's probability in the draw when the token was drawn at a
temperature), and the bytes of K and V of the T tokens it read, with the calculator's
figure for that many tokens and what their arrays hold with the room they keep for the next
positions beside it; a plot draws the arrays' bytes against the step."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import (
    QCheckBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QPushButton, QScrollArea, QSlider,
    QSpinBox, QVBoxLayout, QWidget,
)

from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.token_text import isolated, tokens
from attnviz.engine.calc import calculate
from attnviz.engine.calc.from_config import calc_inputs_from_config
from attnviz.engine.computing.patterns import drop_first_key, head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures.long_picture import colour_table
from attnviz.figures.overview import colour_index, tops
from attnviz.figures.style import BACKGROUND, FOCUS, TEXT
from attnviz.ui.views.fields import plain_label, plain_tip, rich_label
from attnviz.ui.views.long_panes import indexed_image

MAX_NEW = 256
# what the settings keep of the panel (GeneratePanel.fields), each read back as its type
FIELD_TYPES = {"new_tokens": int, "temperature": float, "top_p": float, "seed": int, "go_on": bool}
STOP_WORDS = {"eos": "stopped at the end-of-text token", "max_new": "made the tokens asked for",
              "context": "reached the model's context", "stopped": "stopped",
              "edited": "ended: the sentence was edited"}


class RowsView(QWidget):
    """The generated token's row in every head of one layer: [n_head, T] as one strip per head,
    each head on its own colour scale; hover names the key and the weight."""

    ROW = 14

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state = state
        self.rows: np.ndarray | None = None  # [n_head, n_k]: keys first..T-1
        self.labels: list[str] = []  # the T tokens' labels
        self.layer = 0
        self.first = 0  # the position of the first key shown (1: the first token hidden)
        self.setMouseTracking(True)
        self.setMinimumHeight(60)
        self.hover_text = ""

    def set_rows(self, rows, labels, layer, first: int = 0) -> None:
        self.rows, self.labels, self.layer, self.first = rows, labels, layer, first
        self.setMinimumHeight(self.ROW * (0 if rows is None else rows.shape[0]) + 4)
        self.update()

    def area(self) -> QRectF:
        """Where the rows are painted, in widget pixels: row h is ROW px tall from the top."""
        return QRectF(48, 2, max(1, self.width() - 52), self.ROW * (0 if self.rows is None else len(self.rows)))

    def paintEvent(self, ev) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(BACKGROUND))
        if self.rows is not None and self.rows.size:
            r = self.rows[:, None, :]  # [n_head, 1, T]
            idx = colour_index(r, tops(r, "per-head"))[:, 0, :]
            img = indexed_image(idx, colour_table(self.state.colormap))
            area = self.area()
            p.drawImage(area, img, QRectF(img.rect()))
            p.setPen(QColor(TEXT))
            for h in range(len(self.rows)):
                p.drawText(QRectF(0, area.top() + h * self.ROW, 44, self.ROW),
                           Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, head_title(self.layer, h))
        p.end()

    def mouseMoveEvent(self, ev) -> None:
        area = self.area()
        pos = ev.position()
        if self.rows is None or not area.contains(pos):
            return
        h = min(len(self.rows) - 1, int((pos.y() - area.top()) / self.ROW))
        j = min(self.rows.shape[1] - 1, int((pos.x() - area.left()) * self.rows.shape[1] / area.width()))
        k = j + self.first
        label = self.labels[k] if k < len(self.labels) else str(k)
        self.hover_text = f"{head_title(self.layer, h)} → {isolated(label)} (key {k})  {float(self.rows[h, j]):.4g}"
        self.setToolTip(plain_tip(self.hover_text))  # (it quotes a token label)


# the top-10's cells: a gap before each number column, so the widest token never runs into its
# probability, and one after the arrow that marks the token taken
NUMBER_CELL = "<td align='right' style='padding-left: 14px'>"
MARK_CELL = "<td style='padding-right: 4px'>"


def top_table(step) -> str:
    """The model's top-k at a step, as rich text: each token's probability, and where the token was
    drawn (a temperature above 0) the probability it had in the draw, temperature and top-p
    applied (0 outside the top-p set); greedy takes the first."""
    drawn = step.top_drawn
    head = (f"<tr><td></td><td></td>{NUMBER_CELL}model</td>{NUMBER_CELL}in the draw</td></tr>"
            if drawn is not None else "")
    rows = [
        f"<tr>{MARK_CELL}{'▶' if int(i) == step.id else ''}</td><td>{html.escape(t)}</td>"
        f"{NUMBER_CELL}{np.exp(lp):.3f}</td>"
        + ("" if drawn is None else f"{NUMBER_CELL}{drawn[j]:.3f}</td>") + "</tr>"
        for j, (i, t, lp) in enumerate(zip(step.top_ids, step.top_tokens, step.top_logprobs))]
    chosen = ("" if step.id in step.top_ids else
              f"<br>drawn: {html.escape(step.token)} (outside the top {len(step.top_ids)})")
    title = (f"The model's top {len(step.top_ids)}, with the probability each had in the draw "
             "(temperature and top-p applied):" if drawn is not None else
             f"The model's top {len(step.top_ids)} and the probability of each; greedy takes the first:")
    return title + "<table cellspacing='0'>" + head + "".join(rows) + "</table>" + chosen


class GeneratePanel(QWidget):
    """View of AppState.generation, with the controls that start and stop one (module docstring).
    What the settings keep: `fields()`, shown again by `set_fields`; sigFieldsChanged on a change."""

    sigFieldsChanged = Signal()

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state, self.gen = state, state.generation
        self.n_spin = QSpinBox()
        self.n_spin.setRange(1, MAX_NEW)
        self.n_spin.setValue(20)
        self.temp_spin = QDoubleSpinBox()
        self.temp_spin.setRange(0.0, 5.0)
        self.temp_spin.setSingleStep(0.1)
        self.temp_spin.setToolTip("0: greedy (the most likely token each step)")
        self.top_p_spin = QDoubleSpinBox()
        self.top_p_spin.setRange(0.01, 1.0)
        self.top_p_spin.setSingleStep(0.05)
        self.top_p_spin.setValue(1.0)
        self.seed_spin = QSpinBox()
        self.seed_spin.setRange(0, 2 ** 31 - 1)
        for spin in (self.top_p_spin, self.seed_spin):  # greedy takes neither: greyed at 0
            spin.setToolTip("Used when the temperature is above 0 (greedy draws nothing)")
        self.temp_spin.valueChanged.connect(self._sampling_controls)
        self._sampling_controls(self.temp_spin.value())
        self.go_on_check = QCheckBox("Go on past the end-of-text token")
        self.generate_button = QPushButton("Generate")
        self.stop_button = QPushButton("Stop")
        form = QFormLayout()
        form.addRow("New tokens", self.n_spin)
        form.addRow("Temperature", self.temp_spin)
        form.addRow("Top-p", self.top_p_spin)
        form.addRow("Seed", self.seed_spin)
        form.addRow(self.go_on_check)
        buttons = QHBoxLayout()
        buttons.addWidget(self.generate_button)
        buttons.addWidget(self.stop_button)
        self.status = plain_label(QLabel())
        self.status.setWordWrap(True)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setEnabled(False)
        self.step_label = plain_label(QLabel())  # (it quotes the step's token)
        self.step_label.setWordWrap(True)
        self.kv_label = plain_label(QLabel())
        self.kv_label.setWordWrap(True)
        self.rows_caption = plain_label(QLabel())
        self.rows_caption.setWordWrap(True)
        self.rows_view = RowsView(state)
        self.top_label = rich_label(QLabel())
        self.top_label.setWordWrap(True)  # (its title would widen the dock past the screen)
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMinimumHeight(140)
        self.plot.setLabel("bottom", "step")
        self.plot.setLabel("left", "K and V held (MiB)")
        self.plot.setMouseEnabled(False, False)
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.curve = self.plot.plot([], [], pen=pg.mkPen("#8ab4f8", width=2), symbol="o", symbolSize=4)
        self.marker = pg.InfiniteLine(angle=90, pen=pg.mkPen(FOCUS))
        self.marker.hide()  # until a step is shown (at 0 it gave the empty plot a -400..400 range)
        self.plot.addItem(self.marker)
        self.plot.getPlotItem().layout.setContentsMargins(2, 8, 8, 2)  # the top and right ticks' text whole

        body = QWidget()  # in a scroll area: a short window still fits (the docks are tabbed)
        col = QVBoxLayout(body)
        col.addLayout(form)
        col.addLayout(buttons)
        col.addWidget(self.status)
        col.addWidget(plain_label(QLabel("Step")))
        col.addWidget(self.slider)
        col.addWidget(self.step_label)
        col.addWidget(self.kv_label)
        col.addWidget(self.rows_caption)
        col.addWidget(self.rows_view)
        col.addWidget(self.top_label)
        col.addWidget(self.plot, 1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

        for spin in self.spins().values():
            spin.valueChanged.connect(lambda *_: self.sigFieldsChanged.emit())
        self.go_on_check.toggled.connect(lambda *_: self.sigFieldsChanged.emit())
        self.generate_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.gen.stop)
        self.slider.valueChanged.connect(self.gen.show_step)
        self.gen.sigChanged.connect(self.refresh)
        self.gen.sigStepShown.connect(self._show_step)
        state.sigModelChanged.connect(lambda _m: self.refresh())
        state.sigLayerChanged.connect(lambda _l: self._show_step(self.gen.shown))
        state.sigDisplayChanged.connect(lambda: self._show_step(self.gen.shown))  # Hide first token
        self.refresh()

    def spins(self) -> dict:
        return {"new_tokens": self.n_spin, "temperature": self.temp_spin, "top_p": self.top_p_spin,
                "seed": self.seed_spin}

    def fields(self) -> dict:
        """The sampling options as the settings keep them (FIELD_TYPES)."""
        return {**{key: spin.value() for key, spin in self.spins().items()},
                "go_on": self.go_on_check.isChecked()}

    def set_fields(self, saved: dict) -> None:
        """Show the options `saved` (fields()' keys, each of its type; any left out): a value
        outside its box's range leaves what the box shows."""
        for key, spin in self.spins().items():
            value = saved.get(key)
            if isinstance(value, (int, float)) and spin.minimum() <= value <= spin.maximum():
                spin.setValue(value)
        if isinstance(saved.get("go_on"), bool):
            self.go_on_check.setChecked(saved["go_on"])

    def _sampling_controls(self, temperature: float) -> None:
        """Top-p and the seed apply to a draw only: at temperature 0 (greedy) they are greyed."""
        for spin in (self.top_p_spin, self.seed_spin):
            spin.setEnabled(temperature > 0)

    def start(self) -> None:
        """Ask the state for a generation with the panel's settings (the Generate button); the
        runner starts it, or says in the state why not (shown in the status line)."""
        t = float(self.temp_spin.value())
        self.gen.request(int(self.n_spin.value()), temperature=t, top_p=float(self.top_p_spin.value()),
                         seed=int(self.seed_spin.value()) if t > 0 else None,
                         ignore_eos=self.go_on_check.isChecked())

    def refresh(self) -> None:
        st, g = self.state, self.gen
        model = st.model
        causal = model is not None and model.config.causal
        self.generate_button.setEnabled(causal and not g.running)
        self.stop_button.setEnabled(g.running)
        n = len(g.steps)
        if model is not None and not causal:
            self.status.setText(f"{model.name} is an encoder, so it predicts no next token and cannot generate.")
        elif g.running:
            self.status.setText(f"Generating: {n} token{'s' * (n != 1)} so far…")
        elif g.refused:
            self.status.setText(g.refused)
        elif g.stopped in STOP_WORDS:
            self.status.setText(f"{n} new token{'s' * (n != 1)}: {STOP_WORDS[g.stopped]}.")
        elif g.stopped:  # a failure, in sentences of its own
            self.status.setText(f"{n} new token{'s' * (n != 1)}. {g.stopped}")
        else:
            self.status.setText("")
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, n - 1))
        self.slider.setValue(max(0, g.shown))
        self.slider.blockSignals(False)
        self.slider.setEnabled(n > 1)
        if n:
            self.curve.setData(np.arange(1, n + 1), [s.kv_held / 2 ** 20 for s in g.steps])
        else:
            self.curve.setData([], [])

    def kv_text(self, step) -> str:
        """'KV of 6 tokens: 270 KiB (276,480 bytes); calculator at float32: ...; held with room ...:
        ...': the generation's K and V at that step, the calculator's figure for the same T in the
        engine's float32, named so (the Calculator tab's KV dtype starts at fp16), equal without a
        sliding window (with one, the calculator keeps only the window and says so), and what their
        arrays take, with the room they keep for the next positions (what the process holds; the
        curve plots it)."""
        res = calculate(calc_inputs_from_config(self.state.model.config, seq_len=step.T, kv_dtype="fp32"))
        calc = res.kv_bytes_sequence
        why = next((w for w in res.warnings if "keep only the last" in w), "") if calc != step.kv_bytes else ""
        why = f": {why}, where the generation keeps every token's" if why else ""
        return (f"KV of {tokens(step.T)}: {format_bytes(step.kv_bytes)} ({step.kv_bytes:,} bytes); "
                f"calculator at float32: {format_bytes(calc)} ({calc:,} bytes{why}); held with room for the next "
                f"positions: {format_bytes(step.kv_held)} ({step.kv_held:,} bytes)")

    def _show_step(self, s: int) -> None:
        g = self.gen
        if s < 0 or s >= len(g.steps) or self.state.model is None:
            self.step_label.setText("")
            self.kv_label.setText("")
            self.top_label.setText("")
            self.rows_view.set_rows(None, [], 0)
            self.rows_caption.setText("")
            self.marker.hide()
            return
        step = g.steps[s]
        if self.slider.value() != s:
            self.slider.blockSignals(True)
            self.slider.setValue(s)
            self.slider.blockSignals(False)
        self.step_label.setText(f"Step {s + 1} of {len(g.steps)}: {quoted(step.token)} "
                                f"(read {tokens(step.T)})")
        self.kv_label.setText(self.kv_text(step))
        self.top_label.setText(top_table(step))
        self._show_rows(step)
        self.marker.setValue(s + 1)
        self.marker.show()

    def _show_rows(self, step) -> None:
        """The step's row in every head of the layer shown, under the grid's Hide first token (the
        first key dropped, each row renormalised); Value-weighted needs value norms the steps do
        not keep, and the caption says it does not apply."""
        st = self.state
        layer = min(st.layer, step.rows.shape[0] - 1) if step.rows is not None else 0
        rows, first = None if step.rows is None else step.rows[layer], 0
        if rows is not None and st.hide_first and rows.shape[1] > 1:
            rows, first = drop_first_key(rows), 1
        self.rows_view.set_rows(rows, self._labels(step.T), layer, first)
        notes = ["the first token hidden, each row renormalised"] if first else []
        if st.value_weighted:
            notes.append("Value-weighted does not apply here (the steps keep no value norms)")
        self.rows_caption.setText(f"The row that chose it, in every head of layer {layer} (each head on its "
                                  "own colour scale" + "".join("; " + n for n in notes) + "):")

    def _labels(self, T: int) -> list[str]:
        """The labels of the first T tokens the step read (the prompt and the tokens before it)."""
        model, g = self.state.model, self.gen
        ids = (list(g.prompt_ids) + [st.id for st in g.steps])[:T]
        return model.labels(ids)
