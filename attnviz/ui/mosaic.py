"""The heatmap grid's arithmetic, no widgets: where each head's tile, title and KV-group band sits
in the mosaic (one image pixel per token, or per pooled block of tokens), and the hover read-out of
one cell, shared by the grid and the focus view. `ui/grid.py` draws what these place."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz.engine.patterns import group_size, head_title


def readout(result, layer: int, head: int, q: int, k: int, value: float, badge: str = "") -> str:
    """`L3 H1  are → keys  0.79` (the weight from query token q to key token k), then the head's
    role badge if the roles panel gave it one."""
    tag = f"  · {badge}" if badge else ""
    return f"{head_title(layer, head)}  {result.labels[q]} → {result.labels[k]}  {value:.2f}{tag}"


def cell_readout(state, layer: int, head: int, q: int, k: int) -> str:
    """The read-out of one cell as the heatmaps show it (the grid and the focus view): the shown
    weight, or `(hidden)` for the first key column while Hide first token is on."""
    if state.hide_first and k == 0:
        r = state.result
        return f"{head_title(layer, head)}  {r.labels[q]} → {r.labels[k]}  (hidden)"
    data = state.display_data()
    value = float(data.attn[layer, head, q, k])
    text = readout(state.result, layer, head, q, k, value, state.badge(layer, head))
    r = state.result
    if data.weighted:
        text += (f"  (value-weighted; weight {float(r.attentions[layer, head, q, k]):.2f}, "
                 f"‖v W_O‖ {float(r.value_norms[layer, head, k]):.3g})")
    return text


@dataclass(frozen=True)
class GridLayout:
    """Where each shown head sits in the mosaic, in image pixels (one pixel per token)."""

    mode: str  # "layer" or "all"
    heads: tuple[tuple[int, int], ...]  # (layer, head) per tile
    x0: np.ndarray  # [n_tiles] left column of each tile
    y0: np.ndarray  # [n_tiles] top row of each tile
    T: int  # tile side in image pixels: the token count, or fewer when pooled
    width: int
    height: int
    ncols: int
    title_h: int  # layer view: pixels above each tile row for titles; all view: the header band
    caption_h: int  # pixels under a row ("all": under the mosaic) for "KV g" captions under GQA
    left: int  # all view: pixels left of the tiles for the "L3" row headers
    n_tok: int = 0  # tokens per side of a head
    pool: int = 1  # tokens per tile pixel (max-pooled) when the heads are smaller on screen than T


def make_layout(mode: str, n_layer: int, layer: int, kv_group: np.ndarray, T: int, ncols: int,
                pool: int = 1) -> GridLayout:
    n_tok = T
    T = -(-T // pool)  # tile side in pixels
    n_head = len(kv_group)
    gs = group_size(kv_group)
    gqa = gs > 1
    gap = max(1, round(0.08 * T))
    group_gap = 3 * gap if gqa else 0
    title_h = max(2, round(0.3 * T))
    caption_h = max(2, round(0.25 * T)) if gqa else 0
    if mode == "all":
        heads = tuple((l, h) for l in range(n_layer) for h in range(n_head))
        ncols = n_head
        left = max(2, round(0.4 * T))
    else:
        heads = tuple((layer, h) for h in range(n_head))
        ncols = max(1, min(ncols, n_head))
        left = 0
    col_x = np.zeros(ncols, np.int64) + left
    for c in range(1, ncols):
        col_x[c] = col_x[c - 1] + T + gap + (group_gap if c % gs == 0 else 0)
    idx = np.arange(len(heads))
    rows, cols = idx // ncols, idx % ncols
    x0 = col_x[cols]
    n_rows = int(rows.max()) + 1 if len(heads) else 0
    if mode == "all":
        y0 = title_h + rows * (T + gap)
        height = title_h + n_rows * (T + gap) - gap + caption_h
    else:
        row_h = title_h + T + caption_h + gap
        y0 = rows * row_h + title_h
        height = n_rows * row_h - gap
    width = int(col_x[-1] + T)
    return GridLayout(mode, heads, x0, y0, T, width, int(height), ncols, title_h, caption_h, left,
                  n_tok, pool)


def best_ncols(n_head: int, gs: int, view_w: float, view_h: float) -> tuple[int, float]:
    """Columns that make the tiles of one layer as large as the view allows, KV groups kept whole;
    with the tiles' side in screen pixels."""
    best, best_size = n_head, -1.0
    for c in range(1, n_head + 1):
        if gs > 1 and c % gs and gs % c:
            continue
        rows = math.ceil(n_head / c)
        size = min(view_w / (c * 1.1), view_h / (rows * (1.4 + (0.25 if gs > 1 else 0))))
        if size > best_size * 1.02:
            best, best_size = c, size
    return best, best_size


