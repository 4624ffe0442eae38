"""ui/mosaic.py: where the grid's tiles, titles and KV-group bands go (no widgets needed)."""

import numpy as np

from attnviz.engine.layers import kv_group
from attnviz.ui.mosaic import kv_segments, make_layout, tile_index, title_spots, view_geometry


def test_tile_index_finds_shown_heads_only():
    groups = kv_group(9, 3)  # SmolLM2: 9 query heads, 3 KV heads
    lo = make_layout("layer", 30, 4, groups, 16, ncols=3)
    assert [tile_index(lo, 4, h) for h in (0, 8)] == [0, 8]
    assert tile_index(lo, 3, 0) is None and tile_index(lo, 4, 9) is None
    everything = make_layout("all", 30, 0, groups, 16, ncols=9)
    assert tile_index(everything, 2, 5) == 2 * 9 + 5


def test_kv_bands_cover_each_groups_tiles_and_nothing_else():
    groups = kv_group(9, 3)
    lo = make_layout("layer", 30, 0, groups, 16, ncols=3)  # one KV group per tile row
    segs = kv_segments(lo, groups)
    assert [g for *_, g in segs] == [0, 1, 2]
    for xl, xr, yt, yb, g in segs:
        tiles = np.nonzero(groups == g)[0]
        assert xl < lo.x0[tiles].min() and xr > lo.x0[tiles].max() + lo.T - 1
        assert yt < lo.y0[tiles].min() and yb > lo.y0[tiles].max() + lo.T - 1
    others = make_layout("all", 30, 0, groups, 16, ncols=9)
    assert len(kv_segments(others, groups)) == 3  # one column run per group over all layers


def test_titles_and_geometry():
    groups = kv_group(12, 12)
    lo = make_layout("all", 6, 0, groups, 10, ncols=12)
    spots, texts = title_spots(lo, 12)
    assert len(spots) == 12 + 6 and texts[0] == "H0" and texts[-1] == "L5"
    spots, texts = title_spots(make_layout("layer", 6, 2, groups, 10, ncols=4), 12)
    assert len(spots) == 12 and texts is None  # the grid writes "L2 H0" and badges per refresh
    ncols, pool = view_geometry("layer", 6, 12, 1, 10, 1200, 800)
    assert 12 % ncols == 0 and pool == 1
    assert view_geometry("all", 30, 9, 3, 500, 600, 400)[1] > 1  # 270 heads of 500 tokens: pooled
