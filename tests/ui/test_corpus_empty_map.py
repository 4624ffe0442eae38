"""Corpus's map before a scan is open paints no numbers: no axis ticks (pyqtgraph's default range
read -400..400 "(x0.001)" for layer and head) and no colour bar; a scan drawn shows both, each in
its own place: the layer ticks left of the cells, the head ticks under them, the bar at the right."""

import numpy as np
from PySide6.QtCore import QRect

from windows import drain_events, scan_map_shown


def _light_pixels(image, rect: QRect | None = None) -> int:
    """Pixels in `rect` (all the image unless told) much lighter than the dark plot background:
    text, ticks, the bar's colours."""
    r = rect or image.rect()
    return sum(image.pixelColor(x, y).lightness() > 120
               for y in range(r.top(), r.bottom() + 1) for x in range(r.left(), r.right() + 1))


def _places(view) -> dict[str, QRect]:
    """Where the drawn map paints its layer ticks, its head ticks and its colour bar (view pixels),
    none of them over the cells."""
    def shown(item_rect):
        return view.mapFromScene(item_rect).boundingRect()
    plot, cells = shown(view.plot.sceneBoundingRect()), shown(view.vb.sceneBoundingRect())
    return {"layer ticks": QRect(plot.left(), cells.top(), cells.left() - plot.left(), cells.height()),
            "head ticks": QRect(cells.left(), cells.bottom() + 1, cells.width(), plot.bottom() - cells.bottom()),
            "colour bar": shown(view.cbar.sceneBoundingRect()).intersected(view.rect())}


def test_the_map_before_a_scan_shows_no_numbers_and_a_drawn_one_shows_its_axes_and_bar(qtbot):
    view = scan_map_shown(qtbot, 400, 320)
    before = view.grab().toImage()
    assert _light_pixels(before) == 0
    view.draw(np.linspace(0, 1, 30 * 9).reshape(30, 9), "induction")
    drain_events()
    after = view.grab().toImage()
    places = _places(view)
    cells = view.mapFromScene(view.vb.sceneBoundingRect()).boundingRect()
    for name, rect in places.items():
        assert rect.width() > 4 and rect.height() > 4 and not rect.intersects(cells), (name, rect, cells)
        assert _light_pixels(before, rect) == 0, name
        assert _light_pixels(after, rect) > 20, (name, rect)
