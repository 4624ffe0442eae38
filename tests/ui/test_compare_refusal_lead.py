"""Compare's note on a model B that does not open under a chosen memory budget: the budget's room
("There is only … left beside A") leads only a refusal the budget caused, never a file that does
not open."""

from __future__ import annotations

import pytest

from attnviz.engine.reading import memory_budget as MB
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT

TEXT = "the cat sat on the mat and the cat sat"


@pytest.fixture
def window(auto_budget_compare_window):
    return auto_budget_compare_window(TEXT)


def test_a_b_that_does_not_open_is_not_led_by_the_budget(window, qtbot, tmp_path):
    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    chosen = sum(sizes) + 2 * max(sizes)  # (room for B's layers: the budget is not why)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf")
    open_compare(w, BSource("model", str(broken)))
    qtbot.waitUntil(lambda: jobs.loading is None and bool(jobs.note), timeout=WAIT)
    note = w.compare_panel.note.text()
    assert note.startswith(f"Could not compare with {broken}. "), note
    assert "There is only" not in note and "memory budget" not in note, note
    assert jobs.b is None
