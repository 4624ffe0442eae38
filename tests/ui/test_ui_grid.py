"""The heatmap mosaic on synthetic and tiny real results: orientation, quantisation, scales, KV groups."""

import types

import numpy as np
import pytest

from tiny import FIXTURES
from windows import WAIT

pytest.importorskip("pytestqt")

from attnviz.figures.style import heat_table  # noqa: E402
from attnviz.ui.views.grid import HeatmapGrid, Label  # noqa: E402
from PySide6.QtCore import QPointF  # noqa: E402
from PySide6.QtWidgets import QGraphicsRectItem  # noqa: E402
from attnviz.ui.views.mosaic import make_layout  # noqa: E402
from attnviz.engine.computing.patterns import drop_first_key  # noqa: E402
from attnviz.ui.machinery.state import AppState  # noqa: E402


def fake_result(attn, kv_group=None):  # attn [n_layer, n_head, T, T]
    T = attn.shape[-1]
    n_head = attn.shape[1]
    labels = [f"tok{i}" for i in range(T)]
    return types.SimpleNamespace(
        attentions=attn.astype(np.float32), labels=labels, tokens=labels, offsets=[(i, i + 1) for i in range(T)],
        kv_group=np.arange(n_head) if kv_group is None else np.asarray(kv_group), text="x")


def random_attn(n_layer, n_head, T, seed=0):
    a = np.random.default_rng(seed).random((n_layer, n_head, T, T)).astype(np.float32) ** 3
    return a / a.sum(-1, keepdims=True)


@pytest.fixture
def grid(qtbot):
    st = AppState()
    g = HeatmapGrid(st)
    qtbot.addWidget(g)
    g.resize(900, 500)
    g.show()
    return st, g


def test_tiles_hold_quantised_weights_query_rows_key_columns(grid):
    st, g = grid
    attn = random_attn(2, 4, 7)
    st.set_result(fake_result(attn))
    lo = g.layout_
    vmax = attn.max()
    for i, (layer, head) in enumerate(lo.heads):
        tile = g.img.image[lo.y0[i]:lo.y0[i] + 7, lo.x0[i]:lo.x0[i] + 7]
        expect = (np.minimum(attn[layer, head] * (254 / vmax), 254) + 1.5).astype(np.uint8)
        np.testing.assert_array_equal(tile, expect)
    assert (g.img.image == 0).any()  # gaps are index 0 (transparent)
    # cell_at inverts the layout: (x = key column, y = query row)
    x, y = g.cell_center(0, 2, 5, 1)
    assert g.cell_at(x, y) == (0, 2, 5, 1)


def test_rendered_pixel_orientation(grid, qtbot):
    st, g = grid
    attn = np.zeros((1, 2, 6, 6), np.float32)
    attn[0, 0, 1, 4] = 1.0  # query 1 -> key 4 only
    st.set_result(fake_result(attn))
    lut = heat_table(st.colormap)

    def pixel(img, q, k):
        x, y = g.cell_center(0, 0, q, k)
        p = g.vb.mapViewToScene(__import__("PySide6.QtCore", fromlist=["QPointF"]).QPointF(x, y))
        wp = g.gw.mapFromScene(p)
        c = img.pixelColor(wp.x(), wp.y())
        return np.array([c.red(), c.green(), c.blue()])

    def painted():
        img = g.gw.grab().toImage()
        assert np.abs(pixel(img, 1, 4) - lut[255, :3]).max() <= 3  # the hot cell: row 1, column 4
        assert np.abs(pixel(img, 4, 1) - lut[1, :3]).max() <= 3  # its transpose is cold

    qtbot.waitUntil(painted, timeout=WAIT)  # (the view's range settles from the event loop)


def test_per_head_scale_and_hide_first(grid):
    st, g = grid
    attn = random_attn(1, 3, 5, seed=1)
    attn[0, 1] *= 0.2  # a weak head still reaches the top colour on its own scale
    st.set_result(fake_result(attn))
    st.set_scale_mode("per-head")
    lo = g.layout_
    for i in range(3):
        assert g.img.image[lo.y0[i]:lo.y0[i] + 5, lo.x0[i]:lo.x0[i] + 5].max() == 255
    st.set_hide_first(True)
    shown = drop_first_key(attn)  # [.., T, T - 1]: the keys after the first
    np.testing.assert_allclose(shown.sum(-1), 1.0, rtol=1e-5)
    for i in range(3):
        tile = g.img.image[lo.y0[i]:lo.y0[i] + 5, lo.x0[i]:lo.x0[i] + 5]
        assert (tile[:, 0] == 0).all() and (tile[:, 1:] >= 1).all()
    assert "(hidden)" in g.readout_at(0, 1, 2, 0)
    assert g.readout_at(0, 1, 2, 3).endswith(f"{shown[0, 1, 2, 2]:.2f}")


