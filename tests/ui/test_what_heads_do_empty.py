"""An empty text on SmolLM2 (no BOS) runs no tokens: the grid is empty, and so are What heads do (no
prediction after a token that is gone) and the status bar's compute time (not the last text's)."""

from windows import WAIT, open_window, wait_for_text, widget


def test_an_empty_text_empties_the_prediction_too(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text="The cat sat on the",
                    panels=("predict",))
    w.predict_dock.show()
    w.predict_dock.raise_()
    panel = w.predict_panel
    qtbot.waitUntil(lambda: panel.top_table.rowCount() > 0 and "Next token after" in panel.header.text(),
                    timeout=WAIT)
    w.set_text("")
    qtbot.waitUntil(lambda: w.state.result is None and w.state.text == "", timeout=WAIT)
    w.worker.wait_idle()
    qtbot.waitUntil(lambda: panel.top_table.rowCount() == 0, timeout=WAIT)
    assert "Next token after" not in panel.header.text()
    assert panel.lens_table.rowCount() == 0
    w.set_text("The cat sat on")  # and it comes back with a text
    wait_for_text(qtbot, w, "The cat sat on")
    qtbot.waitUntil(lambda: panel.top_table.rowCount() > 0 and "Next token after" in panel.header.text(),
                    timeout=WAIT)
    w.worker.wait_idle()


def test_an_empty_text_shows_no_compute_time_of_the_text_before(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text="The cat sat on the",
                    panels=())
    assert widget(w, "time_label").text().startswith("compute ")
    w.set_text("")
    qtbot.waitUntil(lambda: w.state.result is None and w.state.text == "", timeout=WAIT)
    assert widget(w, "tokens_label").text() == "0 tokens"
    assert widget(w, "time_label").text() == ""
    w.worker.wait_idle()
