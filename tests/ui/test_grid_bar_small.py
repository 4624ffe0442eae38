"""The grid's A − B colour bar names its limit however small it is, to 3 significant digits: B the
toy model quantized to BF16 in memory moves the weights by about 0.001, which 3 decimals wrote 5%
off (and any limit under 0.0005 as a bar of 0 to 0). Its ends read as the Compare panel's bar
writes them: "+0.447" at the top, "−0.447" at the bottom (the minus sign, not "-"), against
checkpoint 0 (large differences) too."""

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.figures import compare as F
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import axis_labels, drain_events, toy_window

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


def panel_bar_labels(lim: float, monkeypatch) -> list[str]:
    """The labels the Compare panel's A − B bar paints for limit `lim` (top, middle, bottom)."""
    said = []
    image = QImage(120, 340, QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    try:
        F.paint_colour_bar(p, QRectF(10, 20, 14, 256), lim, "A \u2212 B", QColor("black"))
    finally:
        p.end()
    return said[:3]


@pytest.mark.parametrize("b", [BSource("quantized", "BF16"), BSource("checkpoint", 0)])
def test_a_minus_b_bar_names_its_limit_as_the_compare_panel_does(qtbot, tmp_path, monkeypatch, b):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    try:
        g, jobs = w.grid, w.worker.compare_jobs
        open_compare(w, b)
        qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                        timeout=WAIT)
        c = jobs.comparison
        g.mode_selector.buttons["A-B"].click()
        qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result, timeout=WAIT)
        layers = range(c.a_attentions.shape[0]) if w.state.view_mode == "all" else [w.state.layer]
        lim = max(float(np.abs(c.a_attentions[l] - c.b_attentions[l]).max()) for l in layers)
        if b.kind == "quantized":
            assert 0 < lim < 0.005 and abs(round(lim, 3) - lim) > 0.005 * lim, lim  # (3 decimals are off)
        else:
            assert lim > 0.1 and abs(round(lim, 2) - lim) > 1e-4, lim  # (2 decimals are off)
        lo, hi = g.cbar.levels()
        assert hi > 0 and abs(hi - lim) <= 0.005 * lim and lo == -hi
        drain_events()
        texts = [text for text, _box in axis_labels(g.cbar.getAxis("right"))]
        top, bottom = f"+{lim:.3g}", f"\u2212{lim:.3g}"  # both ends, as they stand
        assert top in texts and bottom in texts, texts
        assert not any(t.startswith("-") for t in texts), texts  # every minus is "−"
        assert panel_bar_labels(hi, monkeypatch) == [top, "0", bottom]
    finally:
        w.worker.compare_jobs.close()
        w.worker.wait_idle()
