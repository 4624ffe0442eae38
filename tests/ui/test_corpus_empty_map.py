"""Corpus's map before a scan is open paints no numbers: no axis ticks (pyqtgraph's default range
read -400..400 "(x0.001)" for layer and head) and no colour bar; a scan drawn shows both."""

import numpy as np

from windows import scan_map_shown


def _light_pixels(widget) -> int:
    """Pixels much lighter than the dark plot background: text, ticks, the bar's colours."""
    img = widget.grab().toImage()
    return sum(img.pixelColor(x, y).lightness() > 120
               for y in range(0, img.height(), 2) for x in range(0, img.width(), 2))


def test_the_map_before_a_scan_shows_no_numbers_and_a_drawn_one_does(qtbot):
    view = scan_map_shown(qtbot, 400, 320)
    assert _light_pixels(view) == 0
    view.draw(np.linspace(0, 1, 30 * 9).reshape(30, 9), "induction")
    assert _light_pixels(view) > 200  # (the test sees ticks and the bar where there are some)
