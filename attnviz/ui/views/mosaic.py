"""The heatmap grid's arithmetic, no widgets: where each head's tile, title and KV-group band sits
in the mosaic (one image pixel per token, or per pooled block of tokens), and the hover read-out of
one cell, shared by the grid and the focus view. `ui/views/grid.py` draws what these place; the shown
weights and the column rule of one layer are figures/view.py's, the exports' too."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz.engine.computing.patterns import group_size, head_title
from attnviz.engine.reading.token_text import isolated
from attnviz.figures.numbers import plain_number
from attnviz.figures.view import CAPTION, GAP, GROUP_GAP, TITLE, layer_columns

LEFT = 0.4  # all view: the "L3" row headers left of each band of layers, in head sides
BAND_GAP = 0.6  # all view: between two bands of layers, in head sides
LABEL_PX = 30  # all view: screen pixels a header ("H13", "L29") needs
TITLE_PX, CAPTION_PX = 24, 18  # layer view: screen pixels of a title row, a "KV g" caption row


def readout(result, layer: int, head: int, q: int, k: int, value: float, badge: str = "") -> str:
    """`L3 H1  are → keys  0.79` (the weight from query token q to key token k), then the head's
    role badge if the roles panel gave it one."""
    tag = f"  · {badge}" if badge else ""
    return (f"{head_title(layer, head)}  {isolated(result.labels[q])} → {isolated(result.labels[k])}  {value:.2f}{tag}"
            + raw_pieces(result, q, k))


def raw_pieces(result, q: int, k: int) -> str:
    """`  [Ġare → Ġkeys]`: the tokenizer's own pieces, where they differ from the labels shown."""
    raw, labels = getattr(result, "tokens", None), result.labels
    if not raw or (raw[q] == labels[q] and raw[k] == labels[k]):
        return ""
    return f"  [{isolated(raw[q])} → {isolated(raw[k])}]"


UNDEFINED = "undefined: no weight left once the first key is hidden"  # (a row's read-out, renormalised 0/0)


def cell_readout(state, layer: int, head: int, q: int, k: int) -> str:
    """The read-out of one cell as the heatmaps show it (the grid and the focus view): the shown
    weight, `(hidden)` for the first key column while Hide first token is on, or `undefined` for
    a row with no key left then (Shown.undefined)."""
    r, shown = state.result, state.shown()
    value = shown.weight(layer, head, q, k)
    if value is None or shown.undefined(layer, head, q):
        why = "(hidden)" if value is None else UNDEFINED
        return f"{head_title(layer, head)}  {isolated(r.labels[q])} → {isolated(r.labels[k])}  {why}" + raw_pieces(r, q, k)
    text = readout(r, layer, head, q, k, value, state.badge(layer, head))
    if shown.weighted:
        text += (f"  (value-weighted; weight {float(r.attentions[layer, head, q, k]):.2f}, "
                 f"‖v W_O‖ {plain_number(r.value_norms[layer, head, k])})")
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
    ncols: int  # heads per row of tiles (all view: of one band of layers)
    title_h: int  # layer view: pixels above each tile row for titles; all view: the header band
    caption_h: int  # pixels under a row ("all": under the mosaic) for "KV g" captions under GQA
    left: int  # all view: pixels left of each band's tiles for the "L3" row headers
    n_tok: int = 0  # tokens per side of a head
    pool: int = 1  # tokens per tile pixel (max-pooled) when the heads are smaller on screen than T
    bands: int = 1  # all view: bands of layers side by side
    label_step: int = 1  # all view: every label_step-th head and layer is labelled (room for the text)


@dataclass(frozen=True)
class Geometry:
    """How the grid is cut for a view of a given size."""

    ncols: int  # heads per row (layer view); n_head (all view)
    pool: int  # tokens per tile pixel
    bands: int = 1  # all view: bands of layers side by side
    tile_px: float = 0.0  # a head's side on screen


def _parts(T: int, gqa: bool) -> tuple[int, int, int, int]:  # -> gap, group gap, title, caption (pixels)
    gap = max(1, round(GAP * T))
    return (gap, round(GROUP_GAP / GAP) * gap if gqa else 0, max(2, round(TITLE * T)),
            max(2, round(CAPTION * T)) if gqa else 0)


