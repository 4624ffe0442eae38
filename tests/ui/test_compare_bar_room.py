"""The Compare panel sizes its tiles with the room its colour bars' labels take as measured: where
the A − B labels are wide (a limit of 1.23e-6 writes `+0.00000123`, wider than a fixed 70 px would
allow), the height each canvas asks of the layout at a width still holds every tile whole
with its title whole beside the bar and no band left empty under them, and the bar's labels are
painted inside the canvas; in A or B (the tiles with no bar) as well."""

import dataclasses

import numpy as np
import pytest

from attnviz.figures import compare as F
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import drain_events, toy_window

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"
LIM = 1.23e-6


@pytest.fixture
def panel(qtbot, tmp_path):
    """The toy model against itself quantized, B moved to A less LIM times A − B over its largest."""
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "Q8_0"))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    c = jobs.comparison
    d = c.a_attentions - c.b_attentions
    jobs.comparison = dataclasses.replace(c, b_attentions=c.a_attentions - LIM * d / np.abs(d).max())
    w.state.set_focus(*np.unravel_index(np.abs(d).max(axis=(2, 3)).argmax(), d.shape[:2]))
    jobs.set_mode("A-B")
    drain_events()
    yield w.compare_panel
    jobs.close()
    w.worker.wait_idle()



@pytest.mark.parametrize("mode", ["A-B", "A"])
def test_the_tiles_and_the_focused_head_fit_the_bars_measured_labels(panel, mode):
    assert F.bar_labels(LIM)[0] == "+0.00000123"
    panel.jobs.set_mode(mode)
    drain_events()
    for canvas, titles, rects in ((panel.tiles, "tile_titles", "tile_rects"),
                                  (panel.focus, "focus_titles", "focus_rects")):
        for width in range(260, 900, 9):
            height = canvas.heightForWidth(width)
            canvas.resize(width, height)
            image = canvas.grab().toImage()
            shown, boxes = getattr(panel, titles), getattr(panel, rects)
            assert shown and not any(t.endswith("\u2026") for t in shown), (width, height, shown)
            bottom = max(r.bottom() for r in boxes)
            assert bottom <= height and max(r.right() for r in boxes) <= width, (width, height)
            if height > canvas.minimumHeight():  # the height asked is the height the tiles take
                assert bottom >= height - 7, (width, height, bottom)
            right = _rightmost_ink(image)
            assert 0 <= right < width - 1, (width, right)  # (the labels whole, not cut at the edge)


def _rightmost_ink(image) -> int:
    """The rightmost pixel column with ink (lightness under 100) on some third row, -1 where there
    is none: read from the right edge inwards, so the columns left of it are not read."""
    for x in range(image.width() - 1, -1, -1):
        if any(image.pixelColor(x, y).lightness() < 100 for y in range(0, image.height(), 3)):
            return x
    return -1
