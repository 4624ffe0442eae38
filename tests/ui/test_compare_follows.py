"""Compare's keystroke on the one runner: B's run follows A's on the pool's thread as A's ends, with
no turn of the main thread between them, and a newer keystroke stops B's run of the text before it
(its comparison is never shown; the newest text's is)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import models_pair
from windows import toy_compared_with_checkpoint

WAIT = 30000
HOLD_S = 20
TEXT = "the cat sat on the mat and the"


@pytest.fixture
def window(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def test_b_runs_as_a_ends_without_waiting_for_the_main_thread(window, qtbot, monkeypatch):
    """While the main thread is busy (here: this test, waiting without taking any event) from the
    moment A's run of a keystroke is submitted, B's run of that keystroke starts anyway, on the
    pool's thread, as A's ends; the comparison then shown is of that text, with the engine's
    numbers."""
    from attnviz.engine.analysing import effects

    w = window
    jobs = w.worker.compare_jobs
    started = threading.Event()
    threads = []
    real_trace, real_run = C.compare_trace, effects.window_run

    def trace(**kw):  # B's trace, made as the comparison's job starts B's run
        threads.append(threading.current_thread())
        started.set()
        return real_trace(**kw)

    def slow_run(*a, **kw):  # A's run, long enough for its submission to be seen first
        time.sleep(0.2)
        return real_run(*a, **kw)
    monkeypatch.setattr(C, "compare_trace", trace)
    monkeypatch.setattr(effects, "window_run", slow_run)
    w.set_text(TEXT + " cat")
    qtbot.waitUntil(lambda: w.worker.running("compute") is not None, timeout=WAIT)
    assert started.wait(HOLD_S), "B's run waited for the main thread to take A's result"
    qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat", timeout=WAIT)
    w.worker.wait_idle()
    assert threads and threading.main_thread() not in threads
    c = jobs.comparison
    want = C.compare(models_pair(w.state.model, jobs.b, c.result.input_ids, C.compare_trace))
    np.testing.assert_allclose(c.doc["heads_jsd"], want["heads_jsd"], atol=1e-6)
    np.testing.assert_allclose(c.doc["resid_cos"], want["resid_cos"], atol=1e-6)
    assert jobs.note == ""


def test_a_keystroke_stops_b_s_run_of_the_text_before_it(window, qtbot, monkeypatch):
    """B's run of a keystroke still running when the next key comes is stale from that key on (it
    stops at its next layer): only the newest text's comparison reaches the panel, and no note."""
    w = window
    jobs = w.worker.compare_jobs
    gate, held = threading.Event(), []
    b = jobs.b
    real_run = b.run

    def run(*a, request=None, **kw):
        if not held:
            held.append(request.stop)
            gate.wait(HOLD_S)
        return real_run(*a, request=request, **kw)
    monkeypatch.setattr(b, "run", run)
    shown = []  # the text of each comparison the session hands the panel
    jobs.sigChanged.connect(lambda: shown.append(jobs.comparison.result.text)
                            if jobs.comparison is not None else None)
    try:
        w.set_text(TEXT + " cat")
        qtbot.waitUntil(lambda: bool(held), timeout=WAIT)
        stop = held[0]
        assert not stop()
        w.set_text(TEXT + " cat sat")  # the next keystroke
        assert stop()
    finally:
        gate.set()
    qtbot.waitUntil(lambda: jobs.comparison.result.text == TEXT + " cat sat"
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    w.worker.wait_idle()
    assert TEXT + " cat" not in shown
    assert jobs.note == ""
    assert w.compare_panel.tile_T == jobs.comparison.result.n_tokens
