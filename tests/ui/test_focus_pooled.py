"""The focus view draws a head with more tokens than its view box has pixels pooled, rows to its
height and keys to its width, each pixel the largest weight of its block, so that Qt's
nearest-pixel scaling drops no row or column: every cell of a one-token diagonal reaches the
screen, and the pointer over any painted pixel reads (and a click picks) the cell whose value that
pixel shows. (It drew the T x T pattern whole: the rows and columns that fell between screen pixels
never reached the screen, and the pointer read the cell under its point, not the one painted.)"""

import math
import re
import types

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402

from attnviz.figures.style import no_value_colour  # noqa: E402
from attnviz.ui.machinery.state import AppState  # noqa: E402
from attnviz.ui.views.focus import FocusView  # noqa: E402
from windows import drain_events  # noqa: E402

READOUT = re.compile(r"L0 H0  t(\d+) → t(\d+)  (\S+)")


def _result(T: int, attn=None):
    if attn is None:
        attn = np.eye(T, dtype=np.float32)[None, None]  # a one-token-wide diagonal
    labels = [f"t{i}" for i in range(T)]
    return types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                 offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(1))


def _settle():
    for _ in range(5):
        drain_events()


def _view(qtbot, T: int, size=(420, 520), attn=None):
    st = AppState()
    st.set_result(_result(T, attn))
    fv = FocusView(st)
    qtbot.addWidget(fv)
    fv.resize(*size)
    fv.show()
    qtbot.waitExposed(fv)
    st.set_focus(0, 0)
    _settle()
    return st, fv


def _long(qtbot, more: float, side=max):
    """A focus view on a diagonal `more` times as many tokens as its view box's longer (or
    shorter) side has pixels."""
    st, fv = _view(qtbot, 40)
    T = int(side(fv.vb.width(), fv.vb.height()) * more)
    st.set_result(_result(T))
    _settle()
    return st, fv, T


def _span(fv) -> tuple[int, int, int, int]:
    """(left, right, top, bottom): the screen pixels the picture is painted on. Qt's raster engine
    draws an unsmoothed scaled image into its rect rounded to whole pixels, each pixel the image
    pixel at its centre."""
    box = fv.gw.viewportTransform().mapRect(fv.img.sceneBoundingRect())
    return tuple(math.floor(v + 0.5) for v in (box.left(), box.right(), box.top(), box.bottom()))


def _pixel_of(fv, q: int, k: int) -> tuple[int, int]:
    """The screen pixel at the centre of the image pixel that holds cell (q, k)."""
    left, right, top, bottom = _span(fv)
    n_rows, n_cols = fv.img.image.shape
    rect = fv.img.mapRectToParent(fv.img.boundingRect())  # in tokens
    j = int((k - rect.left()) * n_cols / rect.width())
    i = int((q - rect.top()) * n_rows / rect.height())
    return (math.floor(left + (j + 0.5) * (right - left) / n_cols),
            math.floor(top + (i + 0.5) * (bottom - top) / n_rows))


def _hot(image, x: int, y: int) -> bool:
    """Whether screen pixel (x, y) is painted in the colour of weight 1 (the bar's top)."""
    c = image.pixelColor(x, y)
    return c.red() > 200 and c.green() > 200 and c.blue() < 100  # viridis' yellow; its 0 is purple


def _unshown(fv, T: int) -> list[int]:
    """The diagonal cells (j, j) whose image pixel is not painted in the colour of weight 1."""
    image = fv.gw.viewport().grab().toImage()
    return [j for j in range(T) if not _hot(image, *_pixel_of(fv, j, j))]


def _readout_at(fv, x: int, y: int) -> tuple[int, int, str]:
    """(q, k, weight as written) the hover reads with the pointer on viewport pixel (x, y)."""
    fv.plot.scene().sigMouseMoved.emit(fv.gw.mapToScene(QPoint(x, y)))
    m = READOUT.match(fv.hover_text)
    assert m, (x, y, fv.hover_text)
    return int(m[1]), int(m[2]), m[3]