def test_buffers_reused_and_only_lut_changes_with_colormap(grid):
    st, g = grid
    st.set_result(fake_result(random_attn(2, 4, 9)))
    shown = g.img.image
    before = shown.copy()
    st.set_colormap("magma")
    assert np.shares_memory(g.img.image, shown)
    np.testing.assert_array_equal(g.img.image, before)
    np.testing.assert_array_equal(g.img.lut, heat_table("magma"))
    st.set_result(fake_result(random_attn(2, 4, 8, seed=3)))  # fewer tokens: same storage
    assert np.shares_memory(g.img.image, shown) and g.layout_.T == 8


def test_all_layers_view_and_headers(grid):
    st, g = grid
    st.set_result(fake_result(random_attn(3, 4, 6)))
    st.set_view_mode("all")
    lo = g.layout_
    assert len(lo.heads) == 12 and lo.ncols == 4
    titles = g.titles()
    assert titles == ["H0", "H1", "H2", "H3", "L0", "L1", "L2"]
    assert lo.y0[4] > lo.y0[3] and lo.x0[4] == lo.x0[0]  # layer 1 starts a new row
    st.set_view_mode("layer")
    st.set_layer(2)
    titles = g.titles()
    assert titles == ["L2 H0", "L2 H1", "L2 H2", "L2 H3"]


def test_a_long_title_is_cut_short_of_the_next_tiles_title(grid, qtbot):
    """A badge wider than its tile (a template probe's "coreference (probe)"): the title on screen
    is abbreviated ("H0 coref (p)", its probe note kept) and ends before the next tile's title
    begins; titles() still names it whole. A wider window shows it whole again."""
    st, g = grid
    g.resize(420, 300)
    st.set_result(fake_result(random_attn(1, 4, 6)))
    long = "coreference (probe)"
    st.set_head_labels([[long, "", "", ""]])
    qtbot.waitUntil(lambda: g.layout_ is not None and g.titles()[0] == f"L0 H0  {long}")

    def on_screen(t):  # the title's rectangle in the view's pixels (it is drawn unscaled)
        return t.deviceTransform(g.gw.viewportTransform()).mapRect(t.boundingRect())
    first, second = [t for t in g.plot.addedItems if isinstance(t, Label) and t.full.startswith("L0 H")][:2]
    assert first.text() == "H0 coref (p)" and first.toolTip() == first.full
    assert on_screen(first).right() < on_screen(second).left()
    g.resize(1800, 500)
    qtbot.waitUntil(lambda: first.text() == f"L0 H0  {long}")
    assert on_screen(first).right() < on_screen(second).left()


def test_a_cut_title_keeps_its_off_mark(grid, qtbot):
    """A switched-off head with a long badge: the title cut short of the next tile's still says
    `· off` (the badge is abbreviated, then cut, first; the layer, which every title of the view
    shares, before it), and its probe note."""
    from attnviz.engine.analysing.effects import Ablation

    st, g = grid
    g.resize(420, 300)
    st.effects.set_ablation(Ablation(heads=((0, 0),)))
    changed = fake_result(random_attn(1, 4, 6))
    changed.trace = types.SimpleNamespace(edits=((0, 0),))  # (a run with the head switched off)
    st.set_result(changed)
    st.set_head_labels([["coreference (probe)", "", "", ""]])
    qtbot.waitUntil(lambda: g.layout_ is not None and g.titles()[0] == "L0 H0  · off  coreference (probe)")
    first = next(t for t in g.plot.addedItems if isinstance(t, Label) and t.full.startswith("L0 H0"))
    assert first.text().endswith(" (p)") and first.text().startswith("H0  · off  co")


def test_query_row_highlight_in_every_head(grid):
    st, g = grid
    st.set_result(fake_result(random_attn(1, 4, 6)))
    st.set_query(2)
    assert g.query_line.isVisible()
    rects = g.query_line.path().toSubpathPolygons()
    assert len(rects) == 4  # one outline per head
    for poly, x0, y0 in zip(rects, g.layout_.x0, g.layout_.y0):
        r = poly.boundingRect()
        assert (r.x(), r.y(), r.width(), r.height()) == (x0, y0 + 2, 6, 1)
    st.set_query(None)
    assert not g.query_line.isVisible()


