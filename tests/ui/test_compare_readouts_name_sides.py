"""What Compare's readouts say. The grid in B or A − B reads first the value its pixel shows,
named by its side, then the other two, all of the clean runs (what Compare compares), and says so
while a head is switched off in A; its titles then carry none of A's changed run's marks (it read
A's changed-run weight over B's pixel, and A's role badges and "· off" over B's tiles). The
summary and the JSD map's hover write JSD in significant digits (a 1.5e-05 bits JSD read
"0.0000"), and a model against itself names no head that "moved most". The token strip's hover
reads both top-1 tokens at every position, and 0 flips point at no frame."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPointF

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing import compare_tokens as NT
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number, signed
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from attnviz.ui.views.grid_compare import CLEAN_RUNS
from windows import (WAIT, drain_events, hover, hover_grid, tip_shown, toy_compared_with_checkpoint,
                     toy_compared_with_itself, toy_window)

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def with_step0(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


@pytest.fixture
def itself(qtbot, tmp_path):
    yield from toy_compared_with_itself(qtbot, tmp_path / "s.ini", TEXT)


def test_b_and_a_minus_b_read_what_their_pixels_show_with_a_head_off(with_step0, qtbot):
    w = with_step0
    st, g, jobs = w.state, w.grid, w.worker.compare_jobs
    a, b = st.model, jobs.b
    off = (0, 2)  # (switched off in layer 0, it changes layer 1's patterns)
    st.effects.toggle_head(*off)
    def changed():  # A's run with the head off on screen, and its comparison in
        run = st.result is not None and st.effects.run_of(st.result)
        return (bool(run) and run.changed is not None and run.ablation.heads == ((off,))
                and jobs.comparison is not None and jobs.comparison.result is st.result)
    qtbot.waitUntil(changed, timeout=WAIT)
    w.worker.wait_idle()
    ids = st.result.input_ids
    clean = models_pair(a, b, ids, C.compare_trace)
    layer = 1
    A, B = clean.a.attentions[layer], clean.b.attentions[layer]
    lab = st.result.labels
    moved = np.abs(st.result.attentions[layer] - A)  # A's changed run against its clean run
    head, q, k = (int(v) for v in np.unravel_index(int(moved.argmax()), moved.shape))
    assert moved[head, q, k] > 1e-3
    for mode in ("B", "A-B"):
        side = "B" if mode == "B" else "A \u2212 B"
        g.mode_selector.buttons[mode].click()
        for lay in (0, 1):  # the titles name the side, and none of A's changed run's marks (off, role badge)
            st.set_layer(lay)
            qtbot.waitUntil(lambda m=mode: g.shown_mode == m and g.drawn is st.result, timeout=WAIT)
            drain_events()
            assert g.titles() == [f"{side} {head_title(lay, h)}" for h in range(st.n_head)], g.titles()
        lo = g.layout_
        i = lo.heads.index((layer, head))
        tip = tip_shown(hover_grid(qtbot, g, lo.x0[i] + k + 0.5, lo.y0[i] + q + 0.5))  # (as shown)
        a_, b_ = float(A[head, q, k]), float(B[head, q, k])
        first = f"{b_:.4f}  (A {a_:.4f}, A \u2212 B {signed(a_ - b_)})" if mode == "B" else \
            f"{signed(a_ - b_)}  (A {a_:.4f}, B {b_:.4f})"
        assert tip == f"{side} {head_title(layer, head)}  {lab[q]} \u2192 {lab[k]}  {first}  [{CLEAN_RUNS}]", tip
    assert g.mode_selector.clean.isVisible() and CLEAN_RUNS in g.mode_selector.clean.text()
    assert CLEAN_RUNS in w.compare_panel.title.text()
    # A: the changed run, its marks back
    g.mode_selector.buttons["A"].click()
    st.set_layer(0)
    qtbot.waitUntil(lambda: g.shown_mode == "A" and "\u00b7 off" in g.titles()[off[1]], timeout=WAIT)
    st.effects.toggle_head(*off)
    qtbot.waitUntil(lambda: not g.mode_selector.clean.isVisible(), timeout=WAIT)
    assert CLEAN_RUNS not in w.compare_panel.title.text()


def test_a_model_against_itself_names_no_head_and_no_frames(itself, qtbot):
    w = itself
    jobs, panel = w.worker.compare_jobs, w.compare_panel
    qtbot.waitUntil(lambda: jobs.comparison.doc["kld"] is not None and panel.map_layout is not None, timeout=WAIT)
    c = jobs.comparison
    said = panel.summary.text()
    assert said.startswith("mean head JSD 0 bits; no head moved: every head's JSD is exactly 0;"), said
    assert "moved most" not in said and "framed" not in said, said
    assert "(no flips: A's and B's top-1 agree at every position; each token's bar in the strip above its KL)" in said
    # the strip's hover: the two top-1 tokens (the same) at a position without a flip
    a = w.state.model
    tops = NT.next_tokens(models_pair(a, jobs.b, c.result.input_ids, C.compare_trace)).top_a
    for t in (1, 4):
        hover(panel.strip, panel.strip_cells[t].center())
        tip = tip_shown(panel.strip.toolTip())
        assert tip.endswith(f"; same top-1 in A and B: {quoted(token_text(a, int(tops[t])))}"), tip


def test_a_small_jsd_reads_in_significant_digits(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    jobs, panel = w.worker.compare_jobs, w.compare_panel
    try:
        open_compare(w, BSource("quantized", "Q8_0"))
        panel = w.compare_panel
        qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None
                        and jobs.comparison.doc["kld"] is not None and panel.map_layout is not None, timeout=WAIT)
        w.worker.wait_idle()
        jsd = np.asarray(jobs.comparison.doc["heads_jsd"])
        assert 0 < jsd.max() < 5e-4  # (where ":.4f" read 0.0000)
        l, h = np.unravel_index(int(np.argmax(jsd)), jsd.shape)
        said = panel.summary.text()
        assert said.startswith(f"mean head JSD {plain_number(jsd.mean())} bits; "
                               f"moved most {head_title(int(l), int(h))} ({plain_number(jsd[l, h])} bits)"), said
        assert "(0.0000 bits)" not in said and "JSD 0.0000 bits" not in said
        x, y = headmap.cell_center(panel.head_map(), panel.map_layout, int(l), int(h))
        hover(panel.map, QPointF(x, y))
        top = jobs.comparison.doc["heads_jsd_max"][l][h]
        assert tip_shown(panel.map.toolTip()) == (f"{head_title(int(l), int(h))}: JSD mean {plain_number(jsd[l, h])} "
                                                  f"bits, largest row {plain_number(top)} bits")
    finally:
        jobs.close()
        w.worker.wait_idle()
