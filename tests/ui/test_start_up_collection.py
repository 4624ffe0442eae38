"""The garbage collector during a window's start-up (ui/machinery/tuning.py): its timer collects
nothing until start-up's own collection (freeze_start_up_objects) or until the postponement runs
out (postpone_collections), and from then on collects on its own again; start-up's collection
comes once start-up is done, typing or not (StartUpCollection), and what it freezes of a load is
freed all the same when the load lets it go."""

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


TEXT = "The keys to the cabinet are on the"


def test_the_start_up_collection_keeps_nothing_a_load_made(qtbot, tmp_path, monkeypatch):
    """The start-up collection freezes what is alive when it comes, here the load's GGUF reader,
    still held by the tokenizer built for the first text (the whole vocabulary's build, which lets
    it go, held until the collection has come). What the load lets go afterwards goes all the
    same: once the vocabulary is whole no reader is left, frozen or not, though no collection has
    run since (a frozen reference cycle would stay until the window closed)."""
    import threading

    from gguf import GGUFReader

    import attnviz.engine
    from attnviz.engine.computing.load import load_model
    from attnviz.engine.reading.registry import smollm2_file
    from attnviz.ui.machinery import loading
    from windows import open_window

    def readers():  # this test's load's: by type (isinstance would look through a dead weak proxy
        # another test left, and raise), and not one alive before (a model another test keeps)
        return [o for o in gc.get_objects() if issubclass(type(o), GGUFReader)
                and not any(o is b for b in before)]
    before = []
    monkeypatch.setattr(attnviz.engine, "load_model", load_model)  # (a load of its own: its reader)
    gate, alive = threading.Event(), []
    real_complete, real_freeze = loading.complete_vocabulary, tuning.freeze_start_up_objects

    def complete(model):
        assert gate.wait(WAIT / 1000)
        real_complete(model)

    def freeze():
        gc.collect()
        alive.append(len(readers()))
        real_freeze()
        gate.set()
    monkeypatch.setattr(loading, "complete_vocabulary", complete)
    monkeypatch.setattr(tuning, "freeze_start_up_objects", freeze)
    gc.collect()  # (no other test's reader left but those still held)
    before = readers()
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2_file()), text=TEXT, panels=("predict",))
        qtbot.waitUntil(lambda: bool(alive), timeout=WAIT)
    finally:
        gate.set()
    qtbot.waitUntil(lambda: w.state.model.tokenizer.for_every_text, timeout=WAIT)
    w.worker.wait_idle()
    assert alive == [1]  # frozen while held
    gc.unfreeze()  # (the window's close would: here with no collection in between)
    assert readers() == []


def test_the_start_up_collection_comes_while_typing_goes_on(qtbot, tmp_path, smollm2, monkeypatch):
    """Typing that starts as the window shows its first result and never pauses: the start-up
    collection comes once start-up is done, between two keystrokes' runs, not at typing's first
    pause (where the keystroke that ends the pause would wait for it)."""
    from PySide6.QtGui import QTextCursor

    from windows import open_window

    frozen, real_freeze = [], tuning.freeze_start_up_objects
    monkeypatch.setattr(tuning, "freeze_start_up_objects", lambda: (frozen.append(1), real_freeze()))
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    for _ in range(30):  # a key every 200 ms for 6 s at most
        if frozen:
            break
        qtbot.keyClick(w.text_box, "a")
        qtbot.wait(200)
    assert frozen == [1]
    w.worker.wait_idle()
