"""Start the desktop window: `attnviz`, `python -m attnviz`, `python main.py`."""

from __future__ import annotations

import logging
import sys

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)


class ExceptionGuard(QObject):
    """sys.excepthook while the window runs. PySide hands an exception that escapes a Qt slot to
    sys.excepthook and carries on; the guard turns it into one log record (with the traceback) and
    sigError, which the window shows in its error banner, instead of a traceback on a terminal the
    user may not have. A hook that was installed before it (a debugger, pytest-qt) still sees the
    exception; Python's default one, which would print it again, does not."""

    sigError = Signal(str)

    def __init__(self):
        super().__init__()
        self.previous = sys.__excepthook__
        self._seen: set[str] = set()
        self._inside = False  # a previous hook that calls back into this one must not loop

    def __call__(self, etype, value, tb) -> None:
        if self._inside:
            sys.__excepthook__(etype, value, tb)
            return
        if issubclass(etype, (KeyboardInterrupt, SystemExit)):
            self.previous(etype, value, tb)
            return
        self._inside = True
        try:
            self._report(etype, value, tb)
        finally:
            self._inside = False

    def _report(self, etype, value, tb) -> None:
        text = str(value)
        summary = f"{etype.__name__}: {text if len(text) <= 300 else text[:300] + '…'}"
        if summary not in self._seen:  # a slot that fails on every repaint logs its traceback once
            self._seen.add(summary)
            log.error("unexpected error in the window: %s", summary, exc_info=(etype, value, tb))
        else:
            log.debug("unexpected error in the window again: %s", summary)
        try:
            self.sigError.emit(f"Something went wrong inside attnviz ({summary}); the window carries "
                               "on, and the details are in the log")
        except RuntimeError:  # Qt already shut down
            pass
        if self.previous is not sys.__excepthook__:
            self.previous(etype, value, tb)


_GUARD: ExceptionGuard | None = None


def install_exception_guard() -> ExceptionGuard:
    """Make the guard sys.excepthook (again, if something replaced it) and return it."""
    global _GUARD
    if _GUARD is None:
        _GUARD = ExceptionGuard()
    if sys.excepthook is not _GUARD:
        _GUARD.previous = sys.excepthook
        sys.excepthook = _GUARD
    return _GUARD


def make_app() -> QApplication:
    """The QApplication, with the names QSettings files its settings under, and the guard that
    turns an exception escaping a slot into the window's error banner."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setOrganizationName("attnviz")
    app.setApplicationName("attnviz")
    install_exception_guard()
    return app


def assemble(debounce_ms: int = 2):
    """The app's one state and one job runner, wired together here and only here: the runner
    follows what the state asks of it and writes its results back into it, and its jobs get one
    BLAS thread (more cost more than they give on these small matrices, and take the UI's core).
    Returns (AppState, Worker)."""
    from attnviz.ui.state import AppState
    from attnviz.ui.runner import limit_blas_threads
    from attnviz.ui.worker import Worker

    limit_blas_threads()
    state = AppState()
    worker = Worker(state, debounce_ms)
    worker.follow_state()
    return state, worker


def create_window(model: str | None = None, text: str | None = None,
                  settings: QSettings | None = None, **kw):
    """The main window, with its model already loading: the load starts on the worker thread
    before the widget modules (pyqtgraph: about half a second) are imported, so the two overlap."""
    from attnviz.ui.settings import app_settings, saved_model

    settings = settings if settings is not None else app_settings()
    state, worker = assemble()
    source = model or saved_model(settings)
    worker.load(source)

    from attnviz.ui.window import MainWindow

    return MainWindow(model=source, text=text, settings=settings, state=state, worker=worker, **kw)


def run_app(model: str | None = None, text: str | None = None) -> int:
    """Show the window on `model` (default: the last one used, else SmolLM2) and run the event loop."""
    app = make_app()
    window = create_window(model, text)
    window.show()
    return app.exec()
