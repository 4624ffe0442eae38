"""Divergences between two runs' rows: the Jensen-Shannon divergence of two attention rows (bits)
and the cosine of two residual-stream rows (engine/analysing/compare.py defines what each means)."""

from __future__ import annotations

import numpy as np


def _jsd_parts(p, q):  # [..., n_k] x2 -> p log2(p / m), q log2(q / m) [..., n_k] float64
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0) / np.where(m > 0, m, 1.0)), 0.0)
        tq = np.where(q > 0, q * np.log2(np.where(q > 0, q, 1.0) / np.where(m > 0, m, 1.0)), 0.0)
    return tp, tq


def row_jsd(p, q):  # [..., n_k] x2 -> [...] in bits
    """Jensen-Shannon divergence in bits between rows p and q (float64; 0 * log 0 = 0)."""
    tp, tq = _jsd_parts(p, q)
    return np.clip(0.5 * tp.sum(axis=-1) + 0.5 * tq.sum(axis=-1), 0.0, 1.0)


def visible_jsd(p, q, last):  # [..., n_q, n_k] x2, last [n_q] -> [..., n_q] in bits
    """row_jsd of each query row i over keys 0..last[i] (the keys it sees), its terms summed one
    key after another: a row's value is the same bits however many keys the text has after it
    (a keystroke's earlier rows keep theirs)."""
    tp, tq = _jsd_parts(p, q)
    sums = np.cumsum(0.5 * tp + 0.5 * tq, axis=-1)
    at = np.broadcast_to(np.asarray(last)[:, None], sums.shape[:-1] + (1,))
    return np.clip(np.take_along_axis(sums, at, axis=-1)[..., 0], 0.0, 1.0)


def cosine_rows(x, y):  # [..., T, d] x2 -> [..., T]
    """cos(x[t], y[t]) = x.y / sqrt((x.x)(y.y)) in float64 (exactly 1.0 for equal rows); a zero row
    against a zero row is 1, against anything else 0."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    dot = np.einsum("...d,...d->...", x, y)
    den = np.sqrt(np.einsum("...d,...d->...", x, x) * np.einsum("...d,...d->...", y, y))
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(den > 0, dot / np.where(den > 0, den, 1.0), 0.0)
    both_zero = (den == 0) & ~np.any(x, axis=-1) & ~np.any(y, axis=-1)
    return np.clip(np.where(both_zero, 1.0, cos), -1.0, 1.0)