def kv_captions(g) -> list[str]:
    """The KV group captions drawn over the grid."""
    return sorted({i.toPlainText() for i in g.plot.addedItems
                   if isinstance(i, Label) and i.isVisible() and i.toPlainText().startswith("KV ")})


def test_gqa_model_groups_its_heads(grid):
    from attnviz.engine import load_model

    st, g = grid
    model = load_model(str(FIXTURES / "llama_gqa"))
    assert model.config.n_head == 8 and model.config.n_kv_head == 2
    st.set_model(model)
    st.set_result(model.run(ids=[1, 5, 7, 9, 11, 3]))
    lo = g.layout_
    bands = [b for b in g.plot.addedItems if isinstance(b, QGraphicsRectItem) and b.isVisible()]  # as drawn
    assert kv_captions(g) == ["KV 0", "KV 1"]
    assert len(bands) >= 2
    # heads 0-3 read KV 0, heads 4-7 KV 1: each band contains exactly its group's tiles
    for b in bands:
        r = b.rect()
        inside = [h for i, (_, h) in enumerate(lo.heads)
                  if r.contains(float(lo.x0[i]) + 0.5, float(lo.y0[i]) + 0.5)]
        assert len({int(model.kv_group[h]) for h in inside}) == 1
    if lo.ncols == 8:  # one row: a wider gap between the groups than inside them
        assert lo.x0[4] - lo.x0[3] > lo.x0[1] - lo.x0[0]
    st.set_view_mode("all")
    assert kv_captions(g) == ["KV 0", "KV 1"]
    assert g.layout_.x0[4] - g.layout_.x0[3] > g.layout_.x0[1] - g.layout_.x0[0]


def test_layout_without_gqa_has_no_group_gap():
    lo = make_layout("layer", 6, 0, np.arange(12), 10, 6)
    assert len(set(np.diff(lo.x0[:6]).tolist())) == 1
    assert lo.caption_h == 0


def test_role_badges_go_into_titles_and_readout_without_refilling(grid):
    st, g = grid
    st.set_result(fake_result(random_attn(2, 3, 5)))
    count = g.update_count
    st.set_head_labels([["sink", "", "prev"], ["", "", ""]])
    assert g.titles()[:3] == ["L0 H0  sink", "L0 H1", "L0 H2  prev"]
    assert g.update_count == count  # titles only: the mosaic is not refilled
    assert g.readout_at(0, 2, 3, 1).endswith("  · prev")


