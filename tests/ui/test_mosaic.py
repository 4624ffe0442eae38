"""ui/views/mosaic.py: where the grid's tiles, titles and KV-group bands go (no widgets needed)."""

import numpy as np

from attnviz.engine.computing.layers import kv_group
from attnviz.ui.views.mosaic import CAPTION_PX, TITLE_PX, kv_segments, make_layout, tile_index, title_spots, view_geometry


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
    geo = view_geometry("layer", 6, 12, 1, 10, 1200, 800)
    assert 12 % geo.ncols == 0 and geo.pool == 1
    assert view_geometry("all", 30, 9, 3, 500, 600, 400).pool > 1  # 270 heads of 500 tokens: pooled


def test_the_window_and_the_export_place_a_layers_heads_by_the_same_rule(qapp):
    from types import SimpleNamespace

    from attnviz.figures.data import make_view
    from attnviz.figures.heatmap_layout import layout
    from attnviz.figures.view import EXPORT_ASPECT, layer_columns

    for n_head, n_kv in ((12, 12), (9, 3), (8, 2), (16, 4)):
        groups = kv_group(n_head, n_kv)
        gs = n_head // n_kv
        attn = np.full((2, n_head, 6, 6), 1 / 6, np.float32)
        run = SimpleNamespace(attentions=attn, value_norms=None, text="t", tokens=list("abcdef"),
                              labels=list("abcdef"), input_ids=np.arange(6), kv_group=groups)
        view = make_view(run, model="m", scope="layer", layer=0)
        export_cols = layout(view, 1600).n_cols
        assert export_cols == layer_columns(n_head, gs, EXPORT_ASPECT, 1)[0]
        # the window's columns: the same rule, its titles fixed in pixels (whole KV groups, largest heads)
        window_cols = view_geometry("layer", 2, n_head, gs, 6, 1200, 900).ncols
        assert window_cols == layer_columns(n_head, gs, 1200, 900, 0, 0, TITLE_PX + (CAPTION_PX if gs > 1 else 0))[0]
        assert gs == 1 or window_cols % gs == 0 or gs % window_cols == 0


def test_the_kv_bands_leave_numpy_ma_unimported():
    """The first layout of a grouped-query model (the first key typed into an empty window) must
    not import numpy.ma on the main thread: np.unique does, on its first call, and that took 40 ms
    of the 45 ms stall at that keystroke. A fresh process, so nothing imported it before."""
    import subprocess
    import sys

    code = ("import sys, numpy as np\n"
            "from attnviz.ui.views import mosaic\n"
            "kv = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])\n"
            "mosaic.kv_segments(mosaic.make_layout('layer', 30, 0, kv, 5, 3), kv)\n"
            "print('numpy.ma' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
