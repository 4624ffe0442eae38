"""What the heatmaps show, without Qt: one run's attention under the view options, and where one
layer's heads go. Every view reads this module: the window's grid and focus view (through
AppState.shown), the long view of a long text (LongState.shown), every export
(figures/data.make_view), so none can disagree. The run is dense (a RunResult with attentions
[n_layer, n_head, T, T]) or long (engine/computing/longdoc.LongRun: patterns computed on demand from
each layer's q, k and row log-sum-exp); the rules are the same. Each has a test in
tests/figures/test_view.py (dense) and tests/figures/test_shown_long.py (long against dense):

- Value-weighted: each weight a_qk times w_k = ||v_k W_O(h)||, rows renormalised
  (patterns.value_weighted), once the run has the value norms (a dense run with values=True; a
  long run always has them); until then the weights as they are.
- Hide first token: the first key column is hidden, not zeroed: its key weight w_0 is 0 and each
  row is renormalised over the other keys (patterns.drop_first_key). Both options are one rule:
  shown_qk = a_qk w_k / sum_j a_qj w_j (`key_weights`, patterns.reweigh), a row whose total is 0
  all zeros; with neither, the weights as stored. Under Hide first token such a row is undefined
  (patterns.no_weight_rows), blank in every view and export; a pooled cell shows the defined rows
  of its block alone and is blank only where every row of it is undefined (pooled_undefined). No view shows a value for the hidden key, and it
  takes no part in the colour levels. A dense region at one cell per token leaves its column out
  (`key_pos`: 1..T-1; the window leaves its place blank, an export leaves it out); a region of
  cells (`cells`) and a pooled one are in token coordinates, where the hidden key counts as a 0,
  like a masked one, in a max; a cell's mean is over its shown keys alone.
- Colour levels start at 0. 'shared': one top for every head of the run, every layer, so heads and
  layers stay comparable and an export of one head has the window's colour bar; 'per-head': each
  head's own top. A top of 0 (nothing left to show) becomes 1.0: an empty pattern is the lowest
  colour, with an ordinary 0..1 bar. A view of a part of a long text levels what it shows
  (figures/overview.tops of its cells).
- A view asks for a region, never for the dense [n_layer, n_head, T, T]: `cells(layer, region,
  shape, reduce)`, rows r0..r1-1 x keys c0..c1-1 at most H x W cells, each the max or the mean of
  its block of shown weights (`REDUCES`; blocks split the region as evenly as whole tokens allow:
  `cell_edges`), exact once the region is no larger than the cells; or `region(layers, heads,
  rows, pool)`, `pool` tokens per cell, max-pooled. A dense run's shown weights are computed once
  per result and options; a long run's are streamed a block of rows at a time, each row's total
  (the renormalisation) kept per layer once computed.
- One layer's heads are placed by one column rule (`layer_columns`): a row holds whole KV groups,
  and of those the columns that give the largest heads in the area win.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnviz.engine.reading.token_text import tokens
from attnviz.engine.parallel import in_parallel
from attnviz.engine.computing.patterns import SCALE_MODES, key_totals, max_pool, no_weight_rows, reweigh
from attnviz.engine.errors import Cancelled, InputError

EMPTY_TOP = 1.0  # the colour-scale top when nothing shown is above 0
REDUCES = ("max", "mean")  # what a cell shows of its block of weights
TOP_CELLS = 64  # a long head's top is the largest of its cells at up to this many a side
ROW_BLOCK = 128  # rows of shown weights at a time: a long run's [9, 128, 8,192] float32 is 38 MB


@dataclass(frozen=True)
class Region:
    """Part of what is shown: heads x query rows x key columns, maybe pooled."""

    values: np.ndarray  # [n_layers, n_heads, n_rows, n_cols] float32, shown weights (pooled: block maxima)
    rows: np.ndarray  # [n_rows] first query position of each row
    cols: np.ndarray  # [n_cols] first key position of each column
    pool: int  # tokens per row / column (1: one cell per token)
    hide_first: bool = False  # the first key hidden: rows with no weight left are undefined

    @property
    def blank(self) -> np.ndarray | None:  # -> [n_layers, n_heads, n_rows] bool
        """The undefined rows, which a view leaves blank (a pooled row where each of its rows is:
        its block maxima are then all 0, patterns.pooled_undefined); None without Hide first token."""
        return no_weight_rows(self.values) if self.hide_first else None


@dataclass(frozen=True, eq=False)  # (compared by identity: one per computation)
class Overview:
    """The cells of one layer's heads over a region (Shown.cells): values [n_heads, H, W] float32,
    each the max or the mean of its block of shown weights (`reduce`) in the block's defined rows,
    under `options` (hide_first, value-weighted) as applied, computed from `source` (the run or
    result shown); exact when each cell is one weight. `blank` [n_heads, H]: the rows of cells
    whose every query row is undefined (Shown.undefined_rows), which every view leaves blank."""
    layer: int
    heads: tuple
    region: tuple
    reduce: str
    values: np.ndarray  # [n_heads, H, W] float32
    options: tuple = (False, False)
    source: object = field(default=None, repr=False)  # the LongRun / Result the cells were computed from
    blank: np.ndarray | None = field(default=None, repr=False)  # [n_heads, H] bool (None: none)

    @property
    def exact(self) -> bool:
        r0, r1, c0, c1 = self.region
        return self.values.shape[1:] == (r1 - r0, c1 - c0)

    def cell_tokens(self, axis: int) -> int:
        """Tokens per cell along rows (axis 0) or keys (1), rounded up."""
        r0, r1, c0, c1 = self.region
        n = (r1 - r0) if axis == 0 else (c1 - c0)
        return -(-n // self.values.shape[1 + axis])

    def block_text(self) -> str:
        """The most tokens a cell holds, rows × keys: `4×6 tokens`, `1×1 token` (one weight)."""
        rows, keys = self.cell_tokens(0), self.cell_tokens(1)
        return f"{rows:,}×{keys:,} token" + ("" if rows == keys == 1 else "s")

    def edges(self, axis: int) -> np.ndarray:
        """The first token of each cell along rows (axis 0) or keys (1), and the region's end."""
        r0, r1, c0, c1 = self.region
        lo, hi = (r0, r1) if axis == 0 else (c0, c1)
        return cell_edges(lo, hi, self.values.shape[1 + axis])


