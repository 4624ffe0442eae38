"""The kernels' warm-up is made of steps any thread may take (engine/computing/qmatvec.py warm):
a thread that needs the kernels while a background warm-up is under way on a thread behind it
(warm_in_background: niced, which the system may refuse to raise again) takes the steps that
thread has not begun, at its own priority, and waits only for the one under way there, which is
never done twice; the background thread begins no step while it does. Nothing here is timed: the
background thread is held by a gate, and a caller that would wait for it would wait past the
bounds below (a step that must not begin is given SETTLE to begin)."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine.computing import qmatvec as qm
from gguf_files import Q
from warm_state import as_fresh

pytest.importorskip("numba")

TYPES = (Q.Q8_0, Q.Q4_K)  # float16 scales (the one-row block for uint16) and float32 ones
BOUND = 120  # seconds: far more than the calls of code compiled in this process take
SETTLE = 5  # seconds given a background thread let go to begin a step it should not: far more than it takes


@pytest.fixture
def held_behind(monkeypatch):
    """The warm-up's state as a fresh process has it, and the one-row warm-up's calls listed
    ((thread name, "begin" or "end", scale types)), a background warm-up thread's held at its
    first one-row step (the block for float32 scales) until `gate` opens, another thread's (the
    caller's) held in its steps until `caller_gate` opens (open at first); -> a namespace of
    calls, gate, caller_gate, at_work (set as the caller begins a step) and background_ended (set
    as the background thread ends a step). The gates open at the test's end and the background
    thread is joined."""
    from attnviz.engine.computing import onerow

    as_fresh(monkeypatch)
    held, real = threading.Event(), onerow.warm
    it = SimpleNamespace(calls=[], gate=threading.Event(), caller_gate=threading.Event(), at_work=threading.Event(),
                         background_ended=threading.Event())
    it.caller_gate.set()

    def warm(scales=()):
        me, names = threading.current_thread().name, tuple(np.dtype(s).name for s in scales)
        it.calls.append((me, "begin", names))
        background = me.startswith(qm.WARM_THREAD)
        if background:
            held.set()
            assert it.gate.wait(timeout=600)
        else:
            it.at_work.set()
            assert it.caller_gate.wait(timeout=600)
        real(scales)
        it.calls.append((me, "end", names))
        if background:
            it.background_ended.set()
    monkeypatch.setattr(onerow, "warm", warm)
    t = qm.warm_in_background(TYPES)
    try:
        assert held.wait(timeout=600)  # its kernels warm, its float32 block under way
        yield it
    finally:
        it.gate.set()
        it.caller_gate.set()
        t.join(timeout=600)
    assert not t.is_alive()


def _call(qtypes, done: list) -> threading.Thread:  # qm.warm(qtypes) on a thread of its own ("caller")
    def run():
        qm.warm(qtypes)
        done.append(("caller", "returned"))
    t = threading.Thread(target=run, name="caller", daemon=True)
    t.start()
    return t


def test_a_caller_takes_the_steps_a_held_background_warm_up_has_not_begun(held_behind):
    """The caller needs only the float16 scales' block and the steps: it takes both and returns
    while the background thread is still held in its step."""
    calls = held_behind.calls
    caller = _call([Q.Q8_0], calls)
    caller.join(timeout=BOUND)
    assert not caller.is_alive()  # not waiting for the held thread
    assert qm.warmed([Q.Q8_0]) and qm.ONE_ROW is not None
    assert calls == [(qm.WARM_THREAD, "begin", ("float32",)),
                     ("caller", "begin", ("uint16",)), ("caller", "end", ("uint16",)),
                     ("caller", "begin", ()), ("caller", "end", ()), ("caller", "returned")]


def test_a_caller_waits_for_the_step_under_way_and_the_background_thread_takes_no_more(held_behind):
    """The caller needs the block the background thread is compiling too: it takes the other
    steps first, then waits for that one (compiled once, there); the background thread, let go
    while the caller is held in its own step, ends its step and begins no other (without the rule
    it would take the one-row steps' step, which nobody has begun): the caller takes them."""
    it = held_behind
    it.caller_gate.clear()
    caller = _call(list(TYPES), it.calls)
    try:
        assert it.at_work.wait(timeout=BOUND)  # the caller in its uint16 block, the background thread held
        it.gate.set()
        assert it.background_ended.wait(timeout=BOUND)  # its float32 block ended
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline and sum(c[0] != "caller" for c in it.calls) == 2:
            time.sleep(0.05)
        assert [c for c in it.calls if c[0] != "caller"] == [
            (qm.WARM_THREAD, "begin", ("float32",)), (qm.WARM_THREAD, "end", ("float32",))]
    finally:
        it.caller_gate.set()
    caller.join(timeout=BOUND)
    assert not caller.is_alive() and qm.warmed(TYPES) and qm.ONE_ROW is not None
    assert [(c[0], c[2]) for c in it.calls if c[1] == "begin"] == [
        (qm.WARM_THREAD, ("float32",)), ("caller", ("uint16",)), ("caller", ())]


def test_a_caller_whose_warm_up_returns_finds_the_one_row_steps_set(monkeypatch):
    """warm() returns with extras only once the forward pass takes the one-row steps (ONE_ROW),
    even where the background thread that took their step is held right after recording it done
    (a thread niced to 19 may be preempted there)."""
    as_fresh(monkeypatch)
    held, gate = threading.Event(), threading.Event()

    class Watched(dict):  # qmatvec's record of what is warm, holding that thread past the step
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if key == "one-row steps" and threading.current_thread().name.startswith(qm.WARM_THREAD):
                held.set()
                assert gate.wait(timeout=600)
    monkeypatch.setattr(qm, "_warmed", Watched())
    t = qm.warm_in_background([Q.Q4_K])
    try:
        assert held.wait(timeout=600)
        done = []
        caller = _call([Q.Q4_K], done)
        caller.join(timeout=BOUND)
        assert done == [("caller", "returned")] and qm.warmed([Q.Q4_K])
        assert qm.ONE_ROW is not None
    finally:
        gate.set()
        t.join(timeout=600)


def test_the_import_of_the_one_row_steps_is_a_step_of_its_own(monkeypatch):
    """Importing engine/computing/onerow.py compiles (or loads) its steps' signatures: a step of
    its own, the first of the one-row warm-up, so the steps after it (the blocks, the steps' calls)
    are timed without it and a thread that comes to it under way waits for that step alone."""
    as_fresh(monkeypatch)
    order = []

    class Watched(dict):  # qmatvec's record of what is warm, in the order the steps end
        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            order.append(key)
    monkeypatch.setattr(qm, "_warmed", Watched())
    qm.warm(TYPES)
    assert [k for k in order if "one-row" in str(k)] == [
        "one-row import", ("one-row block", False), ("one-row block", True), "one-row steps"]
