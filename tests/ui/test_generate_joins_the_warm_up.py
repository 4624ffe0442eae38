"""A Generate started before the window has warmed its one-row steps (before its first analysis,
or with no panel that makes one) does not wait for them: its steps take the layer loop until
they are warm, and the generation starts their warm-up at its own priority
(ui/machinery/loading.py warm_the_rest), so the same generation's later steps run every layer
in one compiled call (engine/computing/onerow_stack.py, on one thread or two), as a generation
after the warm-up does (tests/ui/test_generate_takes_the_pair.py), with a warm generation's
tokens."""

import importlib.util
import os
import threading
import weakref

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnviz.ui.machinery import loading as L
from attnviz.ui.machinery.long_jobs import TOP_K
from warm_state import as_fresh
from windows import WAIT, open_window

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="the kernels need numba")

PROMPT = "The keys to the cabinet"
STEPS = 80


def _thread() -> tuple[str, int]:  # this thread's name and scheduling priority (Linux: its nice)
    try:
        nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        nice = 0
    return threading.current_thread().name, nice


def _may_raise_a_thread() -> bool:
    """Whether this process may raise a thread's priority again once lowered (root, CAP_SYS_NICE or
    RLIMIT_NICE; an unprivileged user usually may not, and the window's raise is then refused)."""
    said = []

    def look():
        me = threading.get_native_id()
        own = os.getpriority(os.PRIO_PROCESS, me)
        try:
            os.setpriority(os.PRIO_PROCESS, me, min(19, own + 1))
            os.setpriority(os.PRIO_PROCESS, me, own)
            said.append(os.getpriority(os.PRIO_PROCESS, me) == own)
        except OSError:
            said.append(False)
    t = threading.Thread(target=look)
    t.start()
    t.join()
    return said[0]


@pytest.fixture
def cold(monkeypatch):
    """The kernels' warm-up state as a fresh process has it (the code compiled in this process
    stays: warming again only calls it), and no model's stack built yet."""
    from attnviz.engine.computing import onerow_stack
    from attnviz.engine.computing import qmatvec as qm

    as_fresh(monkeypatch)
    monkeypatch.setattr(onerow_stack, "_STACKS", weakref.WeakKeyDictionary())
    return qm


def test_a_generation_begun_before_the_warm_up_takes_the_one_call_stack_once_it_is_warm(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    from attnviz.engine.computing import onerow_stack
    from attnviz.engine.computing.generate import generate

    stacked, warmed = [], []  # the calls of every layer at once and the one-row warm-ups: (thread, nice)
    real_layers, real_pair, real_warm = onerow_stack._layers, onerow_stack._pair, cold._warm_one_row

    def layers(*a):
        stacked.append(_thread())
        return real_layers(*a)

    def pair(*a):
        stacked.append(_thread())
        return real_pair(*a)

    def warm(half):
        warmed.append(_thread())
        return real_warm(half)
    monkeypatch.setattr(onerow_stack, "_layers", layers)
    monkeypatch.setattr(onerow_stack, "_pair", pair)
    monkeypatch.setattr(cold, "_warm_one_row", warm)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT, panels=("generate",))
    st, gen, panel = w.state, w.state.generation, w.generate_panel
    assert st.model.weights.packed_types and cold.ONE_ROW is None  # (no one-row step warm yet)
    panel.n_spin.setValue(STEPS)
    panel.go_on_check.setChecked(True)  # (every step made, end-of-text or not)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == STEPS, timeout=8 * WAIT)
    w.worker.wait_idle()
    assert cold.ONE_ROW is not None  # warmed meanwhile
    # the generation's later steps (the window's other jobs, on the pool, may take it too)
    steps = [c for c in stacked if c[0].startswith("attnviz-generate")]
    assert steps, stacked
    # by the window's warm-up job, which the Generate started, no nicer than the steps' thread (on
    # 2 cores a thread below it would get a core only after the generation)
    assert len(warmed) == 1 and warmed[0][0].startswith(f"attnviz-{L.WARM_KIND}"), warmed
    assert warmed[0][1] <= steps[0][1], (warmed, steps)

    del stacked[:]
    ref = generate(st.model, st.model.prepare(PROMPT), max_new=STEPS, ignore_eos=True, rows=True, k=TOP_K)
    assert len(stacked) >= STEPS - 1  # (a warm generation: every step after the prompt's in one call)
    # the same tokens; the steps before the warm-up, on the layer loop's NumPy steps, within the
    # kernels' bound of the one-row steps (engine/computing/qmatvec.py takes_layer), not their bits
    assert [s.id for s in gen.steps] == ref.new_ids
    for a, b in zip(gen.steps, ref.steps):
        assert np.allclose(a.top_logprobs, b.top_logprobs, atol=1e-3, rtol=0)
        assert np.allclose(a.rows, b.rows, atol=1e-3, rtol=0)


