"""The Circuits tab: the model's weight-space circuit scores (engine/analysing/circuits.py),
computed once per model (and per training step) in the background (ui/machinery/why_jobs.py) with progress. It shows the
OV copying map (layers x heads, in the grid's head order; click a head to focus it), the focused
head's top Q-, K- and V-composition partners among earlier heads with their role badges, and what
the focused head writes from the key it attends to most at the query picked in the token strip
(a model with an unembedding). That the scores leave RoPE out is said for a model with RoPE only."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.circuits import ZERO_OV
from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.figures import circuits as fig
from attnviz.ui.panels.dla_view import HeadMapView
from attnviz.ui.views.fields import plain_label


class CircuitsPanel(QWidget):
    def __init__(self, state, jobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.state, self.jobs = state, jobs
        self.shown = False
        self.note = plain_label(QLabel())
        self.note.setObjectName("circuits_note")
        self.note.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setFormat("Circuit scores: %v of %m steps")
        self.progress.hide()
        self.map_view = HeadMapView(state, "The copying map appears here once the scores are computed.")
        self.map_view.setToolTip("OV copying score of each head (1: it copies the token it attends "
                                 "to). Hover: the number; click: focus the head")
        self.partners = plain_label(QLabel())  # (its lines and the OV line quote token labels)
        self.partners.setWordWrap(True)
        self.partners.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.ov = plain_label(QLabel())
        self.ov.setWordWrap(True)
        self.ov.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.export_button = QPushButton("Export\u2026")
        self.export_button.setToolTip("The tab as PNG or SVG (with a JSON sidecar); the scores as "
                                      "JSON (attnviz circuits' keys) or the copying map as CSV")
        self.export_button.clicked.connect(self.export_dialog)
        top = QHBoxLayout()
        top.addWidget(self.note, 1)
        top.addWidget(self.export_button, 0, Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(top)
        lay.addWidget(self.progress)
        lay.addWidget(self.map_view, 1)
        lay.addWidget(self.partners)
        lay.addWidget(self.ov)
        jobs.sigChanged.connect(self.refresh)
        jobs.sigProgress.connect(self._on_progress)
        jobs.sigOvChanged.connect(self._draw_lines)
        state.sigFocusChanged.connect(self._draw_lines)  # the focused head's partners
        state.sigFocusChanged.connect(self._on_pick)
        state.sigQueryChanged.connect(self._on_pick)
        state.sigResultChanged.connect(self._on_pick)
        state.sigHeadLabelsChanged.connect(self._draw_lines)
        state.sigWeightsChanged.connect(lambda _m: self.shown and self.jobs.request())
        self.refresh()

    def set_shown(self, shown: bool) -> None:
        self.shown = bool(shown)
        if self.shown:
            self.jobs.request()  # (once per model: held after the first time)
            self._on_pick()

    def view(self) -> fig.CircuitsView | None:
        st, c = self.state, self.jobs.circuits
        if c is None:
            return None
        kv = st.model.kv_group if st.model is not None else None
        rope = st.model is not None and st.model.config.rope is not None  # (the note: with RoPE only)
        return fig.circuits_view(c, model=st.model_name, kv_group=kv, focus=st.focus,
                                 badge=st.badge, ov=self.jobs.ov, rope=rope,
                                 checkpoint=checkpoint_record(st.model))  # (the scores are its)

    def refresh(self) -> None:
        j = self.jobs
        self.progress.setVisible(j.running)
        if j.running and self.progress.maximum() == 0:
            self.progress.setRange(0, 0)  # busy until the first step reports
        v = self.view()
        st = self.state
        rope = st.model is not None and st.model.config.rope is not None
        self.note.setText(j.note or (fig.ROPE_NOTE if rope else ""))
        self.note.setVisible(bool(self.note.text()))
        self.map_view.set_map(None if v is None else fig.copying_map(v))
        if v is not None and v.copying is None:
            self.map_view.empty_text = f"{v.no_map()} The composition partners below still apply" + (
                "." if v.no_copying == ZERO_OV else f"; {_to_copy(st.model)}")  # (zero OV weights: nothing is missing)
        self.export_button.setEnabled(v is not None)
        self._draw_lines()
        self._on_pick()

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)

    def _on_pick(self, *_) -> None:
        """The focused head and the query picked in the strip: what that head writes from the key
        it attends to most there (its weights as they are, in the run on screen), the query's
        own token being only where the head looks from."""
        st = self.state
        if not self.shown or st.focus is None or st.query_pos is None or st.result is None:
            return
        c = self.jobs.circuits
        if c is None or c.copying is None:
            return  # the scores first (refresh picks again), and an encoder's writes are no tokens
        q, r = st.query_pos, st.result
        if q >= len(r.input_ids) or st.focus[0] >= r.attentions.shape[0]:
            return
        row = r.attentions[st.focus[0], st.focus[1], q]
        k = int(np.argmax(row))  # (a tie: the earliest key)
        at = (q, r.labels[q], k, float(row[k]))
        tid = int(r.input_ids[k])
        ov = self.jobs.ov
        if ov is not None and ov[:3] == (*st.focus, tid) and ov[5] == at:
            return
        self.jobs.request_ov(*st.focus, tid, r.labels[k], at)

    def _draw_lines(self, *_) -> None:
        v = self.view()
        if v is None:
            self.partners.setText("")
            self.ov.setText("")
            return
        lines = v.lines(screen=True)
        ov_line = lines.pop() if v.ov is not None else "" if v.copying is None else (
            self.jobs.ov_note or "Pick a query token in the strip (click it) to see what the focused "
                                 "head writes from the key it attends to most there.")
        self.partners.setText("\n".join(lines))
        self.ov.setText(ov_line)
        self.ov.setVisible(bool(ov_line))

    def export_dialog(self) -> None:
        from attnviz.ui.export import export_folder, remember_folder

        stem = f"{(self.state.model_name or 'model').replace('/', '_')}_circuits"
        path, _ = QFileDialog.getSaveFileName(
            self, "Export Circuits", str(export_folder() / f"{stem}.png"),
            "PNG image (*.png);;SVG vector image (*.svg);;JSON (*.json);;CSV table (*.csv)")
        if path and self.export_to(path):
            remember_folder(path)

    def export_to(self, path: str, width: int = 1200) -> list:
        from attnviz.figures.data import ExportError
        from attnviz.figures.panel_export import export_figure
        from attnviz.ui.machinery.runner import describe_error, failure

        try:
            written = export_figure(fig, self.view(), path, width, self.state.model_path)
        except (OSError, ExportError) as exc:
            self.state.show_status(failure("Export failed", describe_error(exc, writing=path)))
            return []
        self.state.show_status(f"Exported {written[0]}")
        return written


def _to_copy(model) -> str:
    """What to open for a copying map: a decoder, for an encoder; for a decoder whose file lacks
    (or holds unusable) its final norm or unembedding, a model whose file holds them."""
    if model is None or not model.config.causal:
        return "open a decoder from the Models menu for copying."
    return ("for copying, open a model whose file holds a usable final norm and unembedding, from "
            "the Models menu.")
