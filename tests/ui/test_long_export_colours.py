"""A long text's export is the long view as shown: each tile's cells in the colours the screen
paints them, at the view's scale (Shared: one top over the layer's tiles shown; Per-head: each
tile its own), the large head at its own top, a hidden first key's cells as the screen paints them,
and the picture says which scales and which display options those are. While the large head or the
tiles shown are still being drawn (the focus moved, an option turned on), there is no picture."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog

from attnviz.figures.data import ExportError

from attnviz.figures.numbers import plain_number
from attnviz.figures.overview import tops
from attnviz.ui.views.long_view import LongView
from windows import WAIT, long_view_shown

CELLS = ((0, 0), (1, 0), (3, 2), (-1, -1), (-2, 5), (7, -3))  # (row, column) of cells checked


@pytest.fixture
def long_view(window, qtbot):
    st = window.state
    lg = long_view_shown(window, qtbot, "The cat sat on the mat near the old red door. " * 24, (1400, 900))
    st.set_focus(st.layer, 2)
    view = window.findChild(LongView)
    qtbot.waitUntil(lambda: lg.pane.heads == (2,) and view.picture() is not None, timeout=WAIT)
    yield view
    window.worker.wait_idle()


def same_cells(picture: QImage, rect, screen: QImage) -> list:
    """The cells whose exported pixel differs from the screen's image of them: [(row, col, ...)]."""
    k = rect.width() // screen.width()
    assert k >= 1 and rect.height() == k * screen.height()
    wrong = []
    for r, c in CELLS:
        r, c = r % screen.height(), c % screen.width()
        got = picture.pixel(rect.left() + c * k + k // 2, rect.top() + r * k + k // 2) & 0xFFFFFF
        want = screen.pixel(c, r) & 0xFFFFFF
        if got != want:
            wrong.append((r, c, hex(got), hex(want)))
    return wrong


@pytest.mark.parametrize("scale", ["shared", "per-head"])
def test_the_exported_tiles_and_head_have_the_screen_s_colours(long_view, tmp_path, scale):
    view, st = long_view, long_view.state
    st.set_scale_mode(scale)
    lg = st.long
    path = tmp_path / "long.png"
    lay = view.export_picture(path)
    picture = QImage(str(path))
    assert not picture.isNull() and picture.width() == lay.width
    screen_tiles = view.tiles.images(lg.tiles, st.scale_mode)  # what the tiles paint
    assert len(screen_tiles) == len(lay.tile_rects) == lg.patterns.n_head
    for h, (rect, screen) in enumerate(zip(lay.tile_rects, screen_tiles)):
        assert same_cells(picture, rect, screen) == [], f"head {h}"
    assert same_cells(picture, lay.pane_rect, view.pane.image()) == []
    t = tops(lg.tiles.values, scale)
    legend = view.picture().scales()
    if scale == "shared":
        assert legend[0].startswith(f"tiles: shared scale, 0 .. {plain_number(t[0])} ")
    else:
        assert legend[0].startswith("tiles: per-head scale") and len(set(t.tolist())) > 1
    assert legend[1] == f"L{st.layer} H2 (large): its own scale, 0 .. {plain_number(tops(lg.pane.values, 'per-head')[0])}"


def test_the_shared_and_per_head_pictures_differ_where_the_tops_do(long_view, tmp_path):
    view, st = long_view, long_view.state
    out = {}
    for scale in ("shared", "per-head"):
        st.set_scale_mode(scale)
        lay = view.export_picture(tmp_path / f"{scale}.png")
        out[scale] = QImage(str(tmp_path / f"{scale}.png"))
    t = tops(st.long.tiles.values, "per-head")
    h = int(t.argmin())  # the tile whose own top is furthest under the shared one
    rect = lay.tile_rects[h]
    k = rect.width() // st.long.tiles.values.shape[2]
    r, c = divmod(int(st.long.tiles.values[h].argmax()), st.long.tiles.values.shape[2])
    x, y = rect.left() + c * k + k // 2, rect.top() + r * k + k // 2
    assert out["shared"].pixel(x, y) != out["per-head"].pixel(x, y)


def test_the_button_writes_the_picture(long_view, tmp_path, monkeypatch):
    path, asked = tmp_path / "view.png", []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda *a, **k: (asked.append(a[2]), (str(path), ""))[1]))
    long_view.export_button.click()
    assert path.is_file() and not QImage(str(path)).isNull()
    assert asked[0].endswith(f"_L{long_view.picture().layer}_long.png")  # (the layer shown)
    assert long_view.window().statusBar().currentMessage() == f"Exported {path}"


