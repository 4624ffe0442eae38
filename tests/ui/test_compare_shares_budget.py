"""Compare's two models and the memory budget (pair_memory.load_second, CompareJobs): a chosen budget
holds A and B together, A's own lowered as B opens and given back whole as Compare closes, and
Models > Memory budget splits a new size the same way while B is open; B picked as the last
training step is the window's own model, compared as it is (no budget changed, nothing opened
beside it, no second release of its memory); a new training step of A is open beside B, the old
one no longer; and a step chosen while B loads keeps that B (loaded once) beside the new A."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtWidgets import QInputDialog

from attnviz.engine.computing.checkpoints import CheckpointSet
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


def settled(qtbot, w):
    """The comparison with the state's model as A in, its next-token numbers too."""
    jobs = w.worker.compare_jobs

    def done():
        c = jobs.comparison
        return (c is not None and c.doc is not None and c.doc["kld"] is not None
                and c.pair.a.model is w.state.model)
    qtbot.waitUntil(done, timeout=WAIT)
    w.worker.wait_idle()


def budget(model) -> int:
    return model.weights.layers.budget


def test_a_chosen_budget_holds_a_and_b_together(window, qtbot, monkeypatch):
    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    chosen = sum(sizes) + max(sizes)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    b = jobs.b
    assert b is not a and budget(a) + budget(b) == chosen
    assert a.budgeted_bytes()[0] + b.budgeted_bytes()[0] <= chosen
    # Models > Memory budget with B open: the dialog says the size holds both, and splits it
    asked, bigger = [], chosen + max(sizes)
    monkeypatch.setattr(QInputDialog, "getText", lambda *x, **k: asked.append(x[2]) or (f"{bigger}B", True))
    w.menus.memory_budget_action.trigger()
    assert "holds model A and model B together" in asked[0]
    assert budget(a) + budget(b) == bigger and budget(b) >= max(sizes)
    jobs.close()
    w.worker.wait_idle()
    assert budget(a) == bigger  # the whole budget A's again


def test_b_at_the_last_step_is_the_windows_model_as_it_is(window, qtbot, monkeypatch):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    base = st.checkpoints.base
    released = []
    real = CB.release_when_freed
    monkeypatch.setattr(CB, "release_when_freed", lambda b, relay: released.append(b) or real(b, relay))
    st.set_checkpoint(16)
    w.worker.wait_idle()
    a16, before = st.model, budget(base)
    open_compare(w, BSource("checkpoint", st.checkpoints.last))
    settled(qtbot, w)
    assert jobs.b is base and budget(base) == before
    assert base.beside() == [] and a16.beside() == [] and released == []
    jobs.close()
    w.worker.wait_idle()
    assert budget(base) == before


def test_a_compared_with_itself_adds_no_release(window, qtbot, monkeypatch):
    released = []
    monkeypatch.setattr(CB, "release_when_freed", lambda b, relay: released.append(b))
    a = window.state.model
    second, _ = CB.load_b(a, BSource("checkpoint", window.state.checkpoints.last), None, None)
    assert second.model is a and not second.own and released == []


def test_a_new_step_is_open_beside_b(window, qtbot):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    a32 = st.model
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    b = jobs.b
    assert a32 in b.beside() and b in a32.beside()
    st.set_checkpoint(16)
    settled(qtbot, w)
    a16 = st.model
    assert a16 in b.beside() and b in a16.beside()
    assert a32 not in b.beside() and b not in a32.beside()


def test_a_step_chosen_while_b_loads_keeps_that_b(window, qtbot, monkeypatch):
    w, st, jobs = window, window.state, window.worker.compare_jobs
    go, loads = threading.Event(), []
    real = CJ.load_b

    def held_back(*args):
        loads.append(args[0])
        go.wait(WAIT / 1000)
        return real(*args)
    monkeypatch.setattr(CJ, "load_b", held_back)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: len(loads) == 1, timeout=WAIT)
    st.set_checkpoint(16)
    go.set()
    settled(qtbot, w)
    assert len(loads) == 1 and jobs.comparison.pair.a.model is st.model
    assert st.model in jobs.b.beside() and "checkpoint 16" in w.compare_panel.title.text()