def cell_edges(lo: int, hi: int, n: int) -> np.ndarray:  # -> [n + 1] strictly increasing (n <= hi - lo)
    """Tokens lo..hi-1 split into n blocks as evenly as whole tokens allow: block j is
    edges[j]..edges[j+1]-1 (the same split as LongPatterns.overview)."""
    return lo + (np.arange(n + 1) * (hi - lo)) // n


def same_prefix(a, b, n: int) -> bool:
    """Whether results a and b both start with the same n token ids (a picked query token stays
    only where it is the same token after the same tokens)."""
    if a is None or b is None or len(a.input_ids) < n or len(b.input_ids) < n:
        return False
    return bool(np.array_equal(a.input_ids[:n], b.input_ids[:n]))


class Shown:
    """One run's attention as every view shows it under (hide_first, value_weighted). `result`: a
    dense RunResult (attentions [n_layer, n_head, T, T]) or a long run (longdoc.LongRun)."""

    def __init__(self, result, hide_first: bool = False, value_weighted: bool = False):
        self.result = result
        self.options = (bool(hide_first), bool(value_weighted))  # as asked
        self.patterns = getattr(result, "patterns", None)  # LongPatterns of a long run, else None
        run = result if self.patterns is None else result.result
        if self.patterns is None:
            self.n_layer, self.n_head, self.n_tok = (int(n) for n in run.attentions.shape[:3])
        else:
            lp = self.patterns
            self.n_layer, self.n_head, self.n_tok = lp.n_layer, lp.n_head, lp.T
        self.norms = getattr(run, "value_norms", None)  # [n_layer, n_head, T] or None
        self.weighted = bool(value_weighted and self.norms is not None)
        self.hide_first = bool(hide_first and self.n_tok > 0)
        self.applied = (self.hide_first, self.weighted)  # the options that change what is shown
        self.key_pos = np.arange(1 if self.hide_first else 0, self.n_tok)  # [n_k] shown key columns
        self._dense: np.ndarray | None = None
        self._head_top: np.ndarray | None = None
        self._weights: dict = {}  # layer -> key weights [n_head, T]
        self._totals: dict = {}  # layer -> (row totals [n_head, T], which are computed [n_head, T])

    @property
    def long(self) -> bool:
        return self.patterns is not None

    # --- the rule ---------------------------------------------------------------------------------
    def key_weights(self, layer: int) -> np.ndarray | None:  # -> [n_head, T] float32
        """What each key's weight is multiplied by before its row is renormalised: ||v_k W_O(h)||
        when value-weighted, else 1; 0 for a hidden first key. None: the weights as stored."""
        if not (self.weighted or self.hide_first):
            return None
        w = self._weights.get(layer)
        if w is None:
            w = (self.norms[layer].astype(np.float32) if self.weighted
                 else np.ones((self.n_head, self.n_tok), np.float32))
            if self.hide_first:
                w[:, 0] = 0.0
            w = self._weights.setdefault(layer, w)  # (one per layer, whichever thread came first)
        return w

    def _shown(self) -> np.ndarray:  # a dense run -> [n_layer, n_head, T, T], token coordinates
        if self._dense is None:
            att = self.result.attentions
            if self.weighted or self.hide_first:
                w = np.stack([self.key_weights(i) for i in range(self.n_layer)])  # [n_layer, n_head, T]
                att = reweigh(att, w, key_totals(att, w))
            self._dense = att
        return self._dense

    def _row_totals(self, layer: int, heads: np.ndarray, a: int, b: int, stop=None,
                    full: np.ndarray | None = None) -> np.ndarray:  # a long run -> [n, b - a]
        """Each row's total sum_k a_qk w_k over every key, rows a..b-1 of `heads`, computed a block
        of rows at a time where not yet known and kept (`full`: rows a..b-1 of those heads over
        every key, when the caller has them)."""
        totals, known = self._totals.get(layer) or self._totals.setdefault(
            layer, (np.zeros((self.n_head, self.n_tok), np.float32), np.zeros((self.n_head, self.n_tok), bool)))
        w = self.key_weights(layer)[heads]
        if full is not None:
            totals[heads, a:b] = key_totals(full, w)
            known[heads, a:b] = True
        for s in range(a, b, ROW_BLOCK):
            e = min(b, s + ROW_BLOCK)
            if known[heads, s:e].all():
                continue
            if stop is not None and stop():
                raise Cancelled("a newer view was asked for")
            every = None if np.array_equal(heads, np.arange(self.n_head)) else heads
            totals[heads, s:e] = key_totals(self.patterns.rows(layer, s, e, every), w)
            known[heads, s:e] = True
        return totals[heads, a:b]

    def rows(self, layer: int, a: int, b: int, heads=None, cols=None, stop=None) -> np.ndarray:
        """Exact shown weights of query rows a..b-1 in `layer`: [n_heads, b - a, c1 - c0] for key
        columns cols = (c0, c1) (all T by default), in token coordinates (a hidden key: 0)."""
        heads = np.arange(self.n_head) if heads is None else np.asarray(heads, dtype=np.int64)
        c0, c1 = (0, self.n_tok) if cols is None else (int(cols[0]), int(cols[1]))
        if not self.long:
            return self._shown()[layer][heads, a:b, c0:c1]
        return self._long_rows(layer, heads, a, b, c0, c1, stop)

    def _long_rows(self, layer, heads, a, b, c0, c1, stop=None) -> np.ndarray:
        lp, w = self.patterns, self.key_weights(layer)
        every = None if np.array_equal(heads, np.arange(self.n_head)) else heads  # (k not repeated)
        if w is None:
            return lp.rows(layer, a, b, every, (c0, c1))
        totals, known = self._totals.get(layer, (None, None))
        if known is not None and known[heads, a:b].all():
            raw, full = lp.rows(layer, a, b, every, (c0, c1)), None
        else:  # every key of these rows: their totals, and the columns asked for
            full = lp.rows(layer, a, b, every)
            raw = full[:, :, c0:c1]
        t = self._row_totals(layer, heads, a, b, stop, full)
        return reweigh(raw, w[heads][:, c0:c1], t)

    # --- colour levels ----------------------------------------------------------------------------
    def head_top(self) -> np.ndarray:  # -> [n_layer, n_head]
        """Each head's colour-scale top: its largest shown weight, EMPTY_TOP where that is 0 (a
        long run: a pass over every layer's pattern)."""
        if self._head_top is None:
            if self.long:
                top = np.stack([self.cells(i, (0, self.n_tok, 0, self.n_tok), (TOP_CELLS, TOP_CELLS))
                                .values.max(axis=(1, 2)) for i in range(self.n_layer)])
            else:
                d = self._shown()
                top = (d.max(axis=(2, 3)) if d.shape[2] * d.shape[3] else
                       np.zeros(d.shape[:2], np.float32)).astype(np.float32)
            self._head_top = np.where(top > 0, top, np.float32(EMPTY_TOP))
        return self._head_top

    def shared_top(self) -> float:
        """The one top of the shared scale: the largest shown weight of the run, EMPTY_TOP if 0."""
        if self.long:
            return float(self.head_top().max())
        d = self._shown()
        top = float(d.max()) if d.size else 0.0
        return top if top > 0 else EMPTY_TOP

    def tops(self, scale_mode: str, layers=None, heads=None) -> np.ndarray:  # -> [n_layers, n_heads]
        """The colour-scale top of each head asked for (levels are 0..top)."""
        if scale_mode not in SCALE_MODES:
            raise ValueError(f"scale mode {scale_mode!r} is not one of {SCALE_MODES}")
        layers, heads = self._select(layers, heads)
        if scale_mode == "shared":
            return np.full((len(layers), len(heads)), self.shared_top(), np.float32)
        return self.head_top()[np.ix_(layers, heads)]

    def levels(self, scale_mode: str, layers=None, heads=None) -> np.ndarray:  # -> [.., .., 2]
        """(low, high) per head asked for: low is always 0."""
        top = self.tops(scale_mode, layers, heads)
        return np.stack([np.zeros_like(top), top], axis=-1)

    # --- regions ------------------------------------------------------------------------------
    def _select(self, layers, heads) -> tuple[list[int], list[int]]:
        layers = list(range(self.n_layer)) if layers is None else [int(l) for l in layers]
        heads = list(range(self.n_head)) if heads is None else [int(h) for h in heads]
        return layers, heads

    def region(self, layers=None, heads=None, rows: tuple[int, int] | None = None,
               pool: int = 1) -> Region:
        """The shown weights of `layers` x `heads` (None: all), query rows a..b (None: all), at
        `pool` tokens per cell. Pooled blocks are in token coordinates: block j holds the keys
        j*pool .. (j+1)*pool - 1 (a hidden first key counts as 0); at one cell per token the
        columns are the shown keys (`key_pos`)."""
        layers, heads = self._select(layers, heads)
        a, b = (0, self.n_tok) if rows is None else (max(0, int(rows[0])), min(self.n_tok, int(rows[1])))
        b = max(a, b)
        if self.long:
            part = np.stack([self.rows(i, a, b, heads) for i in layers])
        else:
            d = self._shown()
            every_head = heads == list(range(self.n_head))
            if every_head and layers == list(range(self.n_layer)):
                part = d  # (views, no copies, for the window's two views)
            elif every_head and len(layers) == 1:
                part = d[layers[0]][None]
            else:
                part = d[np.ix_(layers, heads)]
            part = part[:, :, a:b] if (a, b) != (0, self.n_tok) else part
        pool = max(1, int(pool))
        if pool == 1:
            return Region(part[..., int(self.key_pos[0]):] if self.hide_first else part,
                          np.arange(a, b), self.key_pos, 1, self.hide_first)
        return Region(max_pool(part, pool), np.arange(a, b, pool), np.arange(0, self.n_tok, pool), pool,
                      self.hide_first)

    def cells(self, layer: int, region=None, shape: tuple[int, int] = (1, 1), reduce: str = "max",
              heads=None, stop: Callable[[], bool] | None = None) -> Overview:
        """The shown weights of `layer`'s heads (all, or `heads`) over region = (r0, r1, c0, c1)
        (rows r0..r1-1 x keys c0..c1-1; None: all) at most shape = (H, W) cells, each the max or
        the mean of its block (`cell_edges`) in token coordinates, over the block's defined rows
        (Overview.blank: the rows of cells with none); a region of at most H x W
        weights comes back exact. stop(), asked before each block of rows, ends the work with
        Cancelled when it says so (a newer view is wanted)."""
        if reduce not in REDUCES:
            raise InputError(f"a cell is the 'max' or the 'mean' of its block, not {reduce!r}")
        r0, r1, c0, c1 = (0, self.n_tok, 0, self.n_tok) if region is None else (int(v) for v in region)
        region = (r0, r1, c0, c1)
        heads = tuple(range(self.n_head)) if heads is None else tuple(int(h) for h in heads)
        if not (0 <= r0 < r1 <= self.n_tok and 0 <= c0 < c1 <= self.n_tok):
            raise InputError(f"region {region} is not a block of the {tokens(self.n_tok)}")
        H, W = min(int(shape[0]), r1 - r0), min(int(shape[1]), c1 - c0)
        if H < 1 or W < 1:
            raise InputError(f"a view needs at least 1 x 1 cells, not {shape[0]} x {shape[1]}")
        if self.long and not (self.weighted or self.hide_first):  # the stored weights: the engine's
            every = heads == tuple(range(self.n_head))  # (then its keys are not repeated per head)
            values = self.patterns.overview(layer, (H, W), reduce, heads=None if every else list(heads),
                                            region=region, stop=stop)  # (block maxima over the scores)
            blank = np.zeros((len(heads), H), bool)
        else:
            values, blank = self._fold_cells(layer, np.asarray(heads, dtype=np.int64), region, (H, W),
                                             reduce, stop)
        return Overview(int(layer), heads, region, reduce, values, self.applied, self.result, blank)

    def _fold_cells(self, layer, heads, region, shape, reduce, stop) -> tuple[np.ndarray, np.ndarray]:
        """Cells of exact shown rows, ROW_BLOCK rows at a time; a long run's blocks shared out to
        threads (engine/parallel.in_parallel), each block's cells combined after. -> (values
        [n, H, W], blank [n, H]): a mean is over a cell's defined rows and shown keys (an
        undefined row's zeros and the hidden key's add nothing to its sum), and a row of cells
        with no defined row is blank."""
        r0, r1, c0, c1 = region
        H, W = shape
        row_edges, col_edges = cell_edges(r0, r1, H), cell_edges(0, c1 - c0, W)
        fold = np.maximum.reduceat if reduce == "max" else np.add.reduceat
        blocks = [(a, min(r1, a + ROW_BLOCK)) for a in range(r0, r1, ROW_BLOCK)]
        parts: list = [None] * len(blocks)

        def block(t, buf):  # rows a..b-1 into the cells they meet, i..j-1
            a, b = blocks[t]
            i = int(np.searchsorted(row_edges, a, side="right")) - 1  # the cell of row a
            j = int(np.searchsorted(row_edges, b, side="left"))
            starts = np.concatenate([[a], row_edges[i + 1:j]]) - a
            rows = self.rows(layer, a, b, heads, (c0, c1))  # [n, b - a, c1 - c0]
            defined = (~self.undefined_rows(layer, a, b, heads, stop)).astype(np.int64)  # [n, b - a]
            parts[t] = (i, j, fold(fold(rows, col_edges[:-1], axis=2), starts, axis=1),  # [n, j - i, W]
                        np.add.reduceat(defined, starts, axis=1))  # [n, j - i] defined rows
            return buf

        in_parallel(len(blocks), block, None if self.long else 1, stop)
        out = np.zeros((len(heads), H, W), dtype=np.float32)
        counts = np.zeros((len(heads), H), dtype=np.int64)
        for i, j, part, defined in parts:
            counts[:, i:j] += defined
            if reduce == "max":
                np.maximum(out[:, i:j], part, out=out[:, i:j])
            else:
                out[:, i:j] += part
        if reduce == "mean":  # (a blank cell's sum is 0, and stays 0)
            keys = np.diff(col_edges)  # the shown keys of each column of cells: not the hidden one
            keys[0] -= int(self.hide_first and c0 == 0)
            out /= (np.maximum(counts, 1)[:, :, None] * np.maximum(keys, 1)).astype(np.float32)
        return out, counts == 0

    def weight(self, layer: int, head: int, q: int, k: int) -> float | None:
        """The shown weight from query q to key k, or None for a hidden key."""
        if self.hide_first and k == 0:
            return None
        return float(self.rows(layer, q, q + 1, [head], (k, k + 1))[0, 0, 0])

    def undefined(self, layer: int, head: int, q: int) -> bool:
        """Whether query q's shown row has no weight: the first key hidden and no weight left on
        the others (a decoder's first query, renormalised 0/0; or a sink's row whose other weights
        are 0 in float32). Its numbers are undefined; the exports leave it blank: ExportView.blank."""
        return bool(self.undefined_rows(layer, q, q + 1, [head])[0, 0])

    def undefined_rows(self, layer: int, a: int, b: int, heads=None, stop=None) -> np.ndarray:
        """[n_heads, b - a] bool: which of query rows a..b-1 of `heads` (None: all) are undefined
        (`undefined`); none without Hide first token. A long run's: its rows' totals of 0."""
        heads = np.arange(self.n_head) if heads is None else np.asarray(heads, dtype=np.int64)
        if not self.hide_first or self.n_tok < 2:
            return np.zeros((len(heads), b - a), bool)
        if not self.long:
            return no_weight_rows(self._shown()[layer][heads, a:b])  # (the hidden key: 0)
        return ~(self._row_totals(layer, heads, a, b, stop) > 0)

    def strongest_in_block(self, layer: int, head: int, q0: int, k0: int, pool: int,
                           key_pool: int | None = None) -> tuple[int, int]:
        """(q, k) of the largest shown weight in the pool x key_pool block (None: pool x pool)
        starting at (q0, k0): the cell a pooled pixel shows, in a defined row (the pixel pools those
        alone: pooled_undefined)."""
        lo = max(k0, int(self.key_pos[0]) if len(self.key_pos) else 0)
        q1, k1 = min(self.n_tok, q0 + pool), min(self.n_tok, k0 + (pool if key_pool is None else key_pool))
        if q1 <= q0 or k1 <= lo:
            return q0, k0
        block = self.rows(layer, q0, q1, [head], (lo, k1))[0]
        if self.hide_first:  # (an undefined row's zeros would win a block of zeros)
            undefined = self.undefined_rows(layer, q0, q1, [head])[0]
            block = np.where(undefined[:, None], np.float32(-1), block)
        dq, dk = np.unravel_index(int(block.argmax()), block.shape)
        return q0 + int(dq), lo + int(dk)


