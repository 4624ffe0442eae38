"""What a caller gives Model.run, checked before anything runs: a text made one a tokenizer takes
(clean_text), token ids typed as text (parse_typed_ids), and id lists checked against the
vocabulary (check_ids)."""

from __future__ import annotations

import re

import numpy as np

from attnviz.engine.errors import InputError

_SURROGATE = re.compile("[\ud800-\udfff]")
_TYPED_ID = re.compile(r"[+-]?[0-9]+")


def check_ids(ids, V: int) -> np.ndarray:  # a sequence of ints -> int64 [T], T >= 1
    """Token ids as Model.run takes them, each checked against a vocabulary of V ids: InputError
    naming the first one that is not an integer in 0..V-1."""
    if isinstance(ids, (str, bytes, bytearray)) or getattr(ids, "ndim", 1) != 1:
        raise InputError(f"ids must be a flat list of integers, got {_short(ids)}")
    if isinstance(ids, np.ndarray) and ids.size and ids.dtype.kind in "iu":  # (any other: item by item)
        if ids.min() < 0 or ids.max() >= V:  # an integer array: checked at once
            bad = np.flatnonzero((ids < 0) | (ids >= V))
            raise InputError(f"token id {int(ids[bad[0]])} at position {int(bad[0])} is outside "
                             f"this model's vocabulary 0..{V - 1}")
        return ids.astype(np.int64)
    try:
        items = list(ids)
    except TypeError:
        raise InputError(f"ids must be a list of integers, got {_short(ids)}") from None
    if not items:
        raise InputError("no token ids given: give at least one, e.g. 5, 17, 3")
    for pos, x in enumerate(items):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise InputError(f"ids must be integers: position {pos} holds {_short(x)}")
        if not 0 <= x < V:
            raise InputError(f"token id {int(x)} at position {pos} is outside this model's "
                             f"vocabulary 0..{V - 1}")
    return np.array(items, dtype=np.int64)


def _short(value, n: int = 60) -> str:
    """`value` for a message: its type and a repr cut to n characters."""
    r = repr(value)
    return f"{type(value).__name__} {r if len(r) <= n else r[:n] + '...'}"


def clean_text(text) -> tuple[str, str | None]:
    """Text as a tokenizer can take it, and a one-line notice when something had to change.

    Lone surrogates (U+D800..U+DFFF: a clipboard can carry them, and Python decodes bytes that are
    not UTF-8 in argv to them) are not characters; the tokenizer refuses them. Each becomes U+FFFD,
    one for one, so character offsets still index the caller's text. Anything but a str is refused."""
    if not isinstance(text, str):
        hint = "; decode it first" if isinstance(text, (bytes, bytearray)) else ""
        raise InputError(f"text must be a str, got {_short(text)}{hint}")
    text, n = _SURROGATE.subn("\ufffd", text)
    if not n:
        return text, None
    return text, (f"{n} lone surrogate{'s' if n > 1 else ''} (U+D800..U+DFFF, not characters) "
                  f"replaced by U+FFFD \ufffd")


def parse_typed_ids(text: str) -> list[int] | None:
    """Token ids typed as text ("5, 17 3"), or None when the text is not only integers."""
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    if not all(_TYPED_ID.fullmatch(p) for p in parts):  # ASCII digits only: int() takes "٣" too
        return None
    for p in parts:
        if len(p) > 20:  # int() refuses thousands of digits; no vocabulary is this big
            raise InputError(f"token id {p[:20]}... is too large to be a token id")
    return [int(p) for p in parts]
