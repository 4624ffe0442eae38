"""The real window in the UI tests: opened offscreen on MiniLM (unless told) with per-test settings
in an INI file, never the user's."""

from PySide6.QtCore import QSettings

WAIT = 30000
# the long-text window tests (test_long_window.py, test_long_panels.py): a short prompt, and a
# paragraph they repeat past a lowered dense limit
PROMPT = "The keys to the cabinet are on the"
PARAGRAPH = ("Mr and Mrs Dursley, of number four, Privet Drive, were proud to say that they were "
             "perfectly normal, thank you very much. They were the last people you'd expect to be "
             "involved in anything strange or mysterious, because they just didn't hold with such "
             "nonsense. ")


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


def widget(w, name: str):
    """The one widget of window `w` with object name `name` (the sentence box, the error banner,
    the layer spin box...), found in the window as a user finds it, not through an attribute."""
    from PySide6.QtWidgets import QWidget

    found = w.findChildren(QWidget, name)
    assert len(found) == 1, f"{len(found)} widgets named {name!r} in the window"
    return found[0]


def scores_settled(worker, msecs: int = WAIT) -> bool:
    """Score now what waits for typing to pause, and wait for the runner's jobs to end."""
    worker.flush_scores()
    return worker.wait_idle(msecs)


def wait_for_text(qtbot, w, text):
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=WAIT)


def drain_events():
    """Deliver every event already posted to the main thread: the results of jobs that have ended
    (they arrive queued), pending layouts and geometry changes. After this, a result that has not
    arrived never will from those jobs; no fixed wait can say as much."""
    from PySide6.QtCore import QCoreApplication

    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()
