"""Start the desktop window: `attnviz`, `python -m attnviz`, `python main.py`."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication


def make_app() -> QApplication:
    """The QApplication, with the names QSettings files its settings under."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("attnviz")
    app.setApplicationName("attnviz")
    return app


def run_app(model: str | None = None, text: str | None = None) -> int:
    """Show the window on `model` (default: the last one used, else MiniLM) and run the event loop.
    The model loads on the worker thread, so the window is up before the weights are."""
    app = make_app()
    from attnviz.ui.window import MainWindow

    window = MainWindow(model=model, text=text)
    window.show()
    return app.exec()
