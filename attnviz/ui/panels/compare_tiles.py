"""The Compare panel's A | B | A − B pictures (compare_panel.ComparePanel): each head's tile as
shown, pooled to its pixels as the grid pools its heads (figures/compare.py: weight_tile,
signed_tile), and the cell a pixel of a painted tile shows, for its hover."""

from __future__ import annotations

from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures import compare as F
from attnviz.ui.views import grid_compare as GC
from attnviz.ui.views.painted import window_origin


def layer_pictures(panel, layer: int, mode: str | None = None, heads=None, lim: float | None = None,
                   side: int | None = None):
    """(rgb tiles of `heads` (None: all) of `layer` in `mode` (None: the one shown), each `side`
    pixels square (None: a pixel a token), the colour limit: `lim`, else the layer's largest
    |A − B|; None in A or B), as shown: under Hide first token renormalised, the hidden key and the
    undefined rows in the no-value colour."""
    a, b = panel.sides(panel.jobs.comparison)
    mode, heads = mode or panel.jobs.mode, range(a.n_head) if heads is None else heads
    side = a.n_tok if side is None else int(side)
    if mode == "A-B":
        d, blank = GC.difference(a, b, layer)
        lim = F.signed_limit(d) if lim is None else lim
        return [F.signed_tile(d[h], None if blank is None else blank[h], a.hide_first, lim, side,
                              panel.state.colormap)
                for h in heads], lim
    s = a if mode == "A" else b
    mats, blank = s.rows(layer, 0, s.n_tok), s.undefined_rows(layer, 0, s.n_tok)
    return [F.weight_tile(mats[h], blank[h], s.hide_first, panel.state.colormap, side) for h in heads], None


def tile_cell(panel, head: int, q: int, k: int) -> tuple[float, float]:
    """The centre of the pixels that show cell (q, k) of `head`'s painted tile, in the tiles
    widget's pixels."""
    r, T = panel.tile_rects[head], panel.tile_T
    p = F.tile_pool(T, r.width())
    n = -(-T // p)
    return r.left() + F.block_centre(k // p, n, r.width()), r.top() + F.block_centre(q // p, n, r.height())


def tile_readout(panel, x: float, y: float) -> str | None:
    """The hover over the tiles: the cell the pixel at (x, y) shows (a pooled pixel: its largest
    weight or difference, in a defined row) with A's, B's and A − B's numbers as shown."""
    c, T = panel.jobs.comparison, panel.tile_T
    dpr, origin = panel.tiles.devicePixelRatioF(), window_origin(panel.tiles)
    for hd, r in enumerate(panel.tile_rects):
        at = F.tile_pixel(r, x, y, dpr, origin)
        if at is None:
            continue
        side = int(r.width())
        p = F.tile_pool(T, side)
        blocks = F.pixel_blocks(-(-T // p), side)
        i, j = at
        layer = min(panel.state.layer, c.b_attentions.shape[0] - 1)
        q, k = int(blocks[i]) * p, int(blocks[j]) * p
        if p > 1:  # (a pooled pixel: the cell it shows, as the grid's hover names it)
            cell = GC.pooled_cell(panel.jobs, c.result, layer, hd, q, k, p, panel.state.hide_first)
            q, k = cell or panel.sides(c)[0].strongest_in_block(layer, hd, q, k, p)
        lab = c.result.labels  # (the cell as shown: under Hide first token renormalised)
        return (f"{head_title(layer, hd)}  {quoted(lab[q])} \u2192 {quoted(lab[k])}: "
                f"{GC.cell_numbers(c, layer, hd, q, k, panel.state.hide_first)}")
    return None
