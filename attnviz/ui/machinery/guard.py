"""The exception guard: an exception that escapes a Qt slot becomes one log record and the
window's error banner (app.make_app installs it for the app; the window for windows made without it)."""

from __future__ import annotations

import logging
import sys

from PySide6.QtCore import QObject, Signal

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
