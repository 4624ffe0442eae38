"""Windows and models opened and closed in one process are freed: a window closed and deleted (as
Qt's event loop deletes it) lets go of model A and of Compare's model B, and a window that loads
another model lets go of the one it had, B included."""

from __future__ import annotations

import gc
import weakref

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QSettings

from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.ui.app import create_window
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


def comparing_window(qtbot, tmp_path, name: str):
    """A window on the toy model with Compare open on it quantized to Q8_0, its first comparison in."""
    w = create_window(model=TOY_MODEL, text=TEXT,
                      settings=QSettings(str(tmp_path / f"{name}.ini"), QSettings.Format.IniFormat))
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "Q8_0"))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None
                    and jobs.induction is not None, timeout=WAIT)
    return w


def freed(qtbot, *refs) -> None:
    def gone():
        gc.collect()  # (the window's runner collects on a main-thread timer; this test, now)
        return all(r() is None for r in refs)
    qtbot.waitUntil(gone, timeout=WAIT)


@pytest.mark.parametrize("rounds", [2])
def test_closed_windows_free_their_models(qtbot, tmp_path, rounds):
    for i in range(rounds):
        w = comparing_window(qtbot, tmp_path, f"w{i}")
        refs = (weakref.ref(w), weakref.ref(w.state.model), weakref.ref(w.worker.compare_jobs.b))
        w.close()
        w.worker.wait_idle()
        w.deleteLater()
        del w
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # as the event loop does
        freed(qtbot, *refs)


def test_a_window_loading_another_model_frees_the_one_it_had_and_b(qtbot, tmp_path):
    w = comparing_window(qtbot, tmp_path, "w")
    qtbot.addWidget(w)
    a, b = weakref.ref(w.state.model), weakref.ref(w.worker.compare_jobs.b)
    for _ in range(2):
        w.load_model(TOY_MODEL)
        qtbot.waitUntil(lambda: w.state.model is not None and a() is not w.state.model
                        and w.state.result is not None and w.state.result.n_tokens > 0, timeout=WAIT)
        assert w.worker.compare_jobs.b is None  # a new model A leaves Compare
        freed(qtbot, a, b)
        a = weakref.ref(w.state.model)
    w.worker.wait_idle()


def test_a_closed_compare_panel_keeps_no_comparison(qtbot, tmp_path):
    """The panel's caches (the comparison its tiles last painted, the result its strip last fitted)
    hold it weakly: a closed panel paints no more, and B, then A once replaced, are freed."""
    w = comparing_window(qtbot, tmp_path, "w")
    qtbot.addWidget(w)
    panel = w.compare_panel
    qtbot.waitUntil(lambda: len(panel.tile_rects) > 0, timeout=WAIT)  # the tiles painted
    assert panel.strip.heightForWidth(panel.strip.width()) > 0  # as the layout asks
    a, b = weakref.ref(w.state.model), weakref.ref(w.worker.compare_jobs.b)
    c = weakref.ref(w.worker.compare_jobs.comparison)
    w.compare_dock.close()  # leaves Compare
    qtbot.waitUntil(lambda: w.worker.compare_jobs.b is None, timeout=WAIT)
    freed(qtbot, b, c)
    w.load_model(TOY_MODEL)
    qtbot.waitUntil(lambda: w.state.model is not None and a() is not w.state.model
                    and w.state.result is not None and w.state.result.n_tokens > 0, timeout=WAIT)
    freed(qtbot, a)
    w.worker.wait_idle()
