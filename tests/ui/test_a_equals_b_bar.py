"""A model compared with itself: every A − B is 0, and the A − B colour bars say so. The grid's bar
writes one label, "0" (not ±1, a limit no difference has), and every tile is the map's white; the
Compare panel's bars write only their "0" over white tiles, for the layer and the focused head."""

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import compare as F
from windows import axis_labels, drain_events, toy_compared_with_itself

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def itself(qtbot, tmp_path):
    yield from toy_compared_with_itself(qtbot, tmp_path / "s.ini", TEXT)


def test_the_grids_a_minus_b_bar_reads_0(itself, qtbot):
    w = itself
    g, c = w.grid, w.worker.compare_jobs.comparison
    assert not (c.a_attentions - c.b_attentions).any()
    g.mode_selector.buttons["A-B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result, timeout=WAIT)
    drain_events()
    assert [text for text, _box in axis_labels(g.cbar.getAxis("right"))] == ["0"]
    assert g.cbar.getAxis("right").labelText == "A \u2212 B (weight)"
    cells = np.unique(g.img.image)
    assert list(cells[cells > 0]) == [128]  # every cell the map's middle, white (0: the gaps)


def test_the_compare_panels_bars_read_0(itself, qtbot, monkeypatch):
    w = itself
    painted, real = [], F.paint_colour_bar

    def spy(p, rect, lim, *a, **kw):  # what each bar writes, as it writes it
        said, draw = [], p.drawText
        p.drawText = lambda *t: (said.append(t[-1]), draw(*t))[1]  # (the paint's own painter)
        real(p, rect, lim, *a, **kw)
        painted.append((lim, said))
    monkeypatch.setattr(F, "paint_colour_bar", spy)
    panel = w.compare_panel
    w.worker.compare_jobs.set_mode("A-B")
    w.state.set_focus(0, 1)
    qtbot.waitUntil(lambda: panel.tile_rects != [], timeout=WAIT)
    painted.clear()
    panel.tiles.grab()
    panel.focus.grab()
    assert len(painted) == 2 and all(p == (0.0, ["0", "A \u2212 B"]) for p in painted), painted


def test_a_difference_of_0_is_painted_white_under_a_bar_reading_0(qapp, monkeypatch):
    d = np.zeros((3, 3), np.float32)
    assert F.signed_limit(d) == 0.0
    white = F.signed_rgb(np.zeros(1), 1.0)[0]
    assert min(white) > 240 and (F.signed_rgb(d, F.signed_limit(d)) == white).all()
    said = []
    image = QImage(120, 340, QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    try:
        F.paint_colour_bar(p, QRectF(10, 20, 14, 256), 0.0, "A \u2212 B", QColor("black"))
    finally:
        p.end()
    assert said == ["0", "A \u2212 B"]