def _choose(w, monkeypatch, text: str) -> None:
    """Models > Memory budget, `text` typed."""
    monkeypatch.setattr(QInputDialog, "getText", lambda *x, **k: (text, True))
    w.menus.memory_budget_action.trigger()


def test_auto_with_b_open_holds_a_and_b_together(window, qtbot, monkeypatch):
    """Auto chosen with B open (B's share of a size before): the memory available split as a size
    is, B's budget too, not A's alone; Compare closed, A's budget is auto with what B held counted
    in."""
    from attnviz.engine.reading import weights

    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    MB.set_memory_budget(sum(sizes) + max(sizes))
    a.set_memory_budget(sum(sizes) + max(sizes))
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    b = jobs.b
    unmade = a.grams_to_make() + b.grams_to_make()
    free = 3 * sum(sizes)
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + unmade + free)
    room = free + sum(a.budgeted_bytes()) + sum(b.budgeted_bytes())
    kept_a = max(a.budgeted_bytes()[0], max(sizes)) + a.budgeted_bytes()[1]
    _choose(w, monkeypatch, "auto")
    assert MB.chosen_budget() is None
    assert budget(b) == room - kept_a and budget(a) + budget(b) == room
    held_b = sum(b.budgeted_bytes())
    jobs.close()
    w.worker.wait_idle()
    free_a = free + b.grams_to_make()  # (B's Grams no longer left room for)
    assert budget(a) == free_a + sum(a.budgeted_bytes()) + held_b


@pytest.mark.parametrize("fits", [True, False])
def test_a_budget_chosen_while_b_loads_is_split_as_b_opens(window, qtbot, monkeypatch, fits):
    """A size chosen while B loads (A's alone then) is split between A and B as B opens, not the
    one B's load began under; one too small for both leaves Compare closed, saying why."""
    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    first = 2 * sum(sizes) + max(sizes)
    MB.set_memory_budget(first)
    a.set_memory_budget(first)
    go, loads = threading.Event(), []
    real = CheckpointSet.model

    def held_back(*args):  # (B's file read after its load read the budget)
        loads.append(args[1])
        go.wait(WAIT / 1000)
        return real(*args)
    monkeypatch.setattr(CheckpointSet, "model", held_back)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: len(loads) == 1, timeout=WAIT)
    now = sum(sizes) + max(sizes) if fits else max(sizes)
    _choose(w, monkeypatch, f"{now}B")
    assert budget(a) == now  # (B not open yet: A's alone)
    go.set()
    if fits:
        settled(qtbot, w)
        assert budget(a) + budget(jobs.b) == now
    else:
        qtbot.waitUntil(lambda: jobs.loading is None, timeout=WAIT)
        w.worker.wait_idle()
        assert jobs.b is None and budget(a) == now
        assert "is too small for model A and model B together" in jobs.note


def _auto_memory(monkeypatch, a) -> int:
    """The memory available mocked, fixed: HEADROOM, room for A's and a B's W_O Grams (as many as
    A's), and 64 MiB -> those 64 MiB."""
    from attnviz.engine.reading import weights
    from attnviz.engine.reading.memory_budget import grams_bytes

    free, grams = 64 << 20, 2 * grams_bytes(a.config)
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + grams + free)
    return free


def _auto_room(*models) -> int:
    """What auto allows the models open together now: the memory available less HEADROOM and the
    Grams they have not made yet, with what they hold counted in (pair_memory.share_auto; the
    memory a comparison's runs made them hold since counted in too)."""
    unmade = sum(m.grams_to_make() for m in models)
    return MB.default_budget(unmade, clamp=False) + sum(sum(m.budgeted_bytes()) for m in models)


def test_b_opened_under_auto_holds_a_and_b_together(window, qtbot, monkeypatch):
    """B opened under auto: A's budget, worked out before B was open, is lowered to what A holds,
    B gets the rest of what auto allows (as a chosen size is split as B opens): the two budgets
    together hold what auto allows, not each nearly all of it."""
    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    _auto_memory(monkeypatch, a)
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    b = jobs.b
    assert budget(a) + budget(b) <= _auto_room(a, b)
    assert budget(a) == sum(sizes) and budget(b) >= sum(sizes)  # (each holds all its layers)


