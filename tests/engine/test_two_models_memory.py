"""Two models' memory (Compare's A and B, pair_memory.load_second): under the default budget each leaves
room for the W_O Grams the other has not made yet, as B opens and when A's budget goes back to
auto; a chosen budget holds both models' float32 layers and unembedding copies and nothing else,
whichever Grams were made before; and A compared with its own last checkpoint is A, its budget
untouched."""

import gc
import re

import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.pair_memory import budget_left, load_beside, load_second, move_beside
from attnviz.engine.computing.checkpoints import load_checkpoints
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import AttnvizError, BudgetTooSmall
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading import weights
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.memory_budget import grams_bytes
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.engine.reading.weights import Checkpoint
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6]
VALUES = RunRequest(values=True, use_cache=False)
LLAMA = FIXTURES / "llama_gqa"


pytestmark = pytest.mark.usefixtures("auto_budget")  # (tests/engine/conftest.py)


def _open_b(a):
    return load_second(lambda budget: load_model(LLAMA, budget=budget), a, "B")


def _load_b(a):
    """B as it loads beside `a` (load_beside), before A's budget and B's are split (Second.accept)."""
    return load_beside(lambda budget: load_model(LLAMA, budget=budget), a, "B").model


def test_b_opened_under_auto_leaves_room_for_the_grams_a_has_not_made(monkeypatch):
    """Memory for B's layers and what B needs besides (its own Grams too) keeps every layer of B
    alone; beside an A that has made none of its Grams, B loads keeping less by A's Grams' bytes,
    and beside an A that made them all, every layer again."""
    a = load_model(LLAMA)
    total = sum(a.weights.layers.sizes)
    besides = Checkpoint(LLAMA).float32_bytes() - total + grams_bytes(a.config)
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + besides + total)
    assert load_model(LLAMA).weights.layers.budget == total  # B alone
    b = _load_b(a).weights.layers
    assert b.budget == total - grams_bytes(a.config) and b.kept < a.config.n_layer
    a.run(ids=IDS, request=VALUES)  # all of A's Grams made: their memory is out of what is available
    b = _load_b(a).weights.layers
    assert b.budget == total and b.kept == a.config.n_layer


def test_auto_on_a_with_b_open_leaves_room_for_the_grams_b_has_not_made(monkeypatch):
    """Models > Memory budget 'auto' on A while B is open: the memory available now and A's layers
    held, less the Grams neither has made yet; B freed, less A's alone."""
    a = load_model(LLAMA)
    store = a.weights.layers
    total, grams = sum(store.sizes), grams_bytes(a.config)
    b = _open_b(a)
    b.run(ids=IDS, request=RunRequest(values=True, use_cache=False, layers=1))  # layer 0's Grams
    unmade_b = b.grams_to_make()
    assert 0 < unmade_b < grams
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + grams + unmade_b - 1)
    a.set_memory_budget(None)
    assert store.budget == total - 1 and store.kept < a.config.n_layer
    a.set_memory_budget(10 * total)
    a.run(ids=IDS)  # (every layer of A held again)
    del b
    gc.collect()
    a.set_memory_budget(None)
    assert store.budget == total + unmade_b - 1 and store.kept == a.config.n_layer


def test_a_chosen_budget_leaves_b_the_same_room_whatever_grams_were_made():
    """A chosen budget holds float32 layers: what it leaves for B, and B's own budget, are the
    same before and after A made its Grams (Value-weighted on before Compare or not)."""
    a = load_model(LLAMA)
    held = a.weights.layers.held_bytes()
    MB.set_memory_budget(10 * held)
    before = budget_left(a)
    assert before == 10 * held - held
    b = _open_b(a)
    assert b.weights.layers.budget == before
    a.run(ids=IDS, request=VALUES)
    b.run(ids=IDS, request=VALUES)
    assert a.grams_held() == b.grams_held() == grams_bytes(a.config)
    assert budget_left(a) == before and _open_b(a).weights.layers.budget == before


def test_a_chosen_budget_counts_as_float32_unembedding_copy(tmp_path):
    """A's unembedding copy, kept under its budget (the budget holds every layer and it besides),
    is held by the chosen budget as A's layers are: B gets the budget less both, and a refusal
    names both."""
    cfg, tensors = gguf_tensors(LLAMA)
    a = load_model(write_gguf(tmp_path / "m.gguf", cfg, tensors, Q.Q8_0))
    held = a.weights.layers.held_bytes()
    MB.set_memory_budget(10 * held)
    assert budget_left(a) == 9 * held
    w_u = a.lm_head().w_u
    w_u.hold_after = -1  # (kept from its next block on, as after eight passes)
    w_u.block(0)
    copy = w_u.kept.nbytes
    assert copy > 0 and budget_left(a) == 9 * held - copy

    def refuse(budget):
        raise BudgetTooSmall("refused")  # (the budget is why: its room leads)
    with pytest.raises(AttnvizError, match=re.escape(f"beside {a.name}'s float32 layers and float32 unembedding")):
        load_second(refuse, a, "B")


