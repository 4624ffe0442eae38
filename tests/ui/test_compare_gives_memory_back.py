"""Leaving Compare hands the memory B held back to the system (glibc keeps the freed arenas of
the pool's threads resident otherwise, B's memory staying with the process): the C allocator's
free pages are released once B itself is gone, its jobs let go as Compare closed included."""

from __future__ import annotations

import weakref

import pytest

from attnviz.ui.machinery import tuning
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, WAIT, open_window

TEXT = "When Mary and John went to the store"


@pytest.mark.parametrize("when", ["idle", "typing"])
def test_leaving_compare_releases_the_free_pages_once_b_is_gone(qtbot, tmp_path, monkeypatch, when):
    """`typing`: Compare closed right after a keystroke, its runs and comparison still on their
    way (a job let go holds B until it ends)."""
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.induction is not None, timeout=WAIT)
    w.worker.wait_idle()
    b = weakref.ref(jobs.b)
    released = []  # per release of free pages: whether B was gone by then
    real = tuning.release_free_memory

    def release():
        released.append(b() is None)
        real()
    monkeypatch.setattr(tuning, "release_free_memory", release)
    if when == "typing":
        w.set_text(TEXT + " and")
        qtbot.waitUntil(lambda: w.worker.running("compute") is not None or w.state.result.text != TEXT,
                        timeout=WAIT)
    jobs.close()
    qtbot.waitUntil(lambda: True in released, timeout=WAIT)
    assert b() is None
    w.worker.wait_idle()
