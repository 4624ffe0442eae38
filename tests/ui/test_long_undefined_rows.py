"""The long view under Hide first token: a row with no weight left once the first key is hidden
(a decoder's first query) is undefined, and the large pane, the tiles and the exported picture
leave it blank (the colour of the hidden key's column), as the grid leaves it; a tile's row of cells
pooled from undefined rows alone is blank too, and its hover says so. (They painted it in the colour
of 0, which reads as a row that attends nowhere.) That colour is one no colormap offered paints a
weight in (style.no_value_colour, as every view paints it), and the view's legend and the
picture's say what it means. (It was black: magma's, inferno's and CET-L3's 0.)"""

import numpy as np
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QImage

from attnviz.figures.data import COLORMAPS
from attnviz.figures.style import heat_table, no_value_colour
from attnviz.ui.views.long_view import LongView
from attnviz.ui.views.mosaic import UNDEFINED
from windows import TOY, WAIT, long_view_shown, open_window

TEXT = "the cat sat on a mat. " * 12  # 122 tokens of the toy decoder


def _rgb(image: QImage, x: int, y: int) -> int:
    return image.pixel(x, y) & 0xFFFFFF


def test_the_long_view_and_its_picture_leave_an_undefined_row_blank(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    lg = long_view_shown(w, qtbot, TEXT, (1400, 900))
    st = w.state
    st.set_hide_first(True)
    view = w.findChild(LongView)
    qtbot.waitUntil(lambda: view.picture() is not None and lg.pane.options[0], timeout=WAIT)
    pane, tiles = view.pane.image(), view.tiles.images(lg.tiles, st.scale_mode)
    assert lg.pane.exact and lg.region == (0, 122, 0, 122) and st.long.shown().undefined(st.layer, lg.head(), 0)
    black = view.pane.table()[0] & 0xFFFFFF  # the gap (its name kept from the test's first form)
    assert {_rgb(pane, k, 0) for k in range(pane.width())} == {black}  # query 0: undefined
    assert _rgb(pane, 1, 1) != black  # query 1's first key shown
    # the tiles: the first row of cells holds query 0 alone (blank), the second query 1
    assert lg.tiles.cell_tokens(0) > 1 and lg.tiles.edges(0)[1] == 1
    for img in tiles:
        assert {_rgb(img, k, 0) for k in range(img.width())} == {black}
        assert _rgb(img, 1, 1) != black
    tip = view.tiles.readout(view.tiles.head_rect(3).topLeft() + QPointF(30.0, 0.2))
    assert UNDEFINED in tip and "(cell of up to 2×2 tokens: undefined, no row of it has weight left)" in tip, tip
    # the picture: the screen's cells
    lay = view.export_picture(tmp_path / "long.png")
    picture = QImage(str(tmp_path / "long.png"))
    for rect, n in ((lay.pane_rect, pane.width()), *((r, img.width()) for r, img in zip(lay.tile_rects, tiles))):
        k = rect.width() // n
        assert {_rgb(picture, rect.left() + c * k + k // 2, rect.top() + k // 2) for c in range(n)} == {black}
        assert _rgb(picture, rect.left() + k + k // 2, rect.top() + k + k // 2) != black
    w.worker.wait_idle()


def _far_from_every_colormap(rgb: int) -> dict:
    """{colormap: its nearest colour's distance} for each colormap whose weights come within 40 of
    `rgb` (0..255 a channel): [] where none can be mistaken for it."""
    c = np.array(QColor(rgb).getRgb()[:3], float)
    near = {}
    for name in COLORMAPS:
        d = float(np.sqrt(((heat_table(name)[1:, :3] - c) ** 2).sum(1)).min())
        if d < 40:
            near[name] = round(d, 1)
    return near


def test_the_hidden_key_s_colour_is_no_weight_s_and_the_legends_name_it(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    lg = long_view_shown(w, qtbot, TEXT, (1400, 900))
    st = w.state
    view = w.findChild(LongView)
    assert "first key" not in view.scale_label.text() and "first key" not in " ".join(view.picture().scales())
    st.set_colormap("magma")
    st.set_hide_first(True)
    qtbot.waitUntil(lambda: view.picture() is not None and lg.pane.options[0], timeout=WAIT)
    assert lg.pane.exact and lg.region == (0, 122, 0, 122)
    rect, n = view.pane.head_rect(), 122

    def painted(q: int, k: int) -> int:  # the pane's pixel at the middle of cell (q, k)
        img = view.pane.grab().toImage()
        return img.pixel(int(rect.left() + (k + 0.5) * rect.width() / n),
                         int(rect.top() + (q + 0.5) * rect.height() / n)) & 0xFFFFFF

    hidden, undefined, zero = painted(5, 0), painted(0, 10), painted(5, 20)  # (5, 20): a future key, 0
    assert hidden == undefined != zero
    assert _far_from_every_colormap(hidden) == {}
    assert QColor(hidden).getRgb()[:3] == no_value_colour("magma")
    words = "magenta: no value (the hidden first key, or a row with no weight left)"
    assert view.scale_label.text().endswith(f" · {words}")
    lay = view.export_picture(tmp_path / "long.png")
    picture = QImage(str(tmp_path / "long.png"))
    k = lay.pane_rect.width() // n

    def at(q: int, c: int) -> int:  # the picture's pixel at the middle of the pane's cell (q, c)
        return picture.pixel(lay.pane_rect.left() + c * k + k // 2, lay.pane_rect.top() + q * k + k // 2) & 0xFFFFFF

    assert at(5, 0) == at(0, 10) == hidden != at(5, 20)
    assert view.picture().scales()[-1] == words
    w.worker.wait_idle()


def test_the_colours_label_shows_whole_lines_in_a_narrow_window(qtbot, tmp_path):
    """In a narrow window the bar's colours label, the hidden key's words after its scale, wraps onto
    its two lines and ends at a word with " …" (its tooltip holds it whole), never clipped mid-word
    at the bar's edge."""
    from PySide6.QtCore import QRect, Qt

    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="abc")
    lg = long_view_shown(w, qtbot, TEXT, (900, 700))
    w.state.set_hide_first(True)
    view = w.findChild(LongView)
    label = view.scale_label
    qtbot.waitUntil(lambda: lg.pane.options[0] and "magenta: no value" in view.scale_text(), timeout=WAIT)
    full, fm, room = view.scale_text(), label.fontMetrics(), label.contentsRect()
    need = fm.boundingRect(QRect(0, 0, room.width() - 2, 1 << 20), int(Qt.TextFlag.TextWordWrap), label.text())
    assert need.height() <= room.height() and fm.horizontalAdvance(full) > room.width(), (need, room)
    assert label.text() == full or (label.text().endswith(" …") and full.startswith(label.text()[:-2]))
    assert full in label.toolTip()
    w.worker.wait_idle()