def test_log_colours_are_exported_as_shown(long_view, tmp_path):
    view, st = long_view, long_view.state
    st.long.set_log(True)
    lay = view.export_picture(tmp_path / "log.png")
    picture = QImage(str(tmp_path / "log.png"))
    for rect, screen in zip(lay.tile_rects, view.tiles.images(st.long.tiles, st.scale_mode)):
        assert same_cells(picture, rect, screen) == []
    assert same_cells(picture, lay.pane_rect, view.pane.image()) == []
    assert all(", log, " in line for line in view.picture().scales())



def test_a_log_scale_s_bottom_is_written_as_its_top_is(long_view, qtbot):
    """The bottom of each log scale as numbers.plain_number writes it (`0.0000873`), as its top is,
    not as `.2g` does (`8.7e-05`)."""
    view, st = long_view, long_view.state
    lg = st.long
    lg.set_log(True)
    st.set_layer(1)
    st.set_focus(1, 2)  # (layer 0's head 2 has a weight of 1: a top under 1 here)
    qtbot.waitUntil(lambda: (pic := view.picture()) is not None and (pic.layer, pic.head) == (1, 2), timeout=WAIT)
    top = float(tops(st.long.pane.values, "per-head")[0])
    bottom = plain_number(top / 10_000)
    assert top < 1 and bottom != f"{top / 10_000:.2g}"  # (`.2g` writes one under 0.0001 with an exponent)
    assert view.scale_label.text() == f"colours: log, {bottom} and below .. {plain_number(top)}"
    assert view.picture().scales()[1] == f"L{st.layer} H2 (large): its own scale, log, {bottom} and below .. {plain_number(top)}"
    if st.scale_mode == "shared":
        t = float(tops(st.long.tiles.values, "shared")[0])
        assert view.picture().scales()[0].startswith(f"tiles: shared scale, log, {plain_number(t / 10_000)} and below ")


def test_no_picture_while_the_large_head_is_the_previous_one(long_view, qtbot, tmp_path):
    view, st = long_view, long_view.state
    lg = st.long
    st.set_focus(st.layer, 1)  # the pane still holds head 2's overview until head 1's is computed
    if lg.pane.heads != (1,):
        assert view.picture() is None and not view.export_button.isEnabled()
        with pytest.raises(ExportError, match="still being drawn"):
            view.export_picture(tmp_path / "early.png")
    qtbot.waitUntil(lambda: lg.pane.heads == (1,) and view.picture() is not None, timeout=WAIT)
    assert view.export_button.isEnabled()
    pic = view.picture()
    assert pic.head == 1 and pic.pane.heads == (1,)
    lay = view.export_picture(tmp_path / "h1.png")
    assert same_cells(QImage(str(tmp_path / "h1.png")), lay.pane_rect, view.pane.image()) == []


def test_the_picture_says_the_options_and_paints_the_hidden_key_as_the_screen(long_view, qtbot, tmp_path):
    view, st = long_view, long_view.state
    lg = st.long
    st.set_hide_first(True)
    st.set_value_weighted(True)
    assert view.picture() is None  # (the overviews shown are of the weights as they were)
    qtbot.waitUntil(lambda: view.picture() is not None, timeout=WAIT)
    assert lg.pane.options == lg.tiles.options == (True, True) and lg.region[2] == 0
    pic = view.picture()
    assert pic.title().endswith(", first key hidden, value-weighted")
    assert view.info.text().endswith(", first key hidden, value-weighted")  # (as the view says them)
    lay = view.export_picture(tmp_path / "options.png")
    picture = QImage(str(tmp_path / "options.png"))
    assert same_cells(picture, lay.pane_rect, view.pane.image()) == []  # (cells of key 0: the gap)
    for rect, screen in zip(lay.tile_rects, view.tiles.images(lg.tiles, st.scale_mode)):
        assert same_cells(picture, rect, screen) == []
