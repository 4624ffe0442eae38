"""The long view's hover names a token pair inside the block whose colour the pixel under the
pointer shows, and that block's value: at every pixel row and column of the large pane and of a tile.
(It named q = floor(t·T) while the pixel showed the block of cell floor(t·H), edges (i·T)//H: q
could be the next block's first token, and the hover read a weight above its block's maximum.)"""

import re

import numpy as np
from PySide6.QtCore import QPointF

from attnviz.figures.overview import shown_index
from attnviz.ui.views.long_view import LongView
from windows import WAIT, long_view_shown, open_window

# 855 tokens of SmolLM2: more than the large pane's pixels
TEXT = "The keys to the cabinet are on the table, said the old man to the young boy." * 45
READ = re.compile(r"\(q ([\d,]+), k ([\d,]+)\)  (\S+)   \(cell: block max (\S+) over ")


def _check(area, h: int, ov, index: np.ndarray, image, points) -> None:
    """At each screen pixel (x, y): the hover's q, k lie in the block painted there, its cell value is
    that block's and its weight is no more than that."""
    rows, cols = ov.edges(0), ov.edges(1)
    table = area.table()
    for x, y in points:
        text = area.readout(QPointF(x, y))
        m = READ.search(text)
        assert m, (x, y, text)
        q, k = int(m[1].replace(",", "")), int(m[2].replace(",", ""))
        i, j = np.searchsorted(rows, q, "right") - 1, np.searchsorted(cols, k, "right") - 1
        assert image.pixel(x, y) & 0xFFFFFF == table[index[i, j]] & 0xFFFFFF, (x, y, text, i, j)
        assert m[4] == f"{float(ov.values[ov.heads.index(h), i, j]):.4g}", (x, y, text, i, j)
        # (the block max comes from the block's top score, the weight from its row: they may part in
        # the last float32 bit, which can round apart at the 4 digits shown)
        assert float(m[3]) <= float(m[4]) * 1.001, (x, y, text)


def _pixels(rect, at: float) -> list[tuple[int, int]]:
    """Every pixel of rect's column at fraction `at` across it, and every pixel of its row there."""
    x0, x1, y0, y1 = int(rect.left()) + 1, int(rect.right()), int(rect.top()) + 1, int(rect.bottom())
    x, y = int(rect.left() + at * rect.width()), int(rect.top() + at * rect.height())
    return [(x, v) for v in range(y0, y1)] + [(u, y) for u in range(x0, x1)]


def test_the_hover_names_a_pair_in_the_block_painted_under_it(qtbot, tmp_path, smollm2, monkeypatch):
    w = open_window(qtbot, tmp_path / "t.ini", model=str(smollm2.path), text="abc")
    lg = long_view_shown(w, qtbot, TEXT, (1500, 950))
    view = w.findChild(LongView)
    assert view.pane.devicePixelRatioF() == 1.0
    # cells fewer than the pixels they are drawn on, as after the pane is resized and before its
    # cells at the new size come in: the image is scaled, a cell no longer one pixel
    pane, tiles = view.pane, view.tiles
    assert min(pane.pixels()) > 431 and tiles.tile_px() > 113, (pane.pixels(), tiles.tile_px())
    monkeypatch.setattr(view, "_send_screen", lambda: lg.set_screen(113, (431, 431)))
    view.refresh()
    qtbot.waitUntil(lambda: lg.pane.values.shape[1:] == (431, 431) and lg.tiles.values.shape[1:] == (113, 113)
                    and lg.pane.region == lg.tiles.region == lg.region, timeout=WAIT)
    ov = lg.pane
    assert not ov.exact and ov.cell_tokens(0) == 2
    index = shown_index(ov, "per-head", lg.log)[0]
    _check(pane, lg.head(), ov, index, pane.grab().toImage(), _pixels(pane.head_rect(), 0.37))
    tv = lg.tiles
    assert not tv.exact
    h = 1
    index = shown_index(tv, w.state.scale_mode, lg.log)[tv.heads.index(h)]
    _check(tiles, h, tv, index, tiles.grab().toImage(), _pixels(tiles.head_rect(h), 0.61))
    w.worker.wait_idle()
