"""Compare follows typing down to the next-token numbers: each keystroke's comparison starts its own
KL / flips job at once (no typing pause), off the main thread; a newer keystroke makes the running
one stale (it stops at its next block); the strip's painted KL bars, flip marks and hover then give
the numbers a direct NumPy computation from the two models' logits gives."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from PySide6.QtTest import QTest

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing import compare_tokens as NT
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import compare as F
from attnviz.figures.style import ERROR
from attnviz.ui.machinery.compare_jobs import NEXT_KIND, BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import drain_events, hover, tip_shown

WAIT = 30000
HOLD_S = 120
TEXT = "the cat sat on the mat and the"


@pytest.fixture
def window(toy_compare_window):
    return toy_compare_window(TEXT)


def direct(a, b, ids):
    """KL(P_A || P_B) [T] in nats and both top-1 ids, from each model's own logits (no cache),
    float64 log-softmax."""
    def logp(m):
        trace = C.compare_trace()
        m.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
        head = m.lm_head()  # its final norm, then x @ W_U^T
        x = head.normed(trace.resid[-1]).astype(np.float64)
        z = x @ np.asarray(head.w_u, dtype=np.float64).T
        z -= z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(-1), la.argmax(-1), lb.argmax(-1)


def test_each_keystroke_gets_its_next_token_numbers_and_the_strip_paints_them(window, qtbot):
    w = window
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    started = []  # (T, thread) of each next-token job as it starts
    real = NT.next_token_numbers

    def spy(pair, known=None, stop=None):
        started.append((len(pair.a.ids), threading.current_thread()))
        return real(pair, known, stop)
    submitted = []  # the comparison each 'compare-next' job was submitted for, as submitted
    submit = w.worker.submit

    def record(kind, fn, on_done, request=None, *a, **k):
        if kind == NEXT_KIND:
            submitted.append(request)
        return submit(kind, fn, on_done, request, *a, **k)
    w.worker.submit = record
    NT.next_token_numbers = spy
    try:
        w.text_box.setFocus()
        w.text_box.moveCursor(w.text_box.textCursor().MoveOperation.End)
        for ch in " cat":
            QTest.keyClick(w.text_box, ch)
            text = w.text_box.toPlainText()
            qtbot.waitUntil(lambda text=text: jobs.comparison is not None
                            and jobs.comparison.result.text == text, timeout=WAIT)
            # its numbers are asked for once the comparison's frame is painted, the next key not
            # waited for (the numbers may be in already: a comparison with them is a copy of the
            # same result's)
            qtbot.waitUntil(lambda: bool(submitted) and submitted[-1].result is jobs.comparison.result,
                            timeout=WAIT)
        qtbot.waitUntil(lambda: jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    finally:
        NT.next_token_numbers = real
        w.worker.submit = submit
    assert started and all(t is not threading.main_thread() for _n, t in started)
    c = jobs.comparison
    assert c.result.text == TEXT + " cat"

    kl, top_a, top_b = direct(w.state.model, w.state.checkpoints.model(0), c.result.input_ids)
    np.testing.assert_allclose(c.doc["kld"], kl, rtol=1e-5, atol=1e-8)
    flipped = set(np.flatnonzero(top_a != top_b).tolist())
    assert flipped, "step 0 predicts otherwise at some position"
    assert {f["position"] for f in c.doc["flips"]} == flipped

    # what is painted: a bar 10 * KL / max KL pixels high under each token, a red frame on a flip
    panel = w.compare_panel
    qtbot.waitUntil(lambda: len(panel.strip_cells) == len(kl), timeout=WAIT)
    panel.strip.repaint()
    image = panel.strip.grab().toImage()
    dpr = image.devicePixelRatio()
    for t, r in enumerate(panel.strip_cells):
        x = int(r.center().x() * dpr)
        bottom = r.bottom() - 2
        painted = sum(image.pixelColor(x, int((bottom - 0.5 - i) * dpr)).name() == F.KL_BAR.name()
                      for i in range(12))
        assert abs(painted - 10 * kl[t] / kl.max()) <= 1.0, (t, painted, kl[t])
        edge = image.pixelColor(int((r.left() + 1.5) * dpr), int(r.center().y() * dpr))
        assert (edge.name() == ERROR.lower()) == (t in flipped), t
    t = int(np.argmax(kl))
    hover(panel.strip, panel.strip_cells[t].center())
    shown = re.search(r"KL\(A\u2016B\) (\S+) nats", tip_shown(panel.strip.toolTip()))
    assert shown and abs(float(shown.group(1)) - kl[t]) <= 5.1e-4 * kl[t] + 1e-12  # (4 significant digits, kld's bound)


def test_a_keystroke_makes_the_running_next_token_job_stale(window, qtbot):
    """A next-token job still running when the next key comes is stale from that key on (it stops
    at the unembedding's next block); the newest text's numbers come in."""
    w = window
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc["kld"] is not None,
                    timeout=WAIT)
    gate, held = threading.Event(), []
    real = NT.next_token_numbers

    def hold(pair, known=None, stop=None):
        if not held:
            held.append(stop)
            gate.wait(HOLD_S)
        return real(pair, known, stop)
    NT.next_token_numbers = hold
    try:
        w.set_text(TEXT + " cat")
        qtbot.waitUntil(lambda: bool(held), timeout=WAIT)
        stop = held[0]
        assert not stop()
        w.set_text(TEXT + " cat sat")  # the next keystroke
        assert stop()
        gate.set()
        qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat sat"
                        and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    finally:
        gate.set()
        NT.next_token_numbers = real
        w.worker.wait_idle()
    kl, _, _ = direct(w.state.model, w.state.checkpoints.model(0), jobs.comparison.result.input_ids)
    np.testing.assert_allclose(jobs.comparison.doc["kld"], kl, rtol=1e-5, atol=1e-8)


def compare_shown(w, qtbot):
    """Compare opened on the toy's first checkpoint at the window's first-start size, its first
    comparison and next-token numbers in, its panel raised: (the jobs, the panel)."""
    w.resize(1400, 860)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc["kld"] is not None,
                    timeout=WAIT)
    # (B's induction probe done too: a probe paused for a held job would leave the pool one thread)
    assert w.worker.wait_idle()
    w.compare_dock.raise_()
    return jobs, w.compare_panel


def test_the_numbers_coming_in_repaint_the_strip_not_the_tiles_or_the_map(window, qtbot):
    """A keystroke's next-token numbers change the strip and the summary: the A | B | A − B tiles and
    the JSD map, painted for its comparison already, are not painted again for them."""
    from PySide6.QtCore import QEvent, QObject

    w = window
    jobs, panel = compare_shown(w, qtbot)
    # room for any summary (its height never shrinks while B is open; growing would move the map)
    panel.summary.setMinimumHeight(panel.summary.height() + 200)
    painted = {"tiles": 0, "map": 0, "strip": 0}

    class Count(QObject):
        def eventFilter(self, obj, ev):
            if ev.type() == QEvent.Type.Paint:
                painted[obj.objectName()] += 1
            return False
    count = Count()
    for name in painted:
        getattr(panel, name).setObjectName(name)
        getattr(panel, name).installEventFilter(count)
    gate = threading.Event()
    real = NT.next_token_numbers

    def hold(pair, known=None, stop=None):
        gate.wait(HOLD_S)
        return real(pair, known, stop)
    NT.next_token_numbers = hold
    try:
        w.set_text(TEXT + " cat")
        # the comparison painted (tiles, then the map a moment later), its numbers held
        qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat" and painted["tiles"] > 0
                        and painted["map"] > 0 and not panel._later.isActive(), timeout=WAIT)
        assert jobs.comparison.doc["kld"] is None
        drain_events()  # (a paint the map's timer asked for, still posted)
        drain_events()
        for name in painted:
            painted[name] = 0
        gate.set()
        qtbot.waitUntil(lambda: jobs.comparison.doc["kld"] is not None and painted["strip"] > 0,
                        timeout=WAIT)
    finally:
        gate.set()
        NT.next_token_numbers = real
        w.worker.wait_idle()
    drain_events()
    assert painted["tiles"] == 0 and painted["map"] == 0
    assert "KL(A\u2016B) mean" in panel.summary.text()


def test_a_new_comparison_is_painted_in_the_turn_it_comes_in(window, qtbot):
    """The tiles and the strip paint a new comparison as it comes in (the grid's A − B follows in
    a turn of its own): by the time the session's signal has been handled they show its tokens."""
    w = window
    jobs, panel = compare_shown(w, qtbot)
    qtbot.waitUntil(lambda: panel.tiles.isVisible() and panel.tile_rects != [], timeout=WAIT)
    seen = []  # (text, tokens the tiles and the strip were painted with) as each comparison comes in
    jobs.sigChanged.connect(lambda: seen.append((jobs.comparison.result.text, panel.tile_T,
                                                 len(panel.strip_cells)))
                            if jobs.comparison is not None and jobs.comparison.doc is not None else None)
    w.set_text(TEXT + " cat")
    qtbot.waitUntil(lambda: any(s[0] == TEXT + " cat" for s in seen), timeout=WAIT)
    w.worker.wait_idle()
    T = jobs.comparison.result.n_tokens
    assert (TEXT + " cat", T, T) in seen


def test_b_opens_with_the_unembeddings_the_next_token_numbers_read(window, qtbot, monkeypatch):
    """Both sides' unembeddings are built while B opens (on its load thread), not by a keystroke's
    next-token job, whose first pass over the tables no keystroke could stop."""
    w = window
    jobs = w.worker.compare_jobs
    built, at_open = [], []  # the models whose comparison heads were built; how many as B came in
    real = NT.build_head

    def build(model, *args, **kw):
        built.append(model)
        return real(model, *args, **kw)
    monkeypatch.setattr(NT, "build_head", build)
    jobs.sigChanged.connect(lambda: at_open.append(list(built)) if jobs.b is not None and not at_open else None)
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc["kld"] is not None,
                    timeout=WAIT)
    w.set_text(TEXT + " cat")
    qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat"
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    w.worker.wait_idle()
    a, b = w.state.model, jobs.b
    assert len(at_open) == 1 and {id(m) for m in at_open[0]} == {id(a), id(b)}
    assert len(built) == 2  # nothing built after B opened


