"""The garbage collector's timer during a vocabulary's build (ui/machinery/tuning.py _collect,
engine/reading/gguf_vocab.py collector_paused): automatic collection is off in the window, and a
pause sets the collector's first threshold to 0, which the timer reads as "no collection", as
CPython does: its ticks collect nothing while the pause lasts, and collect again after it."""

import gc
import threading

import pytest

from attnviz.engine.reading import gguf_vocab
from attnviz.ui.machinery import tuning
from attnviz.ui.machinery.state import AppState
from attnviz.ui.machinery.worker import Worker

WAIT = 20000


@pytest.fixture
def collections():
    """The generations collected on this (the main) thread from here, as gc.callbacks sees them."""
    seen, main = [], threading.get_ident()

    def record(phase, info):
        if phase == "start" and threading.get_ident() == main:
            seen.append(info["generation"])
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)


def test_the_timer_collects_nothing_while_collection_is_paused_and_again_after(qtbot, collections):
    Worker(AppState())  # the runner's timer collects from here
    timer = tuning.collect_garbage_on_the_main_thread()
    tuning.postpone_collections(0.0)  # (no start-up postponement in the way)
    kept = []
    with gguf_vocab.collector_paused():
        assert gc.get_threshold()[0] == 0
        for _ in range(3):  # ticks with allocations past every usual threshold
            kept.extend([i] for i in range(5 * 700))
            with qtbot.waitSignal(timer.timeout, timeout=WAIT):
                pass
        assert collections == []
    assert gc.get_threshold()[0] > 0

    def collected():  # allocations go on, as in a window, so a tick finds generation 0 past its limit
        kept.extend([i] for i in range(gc.get_threshold()[0] + 1))
        return collections != []
    qtbot.waitUntil(collected, timeout=WAIT)
    assert 0 in collections and kept
