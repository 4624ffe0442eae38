"""The real window in the UI tests: opened offscreen on MiniLM (unless told) with per-test settings
in an INI file, never the user's."""

from PySide6.QtCore import QSettings

WAIT = 30000


def open_window(qtbot, settings_path, **kw):
    """The window on MiniLM (a first start opens SmolLM2: test_ui_gguf.py), its first heatmaps and
    side panels built."""
    from attnviz.ui.app import create_window

    kw.setdefault("model", "all-MiniLM-L6-v2")
    w = create_window(settings=QSettings(str(settings_path), QSettings.Format.IniFormat), **kw)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    return w


def wait_for_text(qtbot, w, text):
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=WAIT)
