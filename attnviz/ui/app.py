"""Start the desktop window: `attnviz`, `python -m attnviz`, `python main.py`."""

from __future__ import annotations

import sys

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication


def make_app() -> QApplication:
    """The QApplication, with the names QSettings files its settings under."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("attnviz")
    app.setApplicationName("attnviz")
    return app


def create_window(model: str | None = None, text: str | None = None,
                  settings: QSettings | None = None, **kw):
    """The main window, with its model already loading: the load starts on the worker thread
    before the widget modules (pyqtgraph: about half a second) are imported, so the two overlap."""
    from attnviz.ui.state import AppState
    from attnviz.ui.worker import Worker

    settings = settings if settings is not None else QSettings()
    state = AppState()
    worker = Worker(state)
    from attnviz.engine.registry import WINDOW_MODEL

    source = model or str(settings.value("model", WINDOW_MODEL))
    worker.load(source)

    from attnviz.ui.window import MainWindow

    return MainWindow(model=source, text=text, settings=settings, state=state, worker=worker, **kw)


def run_app(model: str | None = None, text: str | None = None) -> int:
    """Show the window on `model` (default: the last one used, else SmolLM2) and run the event loop."""
    app = make_app()
    window = create_window(model, text)
    window.show()
    return app.exec()