def test_heads_larger_than_the_screen_are_max_pooled(grid):
    st, g = grid  # 900 x 500 widget: 300 tokens do not fit one pixel each
    attn = np.zeros((3, 4, 300, 300), np.float32)
    attn[0, 1, 200, 101] = 1.0  # one hot cell: nearest-neighbour scaling could drop it
    attn[2, 3] = np.eye(300)  # a one-token-wide diagonal
    st.set_result(fake_result(attn))
    st.set_view_mode("all")
    lo = g.layout_
    p = lo.pool
    assert p > 1 and lo.T == -(-300 // p) and lo.n_tok == 300
    i = lo.heads.index((0, 1))
    tile = g.img.image[lo.y0[i]:lo.y0[i] + lo.T, lo.x0[i]:lo.x0[i] + lo.T]
    assert tile[200 // p, 101 // p] == 255 and (tile == 255).sum() == 1
    j = lo.heads.index((2, 3))
    diag = g.img.image[lo.y0[j]:lo.y0[j] + lo.T, lo.x0[j]:lo.x0[j] + lo.T]
    assert (np.diag(diag) == 255).all()
    # the read-out names the cell the pooled pixel shows
    x, y = g.cell_center(0, 1, 200, 101)
    assert g.cell_at(x, y) == (0, 1, 200, 101)
    st.set_query(200)
    r = g.query_line.path().toSubpathPolygons()[i].boundingRect()
    assert (r.y(), r.height()) == (lo.y0[i] + 200 // p, 1)


@pytest.mark.parametrize("p", [2, 3, 4, 10])
def test_max_pool_equals_a_loop_over_blocks(p):
    from attnviz.engine.computing.patterns import max_pool

    x = np.random.default_rng(p).random((3, 10, 10)).astype(np.float32)
    n = -(-10 // p)
    expect = np.array([[[x[h, i * p:(i + 1) * p, j * p:(j + 1) * p].max() for j in range(n)]
                        for i in range(n)] for h in range(3)])
    np.testing.assert_array_equal(max_pool(x, p), expect)


@pytest.mark.parametrize("points", [9, 12, 16])
def test_the_colour_bar_title_never_overlaps_its_ticks(qtbot, qapp, points):
    """At any UI font the colour bar's axis is wide enough for its widest tick label and, beside
    it, its rotated title (at 12 pt they overlapped)."""
    from PySide6.QtGui import QFont, QFontMetricsF

    old = qapp.font()
    font = QFont(old)
    font.setPointSize(points)
    qapp.setFont(font)
    try:
        st = AppState()
        g = HeatmapGrid(st)
        qtbot.addWidget(g)
        st.set_result(fake_result(random_attn(1, 2, 4)))
        g.resize(600, 400)
        g.show()
        axis = g.cbar.getAxis("right")

        def wide_enough():
            fm = QFontMetricsF(axis.style["tickFont"])
            assert axis.style["tickFont"].pointSize() == points
            widest = max(fm.horizontalAdvance(f"{v:.1f}") for v in np.linspace(0, 1, 6))
            title_h = QFontMetricsF(axis.label.font()).height()
            assert axis.width() >= axis.style["tickTextOffset"][0] + widest + title_h

        qtbot.waitUntil(wide_enough, timeout=WAIT)
    finally:
        qapp.setFont(old)


@pytest.mark.parametrize("colormap", ["viridis", "inferno", "CET-L4"])
def test_the_mosaics_short_render_draws_pyqtgraphs_pixels(grid, colormap):
    """MosaicImage.render makes the window's uint8 mosaic into premultiplied ARGB with one table
    lookup; pyqtgraph's own render (8-bit image, colour table, converted) gives the same bytes."""
    from attnviz.ui.views.grid_items import MosaicImage

    st, g = grid
    st.set_colormap(colormap)
    st.set_result(fake_result(random_attn(2, 4, 9)))
    img, lut = g.img.image, g.img.lut
    assert img.dtype == np.uint8 and (img == 0).any() and (img == 255).any()  # the gap and the top
    slow = []
    g.img.render_by_pyqtgraph = lambda: slow.append(1)  # (the instance's: only this item's)
    g.img.render()
    del g.img.render_by_pyqtgraph
    ours = g.img.qimage
    assert slow == []  # the short road was taken
    ref = MosaicImage(axisOrder="row-major")
    ref.setImage(img, levels=(0, 255), lut=lut, autoLevels=False)
    ref.render_by_pyqtgraph()
    assert ours.format() == ref.qimage.format() and ours.size() == ref.qimage.size()
    assert bytes(ours.constBits()) == bytes(ref.qimage.constBits())
    # another table: the short road is taken for it too, not a cached one of the first
    every = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for table in (lut, heat_table("CET-L1")):
        a, b = MosaicImage(axisOrder="row-major"), MosaicImage(axisOrder="row-major")
        for item in (a, b):
            item.setImage(every, levels=(0, 255), lut=table, autoLevels=False)
        a.render()
        b.render_by_pyqtgraph()
        assert bytes(a.qimage.constBits()) == bytes(b.qimage.constBits())


def test_the_layout_follows_the_view_size_and_the_text_not_the_last_draw(grid, qtbot):
    """A result with as many tokens, on a grid of the same size, keeps the layout; another token
    count or a resize gets a new one (tiles as large as the area allows)."""
    st, g = grid
    st.set_result(fake_result(random_attn(2, 4, 7)))
    first = g.layout_
    st.set_result(fake_result(random_attn(2, 4, 7, seed=1)))
    assert g.layout_ is first
    st.set_result(fake_result(random_attn(2, 4, 8)))
    assert g.layout_.T == 8 and g.layout_ is not first
    def tile_px():  # the first tile's width on screen, in the view's pixels
        lo = g.layout_
        left, right = (g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(x, lo.y0[0])))
                       for x in (lo.x0[0], lo.x0[0] + lo.T))
        return right.x() - left.x()

    small = tile_px()
    g.resize(1800, 1000)
    qtbot.waitUntil(lambda: g.gw.width() > 1500, timeout=WAIT)
    st.set_result(fake_result(random_attn(2, 4, 8, seed=2)))
    assert tile_px() > small
    g.resize(900, 500)
    qtbot.waitUntil(lambda: g.gw.width() < 1000, timeout=WAIT)
    st.set_result(fake_result(random_attn(2, 4, 8, seed=3)))
    assert tile_px() == small