# --- where one layer's heads go --------------------------------------------------------------------
# a mosaic's parts in head sides (ui/views/mosaic.py lays the window's grid out with these)
GAP = 0.08  # between heads
GROUP_GAP = 3 * GAP  # more between KV groups
TITLE = 0.3  # a title above each head
CAPTION = 0.25  # "KV g" under a row, under grouped-query attention
EXPORT_ASPECT = 4 / 3  # the area an exported layer is fitted to (width : height; its height follows)


def layer_extent(n_head: int, gs: int, ncols: int, title: float = TITLE,
                 caption: float = CAPTION) -> tuple[float, float]:
    """(width, height) of one layer's heads in `ncols` columns, in head sides (`title` and `caption`
    in head sides too; the window's are fixed in pixels: layer_columns' row_px)."""
    gqa = gs > 1
    rows = math.ceil(n_head / ncols)
    groups = math.ceil(ncols / gs) if gqa else 1
    width = ncols + (ncols - 1) * GAP + (groups - 1) * GROUP_GAP
    height = rows * (title + 1 + (caption if gqa else 0)) + (rows - 1) * GAP
    return width, height


def layer_columns(n_head: int, gs: int, width: float, height: float, title: float = TITLE,
                  caption: float = CAPTION, row_px: float = 0.0) -> tuple[int, float]:
    """Columns for one layer's `n_head` heads (`gs` query heads per KV head) in an area width x
    height: only counts that keep each KV group in one row (a multiple or a divisor of gs), and of
    those the one whose heads are largest (a smaller count wins unless the larger gives 2% more).
    `row_px`: what each row needs besides its heads, in the area's units (the window's titles).
    Returns (columns, a head's side in the area's units)."""
    best, best_side = max(1, n_head), -1.0
    for c in range(1, n_head + 1):
        if gs > 1 and c % gs and gs % c:
            continue
        w, h = layer_extent(n_head, gs, c, title, caption)
        side = min(width / w, (height - math.ceil(n_head / c) * row_px) / h)
        if side > best_side * 1.02:
            best, best_side = c, side
    return best, best_side


def window_edge(n_tok: int, window: int | None, pool: int = 1) -> list[tuple[float, float]]:
    """The edge of a causal sliding window over a [T, T] pattern, as a polyline of (key, query)
    points in cell units (divided by `pool` where cells are pooled): keys left of it are out of the
    window. Row q sees keys q - window + 1..q, so the first row with a masked key is q = window.
    [] where the text fits in the window (nothing is masked) or there is no window."""
    if window is None or n_tok <= window:
        return []
    points = []
    for q in range(window, n_tok):
        k = q - window + 1  # the row's first key inside the window
        points += [(k / pool, q / pool), (k / pool, (q + 1) / pool)]
    return points
