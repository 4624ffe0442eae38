"""The guide bar under the sentence: while the sentence is one of the samples, it says in one line
what to look for, and once that sample's heatmaps are computed, which head of the loaded model
shows it best (`engine.analysing.samples.guide`, on the job runner). "Show me" focuses that head.

A view of AppState: it watches the text, model, result and head scores, writes back only through
the state's setters, drops a guide whose text or model is no longer the current one, and names a
guide by the run it was found on (a changed run, with heads switched off, or the clean one). A
roles sample never scores the result itself: it waits for the state's typed-text scores of that
result (the runner scores every result once, with the roles panel's exclusion options, whatever
source the panel shows), so its numbers are the roles panel's. A Find sample needs no scores."""

from __future__ import annotations

import html

from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

from attnviz.engine.analysing.effects import is_changed
from attnviz.engine.analysing.samples import Guide, sample_for_text, switched_off
from attnviz.figures.style import GOOD, WARNING
from attnviz.ui.views.fields import rich_label
from attnviz.ui.views.grid_items import no_model_text


SHOW_TIP = "Focus the head that shows this best in the loaded model"


class GuideBar(QWidget):
    def __init__(self, state, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.sample = None
        self.current: Guide | None = None  # the newest guide ("Show me" focuses its head)
        self._shown = None  # (the guide the answer shows, the result it was found on), or None
        self._asked = None  # what the newest guide job was asked on: (the result, its scores or None)
        self.look = rich_label(QLabel())
        self.look.setWordWrap(True)
        self.look.setToolTip("What this sample shows; the head is found on the loaded model's own "
                             "patterns, with the roles panel's scores and baselines")
        self.answer = rich_label(QLabel())
        self.answer.setWordWrap(True)
        self.show_button = QToolButton()
        self.show_button.setText("Show me")
        self.show_button.setToolTip(SHOW_TIP)
        self.show_button.clicked.connect(self.show_head)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.look, 3)
        row.addWidget(self.answer, 3)
        row.addWidget(self.show_button, 0)
        self._fitted = (None, 0)  # ((sample, width), height) the bar was fitted to
        self._fit()
        state.sigTextChanged.connect(self._on_text)
        state.sigModelChanged.connect(lambda _m: self._on_text(self.state.text))
        state.sigResultChanged.connect(self._on_result)
        state.sigResultChanged.connect(lambda _r: self._write_answer())  # the other run shown
        state.sigHeadScoresChanged.connect(lambda: self._on_result(self.state.result))
        state.sigCheckpointChanged.connect(self._on_checkpoint)  # another step: its heads, anew
        state.sigGuideChanged.connect(self._on_guide)
        state.sigComputeReported.connect(self._on_compute_failed)
        # (without a model the answer says what the views say: one on its way, or none loaded)
        for sig in (state.sigLoadReported, state.sigLoadingChanged):
            sig.connect(lambda *_: self.sample is not None and self.state.model is None and self._forget())
        self._on_text(state.text)

    def _fit(self) -> None:
        """One height per sample and width: what its 'Look for' and its answer need, two lines at
        least, growing but never shrinking while they stay, so an answer that comes or re-wraps
        never moves the grid under the bar. The labels get the bar's height (the layout would
        otherwise give a wrapped label more height than the bar has, and clip it)."""
        need = max(two_lines(self.look), *(text_height(lab) for lab in (self.look, self.answer)))
        key = (self.sample, self.width())
        h = max(need, self._fitted[1]) if self._fitted[0] == key else need
        self._fitted = (key, h)
        for w in (self.look, self.answer):
            w.setFixedHeight(h)
        self.setFixedHeight(h + 4)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        self._fit()

    # --- state -> view --------------------------------------------------------------------------
    def _forget(self) -> None:  # the guide shown is no longer the current one's
        self.current = self._shown = None
        self._asked = None
        self.state.drop_guide()
        if self.state.model is None and self.state.result is None:
            self._no_guide(no_model_text(self.state))
            return
        self._show_off("Finding the head in this model…")
        self.answer.setToolTip("")
        self.answer.setText("<i>Finding the head in this model…</i>")

    def _on_text(self, text: str) -> None:
        self.sample = sample_for_text(text or "")
        self._forget()
        if self.sample is None:
            self.hide()
            return
        self.look.setText(f"<b>Look for:</b> {html.escape(self.sample.look_for, quote=False)}")
        self.show()
        self._fit()
        self._on_result(self.state.result)

    def _on_checkpoint(self, _index: int) -> None:
        """The same text on another checkpoint's weights: the guide waits for that result (the
        worker drops any older model's), then finds the head again."""
        if self.sample is not None:
            self._forget()

    def _on_result(self, result) -> None:
        s, st, model = self.sample, self.state, self.state.model
        if s is None or result is None or model is None or result.text != s.text:
            return
        scores = None
        if s.roles:  # the state's scores of this very result, once they are there
            if st.scores_result is not result or st.scores_stale:
                return
            if st.text_scores is None:
                if st.text_note:
                    self._no_guide(st.text_note)
                return
            scores = st.text_scores
        # (a changed run whose patterns are the clean run's keeps its scores, but not its heads:
        # the guide is asked again, on the run with the heads switched off)
        if self._asked is not None and self._asked[0] is result and self._asked[1] is scores:
            return  # this guide is shown, or on its way
        self._asked = (result, scores)
        self.state.want_guide(s, result, scores)

    def _on_compute_failed(self, request, message: str) -> None:
        """The sample could not be run on this model (a folder without a tokenizer, a text it
        refuses): no head will be found, so the answer says so rather than that one is sought."""
        if message and self.sample is not None and request.text == self.sample.text and self.current is None:
            self._no_guide("No head is named: this model could not compute the sample (the red "
                           "banner above says why)")

    def _on_guide(self, sample, value, message: str, result=None) -> None:
        if sample is not self.sample:
            return  # the text changed while it was found
        if value is None:
            self._no_guide(message)
            return
        self.current, self._shown = value, (value, result)
        self._write_answer()
        if value.layer is None:  # no head has any strength for it: none to focus
            which = "no head still on" if switched_off(result) else "no head of this model"
            self.answer.setToolTip(f"No head passes the bar, and {which} is a candidate")
            near = "comes close to" if self.sample.find else "has any strength for"  # (a Find sample: no head near its bar)
            self._show_off(f"No head to show: {which} {near} what this sample looks for (the answer says why)")
            return
        self.answer.setToolTip("" if value.claimed else "No head passes this sample's bar: 'Show "
                               "me' focuses the closest candidate, as the answer names it")
        self.show_button.setEnabled(True)
        self.show_button.setToolTip(SHOW_TIP if value.claimed else
                                    "Focus the closest candidate (no head passes this sample's bar)")

    def _show_off(self, why: str) -> None:
        self.show_button.setEnabled(False)
        self.show_button.setToolTip(why)

    def _no_guide(self, why: str) -> None:
        """The answer says `why` there is no guide (it failed, or the scores it needs did not come):
        no head is named, so "Show me" focuses none (the guide before was found on another run)."""
        self.current = self._shown = None
        self._show_off("No head to show: the answer says why")
        self.answer.setToolTip("")
        self.answer.setText(f"<span style='color:{WARNING}'>{html.escape(why)}</span>")

    def _write_answer(self) -> None:
        """The guide shown, named by the run it was found on: 'Changed run:' when heads were
        switched off in it, 'Clean run:' when they were not but the grid shows a changed run (a
        guide's job can end after the next run is shown; the next guide follows)."""
        if self._shown is None:
            return
        value, found_on = self._shown
        prefix = ("<b>Changed run:</b> " if is_changed(found_on) else
                  "<b>Clean run:</b> " if is_changed(self.state.result) else "")
        color = GOOD if value.claimed else WARNING
        # (the message is plain text: a token label such as '<s>' or '&' is shown, not read as markup)
        self.answer.setText(f"<span style='color:{color}'>{prefix}{html.escape(value.message, quote=False)}</span>")
        self._fit()

    # --- view -> state --------------------------------------------------------------------------
    def show_head(self) -> None:
        g = self.current
        if g is None or g.layer is None:
            return
        self.state.show_head(g.layer, g.head)


def text_height(label: QLabel, html: str | None = None) -> int:
    """Pixels the label's (rich) text, or `html`, needs at the label's width, wrapped."""
    doc = QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    doc.setHtml(label.text() if html is None else html)
    doc.setTextWidth(max(label.width(), 1))
    return int(doc.size().height()) + 2


def two_lines(label: QLabel) -> int:
    """Pixels two lines of the guide's rich text need (bold and italic lines are taller than the
    plain line spacing): the bar's least height, so a two-line answer never grows it."""
    return text_height(label, "<b>Ag</b><br><i>Ag</i>")
