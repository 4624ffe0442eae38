"""Attention in row blocks (a long text's: engine/computing/longdoc.py), from the queries and the
cached keys and values, so no [n_head, n, T] pattern exists: a block of query rows and one KV
group at a time, the keys each block cannot see skipped; the exact weights of any rows are
recomputed later from their queries and log-sum-exps (pattern_rows).
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.computing.layers import mask_bias
from attnviz.engine.parallel import in_parallel


ROW_BLOCK = 256  # query rows per block at most (see group_rows: fewer where T is long)
BLOCK_BYTES = 4 << 20  # a block's scores of one KV group at most: [keys, group rows] float32, in cache


def group_rows(n_keys: int, n_group: int, block: int = ROW_BLOCK) -> int:
    """Query rows per block so that one KV group's scores [n_keys, n_group * rows] float32 stay
    within BLOCK_BYTES (at least 16 rows, at most `block`): each pass over them (mask, max, exp,
    sum, the product with V) then reads the cache, not memory."""
    fit = BLOCK_BYTES // (4 * max(1, n_keys) * n_group)
    return max(1, min(block, max(16, fit)))


def key_range(q0: int, q1: int, T: int, causal: bool, window: int | None) -> tuple[int, int]:
    """Keys lo..hi-1 that query positions q0..q1-1 may see at all (every key when not causal)."""
    if not causal:
        return 0, T
    return (0 if window is None else max(0, q0 - window + 1)), min(T, q1)


def band_bias(q0: int, q1: int, lo: int, hi: int, window: int | None) -> np.ndarray:
    """float32 [q1 - q0, hi - lo]: 0 where query position q may see key position k (k <= q, and
    q - k < window), -inf elsewhere; the causal mask's block at rows q0.., keys lo.."""
    q = np.arange(q0, q1)[:, None]
    k = np.arange(lo, hi)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    return mask_bias(allowed)


def _mask_t(st, q0: int, lo: int, window: int | None) -> None:
    """-inf into scores st [n_keys, s, m] (keys lo.., queries q0..q0+m-1 of s heads) where the
    causal mask (and the window) hides the key: only the keys of the block's diagonal (k > q0) and
    of the window's edge (k <= q0 + m - 1 - window) are touched, at most m keys each."""
    n_keys, _, m = st.shape
    hi = lo + n_keys
    spans = [(max(lo, q0 + 1), hi)]  # keys after some row of the block
    if window is not None:
        spans.append((lo, min(hi, q0 + m - window)))  # keys before some row's window
    for k0, k1 in spans:
        if k1 > k0:
            st[k0 - lo:k1 - lo] += band_bias(q0, q0 + m, k0, k1, window).T[:, None, :]


def work_buffer(buf, shape) -> np.ndarray:
    """A C-contiguous float32 array of `shape` in the flat work array buf (None or too small: a new
    one): products written into memory already touched, not a fresh allocation's pages each
    block. -> (the array, the work array to pass next time)."""
    n = int(np.prod(shape))
    if buf is None or buf.size < n:
        buf = np.empty(n, dtype=np.float32)
    return buf[:n].reshape(shape), buf


def scores_t(qs, k, q0: int, lo: int, hi: int, causal: bool, window: int | None, out=None):
    """Scaled queries qs [s, m, d_head] of s heads that read one KV head, at positions q0..q0+m-1,
    and that head's keys k [T, d_head] -> the masked scores over keys lo..hi-1, keys as rows:
    [hi - lo, s * m], column h * m + i for head h's query q0 + i (-inf where masked); written into
    `out` when given. One product per KV head; a key's row then meets every query of the block, so
    the reductions over keys (softmax, block maxima) run along axis 0, each a pass over whole rows."""
    s, m, d = qs.shape
    st = np.matmul(k[lo:hi], qs.reshape(s * m, d).T, out=out)  # [hi - lo, s m]
    if causal:
        _mask_t(st.reshape(hi - lo, s, m), q0, lo, window)
    return st


