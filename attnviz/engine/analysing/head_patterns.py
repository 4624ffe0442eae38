"""The detection patterns of the head roles and the per-head measures read on them (heads.py
scores and labels heads with them).

Everything here is pure NumPy on attention patterns `[..., T, T]` (rows sum to 1) and token ids
`[T]`: a role's 0/1 pattern `D [T, T]` (whole, or rows a..b-1 of it for a long text), the
TransformerLens "mul" score sum(A * D) / sum(A), its chance value, the mean attention distance and
the entropy of each row.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.errors import InputError

# roles a head can be labelled with, in tie-break order
ROLES = ("previous", "next", "self", "sink", "duplicate", "induction")
# roles that compare token ids
IDENTITY_ROLES = ("duplicate", "induction")


# ---------------------------------------------------------------- detection patterns

def previous_token_pattern(T):  # T -> D [T, T] bool
    return np.eye(T, k=-1, dtype=bool)


def next_token_pattern(T):  # T -> D [T, T] bool
    return np.eye(T, k=1, dtype=bool)


def self_pattern(T):  # T -> D [T, T] bool
    return np.eye(T, dtype=bool)


def first_token_pattern(T):  # T -> D [T, T] bool
    d = np.zeros((T, T), dtype=bool)
    d[:, 0] = True
    return d


def duplicate_token_pattern(ids, unknown=None):  # [T] (, bool [T]) -> D [T, T] bool
    """Earlier copies of each token. Unknown tokens ([UNK]: the vocabulary lacked the word) are
    never copies of anything: two [UNK]s are usually two different words."""
    ids = np.asarray(ids)
    eq = ids[:, None] == ids[None, :]
    np.fill_diagonal(eq, False)  # a token is always a copy of itself: ignore
    if unknown is not None and np.any(unknown):
        unknown = np.asarray(unknown, dtype=bool)
        eq &= ~unknown[:, None]
        eq &= ~unknown[None, :]
    return np.tril(eq)


def induction_pattern(ids, unknown=None):  # [T] (, bool [T]) -> D [T, T] bool
    dup = duplicate_token_pattern(ids, unknown)
    d = np.zeros_like(dup)
    d[:, 1:] = dup[:, :-1]  # shift one key to the right: the token after the earlier copy
    return np.tril(d)


def detection_pattern(role, ids, unknown=None):  # role, [T] (, bool [T]) -> D [T, T] bool
    """The 0/1 cells a role's score counts; what the window overlays on a head."""
    T = len(ids)
    makers = {
        "previous": lambda: previous_token_pattern(T),
        "next": lambda: next_token_pattern(T),
        "self": lambda: self_pattern(T),
        "sink": lambda: first_token_pattern(T),
        "duplicate": lambda: duplicate_token_pattern(ids, unknown),
        "induction": lambda: induction_pattern(ids, unknown),
    }
    if role not in makers:
        raise InputError(f"no detection pattern for {role!r}; roles are {', '.join(ROLES)}")
    return makers[role]()


# ---------------------------------------------------------------- scores

def mul_score(attn, pattern, exclude_bos=False, exclude_current_token=False):
    """TransformerLens "mul": [..., T, T] x D [T, T] -> [...]; sum(A * D) / sum(A) after exclusions.

    Zeroing A's excluded cells (as TransformerLens does) equals dropping those cells from D and their
    mass from the total, which is what is computed here, without copying A."""
    attn = np.asarray(attn)
    T = attn.shape[-1]
    assert attn.shape[-2] == T and pattern.shape == (T, T), (attn.shape, pattern.shape)
    cells = np.array(pattern, dtype=bool)
    if exclude_bos:
        cells[:, 0] = False
    if exclude_current_token:
        np.fill_diagonal(cells, False)
    qi, ki = np.nonzero(cells)
    num = attn[..., qi, ki].sum(axis=-1, dtype=np.float64)
    den = attn.sum(axis=(-2, -1), dtype=np.float64)
    if exclude_bos:
        den = den - attn[..., :, 0].sum(axis=-1, dtype=np.float64)
    if exclude_current_token:
        den = den - np.trace(attn, axis1=-2, axis2=-1, dtype=np.float64)
    if exclude_bos and exclude_current_token:
        den = den + attn[..., 0, 0]  # counted in both
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12, num / np.where(den > 1e-12, den, 1.0), np.nan)


