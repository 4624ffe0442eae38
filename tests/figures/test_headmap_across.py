"""The layer x head map turned a quarter (layers across, heads down) for wide boxes: layout_fit
picks the orientation with the larger cells, every head's cell centre hits that head in both
orientations (KV gaps included), and the painted cells carry their heads' colours."""

import numpy as np
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number
from windows import painted_texts


def _map(n_layer=30, n_head=9, **kw):
    values = np.random.default_rng(0).uniform(-1, 1, (n_layer, n_head))
    return headmap.HeadMap(title="t", values=values, unit="bits",
                           kv_group=np.repeat(np.arange(3), n_head // 3), **kw)


def test_a_wide_box_lays_the_layers_across_with_larger_cells(qapp):
    hm = _map()
    down, across = headmap.layout(hm, 560, 180), headmap.layout_across(hm, 560, 180)
    fit = headmap.layout_fit(hm, 560, 180)
    assert fit.across and fit.cell == across.cell > down.cell
    tall = headmap.layout_fit(hm, 300, 900)
    assert not tall.across and tall.cell == headmap.layout(hm, 300, 900).cell
    # a map with an MLP column keeps its layers down whatever the box
    with_column = _map(column=("MLP", np.zeros(30)))
    assert not headmap.layout_fit(with_column, 560, 180).across


def test_every_cell_centre_hits_its_head_and_is_painted_its_colour(qapp):
    hm = _map()
    for lay in (headmap.layout(hm, 300, 900), headmap.layout_across(hm, 560, 180)):
        image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
        p = QPainter(image)
        headmap.paint(p, hm, lay, background=QColor("white"))
        p.end()
        for l in range(30):
            for h in range(9):
                x, y = headmap.cell_center(hm, lay, l, h)
                assert headmap.hit(hm, lay, x, y) == ("head", l, h)
                want = headmap.colour(float(hm.values[l, h]), hm.limit)
                assert image.pixelColor(int(x), int(y)).name() == want.name(), (lay.across, l, h)
        # the cells lie inside the picture; the KV gap between H2 and H3 is no head
        x, y = headmap.cell_center(hm, lay, 29, 8)
        assert x + lay.cell / 2 <= lay.width and y + lay.cell / 2 <= lay.height
        x2, y2 = headmap.cell_center(hm, lay, 0, 2)
        gap = (x2, y2 + 0.7 * lay.cell) if lay.across else (x2 + 0.7 * lay.cell, y2)
        assert headmap.hit(hm, lay, *gap) is None


def test_the_caption_says_what_the_colours_mean_signed_or_not(qapp):
    from attnviz.figures import compare as F

    jsd = np.abs(np.random.default_rng(1).uniform(0, 0.2, (4, 3)))
    hm = F.jsd_map(jsd, "A", "B")
    assert hm.scale_text() == f"white 0 to red {plain_number(jsd.max())} bits"  # a JSD is never below 0
    assert headmap.colour(0.0, hm.limit).lightness() > 240  # 0 is the map's white
    signed = _map()
    assert signed.scale_text().startswith("blue < 0 < red, \u00b1")
    img = QImage(400, 300, QImage.Format.Format_RGB32)
    p = QPainter(img)
    headmap.paint(p, hm, headmap.layout_fit(hm, 400, 300), background=QColor("white"))
    p.end()  # (paints without error with the new caption)


def test_colour_indices_give_colour_for_every_value(qapp):
    """The map's cells are coloured from one NumPy pass (colour_indices into colour_table): the
    same colour as colour() value by value, beyond the limit and at 0 included."""
    values = np.array([-3.0, -1.0, -0.5, -1e-9, 0.0, 1e-9, 0.25, 0.999, 1.0, 2.0])
    got = [headmap.colour_table()[i] for i in headmap.colour_indices(values, 1.0)]
    assert [c.rgb() for c in got] == [headmap.colour(float(v), 1.0).rgb() for v in values]


def test_the_caption_names_the_cells_drawn_clipped_at_the_heads_limit(qapp):
    """The colours run to the heads' largest |value|; an MLP column or an embedding cell beyond it is
    drawn at the scale's end, and the caption says so with its size (an MLP at -4 read as -0.4)."""
    values = np.array([[0.1, -0.4], [0.2, 0.3]])
    mlp = np.array([-4.2, 0.1])
    hm = headmap.HeadMap(title="t", values=values, unit="logit", column=("MLP", mlp),
                         extras=(("embed", 0.9), ("bias", 0.01)))
    assert hm.scale_text() == "blue < 0 < red, \u00b10.4 logit (MLP, embed up to \u00b14.2: clipped)"
    inside = headmap.HeadMap(title="t", values=values, unit="logit", column=("MLP", mlp / 100),
                             extras=(("bias", 0.01),))
    assert inside.scale_text() == "blue < 0 < red, \u00b10.4 logit"
    assert headmap.colour(-4.2, hm.limit) == headmap.colour(-0.4, hm.limit)  # (why it must be said)


def test_a_caption_wider_than_the_map_wraps_then_ends_in_an_ellipsis_and_reads_whole_on_hover(qapp, monkeypatch):
    """The lines under the title (what the colours mean, which cells are clipped, the axes) wrap to
    two where the box is narrow, and the second is cut with "…" where two are too few, never
    mid-letter past the picture's edge; the hover over the title's lines gives it whole."""
    from PySide6.QtGui import QFontMetricsF

    from attnviz.figures.render import figure_font
    hm = _map(column=("MLP", np.full(30, 5.0)), extras=(("embed", 7.0),))
    for width, n_lines, cut in ((900, 1, False), (330, 2, False), (200, 2, True)):
        lay = headmap.layout(hm, width, 900)
        said = painted_texts(hm, lay, monkeypatch)
        whole = headmap.caption(hm, lay)
        assert "clipped" in whole and "rows layers, columns heads" in whole
        shown = said[1:1 + n_lines]  # (the title, then the caption's lines)
        assert list(lay.caption_lines) == shown
        assert all(QFontMetricsF(figure_font(10)).horizontalAdvance(s) <= width - 8 for s in shown)
        assert shown[-1].endswith("\u2026") == cut and (cut or " ".join(shown) == whole)
        assert headmap.whole_title(hm, lay) == f"t\n{whole}"


def test_a_wrapped_title_keeps_each_number_with_its_unit(qapp):
    """A title wrapped to the panel's width breaks between words, never between a number and the
    word after it (the ablation scan's "baseline 3.123 nats" read "3.123" at a line's end)."""
    hm = _map()
    hm = headmap.HeadMap("Ablation scan: \u0394 loss when one head is zeroed (baseline 3.123 nats)",
                         hm.values, "nats")
    for width in range(240, 520, 10):
        lines = headmap.layout(hm, width, 900).title_lines
        assert " ".join(lines) == hm.title, (width, lines)
        for line, after in zip(lines, lines[1:]):
            assert not (line[-1].isdigit() and after[0].isalpha()), (width, lines)
