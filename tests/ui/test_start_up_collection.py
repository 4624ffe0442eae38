"""The garbage collector's timer during a window's start-up (ui/machinery/tuning.py
postpone_collections): it collects nothing until start-up's own collection (freeze_start_up_objects)
or until the postponement runs out, and from then on collects on its own again."""

import gc
import weakref

import pytest

from attnviz.ui.machinery import tuning
from attnviz.ui.machinery.state import AppState
from attnviz.ui.machinery.worker import Worker

WAIT = 20000


class Node:
    pass


def a_cycle():
    """A weak reference to a reference cycle only the collector can free, and allocations past
    generation 0's limit, so the timer's next tick would collect it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    kept = [Node() for _ in range(5 * gc.get_threshold()[0])]
    return gone, kept


@pytest.fixture
def timer_after():
    """The timer collecting as usual after the test, whatever postponement it left."""
    yield
    tuning.postpone_collections(0.0)


def test_start_up_collects_nothing_until_its_own_collection_then_the_timer_does(qtbot, timer_after):
    Worker(AppState())  # the runner's timer collects from here
    tuning.postpone_collections(60.0)
    gone, kept = a_cycle()
    qtbot.wait(3 * tuning.GC_INTERVAL_MS)  # ticks of the timer: none collects
    assert gone() is not None
    tuning.freeze_start_up_objects()  # start-up's own collection frees it
    tuning.thaw_objects()
    assert gone() is None
    gone_later, kept_later = a_cycle()  # (`kept` still held: freeing it would lower gc's count)
    assert not gc.isenabled()  # (the timer's, not the automatic collector's, collections free it)

    def collected():  # allocations go on meanwhile, as in a window, so each tick collects the
        # generations past their limits: a collection made while the cycle was being built (another
        # thread's gc.collect) leaves it in generation 1, which generation 0's collections never free
        kept_later.extend(Node() for _ in range(gc.get_threshold()[0] + 1))
        return gone_later() is None
    qtbot.waitUntil(collected, timeout=WAIT)  # the timer collects again
    assert kept and kept_later


def test_a_start_up_that_never_ends_postpones_collections_for_a_while_only(qtbot, timer_after):
    Worker(AppState())
    tuning.postpone_collections(3.0)  # (a model that never loads: no start-up collection comes)
    gone, kept = a_cycle()
    qtbot.wait(2 * tuning.GC_INTERVAL_MS)  # ticks within the postponement: none collects
    assert gone() is not None
    qtbot.waitUntil(lambda: gone() is None, timeout=WAIT)
    assert kept
