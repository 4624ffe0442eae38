"""How large a model's memory budget is (budget.py keeps its layers within it): a size as typed
('2G', 'auto'), the one chosen for this process (set_memory_budget, --memory-budget), the default
from the memory available, and the one a model loads with (resolve_budget)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from attnviz.engine.errors import BudgetTooSmall, InputError, ModelLoadError
from attnviz.engine.reading.byte_sizes import format_bytes

GIB = 1 << 30
HEADROOM = 1 * GIB  # left out of the default budget: the app, the activations, the KV cache

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)

_chosen: int | None = None  # set_memory_budget's bytes; None: the default from the memory available
_by_command_line = False  # the command line chose it (--memory-budget): the window's setting yields


def parse_budget(text: str) -> int | None:
    """'2G', '512 MiB', '1.5GB', '3000000000' -> bytes (K, M, G, T are powers of 1024, as
    `free -g`); 'auto' -> None (the default). InputError otherwise."""
    s = str(text).strip()
    if s.lower() == "auto":
        return None
    m = _SIZE.fullmatch(s)
    if m is None:
        raise InputError(f"memory budget {text!r} is not a size: give e.g. 2G, 512M, 8GiB or auto")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise InputError(f"memory budget {text!r} is zero: give e.g. 2G, 512M, 8GiB or auto")
    return n


def set_memory_budget(n_bytes: int | None, command_line: bool = False) -> None:
    """The budget models loaded from now on get (None: the default from the memory available).
    `command_line`: chosen with --memory-budget, which the window's remembered setting leaves be."""
    global _chosen, _by_command_line
    if n_bytes is not None and n_bytes <= 0:
        raise InputError(f"a memory budget must be more than 0 bytes, got {n_bytes}")
    _chosen = None if n_bytes is None else int(n_bytes)
    _by_command_line = command_line


def chosen_budget() -> int | None:
    return _chosen


def chosen_by_command_line() -> bool:
    return _by_command_line


def available_memory() -> int | None:
    """Bytes of memory the OS can still give this process (Linux MemAvailable), or None if unknown."""
    from attnviz.engine.reading import weights  # tests replace weights.available_memory

    return weights.available_memory()


def grams_bytes(cfg) -> int:
    """Bytes of a model's per-head W_O Grams, every layer's (float32 [n_head, d_head, d_head] a
    layer), which it makes when value norms, head shares or the anatomy first ask for them
    (Model.output_grams) and keeps beside its layers: the default budget leaves room for them,
    but a load is not refused for them (resolve_budget's optional_bytes)."""
    return 4 * cfg.n_layer * cfg.n_head * cfg.d_head * cfg.d_head


def default_budget(other_bytes: int = 0, clamp: bool = True) -> int | None:
    """The memory available now, less what the model needs besides its layers (`other_bytes`) and
    HEADROOM; None (no limit) where the OS does not say. clamp=False: below 0 where memory is
    short of them (a loaded model's layers held then give up that much)."""
    have = available_memory()
    if have is None:
        return None
    free = have - int(other_bytes) - HEADROOM
    return max(0, free) if clamp else free


def resolve_budget(name: str, layer_bytes: Sequence[int], other_bytes: int = 0,
                   budget: int | None = None, optional_bytes: int = 0) -> int | None:
    """The budget a model loads with: `budget`, else the one set_memory_budget chose, else the
    default. Refuses, with the numbers, a model that cannot run one layer within it (chosen) or
    within the memory available (default): its largest layer and what it keeps besides its
    layers (`other_bytes`). `optional_bytes`: what it makes only when asked (the W_O Grams,
    grams_bytes), which the default budget leaves room for but no load is refused for. None: no
    limit."""
    largest = max(layer_bytes, default=0)
    budget = budget if budget is not None else _chosen
    if budget is not None:
        if budget < largest:
            raise BudgetTooSmall(
                f"For {name}, a memory budget of {format_bytes(budget, 'down')} is less than one layer "
                f"expanded to float32 ({format_bytes(largest, 'up')}); give at least that much "
                "(--memory-budget)")
        return budget
    have = available_memory()
    if have is None:
        return None
    need = largest + int(other_bytes)
    if need > have:
        raise ModelLoadError(
            f"{name} needs about {format_bytes(need, 'up')} to run even one layer at a time (its "
            f"largest layer expanded to float32 and what the model keeps besides its layers), but "
            f"only {format_bytes(have, 'down')} of memory is available; pick a smaller model")
    return max(largest, default_budget(int(other_bytes) + int(optional_bytes)))
