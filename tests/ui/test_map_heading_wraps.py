"""A layer x head map's title and caption (figures/headmap.py) wrap to the panel's width, two lines
each, and are painted whole at the dock's default width: Circuits' copying map (its title names the
matrices) and What heads do's DLA (its caption names the colours, the clipped cells and the axes);
where even two lines are too few, the last ends in an ellipsis and the hover gives them whole."""

from dataclasses import replace

import numpy as np
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QFontMetricsF

from attnviz.figures import headmap
from attnviz.figures.render import figure_font
from windows import IOI, TOY, WAIT, dla_shown, hover, open_window, tip_shown


def _inked_lines(view) -> int:
    """How many of the heading's line bands hold dark ink, as the view paints them."""
    img = view.grab().toImage()
    lh = QFontMetricsF(figure_font(11)).height()
    lay = view.lay
    bands = 0
    for i in range(len(lay.title_lines) + len(lay.caption_lines)):
        y0, y1 = int(2 + i * lh), int(2 + (i + 1) * lh)
        if any(img.pixelColor(x, y).lightness() < 140 for y in range(y0, y1) for x in range(4, 60)):
            bands += 1
    return bands


def _whole(view) -> None:
    hm, lay = view.map, view.lay
    assert headmap.title_shown(hm, lay) == hm.title
    assert " ".join(lay.title_lines) == hm.title  # (the painted lines themselves, not the flag)
    assert headmap.caption_shown(hm, lay) == headmap.caption(hm, lay)
    assert _inked_lines(view) == len(lay.title_lines) + len(lay.caption_lines) >= 3


def test_the_copying_maps_title_wraps_whole_at_the_default_width(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=IOI, panels=("why",))
    w.resize(1500, 950)
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    view = w.circuits_panel.map_view
    qtbot.waitUntil(lambda: view.map is not None and view.width() > 300, timeout=WAIT)
    view.grab()
    _whole(view)
    assert len(view.lay.title_lines) == 2  # (it needs two at this width: else the test shows nothing)
    w.resizeDocks([w.circuits_dock], [200], Qt.Orientation.Horizontal)  # too narrow for two lines
    qtbot.waitUntil(lambda: view.width() < 200, timeout=WAIT)
    view.grab()
    assert len(view.lay.title_lines) == 2 and view.lay.title_lines[-1].endswith("\u2026")
    hover(view, QPoint(20, 6))
    # (a tooltip in rich text reads back a no-break space as a space)
    assert tip_shown(view.toolTip()) == headmap.whole_title(view.map, view.lay).replace("\u00a0", " ")


def test_the_dla_caption_wraps_whole_at_the_default_width(qtbot, tmp_path):
    w, view = dla_shown(qtbot, tmp_path / "d.ini")
    qtbot.waitUntil(lambda: view.map is not None and view.width() > 300, timeout=WAIT)
    hm = view.map  # with an MLP and the embeddings beyond the heads' limit, as SmolLM2's often are
    view.set_map(replace(hm, column=("MLP", np.full(hm.values.shape[0], 2 * hm.limit)),
                         extras=(("embed", -3 * hm.limit), ("bias", 0.0))))
    view.grab()
    assert "MLP, embed up to" in headmap.caption(view.map, view.lay)
    _whole(view)
    assert len(view.lay.caption_lines) == 2
