"""A load that fails: the status bar carries the whole error where it has the room (measured once
the load box has left the bar's room, never cut to a few letters), and with no model on screen
the grid says so in place of an empty frame, neither view draws a colour bar of nothing, the focus
view does not ask for a click on a grid that is not there, and the guide does not wait for a head
forever. A model shown before the failed load stays, with its views."""

from PySide6.QtCore import QSettings

from attnviz.engine.analysing.samples import SAMPLES

from windows import WAIT, drain_events, open_window, widget

JUNK = b"not a model at all " * 20


def test_a_failed_first_load_says_what_is_missing(qtbot, tmp_path):
    from attnviz.ui.app import create_window

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(JUNK)
    w = create_window(model=str(junk), settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.resize(1100, 700)
    w.show()
    banner = widget(w, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible() and w.state.loading == "", timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert w.state.model is None
    # the error as far as the bar has room: all of it but an end the length of its temporary
    # folder's path may push out ('Coul…' before); the banner holds all of it
    shown, whole = w.statusBar().currentMessage(), banner.text()
    assert shown == whole or (shown.endswith("\u2026") and whole.startswith(shown[:-1])
                              and len(shown) > 0.8 * len(whole)), (shown, whole)
    assert "junk.gguf is not a GGUF file" in banner.text()
    note = widget(w, "no_model_note")
    assert note.isVisible() and note.text().startswith("No model is loaded")
    assert w.grid.cbar.opacity() == 0 and w.focus_view.cbar.opacity() == 0  # not drawn
    assert w.focus_view.title.text().startswith("No model is loaded")
    answer = w.guide_bar.answer.text()
    assert "No model is loaded" in answer and "Finding" not in answer
    assert not w.guide_bar.show_button.isEnabled()
    w.state.set_text(SAMPLES[1].text)  # another sample: still no model, so no head is being found
    drain_events()
    answer = w.guide_bar.answer.text()
    assert w.guide_bar.isVisible() and "No model is loaded" in answer and "Finding" not in answer, answer


def test_a_failed_load_keeps_the_model_shown_and_its_views(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(JUNK)
    w.state.set_focus(0, 1)
    w.load_model(str(junk))
    banner = widget(w, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible() and w.state.loading == "", timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert banner.text().endswith("Still showing all-MiniLM-L6-v2.")
    assert w.state.model.name == "all-MiniLM-L6-v2" and w.grid.drawn is w.state.result
    assert w.grid.cbar.opacity() == 1 and w.focus_view.cbar.opacity() == 1
    assert not widget(w, "no_model_note").isVisible()
    assert w.focus_view.title.text().startswith("<b>L0 H1</b>")