@pytest.mark.parametrize("more", [1.08, 2.5])
def test_a_diagonal_longer_than_the_view_box_is_painted_whole(qtbot, more):
    st, fv, T = _long(qtbot, more)
    unshown = _unshown(fv, T)
    assert unshown == [], f"{len(unshown)} of {T} diagonal cells not painted, the first {unshown[:8]}"
    assert max(fv.img.image.shape) < T  # (pooled)


def test_the_pointer_reads_the_cell_each_pixel_shows(qtbot):
    st, fv, T = _long(qtbot, 1.3)
    image = fv.gw.viewport().grab().toImage()
    left, right, top, bottom = _span(fv)
    seen = 0
    for y in range(top, bottom, 2):  # along the diagonal, two pixels either side
        mid = left + (y + 0.5 - top) * (right - left) / (bottom - top)
        for x in range(max(left, math.floor(mid) - 2), min(right, math.floor(mid) + 3)):
            q, k, value = _readout_at(fv, x, y)
            hot = _hot(image, x, y)
            assert hot == (q == k and value == "1.00"), (x, y, hot, q, k, value)
            seen += hot
    assert seen > (bottom - top) / 4  # (the diagonal crossed)


def test_a_click_on_a_pooled_pixel_picks_the_query_it_shows_and_outlines_its_row(qtbot):
    st, fv, T = _long(qtbot, 2.5, min)
    rows = -(-T // fv.img.image.shape[0])  # query rows a pixel
    assert rows > 1
    j = T // 2 + 1
    qtbot.mouseClick(fv.gw.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(*_pixel_of(fv, j, j)))
    qtbot.waitUntil(lambda: st.query_pos is not None)
    assert st.query_pos // rows == j // rows  # the query of the diagonal cell the pixel shows
    rect = fv.query_rect.rect()  # the outline frames the row of pixels that holds it, whole
    picture = fv.img.mapRectToParent(fv.img.boundingRect())
    assert (rect.top(), rect.height()) == (j // rows * rows, rows)
    assert (rect.left(), rect.right()) == (picture.left(), picture.right())


def test_a_pane_made_smaller_pools_again(qtbot):
    st, fv = _view(qtbot, 40, size=(700, 760))
    T = int(min(fv.vb.width(), fv.vb.height()) * 0.95)  # a pixel a token, with room to spare
    st.set_result(_result(T))
    _settle()
    assert fv.img.image.shape == (T, T)
    fv.resize(560, 620)
    qtbot.waitUntil(lambda: max(fv.img.image.shape) < T, timeout=5000)
    _settle()
    assert _unshown(fv, T) == []


def test_hide_first_leaves_a_pooled_row_blank_only_where_each_of_its_rows_is_undefined(qtbot):
    T = 900
    attn = np.zeros((1, 1, T, T), np.float32)
    attn[0, 0, :, 0] = 1.0  # every row on the first key: undefined once it is hidden ...
    attn[0, 0, 301, :] = 0.0
    attn[0, 0, 301, 5] = 1.0  # ... but one row, on key 5
    st, fv = _view(qtbot, T, attn=attn)
    st.set_hide_first(True)
    _settle()
    values = fv.img.image
    rows = -(-T // values.shape[0])
    assert rows > 1
    blank = np.isnan(values).all(axis=1)
    assert not blank[301 // rows] and blank.sum() == len(blank) - 1
    image = fv.gw.viewport().grab().toImage()
    assert _hot(image, *_pixel_of(fv, 301, 5))  # the one defined row, painted in its pooled row
    x, y = _pixel_of(fv, 600, 5)  # a row of pixels whose every row is undefined: not a weight of 0
    assert image.pixelColor(x, y).getRgb()[:3] == no_value_colour(st.colormap)
