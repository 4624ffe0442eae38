"""A chosen memory budget and a B that Compare never keeps: A's budget is lowered beside B only
once the window has taken B, so a B let go while it loads (Compare closed, another B picked) or
refused (shape, vocabulary, its unembedding) leaves A's budget as it was, and A with the B
already open still hold the chosen budget together."""

from __future__ import annotations

import threading

import pytest

from attnviz.engine.errors import InputError
from attnviz.engine.reading import memory_budget as MB
from attnviz.ui.machinery import compare_b as CB
from attnviz.ui.machinery import compare_jobs as CJ
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT

TEXT = "the cat sat on the mat and the cat sat"


@pytest.fixture
def window(auto_budget_compare_window):
    return auto_budget_compare_window(TEXT)


def budget(model) -> int:
    return model.weights.layers.budget


def chosen_budget(w):
    """(A, a chosen budget that holds A's layers and one more of B's)"""
    a = w.state.model
    sizes = a.weights.layers.sizes
    chosen = sum(sizes) + max(sizes)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    return a, chosen


def held_back(monkeypatch, refuse_after=None):
    """load_b made to wait for `go`; `done` set once the held load ended; the loads asked for
    listed; the load numbered `refuse_after` refused at once."""
    go, done, loads = threading.Event(), threading.Event(), []
    real = CJ.load_b

    def load(*args):
        loads.append(args[1])
        if len(loads) == refuse_after:
            raise InputError("model B refused")
        go.wait(WAIT / 1000)
        try:
            return real(*args)
        finally:
            done.set()
    monkeypatch.setattr(CJ, "load_b", load)
    return go, done, loads


def test_compare_closed_while_b_loads_leaves_a_budget(window, qtbot, monkeypatch):
    w, jobs = window, window.worker.compare_jobs
    a, chosen = chosen_budget(w)
    go, done, loads = held_back(monkeypatch)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: len(loads) == 1, timeout=WAIT)
    jobs.close()
    go.set()
    assert done.wait(WAIT / 1000)
    w.worker.wait_idle()
    assert not jobs.active and budget(a) == chosen


def test_b_replaced_while_loading_then_refused_leaves_a_budget(window, qtbot, monkeypatch):
    w, jobs = window, window.worker.compare_jobs
    a, chosen = chosen_budget(w)
    go, done, loads = held_back(monkeypatch, refuse_after=2)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: len(loads) == 1, timeout=WAIT)
    open_compare(w, BSource("checkpoint", 8))
    qtbot.waitUntil(lambda: jobs.loading is None, timeout=WAIT)
    assert w.compare_panel.note.text() == "Could not compare with attnviz-toy-stdlib at checkpoint 8. Model B refused."
    go.set()
    assert done.wait(WAIT / 1000)
    w.worker.wait_idle()
    assert not jobs.active and budget(a) == chosen


@pytest.mark.parametrize("refusal", ["shape", "unembedding"])
def test_a_second_b_refused_keeps_a_and_the_open_b_within_the_budget(window, qtbot, monkeypatch, refusal):
    w, jobs = window, window.worker.compare_jobs
    a, chosen = chosen_budget(w)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None, timeout=WAIT)
    w.worker.wait_idle()
    b1 = jobs.b
    assert budget(a) + budget(b1) == chosen

    def refuse(*_):
        raise InputError(f"B's {refusal} refused")
    if refusal == "shape":
        from attnviz.engine.analysing import pair as P

        monkeypatch.setattr(P, "check_same_shape", refuse)
    else:
        monkeypatch.setattr(CB, "ready_heads", refuse)
    open_compare(w, BSource("checkpoint", 8))
    qtbot.waitUntil(lambda: jobs.loading is None, timeout=WAIT)
    w.worker.wait_idle()
    assert f"B's {refusal} refused" in w.compare_panel.note.text()
    assert jobs.b is b1 and budget(a) + budget(b1) == chosen
