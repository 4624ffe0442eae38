"""The training panel: for a model with checkpoints across training (engine/computing/checkpoints.py), a
training-step slider that moves every heatmap through training, beside a plot of the in-context
learning score and the best induction-head score per checkpoint with the current step marked.

A view of AppState: the job runner loads a model's checkpoints (Worker.follow_state, preloading
every checkpoint's weights, so a slider step costs one forward pass on the pool) and hands them to
the state; the panel shows them and writes back only through set_checkpoint. The head-roles panel
rescores each new result, so its badges follow the slider.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

from attnviz.engine.computing.patterns import head_title
from attnviz.figures.numbers import minus_signs, signed
from attnviz.ui.views.fields import plain_label


ICL_COLOR, INDUCTION_COLOR = "#d95f02", "#1b9e77"  # the two curves, their axes and markers
ICL_PEN = pg.mkPen(ICL_COLOR, width=2)
INDUCTION_PEN = pg.mkPen(INDUCTION_COLOR, width=2)
PLOT_HEIGHT = 150


class SignedAxis(pg.AxisItem):
    """An axis whose ticks write the minus as "−", as every number in the window (the ICL score
    falls below 0)."""

    def tickStrings(self, values, scale, spacing):
        return [minus_signs(t) for t in super().tickStrings(values, scale, spacing)]


class TrainingPanel(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Training step: move every heatmap through training "
                               "(arrow keys step one checkpoint)")
        self.slider.setPageStep(1)
        self.step_label = plain_label(QLabel())
        self.step_label.setMinimumWidth(260)
        self.score_label = plain_label(QLabel())
        self.score_label.setStyleSheet("color: #555;")

        self.plot = pg.PlotWidget(background="w", axisItems={"left": SignedAxis("left")})
        self.plot.setFixedHeight(PLOT_HEIGHT)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        pi = self.plot.getPlotItem()
        pi.setLabel("bottom", "training step")
        pi.setLabel("left", "ICL score (nats)", color=ICL_COLOR)
        pi.showAxis("right")
        pi.setLabel("right", "best induction", color=INDUCTION_COLOR)
        self.icl_curve = pi.plot([], [], pen=ICL_PEN, symbol="o", symbolSize=4,
                                 symbolBrush=ICL_COLOR, symbolPen=None, name="ICL score")
        # the induction score (0..1) on its own axis: a second view box on the right axis
        self.right_view = pg.ViewBox()
        pi.scene().addItem(self.right_view)
        pi.getAxis("right").linkToView(self.right_view)
        self.right_view.setXLink(pi)
        self.right_view.setYRange(0, 1, padding=0.05)
        self.right_view.setMouseEnabled(x=False, y=False)
        self.induction_curve = pg.PlotDataItem([], [], pen=INDUCTION_PEN, symbol="o", symbolSize=4,
                                               symbolBrush=INDUCTION_COLOR, symbolPen=None)
        self.right_view.addItem(self.induction_curve)
        pi.getViewBox().sigResized.connect(self._sync_views)
        self.marker = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#444", width=1.5))
        pi.addItem(self.marker)
        self.plot.setToolTip(
            "Orange: ICL score, the loss on late tokens minus the loss on early ones (more negative: "
            "the context helps more). Green: the best head's induction strength on the repeated-random "
            "probe. The line marks the step shown.")

        top = QHBoxLayout()
        top.addWidget(plain_label(QLabel("Training step")))
        top.addWidget(self.slider, 1)
        top.addWidget(self.step_label)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(top)
        col.addWidget(self.score_label)
        col.addWidget(self.plot)
        self.hide()

        state.sigCheckpointsChanged.connect(self._on_checkpoints)
        state.sigCheckpointChanged.connect(self._on_checkpoint)
        self.slider.valueChanged.connect(self._on_slider)
        self._on_checkpoints(state.checkpoints)  # (a model change clears them: the panel hides)

    def _sync_views(self, *_):
        vb = self.plot.getPlotItem().getViewBox()
        self.right_view.setGeometry(vb.sceneBoundingRect())
        self.right_view.linkedViewChanged(vb, self.right_view.XAxis)

    # --- from the state ---------------------------------------------------------------------
    def _on_checkpoints(self, ckpts) -> None:
        if ckpts is None:
            self.hide()
            return
        infos = ckpts.infos
        steps = np.array([c.step for c in infos], dtype=float)
        icl = np.array([np.nan if c.icl_score is None else c.icl_score for c in infos])
        ind = np.array([np.nan if c.induction_score is None else c.induction_score for c in infos])
        self.icl_curve.setData(steps, icl)
        self.induction_curve.setData(steps, ind)
        self.plot.getPlotItem().setXRange(steps[0], steps[-1], padding=0.02)
        self._sync_views()
        self.slider.blockSignals(True)
        self.slider.setRange(0, len(infos) - 1)
        self.slider.setValue(self.state.checkpoint if self.state.checkpoint is not None else 0)
        self.slider.blockSignals(False)
        self._show_step()
        self.show()

    def _on_checkpoint(self, index: int) -> None:
        if self.slider.value() != index:
            self.slider.blockSignals(True)
            self.slider.setValue(index)
            self.slider.blockSignals(False)
        self._show_step()  # (the runner computes the typed sentence on this step's weights)

    def _show_step(self) -> None:
        info = self.state.checkpoint_info()
        if info is None:
            return
        n = len(self.state.checkpoints)
        tokens = f", {info.tokens_seen / 1e6:.2f}M tokens" if info.tokens_seen is not None else ""
        self.step_label.setText(f"step {info.step:,} (checkpoint {info.index} of 0–{n - 1}{tokens})")
        parts = []
        if info.train_loss is not None:
            parts.append(f"training loss {info.train_loss:.3f} nats")  # (cross-entropy, natural log)
        if info.icl_score is not None:
            parts.append(f"ICL score {signed(info.icl_score, 3)} nats")
        if info.induction_score is not None:
            head = (f" ({head_title(*info.induction_head)})"
                    if info.induction_head else "")
            parts.append(f"best induction {info.induction_score:.2f}{head} on the random probe")
        self.score_label.setText(" · ".join(parts))
        self.marker.setValue(info.step)

    # --- to the state -----------------------------------------------------------------------
    def _on_slider(self, value: int) -> None:
        self.state.set_checkpoint(value)
