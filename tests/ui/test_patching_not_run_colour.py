"""A Patching map's cell that was not run is painted in the no-value colour the grid and every
export use (style.no_value_colour of the window's colormap: magenta, bright green under plasma), far
from every colour of the map's blue-white-red, so it never reads as "no effect" (white); the
metric line names it, in the tab and in the exported picture, and a new colormap repaints it.
(It was a light grey, #c8c8c8, about 17 ΔE from the map's white, and the picture never said what
it meant.)"""

from dataclasses import replace

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from attnviz.figures import patching as fig
from attnviz.figures.style import (NO_VALUE_DISTANCE, colour_distance, diverging_colors, no_value_colour,
                                   no_value_word)
from windows import WAIT, patch_map_shown, rgb

T = 12


def _view(colormap="viridis"):
    toks = tuple(f"t{i}" for i in range(T))
    effect = np.random.default_rng(0).uniform(-1.0, 1.0, (4, T))
    effect[2] = np.nan  # a layer not run
    return fig.PatchView("toy", "resid", "denoise", effect, toks, toks, T - 1, 0, 1, "a", "b", 1.0, 0.0,
                         display=(("colormap", colormap),))


def test_a_cell_not_run_is_the_no_value_colour_far_from_the_maps_white(qtbot):
    view = _view()
    m = patch_map_shown(qtbot, view, 520, 300)
    assert m.layout_().pool == (1, 1)
    x, y = m.cell_center(2, 5)
    shown = rgb(m.grab().toImage().pixelColor(int(x), int(y)))
    assert shown == no_value_colour("viridis")
    assert colour_distance(shown, diverging_colors(1024)) >= NO_VALUE_DISTANCE, shown
    assert view.metric_line().endswith(f"; {no_value_word('viridis')}: not run")
    assert fig.readout(view, 2, 5).endswith(": not run")


def test_the_exported_picture_paints_and_names_it(qapp):
    for colormap in ("viridis", "plasma"):
        view = _view(colormap)
        png, lay = fig.png_bytes(view, 700)
        image = QImage.fromData(png)
        x, y = fig.cell_center(lay, 2, 5)
        assert rgb(image.pixelColor(int(x), int(y))) == no_value_colour(colormap)
        svg = fig.svg_bytes(view, 700)[0].decode()
        assert f"{no_value_word(colormap)}: not run" in svg
    assert no_value_colour("plasma") != no_value_colour("viridis")  # (the test tells the two apart)
    whole = replace(view, effect=np.nan_to_num(view.effect))
    assert "not run" not in whole.metric_line()  # named only where a cell was not run


def test_the_tab_paints_it_in_the_windows_colormap_and_follows_a_new_one(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p.what_box.setCurrentText("head_out")
    with qtbot.waitSignal(w.patch_jobs.sigChanged, timeout=WAIT):
        qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.patch_jobs.result is not None and not w.patch_jobs.running, timeout=WAIT)
    result = w.patch_jobs.result
    effect = np.array(result.effect, np.float64)
    effect[1, 0] = np.nan  # (the window runs every layer: one cell made one not run)
    w.patch_jobs.result = replace(result, effect=effect)
    p.refresh()
    assert w.state.colormap == "viridis"
    for colormap in ("viridis", "plasma"):
        w.state.set_colormap(colormap)
        x, y = p.map.cell_center(1, 0)
        assert rgb(p.map.grab().toImage().pixelColor(int(x), int(y))) == no_value_colour(colormap), colormap
        assert p.map.view.metric_line().endswith(f"; {no_value_word(colormap)}: not run")
