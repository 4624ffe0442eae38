"""The long view under Hide first token: a row with no weight left once the first key is hidden
(a decoder's first query) is undefined, and the large pane, the tiles and the exported picture
leave it blank (the black of the hidden key's column), as the grid leaves it; a tile's row of cells
pooled from undefined rows alone is blank too, and its hover says so. (They painted it in the colour
of 0, which reads as a row that attends nowhere.)"""

from PySide6.QtCore import QPointF
from PySide6.QtGui import QImage

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
    black = 0
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
