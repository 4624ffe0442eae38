"""A run kept for a B yet to open is let go once another result is shown: an encoder's first run
(kept with its residual stream for a Compare opening on it) is not held for the rest of the
session while the user types other texts with no B open."""

import gc
import weakref

from windows import open_window

TEXT = "When Mary and John went to the store"


def test_an_encoders_first_run_is_let_go_once_another_text_is_shown(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model="all-MiniLM-L6-v2", text=TEXT)
    w.worker.wait_idle()
    first = weakref.ref(w.state.result)
    text = TEXT
    for word in (" then", " they", " left"):
        text += word
        w.set_text(text)
        qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=30000)
        w.worker.wait_idle()
    qtbot.waitUntil(lambda: gc.collect() is not None and first() is None, timeout=10_000)
