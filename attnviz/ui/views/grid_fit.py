"""How many tokens each pixel of the heatmap grid pools, from the view box the mosaic is drawn in.

Qt scales the mosaic to the view by nearest pixel: a mosaic pixel drawn smaller than a screen pixel
may not be painted at all, and with it a row or a column of a head (a thin diagonal, one strong
query row). So the grid pools (ui/views/mosaic.py make_layout, figures/view.py Shown.region: each
pixel the largest weight of its block) until every pixel of the laid-out mosaic, its titles, gaps
and the view's padding counted, is at least one screen pixel: the fewest tokens a pixel that do.
Qt paints the mosaic into its rect rounded to whole pixels (painted.py), round(lo + w) - round(lo)
of them, never fewer than floor(w): a mosaic n pixels across and at least n screen pixels wide is
painted on at least n, each of its pixels on one of its own."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from attnviz.engine.computing.patterns import group_size
from attnviz.ui.views.mosaic import Geometry, GridLayout, make_layout, view_geometry

PAD = 0.005  # the view's margin around the mosaic, a share of its size on each side (HeatmapGrid._set_range)
BAR_EXTRA = 16  # the colour bar's width besides its axis: the bar and its own margins


def view_size(gw, cbar) -> tuple[int, int]:
    """The screen pixels of the view box the mosaic fills in GraphicsLayoutWidget `gw` beside its
    colour bar `cbar`: the widget less its layout's margins, the spacing and the bar."""
    left, top, right, bottom = gw.ci.layout.getContentsMargins()
    spacing = gw.ci.layout.horizontalSpacing()
    width = gw.width() - left - right - spacing - cbar.getAxis("right").width() - BAR_EXTRA
    return max(int(width), 100), max(int(gw.height() - top - bottom), 100)


def scale(lo: GridLayout, w: float, h: float) -> float:
    """Screen pixels a mosaic pixel of `lo` takes in a w x h view (the view fits the mosaic and
    its margin, its aspect kept)."""
    return min(w / (lo.width * (1 + 2 * PAD)), h / (lo.height * (1 + 2 * PAD)))


def fitted(mode: str, n_layer: int, layer: int, kv_group: np.ndarray, T: int, w: float,
           h: float) -> tuple[GridLayout, Geometry]:
    """The grid's layout in a w x h view (view_geometry's cut) and its geometry, pooled with the
    fewest tokens a pixel that draw each mosaic pixel at least a screen pixel wide and high (where
    even a pixel a head does not, a pixel a head). geometry.pool is the layout's."""
    geo = view_geometry(mode, n_layer, len(kv_group), group_size(kv_group), T, w, h)
    pool = max(1, geo.pool - 1)  # (the estimate's tile side is close: one less may fit)
    while True:
        lo = make_layout(mode, n_layer, layer, kv_group, T, geo.ncols, pool, geo.bands, geo.tile_px)
        s = scale(lo, w, h)
        if s >= 1 or lo.T == 1:
            return lo, replace(geo, pool=pool)
        # (a tile about s times its side: a pool that makes it at most that, fewer pixels each time)
        pool = max(pool + 1, math.ceil(T / max(1, math.floor(lo.T * s))))
