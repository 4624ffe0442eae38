"""The grid's A − B colour bar names its limit however small it is, to 3 significant digits: B the
toy model quantized to BF16 in memory moves the weights by about 0.001, which 3 decimals wrote 5%
off (and any limit under 0.0005 as a bar of 0 to 0)."""

import numpy as np

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import axis_labels, drain_events, toy_window

WAIT = 30000
TEXT = "the cat sat on the mat and the cat"


def test_a_minus_b_bar_of_a_bf16_twin_names_its_small_limit(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    try:
        g, jobs = w.grid, w.worker.compare_jobs
        open_compare(w, BSource("quantized", "BF16"))
        qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                        timeout=WAIT)
        c = jobs.comparison
        g.mode_selector.buttons["A-B"].click()
        qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result, timeout=WAIT)
        layers = range(c.a_attentions.shape[0]) if w.state.view_mode == "all" else [w.state.layer]
        lim = max(float(np.abs(c.a_attentions[l] - c.b_attentions[l]).max()) for l in layers)
        assert 0 < lim < 0.005 and abs(round(lim, 3) - lim) > 0.005 * lim, lim  # (3 decimals are off)
        lo, hi = g.cbar.levels()
        assert hi > 0 and abs(hi - lim) <= 0.005 * lim and lo == -hi
        drain_events()
        texts = [text for text, _box in axis_labels(g.cbar.getAxis("right"))]
        assert f"{lim:.3g}" in texts and f"-{lim:.3g}" in texts, texts  # both ends, as they stand
    finally:
        w.worker.compare_jobs.close()
        w.worker.wait_idle()
