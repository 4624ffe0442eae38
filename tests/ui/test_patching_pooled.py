"""The Patching tab's pictures drawn smaller than their cells pool them, none dropped: the map of
effects puts a long text's positions in blocks (each painted with its effect farthest from the
unchanged one, its sign kept, in the no-value colour only where no cell of it was run), and the picked head's
patterns are pooled as the Compare tiles are (each pixel the largest weight it covers). The hover
names the cell a pixel shows. (The map drew a cell at least 3 pixels wide and 2 high and cut off
what ran past the panel's edge, its colour bar too; the patterns were scaled by nearest pixel and
lost rows.)"""


import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from attnviz.engine.reading.token_text import quoted
from attnviz.figures import compare as C
from attnviz.figures import patching as fig
from attnviz.figures.headmap import colour
from attnviz.figures.numbers import signed
from attnviz.figures.style import no_value_colour
from attnviz.ui.panels.patching_maps import PatchMap
from windows import shown_pattern_pair

T = 300  # positions: far more than the map's width holds at 3 pixels each


def _view(what, effect, layer=None):
    toks = tuple(f"t{i}" for i in range(T))
    return fig.PatchView("toy", what, "denoise", np.asarray(effect, np.float64), toks, toks, T - 1, 0, 1,
                         "a", "b", 1.0, 0.0, layer=layer, kv_group=np.arange(4))


def _hover(widget, x, y) -> str:
    ev = QMouseEvent(QEvent.Type.MouseMove, QPointF(x, y), widget.mapToGlobal(QPointF(x, y)),
                     Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, ev)
    return widget.hover_text


def _rgb(c) -> tuple[int, int, int]:
    return c.red(), c.green(), c.blue()


def _map(qtbot, view, size=(420, 300)) -> PatchMap:
    m = PatchMap(lambda *_: None)
    qtbot.addWidget(m)
    m.resize(*size)
    m.show()
    qtbot.waitExposed(m)
    m.set_view(view)
    return m


@pytest.mark.parametrize("what", ["resid", "head_out_by_pos"])
def test_a_map_smaller_than_its_cells_shows_every_strong_cell_and_reads_it(qtbot, what):
    rng = np.random.default_rng(0)
    shape = (4, T) if what == "resid" else (1, T, 4)  # (head_out_by_pos: positions down, heads across)
    effect = rng.uniform(0.0, 0.05, shape)
    values = effect if what == "resid" else effect[0]
    spikes = [(2, 250), (1, 7)] if what == "resid" else [(250, 2), (7, 1)]
    values[spikes[0]], values[spikes[1]] = -0.9, 0.8  # one cell each, among weak ones
    view = _view(what, effect, 0 if what == "head_out_by_pos" else None)
    m = _map(qtbot, view)
    lay = m.layout_()
    assert max(lay.pool) > 1 and lay.bar.right() <= m.width()  # pooled: the map and its bar in sight
    image = m.grab().toImage()
    for r, c in spikes:
        x, y = m.cell_center(r, c)
        assert _rgb(image.pixelColor(int(x), int(y))) == _rgb(colour(float(values[r, c]), view.limit)), (r, c)
        assert _hover(m, x, y) == fig.readout(view, r, c)
        assert _hover(m, x, y).endswith(f"effect {signed(float(values[r, c]))}")


def test_a_block_with_a_cell_run_is_coloured_and_one_without_is_the_no_value_colour(qtbot):
    effect = np.full((4, T), np.nan)
    effect[:3] = 0.01
    effect[3, 100] = 0.5  # the one cell of layer 3 that was run
    m = _map(qtbot, _view("resid", effect))
    lay = m.layout_()
    image = m.grab().toImage()
    x, y = m.cell_center(3, 100)
    assert _rgb(image.pixelColor(int(x), int(y))) == _rgb(colour(0.5, 0.5))
    assert _hover(m, x, y) == fig.readout(m.view, 3, 100)
    x, y = m.cell_center(3, 100 + 2 * lay.pool[1])  # a block of cells not run
    assert _rgb(image.pixelColor(int(x), int(y))) == no_value_colour("viridis")  # (the default colormap's)
    assert _hover(m, x, y).endswith(": not run")


def test_a_pattern_smaller_than_its_tokens_pools_them_and_reads_the_cell_a_pixel_shows(qtbot):
    att = np.zeros((1, 1, T, T), np.float32)
    strong = list(range(0, T, 5))
    att[0, 0, strong, 3] = 1.0  # one strong key in every 5th query row
    labels = tuple(f"w{i}" for i in range(T))  # (shown_pattern_pair's tokens)
    pair, image = shown_pattern_pair(qtbot, att, 420, 230)
    hot = tuple(int(v) for v in C.weight_rgb(np.ones((1, 1)), "viridis")[0, 0])
    r = pair.rects[0]
    side = int(r.width())
    p = C.tile_pool(T, side)
    n = -(-T // p)
    assert side < T and p > 1
    for q in strong:
        x, y = r.left() + C.block_centre(3 // p, n, side), r.top() + C.block_centre(q // p, n, side)
        assert _rgb(image.pixelColor(int(x), int(y))) == hot, q
        assert _hover(pair, x, y) == f"clean L0 H0  {quoted(labels[q])} \u2192 {quoted(labels[3])}  1.0000"