def test_the_chosen_budget_is_read_once_for_the_room_and_the_words(monkeypatch):
    """A budget chosen on another thread while B loads changes neither B's room nor the words of
    its refusal: both name the budget read as B began."""
    a = load_model(LLAMA)
    held = a.weights.layers.held_bytes()
    reads = iter([held + (1 << 20)])
    monkeypatch.setattr(MB, "chosen_budget", lambda: next(reads, 5 * held))

    def refuse(budget):
        raise BudgetTooSmall("refused")
    with pytest.raises(AttnvizError) as refused:
        load_second(refuse, a, "B")
    assert f"in the 1 MiB of the {format_bytes(held + (1 << 20))} memory budget left beside " in str(refused.value)


@pytest.mark.parametrize("chosen", [False, True])
def test_a_compared_with_its_own_last_checkpoint_keeps_its_budget(chosen):
    """The toy model's last checkpoint is the folder itself, A's own Model: load_second gives A
    back with its budget and layers as they were: under auto with A's Grams not made (none are
    left room for beside itself), and under a chosen budget that leaves less than one layer."""
    a = load_model(TOY_MODEL)
    store = a.weights.layers
    if chosen:  # room for less than a layer beside A's, its Grams made (the reviewer's case)
        a.run(ids=[1, 2, 3, 4], request=VALUES)
        MB.set_memory_budget(sum(store.sizes) + max(store.sizes) // 2)
    budget, kept, line = store.budget, store.kept, a.memory
    ckpts = load_checkpoints(a)
    b = load_second(lambda _budget: ckpts.model(ckpts.last), a, "checkpoint")
    assert b is a and store.budget == budget and store.kept == kept == a.config.n_layer
    assert a.memory == line and a.beside() == []


def test_a_chosen_budget_holds_a_and_b_together():
    """As B opens, A's budget is lowered to what B's leaves of the chosen one (A's had stayed the
    whole budget: the two could hold twice it), so after both run they hold the chosen budget at
    most; own_budget gives A the whole budget back as B goes."""
    a = load_model(LLAMA)
    sizes = a.weights.layers.sizes
    chosen = 3 * max(sizes)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    b = _open_b(a)
    assert a.weights.layers.budget + b.weights.layers.budget == chosen
    for m in (a, b):
        m.run(ids=IDS, request=VALUES)
    assert a.budgeted_bytes()[0] + b.budgeted_bytes()[0] <= chosen
    from attnviz.engine.analysing.pair_memory import own_budget

    own_budget(a, b, chosen)
    assert a.weights.layers.budget == chosen


@pytest.mark.parametrize("share", [0.5, 1.5, 2.0])
def test_a_budget_too_small_for_both_names_the_split(share):
    """Models > Memory budget with B open, a size that leaves B less than one layer beside what A
    holds: refused in one line naming what A keeps, what B needs and the least size that works
    (never a negative size), both budgets as they were."""
    from attnviz.engine.analysing.pair_memory import share_budget

    a = load_model(LLAMA)
    sizes = a.weights.layers.sizes
    chosen = sum(sizes) + 2 * max(sizes)
    MB.set_memory_budget(chosen)
    a.set_memory_budget(chosen)
    a.run(ids=IDS, request=VALUES)
    b = _open_b(a)
    before = a.weights.layers.budget, b.weights.layers.budget
    with pytest.raises(AttnvizError) as info:
        share_budget(a, b, int(share * max(sizes)))
    kept = a.budgeted_bytes()[0]
    assert str(info.value).endswith(f"A keeps {format_bytes(kept, 'up')} ({a.name}'s float32 layers) "
                                    f"and B needs at least its largest layer ({format_bytes(max(sizes), 'up')}); "
                                    f"the least that works is {format_bytes(kept + max(sizes), 'up')}")
    assert "-" not in str(info.value)
    assert (a.weights.layers.budget, b.weights.layers.budget) == before
    share_budget(a, b, kept + max(sizes))  # the least named works
    assert a.weights.layers.budget + b.weights.layers.budget == kept + max(sizes)


def test_auto_short_of_what_a_and_b_hold_takes_from_b_first(monkeypatch):
    """Auto with B open (pair_memory.share_auto) where the memory available is short of what the
    two hold: B gives up its layers first, down to its largest, then A, never below its own."""
    from attnviz.engine.analysing.pair_memory import share_auto

    a = load_model(LLAMA)
    b = _open_b(a)
    sizes = a.weights.layers.sizes
    unmade = a.grams_to_make() + b.grams_to_make()
    held = a.budgeted_bytes()[0]
    for short, want_b, want_a in ((2 * held - 2 * max(sizes), max(sizes), max(sizes)),
                                  (max(sizes), held - max(sizes), held)):
        monkeypatch.setattr(weights, "available_memory", lambda s=short: MB.HEADROOM + unmade - s)
        share_auto(a, b)
        assert (a.weights.layers.budget, b.weights.layers.budget) == (want_a, want_b)
        for m in (a, b):
            m.set_memory_budget(10 * held)
            m.run(ids=IDS)  # (every layer held again)


def _auto_room(*models) -> int:
    """What auto allows the models open together: the memory available less HEADROOM and the Grams
    they have not made yet, with what they hold now counted in (share_auto)."""
    unmade = sum(m.grams_to_make() for m in models)
    return MB.default_budget(unmade, clamp=False) + sum(sum(m.budgeted_bytes()) for m in models)


def _mock_memory(monkeypatch, free: int) -> list:
    """The memory available mocked: HEADROOM, then [0] (set it to the Grams not made yet), then `free`."""
    unmade = [0]
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + unmade[0] + free)
    return unmade


