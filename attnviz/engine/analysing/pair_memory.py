"""Compare's two models and the memory budget: model B opened beside model A (load_beside,
load_second), and one budget, chosen (--memory-budget, the window's setting) or auto, holding the
two together: under a chosen one B gets what A keeps now leaves of it, A the rest (share_budget);
under auto A gets what it keeps now or its fair share, whichever is more, B the rest (share_auto);
split as B opens (Second.accept) and as A moves to another training step (move_beside); A's own
again as B goes (own_budget) or as A leaves that step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from attnviz.engine.errors import AttnvizError, BudgetTooSmall, InputError, ModelLoadError
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.validate import sentences


def budget_left(a) -> int | None:
    """What a chosen memory budget (--memory-budget, the window's setting) leaves for a second model
    beside `a`: the budget less what it keeps for a (Model.budgeted_bytes: a's float32 layers held
    now, at least its largest layer, and its unembedding's float32 copy, once kept). The packed
    blocks, W_O Grams and embeddings of either model come on top of the budget, as with one model.
    None: no budget was chosen, and the second model sizes its own from the memory available
    (load_second)."""
    return _room(a, MB.chosen_budget())[0]


def _kept_for(a) -> tuple[int, str]:
    """(what a chosen budget keeps for `a` beside a second model: its float32 layers held now, at
    least its largest layer so it still runs, and its float32 unembedding copy; those in words),
    from one read of what a holds: a copy kept meanwhile on another thread is in both or neither."""
    layers, copy = a.budgeted_bytes()
    largest = max(_sizes(a), default=0)
    held = (f"{a.name}'s float32 layers" if layers >= largest else f"one float32 layer of {a.name}")
    return max(layers, largest) + copy, held + (" and float32 unembedding" if copy else "")


def _room(a, chosen: int | None) -> tuple[int | None, str]:
    """(what `chosen` leaves beside a, None for no budget; what of a it counted, in words)."""
    kept, held = _kept_for(a)
    return (None if chosen is None else chosen - kept), held


def share_budget(a, b, chosen: int) -> None:
    """A chosen budget over A and B open beside it, split as when B opened (load_second): B gets
    what A keeps now leaves of it (budget_left), A the rest, so the two together hold `chosen`
    at most. InputError naming the split and the least budget that holds it, where B would get
    less than its largest layer; nothing changed then."""
    kept, held = _kept_for(a)
    least = max(max(_sizes(b), default=0), 1)
    if chosen - kept < least:  # (checked before B is touched: its own refusal names only its file)
        raise InputError(f"a memory budget of {format_bytes(chosen)} is too small for model A and "
                         f"model B together: A keeps {format_bytes(kept, 'up')} ({held}) and B needs "
                         f"at least its largest layer ({format_bytes(least, 'up')}); the least that "
                         f"works is {format_bytes(kept + least, 'up')}")
    left = chosen - kept
    b.set_memory_budget(left)
    a.set_memory_budget(chosen - left)


def share_auto(a, b) -> None:
    """The default budget (auto) over A and B open beside it: the memory available now, less
    HEADROOM and the W_O Grams neither has made yet (memory_budget.default_budget), with the
    float32 layers and unembedding copies both hold now counted in. A gets what it keeps now
    (_kept_for) or its fair share (fair_share), whichever is more; B the rest, so neither budget
    claims memory the other's does. Memory short of what they hold: B gives up its layers first,
    down to its largest, then A. Each its own default where the system does not say what is
    available."""
    free = MB.default_budget(a.grams_to_make() + b.grams_to_make(), clamp=False)
    if free is None:
        a.set_memory_budget(None)
        b.set_memory_budget(None)
        return
    layers, copy = a.budgeted_bytes()  # (one read, as _kept_for's)
    room = free + layers + copy + sum(b.budgeted_bytes())
    claim = max(max(layers, _largest(a)) + copy, fair_share(a, b, room))
    left = max(_largest(b), room - claim)
    b.set_memory_budget(left)
    a.set_memory_budget(max(_largest(a), room - left))


def fair_share(a, b, room: int) -> int:
    """A's share of `room` bytes auto allows A and B together: in proportion to the float32 bytes
    of all their layers, and no more than all of A's need (B gets the rest). A GGUF A whose short
    runs read its packed blocks holds few float32 layers as B opens; its long runs then keep
    as many as this share holds, rather than expand every layer again each run. 0 where neither
    has float32 layers to budget."""
    need_a, need_b = sum(_sizes(a)), sum(_sizes(b))
    if need_a + need_b == 0 or room <= 0:
        return 0
    return min(need_a, room * need_a // (need_a + need_b))


def share(a, b, chosen: int | None) -> None:
    """A budget chosen with B open beside A: a size split by share_budget, auto (None) by
    share_auto."""
    if chosen is None:
        share_auto(a, b)
    else:
        share_budget(a, b, chosen)


def _sizes(model) -> tuple:
    """Bytes of each of the model's layers as float32 (none: its layers are not budgeted)."""
    return getattr(model.unchecked_weights.layers, "sizes", ())


def _largest(model) -> int:
    """Bytes of the model's largest float32 layer (0: its layers are not budgeted)."""
    return max(_sizes(model), default=0)


def own_budget(a, b, chosen: int | None) -> None:
    """A given its budget back as Compare lets B go: the chosen one whole, or under the default
    (None) what auto gives A once B has gone: the memory available now with B's float32 layers and
    unembedding copy, given back with B, counted in (B still holds them as this is called).
    Nothing where B is A, or a model the caller holds anyway."""
    if b is None or b is a:
        return
    if chosen is None:
        free = MB.default_budget(a.grams_to_make(), clamp=False)
        chosen = None if free is None else max(_largest(a), free + sum(a.budgeted_bytes()) + sum(b.budgeted_bytes()))
    a.set_memory_budget(chosen)


def rest_steps(steps, keep) -> None:
    """The training steps of A that the window keeps loaded (`steps`: CheckpointSet.loaded), but
    those in `keep` (A and B), let go of their float32 layers while B is open beside A: the budget
    split between A and B would not hold them. A step A moves to expands its layers again from its
    file, within the budget it gets beside B (move_beside)."""
    for m in steps:
        if not any(m is k for k in keep):
            m.let_go_layers()


def move_beside(old, new, b, chosen: int | None) -> None:
    """Model B, loaded beside `old` (load_second), beside `new` instead (A moved to another
    training step): old no longer beside B and its budget its own again, the chosen one whole
    (own_budget) or under the default what auto gives it alone (B, kept, still holds its memory:
    none of it is counted in); new and B each beside the other, and under a chosen budget new's
    lowered to what B's leaves of it (at least one layer), so the two together hold `chosen` at
    most; under the default the memory available split between new and B (share_auto), as when
    B opened beside old."""
    if chosen is not None:
        own_budget(old, b, chosen)
    old.close_beside(b)
    b.close_beside(old)
    if chosen is None and old is not b:
        old.set_memory_budget(None)
    if b is new:
        return
    new.open_beside(b)
    b.open_beside(new)
    if chosen is None:
        share_auto(new, b)
        return
    budget = getattr(b.unchecked_weights.layers, "budget", None)
    sizes = _sizes(new)
    if budget is not None and sizes:
        new.set_memory_budget(max(max(sizes), chosen - budget))


@dataclass(frozen=True)
class Second:
    """Model B as load_beside loaded it, A not yet changed: `own` whether it was loaded for the
    caller (not A itself nor a model in `shared`, which are as they were), `a_budget` A's budget
    beside it under a chosen budget (the chosen one less B's; None: the default, split as B is
    accepted), `chosen` the budget read as B's load began, which a_budget and B's own were worked
    out from."""
    model: object
    own: bool
    a_budget: int | None = None
    chosen: int | None = None

    def accept(self, a) -> None:
        """A's budget lowered to its share beside B, once B is kept (a B let go changes nothing):
        under the default, the memory available split between them (share_auto; A's budget,
        worked out before B held any memory, would claim what B's does), or the budget chosen
        since B's load began split between them (reshare)."""
        if self.reshare(a):
            return
        if self.a_budget is not None:
            a.set_memory_budget(self.a_budget)
        elif self.own and self.chosen is None:
            share_auto(a, self.model)

    def reshare(self, a) -> bool:
        """Where another budget was chosen while B loaded (Models > Memory budget: A's alone, B
        not open beside it yet), that one split between `a` and B as with B open (share) -> True;
        InputError, nothing changed, where a size cannot hold both. False where it is the budget B
        loaded under, or B is not the caller's own."""
        now = MB.chosen_budget()
        if not self.own or now == self.chosen:
            return False
        share(a, self.model, now)
        return True


def load_second(load: Callable[[int | None], object], a, what: str, shared: tuple = ()):
    """Model B beside model `a` (load_beside), a's budget lowered at once to its share (A and B
    together hold the chosen budget, or what auto allows, at most; own_budget gives it back as B
    goes)."""
    second = load_beside(load, a, what, shared)
    second.accept(a)
    return second.model


def load_beside(load: Callable[[int | None], object], a, what: str, shared: tuple = ()) -> Second:
    """Model B beside model `a`, as a Second: `load(budget)` gets what a chosen memory budget
    leaves (budget_left), and a's own budget is to be lowered to the rest once B is kept
    (Second.accept: on the caller's thread, after its checks); under the default, B's budget
    (from the memory available as it loads) is then lowered by the W_O Grams A has not made yet,
    the memory available split between the two once B is kept (Second.accept: share_auto), and
    each model's default budget from then on leaves room for the other's (Model.open_beside).
    A `load` that gives `a` itself, or a model in `shared` (one the caller holds anyway: the
    window's folder model, the last checkpoint), gives it as it is: no budget changed, nothing
    opened beside. Any refusal (the file does not open, the budget holds none of B's layers)
    comes back as one line, two sentences: what could not be loaded (`what` B is and, where the
    chosen budget is why, the room it had) and why, in the refusal's own words. `what` "": the
    caller names B in its own lead ("Could not compare with …"), so the refusal says only the room
    (where the budget is why) and why."""
    chosen = MB.chosen_budget()  # read once: the room and the refusal's words name one budget
    left, held = _room(a, chosen)
    if left is not None and left <= 0:
        raise InputError(sentences(f"Could not load {what}" if what else "", f"the memory budget of "
                                   f"{format_bytes(chosen)} is all held by {held}; give a larger "
                                   "--memory-budget for two models"))
    fitting = False  # whether a refusal is B's layers set to the room left (the budget's)
    try:
        b = load(left)
        if b is a or any(b is m for m in shared):  # (nothing more loaded: each budget as it was)
            return Second(b, False)
        if left is not None:  # a loader that takes no budget (A quantized in memory) keeps to it too
            fitting = True
            b.set_memory_budget(left)
        else:
            b.leave_room(a.grams_to_make())
        a.open_beside(b)
        b.open_beside(a)
        return Second(b, True, None if left is None else chosen - left, chosen)
    except AttnvizError as exc:
        # (the room rounds down, as B's own refusal writes the budget it got); it leads only a
        # refusal the budget caused, never a file that does not open or a mismatch
        by_budget = fitting or isinstance(exc, BudgetTooSmall)
        room = "" if left is None or not by_budget else (
            f"{format_bytes(left, 'down')} of the {format_bytes(chosen)} memory budget left beside {held}")
        if what:
            lead = f"Could not load {what}" + (f" in the {room}" if room else "")
        else:
            lead = f"There is only {room}" if room else ""
        kind = ModelLoadError if isinstance(exc, ModelLoadError) else InputError
        raise kind(sentences(lead, str(exc))) from None
