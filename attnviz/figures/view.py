"""What the heatmaps show, without Qt: one run's attention under the view options, and where one
layer's heads go. The window's grid and focus view (through AppState.shown) and every export
(figures/data.make_view) read this module, so they cannot disagree. The rules, each with a test in
tests/figures/test_view.py:

- Value-weighted: each weight a_qk times ||v_k W_O(h)||, rows renormalised (patterns.value_weighted),
  once the run has the value norms; until then the weights as they are.
- Hide first token: the first key column is dropped, not zeroed. The shown keys are `key_pos`
  (1..T-1) and each row is renormalised over them (patterns.drop_first_key): no view shows a value
  for the hidden column, and it takes no part in the colour levels. The window leaves its place
  blank so every column stays under its token; an export leaves it out.
- Colour levels start at 0. 'shared': one top for every head of the run, every layer, so heads and
  layers stay comparable and an export of one head has the window's colour bar; 'per-head': each
  head's own top. A top of 0 (nothing left to show) becomes 1.0: an empty pattern is the lowest
  colour, with an ordinary 0..1 bar.
- A view asks for a region: which heads, which query rows, at which resolution (`pool` tokens per
  pixel, max-pooled so no peak is lost), never for the dense [n_layer, n_head, T, T]. For now the
  region is cut from the dense shown array, computed once per result and options.
- One layer's heads are placed by one column rule (`layer_columns`): a row holds whole KV groups,
  and of those the columns that give the largest heads in the area win.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz.engine.computing.patterns import SCALE_MODES, drop_first_key, max_pool, value_weighted

EMPTY_TOP = 1.0  # the colour-scale top when nothing shown is above 0


@dataclass(frozen=True)
class Region:
    """Part of what is shown: heads x query rows x key columns, maybe pooled."""

    values: np.ndarray  # [n_layers, n_heads, n_rows, n_cols] float32, shown weights (pooled: block maxima)
    rows: np.ndarray  # [n_rows] first query position of each row
    cols: np.ndarray  # [n_cols] first key position of each column
    pool: int  # tokens per row / column (1: one cell per token)


def same_prefix(a, b, n: int) -> bool:
    """Whether results a and b both start with the same n token ids (a picked query token stays
    only where it is the same token after the same tokens)."""
    if a is None or b is None or len(a.input_ids) < n or len(b.input_ids) < n:
        return False
    return bool(np.array_equal(a.input_ids[:n], b.input_ids[:n]))


class Shown:
    """One run's attention as the heatmaps show it under (hide_first, value_weighted)."""

    def __init__(self, result, hide_first: bool = False, value_weighted: bool = False):
        self.result = result
        self.options = (bool(hide_first), bool(value_weighted))  # as asked
        att = result.attentions  # [n_layer, n_head, T, T]
        self.n_layer, self.n_head, self.n_tok = (int(n) for n in att.shape[:3])
        self.weighted = bool(value_weighted and result.value_norms is not None)
        self.hide_first = bool(hide_first and self.n_tok > 0)
        self.key_pos = np.arange(1 if self.hide_first else 0, self.n_tok)  # [n_k] shown key columns
        self._dense: np.ndarray | None = None
        self._head_top: np.ndarray | None = None

    def _shown(self) -> np.ndarray:  # -> [n_layer, n_head, T, n_k]
        if self._dense is None:
            att = self.result.attentions
            if self.weighted:  # [n_layer, n_head, T, T] x [n_layer, n_head, T]
                att = value_weighted(att, self.result.value_norms)
            if self.hide_first:
                att = drop_first_key(att)
            self._dense = att
        return self._dense

    # --- colour levels ----------------------------------------------------------------------------
    def head_top(self) -> np.ndarray:  # -> [n_layer, n_head]
        """Each head's colour-scale top: its largest shown weight, EMPTY_TOP where that is 0."""
        if self._head_top is None:
            d = self._shown()
            top = (d.max(axis=(2, 3)) if d.shape[2] * d.shape[3] else
                   np.zeros(d.shape[:2], np.float32)).astype(np.float32)
            self._head_top = np.where(top > 0, top, np.float32(EMPTY_TOP))
        return self._head_top

    def shared_top(self) -> float:
        """The one top of the shared scale: the largest shown weight of the run, EMPTY_TOP if 0."""
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
        j*pool .. (j+1)*pool - 1 that are shown (a hidden first key is simply absent)."""
        layers, heads = self._select(layers, heads)
        a, b = (0, self.n_tok) if rows is None else (max(0, int(rows[0])), min(self.n_tok, int(rows[1])))
        b = max(a, b)
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
            return Region(part, np.arange(a, b), self.key_pos, 1)
        if self.hide_first:  # back into token coordinates: a 0 in the hidden column's place
            part = np.concatenate([np.zeros(part.shape[:-1] + (1,), part.dtype), part], axis=-1)
        return Region(max_pool(part, pool), np.arange(a, b, pool), np.arange(0, self.n_tok, pool), pool)

    def weight(self, layer: int, head: int, q: int, k: int) -> float | None:
        """The shown weight from query q to key k, or None for a hidden key."""
        if self.hide_first and k == 0:
            return None
        return float(self._shown()[layer, head, q, k - int(self.key_pos[0]) if len(self.key_pos) else k])

    def strongest_in_block(self, layer: int, head: int, q0: int, k0: int, pool: int) -> tuple[int, int]:
        """(q, k) of the largest shown weight in the pool x pool block starting at (q0, k0): the cell
        a pooled pixel shows."""
        k_first = int(self.key_pos[0]) if len(self.key_pos) else 0
        lo = max(k0, k_first)
        block = self._shown()[layer, head, q0:q0 + pool, lo - k_first:k0 + pool - k_first]
        if block.size == 0:
            return q0, k0
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