def chance_score(attn, pattern, allowed, exclude_bos=False, exclude_current_token=False):
    """What `mul_score` would give if, in each query row, the head spread its attention evenly over
    the keys it may attend to: [..., T, T] x D, allowed [T, T] -> [...].

    The head's own row masses (after the same exclusions) weight the rows, so a head is compared
    with itself: sum_q mass_q * |D_q| / |allowed_q| / sum_q mass_q."""
    attn = np.asarray(attn)
    cells = np.array(pattern, dtype=bool) & allowed
    keys = np.array(allowed, dtype=bool)
    if exclude_bos:
        cells[:, 0] = keys[:, 0] = False
    if exclude_current_token:
        np.fill_diagonal(cells, False)
        np.fill_diagonal(keys, False)
    n_keys = keys.sum(axis=-1)
    frac = np.where(n_keys > 0, cells.sum(axis=-1) / np.maximum(n_keys, 1), 0.0)  # [T]
    mass = np.einsum("...qk,qk->...q", attn, keys.astype(attn.dtype), dtype=np.float64)
    total = mass.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 1e-12, (mass * frac).sum(axis=-1) / np.where(total > 1e-12, total, 1.0),
                        np.nan)


def per_layer(fn, attn):  # keeps float64 temporaries to one layer's size
    attn = np.asarray(attn)
    if attn.ndim < 4:
        return fn(attn)
    return np.stack([fn(a) for a in attn])


def mean_distance(attn):  # [..., T, T] -> [...], in tokens
    def one(a):
        T = a.shape[-1]
        pos = np.arange(T)
        dist = np.abs(pos[:, None] - pos[None, :]).astype(np.float32)  # [T, T]
        return (a * dist).sum(axis=-1, dtype=np.float64).mean(axis=-1)

    return per_layer(one, attn)


def entropy(attn):  # [..., T, T] -> [...], in bits
    def one(a):
        a = np.asarray(a, dtype=np.float32)
        lg = np.zeros_like(a)
        np.log2(a, out=lg, where=a > 0)  # 0 * log 0 = 0
        lg *= a
        return -lg.sum(axis=-1, dtype=np.float64).mean(axis=-1)

    return per_layer(one, attn)


def row_coverage(pattern):  # D [T, T] -> (share of rows with a cell, number of such rows)
    rows = int(pattern.any(axis=-1).sum())
    return rows / pattern.shape[0], rows


def detection_rows(role, ids, a, b, unknown=None):  # role, [T], rows a..b-1 -> D[a:b] [b - a, T] bool
    """Rows a..b-1 of detection_pattern(role, ids, unknown), without forming the [T, T] pattern."""
    ids = np.asarray(ids)
    T = len(ids)
    q = np.arange(a, b)[:, None]
    k = np.arange(T)[None, :]
    if role == "previous":
        return k == q - 1
    if role == "next":
        return k == q + 1
    if role == "self":
        return k == q
    if role == "sink":
        return np.broadcast_to(k == 0, (b - a, T)).copy()
    if role not in IDENTITY_ROLES:
        raise InputError(f"no detection pattern for {role!r}; roles are {', '.join(ROLES)}")
    known = np.ones(T, dtype=bool) if unknown is None else ~np.asarray(unknown, dtype=bool)
    if role == "duplicate":  # an earlier copy of token q: ids[k] == ids[q], k < q
        return (ids[a:b, None] == ids[None, :]) & (k < q) & known[a:b, None] & known[None, :]
    d = np.zeros((b - a, T), dtype=bool)  # induction: the token after an earlier copy, k - 1 < q
    d[:, 1:] = ((ids[a:b, None] == ids[None, :-1]) & (k[:, 1:] <= q) & known[a:b, None]
                & known[None, :-1])
    return d
