"""Typed back to a text computed before, a decoder takes every token's rows from its KV cache: the
status bar says the text was kept from before, not "compute 0 ms". A text with new tokens, and a
run with a head switched off (its changed run computed), show the engine's time."""

import re

from windows import TOY, open_window, wait_for_text, widget

TEXT = "def add(a, b):"
COMPUTED = re.compile(r"compute (<1|\d+) ms")  # (a toy run can take under half a ms)


def typed(qtbot, w, text):
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    w.worker.wait_idle()
    return widget(w, "time_label")


def test_a_text_typed_back_says_it_was_kept_from_before(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    w.worker.wait_idle()
    assert COMPUTED.fullmatch(typed(qtbot, w, TEXT + " return").text())
    label = typed(qtbot, w, TEXT)  # back: every token from the cache
    assert w.state.result.cache_computed == 0
    assert label.text() == "kept from before"
    assert "computed before" in label.toolTip()
    assert COMPUTED.fullmatch(typed(qtbot, w, TEXT + " pass").text())  # new tokens computed
    assert "computed before" not in label.toolTip()


def test_a_changed_run_of_a_text_typed_back_shows_its_time(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    w.worker.wait_idle()
    w.state.effects.toggle_head(1, 0)  # each changed run is computed from the clean one's layers
    typed(qtbot, w, TEXT)
    typed(qtbot, w, TEXT + " return")
    label = typed(qtbot, w, TEXT)
    assert w.state.effects.ablation.active and w.state.result.cache_computed == 0
    assert COMPUTED.fullmatch(label.text())
