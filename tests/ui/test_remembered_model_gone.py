"""A remembered model that no longer opens (its file deleted or moved since the last session): the
window opens its default instead, keeps the remembered text, and the banner says what happened.
A model asked for by name or path is not replaced: the banner says it could not be loaded."""

from PySide6.QtCore import QSettings

from attnviz.engine.reading.registry import WINDOW_MODEL
from attnviz.ui.app import create_window
from windows import WAIT, widget


def remembered(tmp_path, model: str) -> QSettings:
    s = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    s.setValue("model", model)
    s.setValue("text", "A text from the last session")
    s.sync()
    return s


def test_a_remembered_model_since_deleted_opens_the_default_and_says_why(qtbot, tmp_path):
    gone = tmp_path / "gone.gguf"
    w = create_window(settings=remembered(tmp_path, str(gone)))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.model_name == WINDOW_MODEL and w.state.result is not None, timeout=WAIT)
    banner = widget(w, "error_banner")
    assert banner.isVisible()
    text = banner.text()
    assert text.startswith(f"Could not open the last model, {gone}. ")
    assert f"Opened {WINDOW_MODEL} instead" in text
    assert w.text_box.toPlainText() == "A text from the last session"
    assert w.windowTitle() == f"attnviz — {WINDOW_MODEL}"
    w.worker.wait_idle()


def test_a_model_asked_for_is_not_replaced(qtbot, tmp_path):
    gone = tmp_path / "gone.gguf"
    w = create_window(model=str(gone), settings=remembered(tmp_path, "all-MiniLM-L6-v2"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: widget(w, "error_banner").isVisible(), timeout=WAIT)
    assert widget(w, "error_banner").text().startswith(f"Could not load model {gone}. ")
    assert "No model is loaded." in widget(w, "error_banner").text()
    assert w.state.model is None and not w.state.loading
