"""Long texts, up to a model's context: a forward pass that keeps what the patterns are computed
from, and the patterns computed on demand for what is looked at. Pure NumPy, no Qt.

Every pattern of a run at once is [n_layer, n_head, T, T] float32: 72 GB for SmolLM2 (30 x 9 heads)
at its 8,192 positions. A long run (`run_long`) instead keeps, per layer,

    q    [n_head, T, d_head]     the queries, RoPE applied
    k    [n_kv_head, T, d_head]  the keys as cached (RoPE applied, not repeated per group); and V
    lse  [n_head, T]             each row's log-sum-exp of its scores

(31 MB a layer for SmolLM2 at T = 8,192), and attention runs in row blocks (rowblocks.attend_in_blocks),
so no [n_head, T, T] array exists either. A weight is then exp(q_i k_j * scale - lse_i): any block of
rows, one head's rows, one key's column or an overview tile (the max or the mean of each block of
the pattern at a resolution) is computed when asked, from these alone (`LongPatterns`, in
long_patterns.py). From V and each layer's W_O the run also gives its value norms
||v_k W_O(h)|| [n_layer, n_head, T] (result.value_norms, what Value-weighted reads: Model.value_norms).

Below DENSE_LIMIT bytes of patterns the dense path (Model.run) stays what the window types on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnviz.engine.errors import InputError
from attnviz.engine.computing.long_patterns import LongPatterns
from attnviz.engine.computing.rowblocks import ROW_BLOCK, attend_in_blocks
from attnviz.engine.computing.patterns import check_finite
from attnviz.engine.parallel import cores
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, LayerCache, Trace

DENSE_LIMIT = 2 << 30  # bytes of dense patterns [n_layer, n_head, T, T] float32 a run may hold


def dense_bytes(n_layer: int, n_head: int, T: int, rows: int | None = None) -> int:
    """Bytes of float32 patterns [n_layer, n_head, rows, T] (rows: all T by default)."""
    return 4 * n_layer * n_head * (T if rows is None else rows) * T


class LongTrace(Trace):
    """A trace for a long text: no dense patterns; each layer keeps q, k, v and the rows'
    log-sum-exp, and attention runs in row blocks of `row_block`. `progress(i, n_layer)` is called
    before layer i (and with i = n_layer at the end); it may raise Cancelled to stop the run."""

    def __init__(self, progress: Callable[[int, int], None] | None = None, row_block: int = ROW_BLOCK,
                 workers: int | None = None, **records):  # records: inputs, z, resid (see Trace)
        super().__init__(patterns=False, kv=True, **records)
        self.progress = progress
        self.row_block = row_block
        self.workers = cores() if workers is None else max(1, int(workers))
        self.queries: list = []  # per layer [n_head, T, d_head]
        self.lse: list = []  # per layer [n_head, T]
        self.consts: list = []  # per layer families.Consts

    def begin(self, n_layer, ids, p=0):
        if (p and self.past is None) or self.edits or self.start:
            raise ValueError("a long trace runs every row and layer (but an earlier run's prefix), "
                             "without edits")
        super().begin(n_layer, ids, p)
        self.queries, self.lse, self.consts = [None] * n_layer, [None] * n_layer, [None] * n_layer

    def attention(self, q, k, v, c, cache):  # the run's strategy (families.Consts.attention)
        return block_attention(q, k, v, c, cache, self.row_block)

    def slot(self, i, past, rows):
        if self.progress is not None:
            self.progress(i, len(self.k))
        return _LongSlot(self, i, past, rows)


def block_attention(q, k, v, c, cache, row_block: int = ROW_BLOCK):
    """families.dense_attention in blocks of `row_block` query rows: q [n_head, n, d_head], k and v
    [n_kv_head, T, d_head] -> z [n_head, n, d_head], with no [n_head, n, T] pattern; q and each
    row's log-sum-exp [n_head, n] go to cache.q, what a pattern is recomputed from."""
    z, lse = attend_in_blocks(q, k, v, c.scale, c.causal, c.window, c.n_group, row_block,
                              c.workers)  # [n_head, n, d_head], [n_head, n]
    cache.q(q, lse, c)
    cache.pattern(None)
    return z


class _LongSlot(LayerCache):
    """A layer's slot in a LongTrace: q, lse and the constants kept."""

    def q(self, q, lse, c):
        t = self.trace
        if self._p:  # the earlier run's rows first
            q = np.concatenate([self.past.queries[self.i][:, :self._p], q], axis=1)
            lse = np.concatenate([self.past.lse[self.i][:, :self._p], lse], axis=1)
        t.queries[self.i], t.lse[self.i], t.consts[self.i] = np.ascontiguousarray(q), lse, c


