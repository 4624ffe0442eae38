"""The status bar's copy of a long error (a pickle checkpoint's conversion advice) is cut with an
ellipsis before the token count and compute time at its right, never run into them mid-word; the
banner above the text keeps the whole message."""

from PySide6.QtWidgets import QWidget

from windows import WAIT, drain_events, open_window, widget


def test_a_long_error_ends_with_an_ellipsis_before_the_figures(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1280, 800)
    pickle = tmp_path / "model.bin"
    pickle.write_bytes(b"\x80\x02}q\x00.")
    w.load_model(str(pickle))
    banner = widget(w, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible() and "pickle" in banner.text(), timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    bar = w.statusBar()
    message = bar.currentMessage()
    assert message.endswith("…") and banner.text().startswith(message[:-1])
    figures = [c for c in bar.findChildren(QWidget) if c.parentWidget() is bar and c.isVisible()
               and c.width() > 0]
    assert figures, "the token count and compute time are in the status bar"
    left_of_figures = min(c.x() for c in figures)
    assert bar.fontMetrics().horizontalAdvance(message) < left_of_figures
