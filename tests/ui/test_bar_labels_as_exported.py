"""The window's colour bar (grid_items.colour_bar: the grid's and the focus view's) and an exported
figure's colour bar write the same weights the same way: the same labels, 0 to the largest weight,
read off what each paints (the axis' laid-out labels; the SVG's text)."""

import numpy as np
import pyqtgraph as pg
import pytest

from attnviz.ui.views.grid_items import colour_bar, update_bar
from export_files import bar_labels
from windows import axis_labels


@pytest.mark.parametrize("top", [0.9996, 0.87, 0.63, 0.37, 0.046, 1.37])
def test_the_window_and_the_export_write_a_bars_labels_alike(qtbot, top):
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(200, 600)  # (tall: pyqtgraph leaves out no step)
    bar = colour_bar("viridis", widget.font())
    widget.addItem(bar)
    widget.show()
    update_bar(bar, None, (0.0, float(np.float32(top))), "attention weight")
    qtbot.wait(1)
    shown = sorted((text for text, _box in axis_labels(bar.getAxis("right"))), key=float)
    assert len(shown) >= 3 and shown == bar_labels(top)
