"""The lines above the heatmaps that say what is wrong or missing: the error banner (a load or a
compute that failed; the last good state stays on screen), the model's notice (e.g. a GGUF whose
tokenizer attnviz cannot build) and the text's notice (truncated to the model's positions, lone
surrogates replaced). The two notices are views of AppState; the window writes the banner."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QLabel, QStatusBar, QWidget

from attnviz.engine.reading.token_text import cut_shown, tokens
from attnviz.engine.reading.validate import full_stop
from attnviz.figures.style import ERROR_BACKGROUND, WARNING
from attnviz.ui.views.fields import plain_label

def sentence(text: str) -> str:
    """A message as one sentence: a final period added where it ends in no '.', '?', '!' or '…';
    no dot is taken off, since it may end a path or a name (a folder "runs.", a model "v1.")."""
    return full_stop(text)


def status_line(bar: QStatusBar, message: str) -> str:
    """`message` cut with an ellipsis to the room the status bar has left of its permanent figures
    (the token count, the compute time), so a long message never runs into them mid-word."""
    shown = [c for c in bar.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
             if c.isVisible() and c.width() > 0]
    right = min((c.x() for c in shown), default=bar.width())
    room = max(right - 16, 40)
    return bar.fontMetrics().elidedText(str(message), Qt.TextElideMode.ElideRight, room)


def show_status(bar: QStatusBar, message: str, msecs: int) -> None:
    """`message` in the status bar for `msecs`, cut as status_line cuts it; cut again once the bar
    is laid out, since the figures at its right may move as the same event shows or hides them (a
    failed load hides the load box: measured before, the message had a few letters' room)."""
    shown = status_line(bar, message)
    bar.showMessage(shown, msecs)

    def again() -> None:
        if bar.currentMessage() == shown:
            better = status_line(bar, message)
            if better != shown:
                bar.showMessage(better, msecs)
    QTimer.singleShot(0, bar, again)


class Notices(QObject):
    """Three labels the window places: banner (errors; click to dismiss, at the top), text (the
    result's notices) and model (the model's notice), both under the token strip."""

    def __init__(self, state, parent: QObject | None = None):
        super().__init__(parent)
        self.state = state
        self.kind = ""  # what the banner shows: "compute" is cleared by the next result
        self.banner = plain_label(QLabel())  # (an error may quote a text, a token or a path)
        self.banner.setWordWrap(True)
        self.banner.setStyleSheet(f"background: {ERROR_BACKGROUND}; color: white; padding: 4px;")
        self.banner.setToolTip("Click to dismiss")
        self.banner.mousePressEvent = lambda _ev: self.banner.hide()
        self.text = plain_label(QLabel())
        self.text.setStyleSheet(f"color: {WARNING}; font-weight: bold;")
        self.model = plain_label(QLabel())  # (it names the model)
        self.model.setWordWrap(True)
        self.model.setStyleSheet(f"color: {WARNING};")
        for label, name in ((self.banner, "error_banner"), (self.text, "text_notice"),
                            (self.model, "model_notice")):
            label.setObjectName(name)
            label.hide()
        state.sigResultChanged.connect(self._on_result)
        state.sigModelChanged.connect(self._on_model)

    def show_error(self, message: str, kind: str = "") -> str:
        """Show `message` as one sentence in the banner; returns the sentence shown."""
        message = sentence(message)
        self.kind = kind
        self.banner.setText(message)
        self.banner.show()
        return message

    def clear_error(self) -> None:
        self.kind = ""
        self.banner.hide()
        self.banner.clear()

    def _on_model(self, model) -> None:
        notice = model.notice if model is not None else None
        self.model.setText(sentence(f"{model.name}: {notice}") if notice else "")
        self.model.setVisible(bool(notice))

    def _on_result(self, result) -> None:
        lines = []
        if result is not None and result.truncated:
            T = len(result.tokens)
            model = self.state.model
            max_pos = model.config.max_positions if model is not None else T
            lines.append(f"Text is {tokens(result.n_tokens_full)}; {self.state.model_name} reads at "
                         f"most {max_pos:,} positions, so what is shown is "
                         f"{cut_shown(result.labels, result.offsets)}.")
        st = self.state
        notice = result.notice if result is not None else None
        if result is not None and not notice and result.text == st.text:
            notice = st.text_notice  # the state replaced them before the run: the same notice
        if notice:  # e.g. lone surrogates from a clipboard, replaced
            lines.append(sentence(notice))
        self.text.setText("\n".join(lines))
        self.text.setVisible(bool(lines))
