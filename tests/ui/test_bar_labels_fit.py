"""The colour bar's tick labels (the grid's and the focus view's: grid_items.colour_bar) lie inside
the bar's axis, left of its turned title's column, however many digits the ends need: a difference's
limits of 3 significant digits read -0.00000123 (grid_items.level_ticks), far wider than the
"0.000" of a probability. Checked on the labels' laid-out boxes as the axis paints them."""

import pyqtgraph as pg
import pytest

from attnviz.ui.views.grid_items import colour_bar, update_bar
from windows import axis_labels

TITLE_NUDGE = 5  # px: pyqtgraph sets a right axis' title this far past the axis' edge


@pytest.mark.parametrize("height", [500, 160, 120])
def test_the_colour_bars_labels_lie_inside_its_axis_and_clear_of_its_title(qtbot, height):
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(200, height)
    bar = colour_bar("viridis", widget.font())
    widget.addItem(bar)
    widget.show()
    shown = None
    for lim in (0.37, 0.00105, 0.000123, 1.23e-6, 0.37):
        shown = update_bar(bar, shown, (-lim, lim), "A \u2212 B (weight)")
        qtbot.wait(1)  # (laid out again)
        axis = bar.getAxis("right")
        width = axis.geometry().width()
        title = axis.mapRectFromItem(axis.label, axis.label.boundingRect())
        boxes = axis_labels(axis)
        assert len(boxes) >= 2  # (the ends at least)
        for text, box in boxes:
            assert 0 <= box.left() and box.right() <= title.left() and title.right() <= width + TITLE_NUDGE, \
                f"{text!r} at x {box.left():.0f}-{box.right():.0f}, the title at {title.left():.0f}-" \
                f"{title.right():.0f}, the axis {width:.0f} wide (limit {lim})"
