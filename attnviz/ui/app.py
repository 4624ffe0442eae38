"""Start the desktop window: `attnviz`, `python -m attnviz`, `python main.py`."""

from __future__ import annotations

import atexit
import sys

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from attnviz.ui.machinery.guard import ExceptionGuard, install_exception_guard  # noqa: F401 (the app's guard)


def make_app() -> QApplication:
    """The QApplication, with the names QSettings files its settings under, and the guard that
    turns an exception escaping a slot into the window's error banner."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("attnviz")
    app.setApplicationName("attnviz")
    app.setDesktopFileName("attnviz")  # the menu entry `attnviz --install-desktop` writes
    install_exception_guard()
    if not getattr(make_app, "closing", False):
        make_app.closing = True
        atexit.register(close_windows)
    return app


def close_windows() -> None:
    """At the interpreter's exit (a script that ends with a window open): each window closes as a
    user's close would (its jobs shut down, its settings written) before Python tears Qt's objects
    down in no particular order (which could crash the process)."""
    app = QApplication.instance()
    if app is None:
        return
    for w in app.topLevelWidgets():
        if w.isVisible():
            w.close()
    app.processEvents()


def assemble(debounce_ms: int = 0):
    """The app's one state and one job runner, wired together here and only here: the runner
    follows what the state asks of it and writes its results back into it, and its jobs get one
    BLAS thread (more cost more than they give on these small matrices, and take the UI's core).
    Returns (AppState, Worker)."""
    from attnviz.ui.machinery.state import AppState
    from attnviz.engine.reading.qpack import ask_for_kernels
    from attnviz.ui.machinery.tuning import limit_blas_threads
    from attnviz.ui.machinery.worker import Worker

    limit_blas_threads()
    ask_for_kernels(rest_later=True)  # a long-lived process: its keystrokes multiply on the file's
    # blocks; the kernels' one-row steps warmed after the first analysis (loading.py warm_the_rest),
    # a keystroke before then taking the few-row kernels rather than wait for them
    state = AppState()
    worker = Worker(state, debounce_ms)
    worker.follow_state()
    return state, worker


def create_window(model: str | None = None, text: str | None = None,
                  settings: QSettings | None = None, debounce_ms: int = 0, **kw):
    """The main window on the app's one state and runner (assemble), with its model already
    loading: the load starts on the worker thread before the widget modules (pyqtgraph: about half
    a second) are imported, so the two overlap. `kw`: MainWindow's (panels, parent)."""
    from attnviz.engine.computing.text_input import clean_text
    from attnviz.ui.machinery.settings import app_settings, apply_memory_budget, saved_model, saved_text
    from attnviz.ui.machinery.tuning import postpone_collections

    settings = settings if settings is not None else app_settings()
    budget_note = apply_memory_budget(settings)  # before the first load
    state, worker = assemble(debounce_ms)
    postpone_collections()  # until start-up's own collection, once the first analysis is done
    source = model or saved_model(settings)
    # the text MainWindow will show (as the state cleans it): the load builds its tokenizer for it
    worker.load(source, text=clean_text(text if text is not None else saved_text(settings))[0])

    from attnviz.ui.window import MainWindow

    window = MainWindow(state, worker, settings=settings, model=model, text=text, **kw)
    window.budget_note = budget_note  # (said once the model is shown: views/load_outcome.py)
    return window


def run_app(model: str | None = None, text: str | None = None) -> int:
    """Show the window on `model` (default: the last one used, else SmolLM2) and run the event loop."""
    app = make_app()
    window = create_window(model, text)
    window.show()
    return app.exec()
