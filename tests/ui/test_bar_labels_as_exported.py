"""The window's colour bar (grid_items.colour_bar: the grid's and the focus view's) and an exported
figure's colour bar write the same weights the same way: the same labels, 0 to the largest weight,
read off what each paints (the axis' laid-out labels; the SVG's text)."""

import numpy as np
import pyqtgraph as pg
import pytest

from attnviz.ui.views.grid_items import colour_bar, update_bar
from export_files import bar_labels, label_value
from windows import axis_labels


def window_bar_labels(qtbot, top: float) -> list[str]:
    """The labels a window's bar of weights 0 to `top` (as float32) paints, smallest first."""
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(200, 600)  # (tall: pyqtgraph leaves out no step)
    bar = colour_bar("viridis", widget.font())
    widget.addItem(bar)
    widget.show()
    update_bar(bar, None, (0.0, float(np.float32(top))), "attention weight")
    qtbot.wait(1)
    return sorted((text for text, _box in axis_labels(bar.getAxis("right"))), key=label_value)


@pytest.mark.parametrize("top", [0.9996, 0.87, 0.63, 0.37, 0.046, 1.37])
def test_the_window_and_the_export_write_a_bars_labels_alike(qtbot, top):
    shown = window_bar_labels(qtbot, top)
    assert len(shown) >= 3 and shown == bar_labels(top)


@pytest.mark.parametrize("top, want", [
    (1e30, ["0", "5e+29", "1e+30"]),
    (3e-9, ["0", "1e\u221209", "2e\u221209", "3e\u221209"]),
])
def test_a_huge_or_tiny_bar_is_written_with_exponents_in_the_window_and_the_export(qtbot, top, want):
    """Weights up to 1e30 (or 3e-9) read `5e+29`, `1e+30`, not 31 digits in fixed point (nor
    `0.000000003`), alike in the window's bar and an exported figure's."""
    shown = window_bar_labels(qtbot, top)
    assert shown == want and bar_labels(float(np.float32(top))) == want


@pytest.mark.parametrize("top", [0.6166, 0.2004, 0.02015, 0.9996])
def test_the_grids_bar_writes_its_top_as_the_export_does(qtbot, top):
    """The grid's own redraw (a result set, the shared scale): the weights' largest as it is, not
    first rounded to 3 significant digits (0.6166 read 0.62, 0.02015 read 0.02)."""
    from types import SimpleNamespace

    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.views.grid import HeatmapGrid

    att = np.full((1, 2, 4, 4), top / 4, dtype=np.float32)
    att[0, 1, 3, 2] = top
    labels = ["ta", "tb", "tc", "td"]
    st = AppState()
    g = HeatmapGrid(st)
    qtbot.addWidget(g)
    g.resize(900, 700)  # (tall: pyqtgraph leaves out no step)
    g.show()
    st.set_result(SimpleNamespace(attentions=att, labels=labels, tokens=labels, text="x",
                                  offsets=[(i, i + 1) for i in range(4)], kv_group=np.arange(2)))
    qtbot.wait(1)
    assert st.scale_mode == "shared" and g.cbar.levels()[1] == np.float32(top)
    shown = sorted((text for text, _box in axis_labels(g.cbar.getAxis("right"))), key=label_value)
    assert len(shown) >= 3 and shown == bar_labels(top)