def pool_factor(T: int, tile_px: float) -> int:
    """Tokens per pixel so a head is not drawn larger than it appears: nearest-neighbour scaling
    would drop rows and columns (thin diagonals vanish); max-pooling keeps every peak visible."""
    return max(1, math.ceil(T / max(tile_px, 8.0) - 0.15))  # a 15% shrink drops almost nothing


def view_geometry(mode: str, n_layer: int, n_head: int, gs: int, T: int, w: float, h: float) -> tuple[int, int]:
    """(columns, pool factor) for a view w x h screen pixels large: the all view shows every head of
    a layer in one row; the layer view picks the columns that make its tiles largest."""
    if mode == "all":
        extra = 0.25 if gs > 1 else 0.0
        tile_px = min(w / (n_head * 1.1 + 0.4 + extra * n_head / gs), h / (n_layer * 1.1 + 0.3 + extra))
        return n_head, pool_factor(T, tile_px)
    ncols, tile_px = best_ncols(n_head, gs, w, h)
    return ncols, pool_factor(T, tile_px)


def tile_index(lo: GridLayout, layer: int, head: int) -> int | None:
    """The tile that shows head (layer, head), or None when the layout does not show it."""
    if lo.mode == "all":
        i = layer * lo.ncols + head
    else:
        if layer != lo.heads[0][0]:
            return None
        i = head
    return i if 0 <= i < len(lo.heads) else None


def title_spots(lo: GridLayout, n_head: int):
    """Where the titles go: [(x, y, anchor)] and their texts. Layer view: one title above each tile,
    texts None (the window writes "L3 H1" and the role badge per refresh); all view: "H1" over each
    column and "L3" left of each row."""
    T = lo.T
    if lo.mode != "all":
        return [(float(lo.x0[i]), float(lo.y0[i]) - 0.05 * T, (0, 1)) for i in range(len(lo.heads))], None
    n_layer = len(lo.heads) // n_head
    spots = [(float(lo.x0[h]) + T / 2, lo.title_h * 0.9, (0.5, 1)) for h in range(n_head)]
    spots += [(lo.left * 0.85, float(lo.y0[l * n_head]) + T / 2, (1, 0.5)) for l in range(n_layer)]
    return spots, [f"H{h}" for h in range(n_head)] + [f"L{l}" for l in range(n_layer)]


def kv_segments(lo: GridLayout, kv_group: np.ndarray) -> list[tuple[float, float, float, float, int]]:
    """The KV-group bands behind the tiles, [(x_left, x_right, y_top, y_bottom, group)]: one per
    group in the all view (a column run), one per group and tile row in the layer view."""
    T = lo.T
    pad = max(0.5, 0.04 * T)
    segments = []
    if lo.mode == "all":
        for g in range(int(kv_group.max()) + 1):
            cols = np.nonzero(kv_group == g)[0]
            segments.append((lo.x0[cols[0]] - pad, lo.x0[cols[-1]] + T + pad, lo.title_h - pad, lo.height, g))
        return segments
    row_of = np.arange(len(lo.heads)) // lo.ncols
    for r in range(int(row_of.max()) + 1):
        in_row = np.nonzero(row_of == r)[0]
        for g in np.unique(kv_group[[lo.heads[i][1] for i in in_row]]):
            tiles = [i for i in in_row if kv_group[lo.heads[i][1]] == g]
            segments.append((lo.x0[tiles[0]] - pad, lo.x0[tiles[-1]] + T + pad,
                             lo.y0[tiles[0]] - lo.title_h, lo.y0[tiles[0]] + T + lo.caption_h, int(g)))
    return segments