def test_a_generation_asking_for_a_warm_up_under_way_raises_it_to_its_own_priority(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    from attnviz.engine.computing import generate as G

    held, gate, warmed, steps = threading.Event(), threading.Event(), [], []
    real_warm, real_generate = cold._warm_one_row, G.generate

    def warm(half):  # the warm-up after the first analysis, held as it loads the one-row steps
        if warmed:  # (the generation's thread, which takes the steps meanwhile: not held)
            return real_warm(half)
        warmed.append(threading.get_native_id())
        held.set()
        gate.wait(3 * WAIT / 1000)
        warmed.append(_thread())  # (the priority it loads them at)
        return real_warm(half)

    def generate(*a, **k):
        steps.append(_thread())
        return real_generate(*a, **k)
    monkeypatch.setattr(cold, "_warm_one_row", warm)
    monkeypatch.setattr(G, "generate", generate)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT,
                        panels=("predict", "generate"))
        gen, panel = w.state.generation, w.generate_panel
        qtbot.waitUntil(held.is_set, timeout=WAIT)  # the first analysis is in: its warm-up has begun
        nice = lambda: os.getpriority(os.PRIO_PROCESS, warmed[0])  # noqa: E731
        main = _thread()[1]
        if nice() <= main or not _may_raise_a_thread():
            pytest.skip("no per-thread priority here, or not one this process may raise again")
        panel.n_spin.setValue(4)
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(gen.steps) >= 1, timeout=WAIT)  # (its first step, on the layer loop)
        assert steps and nice() <= steps[0][1], (nice(), steps)
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    w.worker.wait_idle()
    assert warmed[1][0].startswith(f"attnviz-{L.WARM_KIND}") and warmed[1][1] <= steps[0][1], (warmed, steps)


def test_a_generation_raises_the_warm_up_a_keystroke_began_to_its_own_priority(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    """No first analysis (no What heads do): a keystroke's one-row run began the warm-up on a
    thread of the kernels' own, far below the main thread (engine/computing/qmatvec.py
    warm_in_background); the Generate's own warm-up waits for it, so it is raised too."""
    from PySide6.QtGui import QTextCursor

    held, gate, warmed, steps = threading.Event(), threading.Event(), [], []
    real_warm = cold._warm_one_row

    def warm(half):
        warmed.append((threading.current_thread().name, threading.get_native_id()))
        held.set()
        gate.wait(3 * WAIT / 1000)
        return real_warm(half)
    monkeypatch.setattr(cold, "_warm_one_row", warm)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT, panels=("generate",))
        gen, panel = w.state.generation, w.generate_panel
        assert not held.is_set()
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        qtbot.keyClick(w.text_box, "s")
        qtbot.waitUntil(held.is_set, timeout=WAIT)
        name, tid = warmed[0]
        nice = lambda: os.getpriority(os.PRIO_PROCESS, tid)  # noqa: E731
        assert name.startswith("qmatvec-warm")
        if nice() <= _thread()[1] or not _may_raise_a_thread():
            pytest.skip("no per-thread priority here, or not one this process may raise again")
        panel.n_spin.setValue(4)
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(gen.steps) >= 1, timeout=WAIT)
        steps.append(nice())
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    w.worker.wait_idle()
    assert steps[0] <= _thread()[1], (steps, _thread())  # (the generation's thread: the main thread's)


def test_a_generation_takes_the_steps_of_a_warm_up_it_may_not_raise_at_its_own_priority(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    """Where the system refuses to raise the first analysis's warm-up thread again (Linux, an
    unprivileged user: RLIMIT_NICE; refused here), that thread, held in its first one-row step as
    a thread below the others may be, does not hold the generation's warm-up back: the steps it
    has not begun are taken meanwhile on a thread at the generation's priority (the main
    thread's), and none is done twice."""
    from attnviz.engine.computing import onerow
    from attnviz.ui.machinery import tuning

    monkeypatch.setattr(tuning, "to_this_threads_priority", lambda native_id: None)  # (refused)
    calls, held, gate, real = [], threading.Event(), threading.Event(), onerow.warm

    def warm(scales=()):  # each step of the one-row warm-up: (thread, nice, its scale types)
        calls.append((*_thread(), tuple(np.dtype(s).name for s in scales)))
        if not held.is_set():  # (the first: the warm-up after the first analysis, held)
            held.set()
            gate.wait(3 * WAIT / 1000)
        real(scales)
    monkeypatch.setattr(onerow, "warm", warm)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT,
                        panels=("predict", "generate"))
        gen, panel = w.state.generation, w.generate_panel
        qtbot.waitUntil(held.is_set, timeout=WAIT)
        panel.n_spin.setValue(4)
        qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(calls) >= 2, timeout=WAIT)  # the next step, taken while it is held
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    w.worker.wait_idle()
    main = _thread()[1]
    assert all(name.startswith(f"attnviz-{L.WARM_KIND}") for name, _, _ in calls), calls
    assert all(nice <= main for _, nice, _ in calls[1:]), (calls, main)
    assert len({scales for _, _, scales in calls}) == len(calls), calls  # each step once