def test_the_pool_jobs_after_a_comparison_wait_for_its_frame(window, qtbot, monkeypatch):
    """A comparison's next-token job and the text's quick head scores are submitted after the
    comparison's frame is painted (the grid's A − B, painted in a turn after the panel's tiles),
    not beside it: a job's Python on the pool would hold the GIL those paints need."""
    from PySide6.QtCore import QEvent, QObject

    from attnviz.ui.machinery.score_jobs import SCORES_KIND

    w = window
    jobs, _panel = compare_shown(w, qtbot)
    w.worker.wait_idle()
    monkeypatch.setattr(w.worker.score_jobs.score_timing, "at_once", lambda *_: True)  # (the quick scores)
    order = []  # ("frame", text): the grid painted with a comparison's A − B; ("submit", kind, text)
    real = w.worker.submit

    def submit(kind, fn, on_done, request=None, *a, **kw):
        order.append(("submit", kind, w.state.text))
        return real(kind, fn, on_done, request, *a, **kw)
    monkeypatch.setattr(w.worker, "submit", submit)

    class Painted(QObject):
        def eventFilter(self, obj, ev):
            c = jobs.comparison
            if ev.type() == QEvent.Type.Paint and c is not None and c.doc is not None:
                order.append(("frame", c.result.text))
            return False
    painted = Painted()
    w.grid.gw.viewport().installEventFilter(painted)
    w.set_text(TEXT + " cat")
    qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat"
                    and jobs.comparison.doc["kld"] is not None
                    and ("submit", SCORES_KIND, TEXT + " cat") in order, timeout=WAIT)
    w.worker.wait_idle()
    w.grid.gw.viewport().removeEventFilter(painted)
    frame = order.index(("frame", TEXT + " cat"))
    assert order.index(("submit", NEXT_KIND, TEXT + " cat")) > frame
    assert order.index(("submit", SCORES_KIND, TEXT + " cat")) > frame
