"""A long run's patterns on demand (`LongPatterns`): any block of rows, one key's column, or an
overview at a resolution, computed from each layer's q, k and row log-sum-exp (longdoc.py keeps
them), with no [n_head, T, T] array formed."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnviz.engine.computing.rowblocks import (
    ROW_BLOCK, group_rows, key_range, kv_heads, pattern_rows, scores_t, work_buffer,
)
from attnviz.engine.errors import InputError
from attnviz.engine.parallel import in_parallel

TABLE_KEYS = 4  # keys per entry of a head's key-block table (LongPatterns.overview)
TABLE_MIN_T = 2048  # tokens from which a head's whole overview keeps its table
TABLES_KEPT = 2  # tables kept per run: [T / TABLE_KEYS, T] float32 each (64 MB at T = 8,192)


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """starts[j]..starts[j]+lengths[j]-1 for every j, one after the other: int64 [sum(lengths)]."""
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(total)


def _fill_table(table, st, lo: int, hi: int) -> None:
    """table [ceil(T / TABLE_KEYS), m] (rows a..b-1's columns) <- the max of each table block of
    the scores st [hi - lo, m] of keys lo..hi-1 (blocks partly outside lo..hi: the keys inside;
    the others hidden from these rows, as -inf from the start)."""
    B = TABLE_KEYS
    f0, f1 = -(-lo // B) * B, hi // B * B  # whole blocks f0..f1-1
    if f1 > f0:
        np.max(st[f0 - lo:f1 - lo].reshape((f1 - f0) // B, B, -1), axis=1, out=table[f0 // B:f1 // B])
    if f0 > lo:  # the block lo falls in
        np.maximum(table[lo // B], st[:min(f0, hi) - lo].max(axis=0), out=table[lo // B])
    if hi > max(f1, f0):  # the block hi falls in
        np.maximum(table[f1 // B], st[max(f1, lo) - lo:].max(axis=0), out=table[f1 // B])


def fold_segments(x: np.ndarray, starts: np.ndarray, stops: np.ndarray, op) -> np.ndarray:
    """x [n, ...] folded along axis 0 over segments starts[j]..stops[j]-1 (each at least one row)
    with op (np.maximum or np.add) -> [len(starts), ...]; as op.reduceat, which walks each
    segment's rows one column at a time. Narrow segments (a zoomed overview's cells): one gathered
    row per segment at a time, whole-array ops; wide ones: one reduce over each slice."""
    widths = stops - starts
    if op is np.add and int(widths.max()) > 16:
        out = np.empty((len(starts),) + x.shape[1:], dtype=x.dtype)
        for j, (a, b) in enumerate(zip(starts.tolist(), stops.tolist())):
            np.add.reduce(x[a:b], axis=0, out=out[j])
        return out
    out = x[starts]
    valid = (slice(None),) + (None,) * (x.ndim - 1)
    for i in range(1, int(widths.max())):
        row = x[np.minimum(starts + i, stops - 1)]  # a segment's last row again once it is done
        if op is np.maximum:
            np.maximum(out, row, out=out)
        else:
            np.add(out, row, out=out, where=(i < widths)[valid])
    return out


@dataclass(frozen=True)
class LongPatterns:
    """A run's patterns, computed on demand from each layer's q, k and row log-sum-exp (module
    docstring). Read-only; safe to read from several threads."""
    q: tuple  # per layer [n_head, T, d_head]
    k: tuple  # per layer [n_kv_head, T, d_head]
    lse: tuple  # per layer [n_head, T]
    scale: tuple  # per layer float
    window: tuple  # per layer int or None
    causal: bool
    n_group: int  # query heads per KV head
    # (layer, head) -> [ceil(T / TABLE_KEYS), T] float32: entry [j, q] the max of query q's scores
    # over keys j TABLE_KEYS.. (j + 1) TABLE_KEYS - 1 (-inf where all are masked); see overview
    tables: dict = field(default_factory=dict, compare=False, repr=False)
    _tables_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def n_layer(self) -> int:
        return len(self.q)

    @property
    def n_head(self) -> int:
        return self.q[0].shape[0]

    @property
    def T(self) -> int:
        return self.q[0].shape[1]

    @property
    def nbytes(self) -> int:  # what is kept: q, k and lse
        return sum(a.nbytes for a in (*self.q, *self.k, *self.lse))

    def _check(self, layer: int, a: int, b: int, heads=None, cols=None) -> None:
        if not 0 <= layer < self.n_layer:
            raise InputError(f"layer {layer} is outside the model's {self.n_layer} layers "
                             f"(0..{self.n_layer - 1})")
        for name, (x, y) in (("rows", (a, b)), ("columns", cols or (0, self.T))):
            if not 0 <= x < y <= self.T:
                raise InputError(f"{name} {x}:{y} are not a block of the {self.T} tokens "
                                 f"(0 <= A < B <= {self.T})")
        if heads is not None and not all(0 <= h < self.n_head for h in heads):
            raise InputError(f"heads {list(heads)} are not all among the {self.n_head} heads")

    def _heads(self, layer: int, a: int, b: int, heads):
        """q [n, b - a, d_head], lse [n, b - a] and the KV head each reads, kv [n], of rows a..b-1
        of every head (heads None) or of `heads`."""
        q, lse = self.q[layer][:, a:b], self.lse[layer][:, a:b]
        kv = np.arange(self.n_head) // self.n_group
        if heads is not None:
            heads = np.asarray(heads, dtype=np.int64)
            q, lse, kv = q[heads], lse[heads], kv[heads]
        return q, lse, kv

    def rows(self, layer: int, a: int, b: int, heads=None, cols=None) -> np.ndarray:
        """Exact weights of query rows a..b-1 in `layer`: [n_head (or len(heads)), b - a, c1 - c0]
        for key columns cols = (c0, c1), all T by default."""
        self._check(layer, a, b, heads, cols)
        q, lse, kv = self._heads(layer, a, b, heads)
        return pattern_rows(q, self.k[layer], lse, self.scale[layer], a, self.causal,
                            self.window[layer], kv, cols)

    def blocks(self, layer: int, block: int = ROW_BLOCK):
        """(a, rows [n_head, m, w]) for row blocks a..a+m-1 of `layer`, in order: a whole pattern
        streamed without holding it. w = T, or, in a causal model, a + m (the keys after the block's
        last row hold 0 and are left out)."""
        for a in range(0, self.T, block):
            b = min(self.T, a + block)
            yield a, self.rows(layer, a, b, cols=(0, b if self.causal else self.T))

    def dense(self, layers=None, rows=None) -> np.ndarray:
        """[len(layers), n_head, b - a, T] for rows = (a, b): what a caller asked to hold whole."""
        layers = range(self.n_layer) if layers is None else layers
        a, b = (0, self.T) if rows is None else rows
        return np.stack([self.rows(i, a, b) for i in layers])

    def column(self, key: int) -> np.ndarray:
        """Every query's weight on key position `key`: [n_layer, n_head, T] (0 where masked), one
        dot product per query and head, without forming a row."""
        if not 0 <= key < self.T:
            raise InputError(f"key position {key} is outside the {self.T} tokens (0..{self.T - 1})")
        out = np.zeros((self.n_layer, self.n_head, self.T), dtype=np.float32)
        for i in range(self.n_layer):
            lo, hi = self._queries_seeing(key, self.window[i])
            kk = np.repeat(self.k[i][:, key], self.n_group, axis=0)  # [n_head, d_head]
            qs = self.q[i][:, lo:hi] * np.float32(self.scale[i])  # [n_head, m, d_head]
            s = np.einsum("hmd,hd->hm", qs, kk) - self.lse[i][:, lo:hi]
            out[i, :, lo:hi] = np.exp(s)
        return out

    def _queries_seeing(self, key: int, window) -> tuple[int, int]:  # queries lo..hi-1 that see key
        if not self.causal:
            return 0, self.T
        return key, self.T if window is None else min(self.T, key + window)

    def _cells(self, layer: int, a: int, b: int, heads, col_edges: np.ndarray, row_starts: np.ndarray,
               reduce: str, out: np.ndarray, buf=None, table=None, use_table: bool = False):
        """Query rows a..b-1 folded into cells: rows row_starts[i].. (relative to a) x keys
        col_edges[j]..col_edges[j+1]-1 (absolute, strictly increasing), each cell the max or the sum
        ("max", "mean") of its weights, written into out [n_head (or len(heads)), len(row_starts),
        len(col_edges) - 1]; buf: a work array (rowblocks.work_buffer), returned for the next block.
        One product per KV head (rowblocks.scores_t: keys as rows), so each block of keys folds along
        axis 0, a pass over whole rows. For the max, the max is taken over the scores and only the
        blocks' maxima are exponentiated: exp(max_k s_k - lse) = max_k exp(s_k - lse) (exp and the
        one subtraction keep the order), the same float32 numbers as reducing rows() at a fraction
        of the exp calls. `table` (one head, the max): a key-block table (LongPatterns.tables) this
        block fills (use_table False: all keys computed) or reads (True: see _table_maxima)."""
        q, lse, kv = self._heads(layer, a, b, heads)
        m = b - a
        lo, hi = key_range(a, b, self.T, self.causal, self.window[layer])
        lo, hi = max(lo, int(col_edges[0])), min(hi, int(col_edges[-1]))
        out[...] = 0
        if hi <= lo:
            return buf
        j0 = int(np.searchsorted(col_edges, lo, side="right")) - 1  # blocks j0..j1-1 meet keys lo..hi-1
        j1 = int(np.searchsorted(col_edges, hi, side="left"))
        starts = np.maximum(col_edges[j0:j1], lo) - lo  # each block's keys, relative to lo
        stops = np.minimum(col_edges[j0 + 1:j1 + 1], hi) - lo
        row_stops = np.append(row_starts[1:], m)
        op = np.maximum if reduce == "max" else np.add
        for g, idx in kv_heads(kv):
            qs = q[idx] * np.float32(self.scale[layer])
            if use_table:
                by_col = self._table_maxima(table[:, a:b], qs, self.k[layer][g], a, lo + starts,
                                            lo + stops, self.window[layer])  # [J, m]
            else:
                st, buf = work_buffer(buf, (hi - lo, len(idx) * m))
                st = scores_t(qs, self.k[layer][g], a, lo, hi, self.causal, self.window[layer], st)
                if table is not None:  # [hi - lo, m]: fill the table's entries of rows a..b-1
                    _fill_table(table[:, a:b], st, lo, hi)
                if reduce == "mean":  # the weights themselves, summed
                    st3 = st.reshape(hi - lo, len(idx), m)
                    st3 -= lse[idx]
                    np.exp(st, out=st)
                by_col = fold_segments(st, starts, stops, op)  # [J, s m]
            by_row = np.ascontiguousarray(by_col.reshape(j1 - j0, len(idx), m).transpose(2, 1, 0))
            if reduce == "max":  # [m, s, J]; a block no key of which a row may see: exp(-inf) = 0
                by_row -= lse[idx].T[..., None]
                np.exp(by_row, out=by_row)
            out[idx, :, j0:j1] = fold_segments(by_row, row_starts, row_stops, op).transpose(1, 0, 2)
        return buf

    def _table_maxima(self, table, qs, k, a: int, s: np.ndarray, e: np.ndarray, window) -> np.ndarray:
        """Each query row a..a+m-1's largest score over keys s[j]..e[j]-1 (absolute) -> [J, m]: the
        key-block table's entries [m rows] for the whole blocks of TABLE_KEYS keys inside each
        block of keys, and the scores of the keys left over at its two ends computed (one product:
        qs [1, m, d_head] with those keys, k [T, d_head]); the same numbers as computing every
        key, but for float32 rounding (the table's come from other products)."""
        B, m = TABLE_KEYS, qs.shape[1]
        J = len(s)
        i0, i1 = -(-s // B), e // B  # whole table blocks i0..i1-1 inside each block of keys
        inner = i1 > i0
        left = np.where(inner, i0 * B, e) - s  # keys s.. before the whole blocks (all when none)
        right = np.where(inner, e - i1 * B, 0)  # keys after them
        top = np.full((J, m), -np.inf, dtype=np.float32)
        if inner.any():
            top[inner] = fold_segments(table, i0[inner], i1[inner], np.maximum)
        n = left + right
        if n.sum():
            keys = np.concatenate([_spans(s, left), _spans(np.where(inner, i1 * B, e), right)])
            cell = np.concatenate([np.repeat(np.arange(J), left), np.repeat(np.arange(J), right)])
            order = np.argsort(keys, kind="stable")  # a block's keys are one run of rows
            keys, cell = keys[order], cell[order]
            st = np.matmul(k[keys], qs[0].T)  # [n keys, m]
            rows = np.arange(a, a + m)
            spans = [(int(np.searchsorted(keys, a, side="right")), len(keys))]  # keys after row a
            if window is not None:  # keys before the last row's window
                spans.append((0, int(np.searchsorted(keys, a + m - window, side="right"))))
            for x, y in spans:
                if y > x:
                    ks = keys[x:y, None]
                    hidden = ks > rows[None, :]
                    if window is not None:
                        hidden |= rows[None, :] - ks >= window
                    np.putmask(st[x:y], hidden, np.float32(-np.inf))
            has = n > 0
            first = np.concatenate([[0], np.cumsum(n[has])[:-1]])
            part = fold_segments(st, first, first + n[has], np.maximum)
            top[has] = np.maximum(top[has], part)
        return top

    def overview(self, layer: int, shape: tuple[int, int], reduce: str = "max", heads=None,
                 region: tuple[int, int, int, int] | None = None,
                 stop: Callable[[], bool] | None = None, workers: int | None = None) -> np.ndarray:
        """The pattern of rows r0..r1-1 x keys c0..c1-1 (region; default all) at a resolution of at
        most shape = (H, W) cells: each cell the max or the mean ("max", "mean") of its block of
        weights (masked weights count as 0 in a mean). Blocks split the region as evenly as whole
        rows and columns allow. -> [n_head (or len(heads)), H', W'] with H' = min(H, r1 - r0), W'
        likewise; a region of at most H x W weights comes back exact. `stop()`, asked before each
        block of rows, ends the work with Cancelled when it says so (a newer view is wanted).
        The blocks of rows are shared out to `workers` threads (None: one per core; see
        in_parallel), each with one BLAS thread; the cells are the same float32s for any number."""
        if reduce not in ("max", "mean"):
            raise InputError(f"an overview cell is the 'max' or the 'mean' of its block, not {reduce!r}")
        r0, r1, c0, c1 = (0, self.T, 0, self.T) if region is None else region
        self._check(layer, r0, r1, heads, (c0, c1))
        H, W = min(int(shape[0]), r1 - r0), min(int(shape[1]), c1 - c0)
        if H < 1 or W < 1:
            raise InputError(f"an overview needs at least 1 x 1 cells, not {shape[0]} x {shape[1]}")
        row_edges = r0 + (np.arange(H + 1) * (r1 - r0)) // H  # strictly increasing: H <= r1 - r0
        col_edges = c0 + (np.arange(W + 1) * (c1 - c0)) // W
        n = self.n_head if heads is None else len(heads)
        out = np.empty((n, H, W), dtype=np.float32)
        share = max(len(idx) for _, idx in kv_heads(self._heads(layer, 0, 0, heads)[2]))
        rows = group_rows(c1 - c0, share)  # rows per block, so that a KV head's scores stay in cache
        cells, i = [], 0
        while i < H:  # cells i..j-1, about `rows` rows at a time
            j = i + 1
            while j < H and row_edges[j + 1] - row_edges[i] <= rows:
                j += 1
            cells.append((i, j))
            i = j

        table, use_table = None, False
        if reduce == "max" and heads is not None and len(heads) == 1 and self.T >= TABLE_MIN_T:
            key = (layer, int(heads[0]))
            with self._tables_lock:
                table = self.tables.get(key)
            use_table = table is not None and int(np.diff(col_edges).min()) >= 2 * TABLE_KEYS
            if table is None and (r0, r1, c0, c1) == (0, self.T, 0, self.T):  # the whole pattern:
                table = np.full((-(-self.T // TABLE_KEYS), self.T), -np.inf, dtype=np.float32)
            elif not use_table:
                table = None

        def block(t, buf):  # rows of cells i..j-1
            i, j = cells[t]
            a, b = int(row_edges[i]), int(row_edges[j])
            return self._cells(layer, a, b, heads, col_edges, row_edges[i:j] - a, reduce,
                               out[:, i:j], buf, table, use_table)

        in_parallel(len(cells), block, workers, stop)
        if table is not None and not use_table:  # filled: kept for the zooms that follow
            with self._tables_lock:
                self.tables[key] = table
                for old in list(self.tables)[:-TABLES_KEPT]:
                    del self.tables[old]
        if reduce == "mean":
            out /= np.outer(np.diff(row_edges), np.diff(col_edges)).astype(np.float32)
        return out