def test_a_new_step_under_auto_holds_the_new_a_and_b_together(window, qtbot, monkeypatch):
    """A moved to another training step under auto with B open: the new step and B hold what auto
    allows together, and the step A left is no longer lowered beside B: its budget is what auto
    gives it alone (as a chosen size is given back whole to the step A left)."""
    w, st, jobs = window, window.state, window.worker.compare_jobs
    a32 = st.model
    _auto_memory(monkeypatch, a32)
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    b = jobs.b
    st.set_checkpoint(16)
    settled(qtbot, w)
    a16 = st.model
    assert a16 is not a32 and budget(a16) + budget(b) <= _auto_room(a16, b)
    assert budget(a16) == sum(a32.weights.layers.sizes)  # (every layer of it, as it holds them)
    left = budget(a32)
    a32.set_memory_budget(None)  # (what auto gives the step A left, beside nothing)
    assert left == budget(a32) and a32.beside() == []


@pytest.mark.parametrize("source", [BSource("checkpoint", 0), BSource("quantized", "Q8_0")])
def test_a_b_the_budget_left_cannot_hold_is_named_once(window, qtbot, source):
    """The note names B once, in its lead, then says the room B had and B's own refusal: never
    "Could not compare with B. Could not load B in …"."""
    w, jobs = window, window.worker.compare_jobs
    a = w.state.model
    sizes = a.weights.layers.sizes
    chosen = sum(sizes) + max(sizes) // 4  # (A's layers held, a quarter of a layer left for B)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    open_compare(w, source)
    qtbot.waitUntil(lambda: jobs.loading is None and bool(jobs.note), timeout=WAIT)
    note = w.compare_panel.note.text()
    lead = f"Could not compare with {source.describe(a.name)}. There is only "
    assert note.startswith(lead) and note.count("Could not") == 1, note
    assert f"memory budget left beside {a.name}'s float32 layers. " in note, note
    assert jobs.b is None and budget(a) == chosen


def test_the_steps_not_shown_let_go_of_their_layers_while_b_is_open(window, qtbot):
    """The training steps the window keeps loaded (CheckpointSet.preload) hold float32 layers that
    the budget split between A and B does not count: as B opens they let them go, and so does the
    step A leaves while B is open; A and B keep theirs, and the step A moves to expands its own
    again as it runs."""
    w, st, jobs = window, window.state, window.worker.compare_jobs
    qtbot.waitUntil(lambda: st.checkpoints is not None, timeout=WAIT)
    steps = st.checkpoints.loaded()
    assert len(steps) == len(st.checkpoints) and all(m.budgeted_bytes()[0] > 0 for m in steps)
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    a32, b = st.model, jobs.b
    assert [m for m in steps if m.budgeted_bytes()[0] > 0] == [a32] and b.budgeted_bytes()[0] > 0
    st.set_checkpoint(16)
    settled(qtbot, w)
    a16 = st.model
    assert a16.budgeted_bytes()[0] > 0 and a32.budgeted_bytes()[0] == 0
    assert [m for m in steps if m.budgeted_bytes()[0] > 0] == [a16] and b.budgeted_bytes()[0] > 0
    assert jobs.comparison.pair.a.model is a16


def test_b_opened_under_auto_splits_the_memory_the_steps_let_go_of(window, qtbot, monkeypatch):
    """Memory available falls as models hold layers (a fixed machine): B opened under auto splits
    what is free once the steps not shown have let go of their layers, so working the split out
    again afterwards changes neither budget."""
    from attnviz.engine.analysing.pair_memory import share_auto
    from attnviz.engine.reading import weights

    w, st, jobs = window, window.state, window.worker.compare_jobs
    qtbot.waitUntil(lambda: st.checkpoints is not None, timeout=WAIT)
    steps = st.checkpoints.loaded()
    assert sum(m.budgeted_bytes()[0] for m in steps if m is not st.model) > 0
    total = MB.HEADROOM + (64 << 20)
    held = lambda: sum(sum(m.budgeted_bytes()) for m in {*steps, *([jobs.b] if jobs.b else [])})  # noqa: E731
    monkeypatch.setattr(weights, "available_memory", lambda: total - held())
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w)
    a, b = st.model, jobs.b
    opened = budget(a), budget(b)
    share_auto(a, b)
    assert (budget(a), budget(b)) == opened
