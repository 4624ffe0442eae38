"""Find: which heads send a query token to a key token, ranked by specificity, and the token a
user names (`are`, `the@3`) resolved to its position.

Pure NumPy on a RunResult's `attentions [n_layer, n_head, T, T]` and its token labels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from attnviz.engine.errors import InputError
from attnviz.engine.reading.token_text import plain, quoted, tokens


class HeadHit(NamedTuple):
    layer: int
    head: int
    weight: float  # A[query, key]
    specificity: float = 0.0  # weight minus the mean weight the other queries give the same key


def find(result, query_pos, key_pos):
    """Every (layer, head) ranked by how specifically the query attends to the key, highest first.

    specificity = A[q, k] - mean over the other queries q' that can see k of A[q', k]. A head in
    which every token attends to k (a sink, a head parked on a noun) gives q -> k a high weight
    that says nothing about q; its specificity is near 0."""
    att = np.asarray(result.attentions)
    T = att.shape[-1]
    q, k = _positions(T, query_pos, key_pos)
    causal = not np.triu(att[0, 0], 1).any() if T > 1 else True
    _visible(q, k, causal, getattr(result, "labels", None))
    return rank_heads(att[:, :, :, k], q, k, causal)


def find_long(patterns, query_pos, key_pos):
    """find() on a long run's patterns (long_patterns.LongPatterns): only key k's column is computed."""
    q, k = _positions(patterns.T, query_pos, key_pos)
    _visible(q, k, patterns.causal)
    return rank_heads(patterns.column(k), q, k, patterns.causal)


def _positions(T, query_pos, key_pos):
    for name, p in (("query", query_pos), ("key", key_pos)):
        if not 0 <= int(p) < T:
            raise InputError(f"{name} position {p} is outside the {tokens(T)} (0..{T - 1})")
    return int(query_pos), int(key_pos)


def _visible(q, k, causal, labels=None):
    """A causal model's query sees only itself and earlier keys: every head gives a later key 0, so
    a ranking would order zeros."""
    if causal and k > q:
        name = (lambda i: f"{quoted(labels[i])}@{i}") if labels is not None else (lambda i: f"position {i}")
        raise InputError(f"the key {name(k)} comes after the query {name(q)}: in a causal model a "
                         f"token attends only to itself and earlier tokens, so every head gives this "
                         f"key weight 0. Pick a key at or before the query")


def rank_heads(col, q, k, causal):
    """col [n_layer, n_head, T]: every query's weight on key k -> HeadHits, most specific first."""
    T = col.shape[-1]
    w = col[:, :, q]  # [n_layer, n_head]
    # the other queries that can see k (in a decoder, q' >= k; a bidirectional model: all)
    others = np.array([i for i in range(k if causal else 0, T) if i != q], dtype=np.int64)
    base = col[:, :, others].mean(axis=-1) if others.size else np.zeros_like(w)
    spec = w - base
    hits = [HeadHit(l, h, float(w[l, h]), float(spec[l, h]))
            for l in range(w.shape[0]) for h in range(w.shape[1])]
    return sorted(hits, key=lambda x: (-x.specificity, -x.weight, x.layer, x.head))


def _norm(s):  # a token as typed: no space marks ("·keys" and "keys" alike), any case
    return plain(s).lower()


def _listing(labels):
    return " ".join(f"{lab}@{i}" for i, lab in enumerate(labels))


def resolve_token(result, spec):
    """Position of a token given as its display text ("keys", "·keys" or "Ġkeys"), or `text@pos`
    when it occurs more than once."""
    labels = list(result.labels)
    raw = list(getattr(result, "tokens", labels))
    spec = str(spec)
    text, pos = spec, None
    if "@" in spec:
        head, tail = spec.rsplit("@", 1)
        digits = tail.strip().lstrip("-")
        if digits.isascii() and digits.isdigit():  # "²".isdigit() is True, but int("²") fails
            text, pos = head, int(tail)
    if pos is not None:
        if not 0 <= pos < len(labels):
            raise InputError(f"position {pos} in {quoted(spec)} is outside the {tokens(len(labels))} "
                             f"(0..{len(labels) - 1}): {_listing(labels)}")
        if text and _norm(text) not in (_norm(labels[pos]), _norm(raw[pos])):
            raise InputError(f"position {pos} holds {quoted(labels[pos])}, not {quoted(text)}: {_listing(labels)}")
        return pos
    # case-insensitive on the display label or the tokenizer's own token string
    exact = [i for i in range(len(labels))
             if _norm(text) and _norm(text) in (_norm(labels[i]), _norm(raw[i]))]
    if not exact:
        raise InputError(f"token {quoted(text)} is not in the text; its {tokens(len(labels))} are: "
                         f"{_listing(labels)}")
    if len(exact) > 1:
        where = ", ".join(f"{labels[i]}@{i}" for i in exact)
        raise InputError(f"token {quoted(text)} occurs {len(exact)} times (at positions "
                         f"{', '.join(map(str, exact))}); pick one: {where}")
    return exact[0]