class _LongPast(KVCache):
    """An earlier long run as the cache of the next (run_long's reuse): its ids, K, V, and the q and
    row log-sum-exp of each layer; at least the last token is computed again (a text the same or
    shorter runs its last row, so every record of the new run is whole)."""

    def __init__(self, run: LongRun):
        lp, trace = run.patterns, run.result.trace
        super().__init__(ids=np.asarray(run.result.input_ids), k=list(lp.k), v=list(trace.v))
        self.queries, self.lse = lp.q, lp.lse

    def prefix(self, ids: np.ndarray) -> int:
        return min(super().prefix(ids), len(ids) - 1)


@dataclass(frozen=True)
class LongRun:
    """A long text's run: the RunResult (tokens, ids, cache figures, value_norms; its `attentions`
    is None) and its patterns on demand."""
    result: object  # run_result.RunResult
    patterns: LongPatterns


def patterns_of(trace: LongTrace, cfg) -> LongPatterns:
    """The LongPatterns a finished LongTrace holds."""
    c = trace.consts
    return LongPatterns(q=tuple(trace.queries), k=tuple(trace.k), lse=tuple(trace.lse),
                        scale=tuple(x.scale for x in c), window=tuple(x.window for x in c),
                        causal=cfg.causal, n_group=cfg.n_group)


def run_long(model, text: str | None = None, *, ids=None, truncate: bool = False,
             progress: Callable[[int, int], None] | None = None,
             row_block: int = ROW_BLOCK, workers: int | None = None,
             reuse: LongRun | None = None) -> LongRun:
    """Run `text` or `ids` (as Model.run reads them, or a Prepared text) without dense patterns:
    LongRun. The run
    neither reads nor updates the model's KV cache. `progress(i, n_layer)` before each layer (see
    LongTrace) may raise Cancelled. Its rows are shared out to `workers` threads (None: one per
    core), each with one BLAS thread (engine/parallel.py). `reuse`: an earlier long run
    of this model (a causal one): the tokens it shares with this text at the start are not
    computed again, their K, V, q and log-sum-exp are its (as the dense path's KV cache;
    result.cache_reused says how many)."""
    trace = LongTrace(progress, row_block, workers)
    cfg = model.config
    if (reuse is not None and cfg.causal and isinstance(reuse.result.trace, LongTrace)
            and (reuse.patterns.n_layer, reuse.patterns.n_head) == (cfg.n_layer, cfg.n_head)):
        trace.past = _LongPast(reuse)
    result = model.run(text, ids=ids, request=RunRequest(truncate=truncate, use_cache=False),
                       trace=trace)
    check_finite(model.name, trace.lse)  # a row's log-sum-exp is finite where its weights are
    norms = model.value_norms(None, trace.v)[0]  # [n_layer, n_head, T]: Value-weighted
    result = dataclasses.replace(result, value_norms=norms)
    if progress is not None:
        progress(model.config.n_layer, model.config.n_layer)
    return LongRun(result, patterns_of(trace, model.config))


class DenseTooLarge(InputError):
    """Every pattern of a text at once would exceed DENSE_LIMIT. `shape` [n_layer, n_head, T, T] and
    `nbytes` say how large; `advice(instead)` is the message with another suggestion."""

    def __init__(self, shape: tuple, nbytes: int, instead: str, limit: int | None = None):
        self.shape, self.nbytes = shape, nbytes
        self.limit = DENSE_LIMIT if limit is None else limit
        super().__init__(self.advice(instead))

    def advice(self, instead: str) -> str:
        n_layer, n_head, T, _ = self.shape
        return (f"every attention pattern of {T} tokens at once is [{n_layer}, {n_head}, {T}, {T}] "
                f"float32 = {format_bytes(self.nbytes, 'up')}, over the {format_bytes(self.limit)} limit: "
                f"{instead}")


# what a person can do instead, in words they can type or click (no Python names)
LONG_TEXT_ADVICE = ("the window shows a text this long in its long view; on the command line, "
                    "`attnviz attention --layer L` or `--rows A:B` writes a part of its patterns")


def is_long(cfg, T: int, limit: int | None = None) -> bool:
    """Whether every pattern of T tokens at once [n_layer, n_head, T, T] would pass `limit` bytes
    (None: DENSE_LIMIT): the one test of dense against long (Model.run makes it, once per run)."""
    return dense_bytes(cfg.n_layer, cfg.n_head, T) > (DENSE_LIMIT if limit is None else limit)


def check_dense(cfg, T: int, limit: int | None = None) -> None:
    """DenseTooLarge when every pattern of T tokens at once passes `limit` (None: DENSE_LIMIT)."""
    if is_long(cfg, T, limit):
        raise DenseTooLarge((cfg.n_layer, cfg.n_head, T, T), dense_bytes(cfg.n_layer, cfg.n_head, T),
                            LONG_TEXT_ADVICE, limit)


__all__ = ["DENSE_LIMIT", "DenseTooLarge", "LongRun", "LongTrace", "check_dense", "dense_bytes",
           "is_long", "patterns_of", "run_long"]
