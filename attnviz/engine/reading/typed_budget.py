"""A memory budget as a person types it (the window's dialog, --memory-budget):
memory_budget.parse_budget, with a bare number too small to be meant as bytes refused."""

from __future__ import annotations

from attnviz.engine.errors import InputError
from attnviz.engine.reading.memory_budget import parse_budget
from attnviz.engine.reading.token_text import plural


def parse_typed_budget(text: str) -> int | None:
    """parse_budget for a size a person typed (the window's dialog, --memory-budget): a bare number
    below 1 MiB, with no unit, is refused naming what it would be, as it almost surely meant
    megabytes ('512' -> 512 bytes, less than any layer). '512B' still says bytes."""
    n = parse_budget(text)
    s = str(text).strip()
    if n is not None and n < 1 << 20 and not s[-1:].isalpha():
        raise InputError(f"memory budget {s!r} would be {plural(n, 'byte')}: type {s}M for megabytes "
                         f"({s}G for gigabytes, {s}B if bytes are meant)")
    return n