def test_b_opened_under_auto_holds_a_and_b_together(monkeypatch):
    """B opened under auto: A's budget, worked out before B held anything, no longer claims the
    memory B's does: the two together hold what auto allows, split as a chosen size is (A keeps
    what it holds, B gets the rest)."""
    a = load_model(LLAMA)
    sizes = a.weights.layers.sizes
    free = 6 * sum(sizes)
    unmade = _mock_memory(monkeypatch, free)
    a.set_memory_budget(None)  # (A alone under auto: every byte available is A's)
    a.run(ids=IDS)
    unmade[0] = 2 * a.grams_to_make()  # (A's Grams and B's, none made)
    b = _open_b(a)
    room = _auto_room(a, b)
    assert room == free + sum(a.budgeted_bytes()) + sum(b.budgeted_bytes())
    assert a.weights.layers.budget + b.weights.layers.budget == room
    assert a.weights.layers.budget == a.budgeted_bytes()[0] == sum(sizes)


def test_a_moved_to_another_step_under_auto_holds_the_new_a_and_b_together(monkeypatch):
    """A moved to another training step under auto (move_beside): the new A and B hold what auto
    allows together (the new A's budget, worked out as it loaded, claimed B's memory too), and the
    step A left is no longer lowered beside B: its budget is what auto gives it alone."""
    old, new = load_model(LLAMA), load_model(LLAMA)
    sizes = old.weights.layers.sizes
    free = 6 * sum(sizes)
    unmade = _mock_memory(monkeypatch, free)
    unmade[0] = 3 * old.grams_to_make()  # (old's, new's and B's Grams, none made)
    for m in (old, new):
        m.set_memory_budget(None)  # (as a step loads: auto from the memory available)
    old.run(ids=IDS)
    b = _open_b(old)
    assert old.weights.layers.budget == sum(sizes)  # (lowered beside B: what it holds)
    move_beside(old, new, b, None)
    assert new.weights.layers.budget + b.weights.layers.budget == _auto_room(new, b)
    assert new.weights.layers.budget == sum(sizes)  # (what new holds: its layers, expanded as it loaded)
    assert old.beside() == [] and old not in b.beside() and new in b.beside()
    alone = free + unmade[0] - old.grams_to_make() + old.budgeted_bytes()[0]
    assert old.weights.layers.budget == alone


def test_a_packed_gguf_a_under_auto_gets_its_share_as_b_opens(tmp_path, monkeypatch):
    """A GGUF A whose short runs read its packed blocks holds no float32 layer as B opens under
    auto: it gets its share of what auto allows the two (pair_memory.fair_share), not one layer,
    so its long runs keep their layers (the second expands none) and its memory line names that
    budget; the two budgets together hold what auto allows. Short of both models' layers, A's
    share is in proportion to its layers' bytes."""
    pytest.importorskip("numba")
    from attnviz.engine.analysing.pair_memory import share_auto
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.reading import qpack

    cfg, tensors = gguf_tensors(LLAMA)
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    qpack.ask_for_kernels()
    try:
        a = load_model(path)
    finally:
        qpack.ask_for_kernels(False)
    store = a.weights.layers
    need = sum(store.sizes)
    assert store.held_bytes() == 0 and store.view_bytes() > 0
    unmade = _mock_memory(monkeypatch, 3 * need)
    unmade[0] = 2 * a.grams_to_make()  # (A's Grams and B's, none made)
    b = load_second(lambda budget: load_model(path, budget=budget), a, "B")  # (B: float32, held)
    assert store.budget + b.weights.layers.budget == _auto_room(a, b)
    assert store.budget == need and f"within the {format_bytes(need)} memory budget" in a.memory
    monkeypatch.setattr(qm, "ROWS_UNEXPANDED", 12)
    long = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]  # (more rows than the crossover)
    a.run(ids=long, request=RunRequest(use_cache=False))
    expanded = store.expansions
    a.run(ids=long, request=RunRequest(use_cache=False))
    assert store.expansions == expanded and store.held_bytes() == need
    assert f"{a.config.n_layer} expanded to float32" in a.memory
    for m in (a, b):
        m.set_memory_budget(max(store.sizes))  # (each holds one layer at most now)
    room = need // 2 + sum(a.budgeted_bytes()) + sum(b.budgeted_bytes())
    grams = a.grams_to_make() + b.grams_to_make()
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + grams + need // 2)
    share_auto(a, b)
    assert store.budget == max(max(store.sizes), room // 2) and store.budget + b.weights.layers.budget == room