def attend_in_blocks(q, k, v, scale, causal, window=None, n_group=1, block=ROW_BLOCK, workers=1):
    """Attention of n queries at positions T-n..T-1 over T keys, a block of rows and one KV group
    at a time (group_rows), so no [n_head, n, T] array exists; keys a block cannot see (beyond its
    last row, outside the window) are skipped. q [n_head, n, d_head], k, v [n_kv_head, T, d_head] ->
    z [n_head, n, d_head] and each row's log-sum-exp lse [n_head, n] (a weight is then
    exp(score - lse): pattern_rows). The weights are not normalised in place: z is the product
    with exp(score - max) divided by the row's sum, one [rows, d_head] division. The blocks are
    shared out to `workers` threads (parallel.in_parallel)."""
    n_head, n, _ = q.shape
    n_kv = k.shape[0]
    T = k.shape[1]
    p = T - n
    z = np.empty((n_head, n, v.shape[-1]), dtype=np.float32)
    lse = np.empty((n_head, n), dtype=np.float32)
    tasks, a = [], 0
    while a < n:  # (rows a..b-1, keys lo..hi-1, KV head g), the longest rows first
        lo, hi = key_range(p + a, p + min(n, a + block), T, causal, window)
        b = min(n, a + group_rows(hi - lo, n_group, block))
        lo, hi = key_range(p + a, p + b, T, causal, window)
        tasks += [(a, b, lo, hi, g) for g in range(n_kv)]
        a = b
    tasks.reverse()  # (a block's cost grows with its keys: the large ones first, the small fill in)

    def task(t, buf):
        a, b, lo, hi, g = tasks[t]
        heads = slice(g * n_group, (g + 1) * n_group)
        st, buf = work_buffer(buf, (hi - lo, n_group * (b - a)))
        st = scores_t(q[heads, a:b] * np.float32(scale), k[g], p + a, lo, hi, causal, window, st)
        top = st.max(axis=0)  # [n_group m]
        st -= top
        np.exp(st, out=st)
        total = st.sum(axis=0)
        zg = np.matmul(st.T, v[g, lo:hi])  # [n_group m, d_head]
        zg /= total[:, None]
        z[heads, a:b] = zg.reshape(n_group, b - a, -1)
        np.log(total, out=total)
        total += top
        lse[heads, a:b] = total.reshape(n_group, b - a)
        return buf

    in_parallel(len(tasks), task, workers)
    return z, lse


def kv_heads(kv) -> list:
    """[n] the KV head each of n query heads reads -> [(KV head, indices of the query heads that
    read it)], KV heads in order: the query heads one product serves (scores_t)."""
    kv = np.asarray(kv, dtype=np.int64)
    return [(int(g), np.flatnonzero(kv == g)) for g in np.unique(kv)]


def pattern_rows(q, k, lse, scale, q0, causal, window=None, kv=None, cols=None):
    """Exact weights of query rows q0..q0+m-1 from their q [n_head, m, d_head], the keys
    k [n_kv_head, T, d_head] and the rows' log-sum-exp lse [n_head, m] (attend_in_blocks):
    -> [n_head, m, c1 - c0] for key columns cols = (c0, c1) (default all T), 0 where masked.
    kv [n_head]: the KV head each query head reads (default: grouped-query order, head h reads
    h // (n_head / n_kv_head)). The scores are scores_t's, one product per KV head."""
    n_head, m, _ = q.shape
    T = k.shape[1]
    if kv is None:
        kv = np.arange(n_head) // (n_head // k.shape[0])
    c0, c1 = (0, T) if cols is None else cols
    lo, hi = key_range(q0, q0 + m, T, causal, window)
    lo, hi = max(lo, c0), min(hi, c1)
    out = np.zeros((n_head, m, c1 - c0), dtype=np.float32)
    if hi > lo:
        for g, idx in kv_heads(kv):
            st = scores_t(q[idx] * np.float32(scale), k[g], q0, lo, hi, causal, window)
            st = st.reshape(hi - lo, len(idx), m)  # [keys, s, m]
            st -= lse[idx]
            np.exp(st, out=st)
            out[idx, :, lo - c0:hi - c0] = st.transpose(1, 2, 0)
    return out
