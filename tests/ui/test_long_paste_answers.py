"""A long paste leaves the window answering: the Patching panel tokenises its texts on a job, not
on the window's thread, and shows a long clean text cut, with its size. The tokenizer is made as
slow as a paste of millions of characters makes it; the longest pause is read from a 5 ms timer's
ticks."""

import time

from PySide6.QtCore import QElapsedTimer, QTimer
from PySide6.QtGui import QGuiApplication

from attnviz.engine.computing.model import Model
from windows import TEXTBOOK, WAIT, open_window

SLOW = 2.0  # seconds each encode takes here
TEXT = "The keys to the cabinet are on the table. " * 500  # 21,000 characters, past the model's positions


def test_a_long_paste_leaves_the_window_answering(qtbot, tmp_path, monkeypatch):
    # (a decoder whose texts go through Model.encode: Patching is off for an encoder)
    w = open_window(qtbot, tmp_path / "s.ini", model=TEXTBOOK)
    p = w.patching_panel
    w.patching_dock.show()
    w.patching_dock.raise_()  # (a hidden tab checks nothing)
    qtbot.waitUntil(lambda: p.position_label.text().startswith("P = "), timeout=WAIT)
    encode, calls = Model.prepare, []

    def slow_encode(self, *a, **k):
        calls.append(1)
        time.sleep(SLOW)
        return encode(self, *a, **k)

    monkeypatch.setattr(Model, "prepare", slow_encode)  # (what the check tokenises with)
    clock, ticks = QElapsedTimer(), []
    clock.start()
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(lambda: ticks.append(clock.elapsed()))
    timer.start()
    try:
        QGuiApplication.clipboard().setText(TEXT)
        w.text_box.selectAll()
        w.text_box.paste()
        # the check's answer: the text is longer than the model's positions, no token at P
        qtbot.waitUntil(lambda: p.position_label.text() == "", timeout=WAIT)
        qtbot.wait(200)
    finally:
        timer.stop()
        w.worker.wait_idle()
    assert calls  # (the slow tokenizer was met: the window answered while it ran)
    assert w.state.text == TEXT.strip() or w.state.text == TEXT
    longest = max(b - a for a, b in zip(ticks, ticks[1:]))
    assert longest < 1000 * SLOW / 2, f"the window stood still {longest} ms"
    shown = p.clean_label.text()
    assert len(shown) < 2100 and shown.endswith(f"\u2026 ({len(w.state.text):,} characters)")