def make_layout(mode: str, n_layer: int, layer: int, kv_group: np.ndarray, T: int, ncols: int,
                pool: int = 1, bands: int = 1, tile_px: float = 0.0) -> GridLayout:
    """Layer view: one layer's heads in `ncols` columns, a title above each. All view: every head,
    one row per layer and one column per head, the layers cut into `bands` side by side, with
    headers every label_step-th head and layer so that `tile_px` screen pixels per head fit them."""
    n_tok = T
    T = -(-T // pool)  # tile side in pixels
    n_head = len(kv_group)
    gs = group_size(kv_group)
    gap, group_gap, title_h, caption_h = _parts(T, gs > 1)
    col_dx = np.zeros(n_head, np.int64)
    for c in range(1, n_head):
        col_dx[c] = col_dx[c - 1] + T + gap + (group_gap if c % gs == 0 else 0)
    if mode == "all":
        bands = max(1, min(bands, n_layer))
        per_band = math.ceil(n_layer / bands)
        px = tile_px / T if tile_px > 0 else 0.0  # screen pixels per image pixel
        if px:  # the "H1" headers and "KV g" captions as tall as their text on screen
            title_h = max(title_h, math.ceil(TITLE_PX / px))
            caption_h = max(caption_h, math.ceil(CAPTION_PX / px)) if gs > 1 else 0
        step = max(1, math.ceil(LABEL_PX / (px * (T + gap)))) if px else 1
        left = max(2, round(LEFT * T), math.ceil(LABEL_PX / px) if px else 0)
        band_w = left + int(col_dx[-1]) + T
        band_gap = max(gap, round(BAND_GAP * T))
        heads = tuple((l, h) for l in range(n_layer) for h in range(n_head))
        ls = np.repeat(np.arange(n_layer), n_head)
        hs = np.tile(np.arange(n_head), n_layer)
        x0 = (ls // per_band) * (band_w + band_gap) + left + col_dx[hs]
        y0 = title_h + (ls % per_band) * (T + gap)
        width = bands * band_w + (bands - 1) * band_gap
        height = title_h + per_band * (T + gap) - gap + caption_h
        return GridLayout(mode, heads, x0, y0, T, int(width), int(height), n_head, title_h, caption_h,
                          left, n_tok, pool, bands, step)
    heads = tuple((layer, h) for h in range(n_head))
    top = title_h  # room above the first row
    if tile_px > 0:  # titles and captions as tall as their text on screen, not a share of the head
        px = tile_px / T
        title_h = max(1, round(TITLE_PX / px))
        # (a title sits above its tile's focus frame: below the first row it reaches into the gap
        # and caption over it, at the first only the grid's own top is there)
        top = max(title_h, math.ceil(TITLE_PX / px + focus_margin(T)))
        caption_h = max(1, round(CAPTION_PX / px)) if gs > 1 else 0
    ncols = max(1, min(ncols, n_head))
    col_x = col_dx[:ncols]  # every row as the first: whole KV groups (layer_columns)
    idx = np.arange(n_head)
    rows, cols = idx // ncols, idx % ncols
    row_h = title_h + T + caption_h + gap
    n_rows = int(rows.max()) + 1
    return GridLayout(mode, heads, col_x[cols], rows * row_h + top, T, int(col_x[-1] + T),
                      int((n_rows - 1) * row_h + top + T + caption_h), ncols, title_h, caption_h, 0,
                      n_tok, pool)


def pool_factor(T: int, tile_px: float) -> int:
    """Tokens per pixel so a head is not drawn larger than it appears: nearest-neighbour scaling
    would drop rows and columns (thin diagonals vanish); max-pooling keeps every peak visible.
    (ui/views/grid_fit.fitted checks the laid-out mosaic against its view.)"""
    return max(1, math.ceil(T / max(tile_px, 8.0)))


def all_extent(n_layer: int, n_head: int, gs: int, bands: int, left: float = LEFT,
               side: float = 0.0) -> tuple[float, float]:
    """(width, height) of every layer's heads in `bands` bands, in head sides; with a head's `side`
    on screen, the header and caption rows as tall as their text (make_layout's)."""
    gqa = gs > 1
    title = max(TITLE, TITLE_PX / side) if side > 0 else TITLE
    caption = max(CAPTION, CAPTION_PX / side) if side > 0 else CAPTION
    per_band = math.ceil(n_layer / bands)
    groups = math.ceil(n_head / gs) if gqa else 1
    band_w = left + n_head + (n_head - 1) * GAP + (groups - 1) * GROUP_GAP
    return (bands * band_w + (bands - 1) * BAND_GAP,
            title + per_band * (1 + GAP) - GAP + (caption if gqa else 0))


def all_bands(n_layer: int, n_head: int, gs: int, w: float, h: float) -> tuple[int, float]:
    """Bands of layers for the all view in w x h screen pixels: the count that makes the heads
    largest, their row headers given room to be read. Returns (bands, a head's side in pixels)."""
    best, best_side = 1, -1.0
    for b in range(1, n_layer + 1):
        ew, eh = all_extent(n_layer, n_head, gs, b)
        side = min(w / ew, h / eh)
        ew, eh = all_extent(n_layer, n_head, gs, b, max(LEFT, LABEL_PX / max(side, 1.0)),
                            max(side, 1.0))
        side = min(w / ew, h / eh)
        if side > best_side * 1.02:
            best, best_side = b, side
    return best, best_side


def view_geometry(mode: str, n_layer: int, n_head: int, gs: int, T: int, w: float, h: float) -> Geometry:
    """How to cut the grid for a view w x h screen pixels large: the all view in the bands of layers
    that make its heads largest; the layer view in the columns that do (figures/view.layer_columns,
    the exports' rule)."""
    if mode == "all":
        bands, tile_px = all_bands(n_layer, n_head, gs, w, h)
        return Geometry(n_head, pool_factor(T, tile_px), bands, tile_px)
    ncols, tile_px = layer_columns(n_head, gs, w, h, 0.0, 0.0, TITLE_PX + (CAPTION_PX if gs > 1 else 0))
    return Geometry(ncols, pool_factor(T, tile_px), 1, tile_px)


def tile_index(lo: GridLayout, layer: int, head: int) -> int | None:
    """The tile that shows head (layer, head), or None when the layout does not show it."""
    if lo.mode == "all":
        i = layer * lo.ncols + head
    else:
        if layer != lo.heads[0][0]:
            return None
        i = head
    return i if 0 <= i < len(lo.heads) else None


def focus_margin(T: int) -> float:
    """How far the focus frame stands off a tile, in image pixels."""
    return max(0.5, 0.03 * T)


def title_spots(lo: GridLayout, n_head: int):
    """Where the titles go: [(x, y, anchor)] and their texts. Layer view: one title above each tile,
    texts None (the window writes "L3 H1" and the role badge per refresh); all view: "H1" over every
    label_step-th column of each band and "L3" left of every label_step-th row."""
    T = lo.T
    if lo.mode != "all":
        above = focus_margin(T)  # clear of the focus frame
        return [(float(lo.x0[i]), float(lo.y0[i]) - above, (0, 1)) for i in range(len(lo.heads))], None
    n_layer = len(lo.heads) // n_head
    per_band = math.ceil(n_layer / lo.bands)
    spots, texts = [], []
    for band in range(lo.bands):
        first = band * per_band * n_head  # the band's first tile
        if first >= len(lo.heads):
            break
        for h in range(0, n_head, lo.label_step):
            spots.append((float(lo.x0[first + h]) + T / 2, lo.title_h * 0.9, (0.5, 1)))
            texts.append(f"H{h}")
    for l in range(0, n_layer):
        if (l % per_band) % lo.label_step == 0:
            i = l * n_head
            spots.append((float(lo.x0[i]) - lo.left * 0.1, float(lo.y0[i]) + T / 2, (1, 0.5)))
            texts.append(f"L{l}")
    return spots, texts


def title_room(lo: GridLayout) -> float | None:
    """Layer view: image pixels a title above a tile may take, from its tile's left edge to the
    next tile's in its row (a row of one: the tile's side); all view: None (its short headers
    are never cut)."""
    if lo.mode != "layer":
        return None
    xs = np.unique(lo.x0)
    return float(np.diff(xs).min()) if len(xs) > 1 else float(lo.T)


def kv_segments(lo: GridLayout, kv_group: np.ndarray) -> list[tuple[float, float, float, float, int]]:
    """The KV-group bands behind the tiles, [(x_left, x_right, y_top, y_bottom, group)]: one per
    group in the all view (a column run), one per group and tile row in the layer view."""
    T = lo.T
    pad = max(0.5, 0.04 * T)
    segments = []
    if lo.mode == "all":
        n_head = len(kv_group)
        n_layer = len(lo.heads) // n_head
        per_band = math.ceil(n_layer / lo.bands)
        for first in range(0, n_layer, per_band):  # one run of columns per group and band
            last = min(n_layer, first + per_band) - 1
            for g in range(int(kv_group.max()) + 1):
                cols = np.nonzero(kv_group == g)[0]
                segments.append((lo.x0[first * n_head + cols[0]] - pad, lo.x0[first * n_head + cols[-1]] + T + pad,
                                 lo.title_h - pad, lo.y0[last * n_head] + T + lo.caption_h, g))
        return segments
    # in Python ints: a relayout at each new token walks these per tile (not np.unique: its first
    # call imports numpy.ma, on the main thread at the first keystroke into an empty window)
    group = [int(kv_group[h]) for _, h in lo.heads]
    x0, y0 = lo.x0.tolist(), lo.y0.tolist()
    for start in range(0, len(lo.heads), lo.ncols):  # tile rows: ncols consecutive tiles each
        in_row = range(start, min(len(lo.heads), start + lo.ncols))
        for g in sorted({group[i] for i in in_row}):
            tiles = [i for i in in_row if group[i] == g]
            segments.append((x0[tiles[0]] - pad, x0[tiles[-1]] + T + pad,
                             y0[tiles[0]] - lo.title_h if start else 0, y0[tiles[0]] + T + lo.caption_h, g))
    return segments


def same_layout(a: GridLayout | None, b: GridLayout | None) -> bool:
    """Whether two layouts put every tile, title and band in the same place."""
    if a is None or b is None:
        return a is b
    scalars = ("mode", "heads", "T", "width", "height", "ncols", "title_h", "caption_h", "left",
               "n_tok", "pool", "bands", "label_step")
    return (all(getattr(a, f) == getattr(b, f) for f in scalars)
            and np.array_equal(a.x0, b.x0) and np.array_equal(a.y0, b.y0))
