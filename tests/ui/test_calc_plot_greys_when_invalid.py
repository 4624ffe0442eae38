"""An invalid Calculator field greys the last good figures: the text, the plot's curves and legend,
and the comparison's row names (none stays in colour saying "as given: GQA (…)" beside the
error)."""

import numpy as np
from PySide6.QtGui import QColor

from attnviz.ui.panels.calc_views import CURVE_COLORS


def pixels_near(widget, colour: str, tol: int = 30) -> int:
    img = widget.grab().toImage()
    img = img.convertToFormat(img.Format.Format_RGB32)
    a = np.frombuffer(img.constBits(), np.uint8, img.sizeInBytes()).reshape(img.height(), -1)[:, :img.width() * 4]
    bgr = a.reshape(img.height(), img.width(), 4)[..., :3].astype(int)
    c = QColor(colour)
    return int((np.abs(bgr - (c.blue(), c.green(), c.red())).max(axis=2) <= tol).sum())


def names_in_colour(table) -> int:
    """Pixels of the comparison table's row names in their curves' colours."""
    return sum(pixels_near(table, QColor(c).darker(130).name(), tol=12) for c in CURVE_COLORS.values())


def legend_colours(plot):
    return {label.opts.get("color") for _, label in plot.getPlotItem().legend.items}


def test_invalid_inputs_grey_the_plots_curves_and_legend(calc_panel, qtbot):
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData("llama-3-8b"))
    plot = calc_panel.plot
    assert all(pixels_near(plot, CURVE_COLORS[k]) > 50 for k in ("mha", "gqa", "mqa"))
    assert names_in_colour(calc_panel.compare_table) > 20
    calc_panel.spins["n_kv_head"].setValue(5)  # 32 query heads do not group into 5
    assert calc_panel.error_labels["n_kv_head"].isVisibleTo(calc_panel)
    assert all(pixels_near(plot, CURVE_COLORS[k]) == 0 for k in ("mha", "gqa", "mqa"))
    assert legend_colours(plot) == {"#808080"}
    assert names_in_colour(calc_panel.compare_table) == 0  # the table's row names grey too
    calc_panel.spins["n_kv_head"].setValue(8)  # valid again: in colour again
    assert all(pixels_near(plot, CURVE_COLORS[k]) > 50 for k in ("mha", "gqa", "mqa"))
    assert "#808080" not in legend_colours(plot)
    assert names_in_colour(calc_panel.compare_table) > 20
