"""gguf_vocab.collector_paused (a vocabulary's build): no automatic garbage collection inside,
whoever else pauses meanwhile, nested or on another thread; afterwards the collector is as its
owner left it, switched off or on meanwhile (the window's runner switches it off for good, from
another thread than a load's) or given other thresholds."""

import gc
import threading

import pytest

from attnviz.engine.reading import gguf_vocab as V


def collections_while_allocating() -> int:
    """Collections that this thread's allocations set off: 50,000 small lists made and kept (the
    collector's first threshold passed many times over)."""
    me, seen = threading.current_thread(), []

    def count(phase, info):
        if phase == "start" and threading.current_thread() is me:
            seen.append(info["generation"])
    gc.callbacks.append(count)
    try:
        kept = [[i] for i in range(50_000)]
    finally:
        gc.callbacks.remove(count)
    del kept
    return len(seen)


@pytest.fixture
def collector():
    """The collector on with its thresholds, as a process starts (the window's runner may have
    switched it off for the process: put back after)."""
    was_on, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    yield thresholds
    gc.set_threshold(*thresholds)
    if not was_on:
        gc.disable()


def test_nothing_is_collected_inside_and_collection_resumes_after_even_an_error(collector):
    assert collections_while_allocating() > 10
    with V.collector_paused():
        assert collections_while_allocating() == 0
        with V.collector_paused():  # nested
            assert collections_while_allocating() == 0
        assert collections_while_allocating() == 0
    assert collections_while_allocating() > 10
    with pytest.raises(RuntimeError), V.collector_paused():
        raise RuntimeError("inside")
    assert collections_while_allocating() > 10 and gc.isenabled() and gc.get_threshold() == collector
    gc.collect()  # (an explicit collection still runs inside: below)
    with V.collector_paused():
        assert gc.collect() >= 0


def test_a_collector_switched_off_meanwhile_stays_off_and_one_switched_on_stays_on(collector):
    started = threading.Event()
    with V.collector_paused():  # a load's build
        threading.Thread(target=lambda: (gc.disable(), started.set())).start()  # the runner, elsewhere
        assert started.wait(10)
    assert not gc.isenabled() and collections_while_allocating() == 0
    with V.collector_paused():
        gc.enable()
    assert gc.isenabled() and collections_while_allocating() > 10


def test_pauses_on_two_threads_end_with_the_last_of_them(collector):
    inside, done = threading.Event(), threading.Event()

    def other_load():
        with V.collector_paused():
            inside.set()
            done.wait(10)
    t = threading.Thread(target=other_load)
    with V.collector_paused():
        t.start()
        assert inside.wait(10)
    assert collections_while_allocating() == 0  # the other thread's pause still runs
    done.set()
    t.join(10)
    assert collections_while_allocating() > 10 and gc.get_threshold() == collector
    first, second = V.collector_paused(), V.collector_paused()  # overlapping, not nested
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert collections_while_allocating() == 0
    second.__exit__(None, None, None)
    assert collections_while_allocating() > 10


def test_thresholds_set_meanwhile_are_kept(collector):
    with V.collector_paused():
        gc.set_threshold(500, 7, 9)
    assert gc.get_threshold() == (500, 7, 9)
