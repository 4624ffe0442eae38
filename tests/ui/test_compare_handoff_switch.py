"""A model switched away while its run for a keystroke is on its way, with What heads do shown
(A's runs are kept for a Compare yet to open), is let go: once the new model's text is shown,
nothing holds the old model (a model of gigabytes would stay in memory)."""

from __future__ import annotations

import gc
import threading
import weakref

from attnviz.engine.analysing import effects as E
from windows import TOY, WAIT, open_window

ENCODER = "all-MiniLM-L6-v2"


def test_a_model_switched_away_mid_run_is_let_go(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text="the cat sat on the mat")
    st = w.state
    st.effects.set_wanted(True)  # What heads do shown: A's runs are traced and kept
    w.worker.wait_idle()
    started, gate, real = threading.Event(), threading.Event(), E.window_run

    def held(*a, **k):  # A's keystroke run waits until the switch is under way
        started.set()
        gate.wait(timeout=WAIT / 1000)
        return real(*a, **k)
    monkeypatch.setattr(E, "window_run", held)
    old = weakref.ref(st.model)
    w.set_text("the cat sat on the mat and the dog")
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    try:
        with qtbot.waitSignal(st.sigModelChanged, timeout=4 * WAIT):
            w.load_model(ENCODER)
    finally:
        gate.set()
    monkeypatch.setattr(E, "window_run", real)
    text = "another sentence for the encoder"
    w.set_text(text)
    qtbot.waitUntil(lambda: st.result is not None and st.model.name == ENCODER
                    and st.result.text == text, timeout=4 * WAIT)
    w.worker.wait_idle()
    qtbot.waitUntil(lambda: (gc.collect(), old() is None)[1], timeout=WAIT)
