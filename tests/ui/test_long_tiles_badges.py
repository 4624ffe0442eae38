"""The long view's tiles carry each head's role badge in their titles, as the grid's tiles do (the
same title and shorter forms: figures/titles.title_forms), a probe's badge saying "(probe)" or, in a
narrow tile, "(p)". (The tiles were titled "L1 H0" alone while the Overview labelled the heads.)"""

import re

from PySide6.QtCore import QPointF
from PySide6.QtGui import QImage, QPainter

from attnviz.figures.roles import short_badge
from attnviz.ui.views.long_view import LongView
from windows import TOY, WAIT, long_view_shown, open_window

TEXT = "the cat sat on a mat. " * 12  # 122 tokens of the toy decoder: a long text at 40


def painted_titles(tiles, monkeypatch) -> list[str]:
    """The texts the tiles paint, in order (each tile's title)."""
    said = []
    image = QImage(tiles.width(), tiles.height(), QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    try:
        tiles.paint(p)
    finally:
        p.end()
    return said


def test_the_long_tiles_titles_carry_the_role_badges(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    st = w.state
    lg = long_view_shown(w, qtbot, TEXT, (1400, 900))
    st.set_layer(1)
    tiles = w.findChild(LongView).tiles
    n_head = st.model.config.n_head
    for source, note in (("text", ""), ("probe", " (probe)")):
        st.set_role_options(source=source)
        qtbot.waitUntil(lambda: st.head_labels is not None and lg.tiles is not None and lg.tiles.layer == 1
                        and all(b.endswith(" (probe)") == (source == "probe") for b in st.head_labels[1]),
                        timeout=WAIT)
        badges = st.head_labels[1]
        assert all(badges) and note in badges[0]
        titles = painted_titles(tiles, monkeypatch)
        assert len(titles) == n_head
        for h, title in enumerate(titles):  # whole, or as the grid shortens it
            assert title in (f"L1 H{h}  {badges[h]}", f"H{h}  {badges[h]}", f"H{h} {short_badge(badges[h])}"), titles
        if source == "probe":
            assert all(t.endswith(("(probe)", "(p)")) for t in titles), titles
        for h in range(n_head):  # a hover over a tile names its head with the badge whole
            r = tiles.head_rect(h)
            said = tiles.readout(QPointF(r.center().x(), r.bottom() - 2))
            assert said.startswith(f"L1 H{h}  {badges[h]}  "), said


def test_a_new_long_texts_tiles_show_no_badges_of_the_last_texts_scores(qtbot, tmp_path, monkeypatch):
    """The tiles draw the text the scores follow (state.text_result): from the new run's first paint
    until its own scores come, they show no badge, as the grid over a preview (grid.py)."""
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    st = w.state
    lg = long_view_shown(w, qtbot, TEXT, (1400, 900))
    tiles = w.findChild(LongView).tiles
    qtbot.waitUntil(lambda: bool(st.head_labels) and st.scores_result is st.text_result, timeout=WAIT)
    old, seen = st.text_result, []

    def look(*_):  # each title as painted while the new text's scores are not yet in
        if lg.run is not None and lg.run.result is not old and st.scores_result is not st.text_result:
            seen.extend(painted_titles(tiles, monkeypatch))
    lg.sigRunChanged.connect(look)  # (the tiles' first paint of the new run)
    st.set_text("a dog ran to the big red barn. " * 10)
    qtbot.waitUntil(lambda: look() or (st.text_result is not old and st.scores_result is st.text_result
                                       and bool(st.head_labels)), timeout=WAIT)
    assert seen and all(re.fullmatch(r"(L\d+ )?H\d+", t) for t in seen), seen  # the head alone
    assert painted_titles(tiles, monkeypatch)[0].startswith("L0 H0  ")  # then the new text's badges


def test_the_long_views_picture_titles_its_tiles_as_the_screen_does(qtbot, tmp_path, monkeypatch):
    """The exported picture titles each tile with the badge the view's tile shows (the same title
    forms), a probe's saying so. (The picture wrote "L1 H0" alone under badged tiles.)"""
    from attnviz.figures import render
    from attnviz.figures.titles import abbreviations
    from windows import figure_words

    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    st = w.state
    long_view_shown(w, qtbot, TEXT, (1400, 900))
    st.set_layer(1)
    view = w.findChild(LongView)
    n_head = st.model.config.n_head
    words = figure_words(monkeypatch, render)
    for source, note in (("text", ""), ("probe", " (probe)")):
        st.set_role_options(source=source)
        qtbot.waitUntil(lambda: st.head_labels is not None and view.picture() is not None
                        and view.picture().layer == 1
                        and all(b.endswith(" (probe)") == (source == "probe") for b in st.head_labels[1]),
                        timeout=WAIT)
        badges = st.head_labels[1]
        assert all(badges) and note in badges[0]
        words.clear()
        view.export_picture(tmp_path / f"{source}.png")
        titles = words[1:1 + n_head]  # (after the picture's title line)
        for h, title in enumerate(titles):  # whole, or as the view's tiles shorten it
            assert title in (f"L1 H{h}  {badges[h]}", f"H{h}  {badges[h]}", f"H{h} {short_badge(badges[h])}"), titles
        assert len({t.startswith("L1 ") for t in titles}) == 1  # (a row in one form)
        short = [t for h, t in enumerate(titles) if t == f"H{h} {short_badge(badges[h])}" != f"H{h} {badges[h]}"]
        legend = [line for line in words if line.startswith("titles: ")]  # what they abbreviate
        assert legend == ([f"titles: {abbreviations(badges)}"] if short else []), (titles, legend)
        if source == "probe":
            assert all(t.endswith(("(probe)", "(p)")) for t in titles), titles
            assert short and legend[0].endswith(", (p) = from the probe"), legend
