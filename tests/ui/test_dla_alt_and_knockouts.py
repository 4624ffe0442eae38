"""What heads do, as shown: the DLA's alternative is the one the header names and the vs box's
placeholder offers (the clean top-1, or its second when the target is the top-1: the command
line's rule too); a typed '#-1' is said to be no token id; an encoder knocks out an edge to a
later key from the Ablation tab and the grid's menu, and the grid shows it; a backwards layer
range and an edge already knocked out are refused in words that say so."""

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnviz.engine.analysing.effects import is_changed
from windows import WAIT, open_window

COUNT = "one two three four five six. one two three four five"


def _panel(w):
    w.predict_dock.show()
    w.predict_dock.raise_()
    return w.predict_panel


def _type_target(qtbot, panel, text):
    panel.target_edit.clear()
    qtbot.keyClicks(panel.target_edit, text)
    qtbot.keyClick(panel.target_edit, Qt.Key.Key_Return)


@pytest.fixture
def smol(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=COUNT, panels=("predict",))
    yield w
    w.worker.wait_idle()


def test_the_header_and_the_placeholder_name_the_alternative_dla_uses(smol, qtbot):
    w = smol
    panel, eff = _panel(w), w.state.effects

    def shown(target):
        w.worker.effects_jobs.flush()
        a = eff.analysis
        return a is not None and panel.header.text() and a.label(a.target) == target
    qtbot.waitUntil(lambda: shown("·six"), timeout=WAIT)
    a = eff.analysis
    assert [a.label(i) for i in a.clean.top_ids[:2]] == ["·six", "·five"]
    # (target, the alternative the header names, the vs box's placeholder)
    for typed, target, alt, placeholder in (("", "·six", "·five", "second: ·five"),
                                            (" seven", "·seven", "·six", "top-1: ·six"),
                                            (" five", "·five", "·six", "top-1: ·six")):
        _type_target(qtbot, panel, typed)
        qtbot.waitUntil(lambda target=target: shown(target), timeout=WAIT)
        assert f"target <b>‘{target}’</b> vs <b>‘{alt}’</b>" in panel.header.text()
        assert eff.analysis.label(eff.analysis.alt) == alt
        assert panel.alt_edit.text() == "" and panel.alt_edit.placeholderText() == placeholder
    assert "or its second when the target is the top-1" in panel.alt_edit.toolTip()
    _type_target(qtbot, panel, "#-1")
    qtbot.waitUntil(lambda: "token id -1 is outside the vocabulary 0..49151" in panel.header.text(),
                    timeout=WAIT)
    # a decoder's query sees no later key: said so, nothing knocked out
    ab = panel.ablation_panel
    ab.knock_edit.setText("2-7 in 3")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text().startswith("the edge 2→7 is not one a query sees in SmolLM2")
    assert not eff.ablation.active


def test_an_encoder_knocks_out_an_edge_to_a_later_key(qtbot, tmp_path):
    from attnviz.ui.panels.ablation_panel import head_menu

    w = open_window(qtbot, tmp_path / "m.ini", text="the cat sat on the mat because it was tired",
                    panels=("predict",))
    assert not w.state.model.config.causal
    ab, eff = _panel(w).ablation_panel, w.state.effects
    clean = w.state.result.attentions.copy()
    assert clean[3, :, 2, 7].min() > 0
    ab.knock_edit.setText("2-7 in 3")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == "" and eff.ablation.knockouts == (((3,), 2, 7),)
    qtbot.waitUntil(lambda: is_changed(w.state.result), timeout=WAIT)
    shown = w.state.result.attentions
    assert shown[3, :, 2, 7].max() == 0 and np.all(shown[3, :, 2].sum(axis=-1) > 0.999)
    np.testing.assert_array_equal(shown[:3], clean[:3])  # the layers before it: the clean run's
    qtbot.waitUntil(lambda: "knocked out 2→7 in layer 3" in w.ablation_bar.label.text(), timeout=WAIT)
    assert ab.head_list.item(0).text() == "edge 2→7 knocked out in layer 3"
    # the grid's menu on that cell: the knockout can be restored, or widened to every layer
    texts = [a.text() for a in head_menu(w.state, 3, 1, 2, 7, w).actions()]
    labels = w.state.result.labels
    edge = f"2 '{labels[2]}' → 7 '{labels[7]}'"
    assert f"Restore {edge} in layer 3" in texts and f"Knock out {edge} in every layer" in texts
    assert f"Knock out {edge} in layer 3" not in texts
    # typed again: refused, not silently taken back out
    ab.knock_edit.setText("2-7 in 3")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text().startswith("the edge 2→7 is already knocked out in layer 3")
    assert eff.ablation.knockouts == (((3,), 2, 7),)
    ab.knock_edit.setText("7-2 in 5-3")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == "layers 5-3 run backwards: write 3-5"
    ab.knock_edit.setText("2-12 in 3")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == "the edge 2→12 is outside this text's 12 tokens (0..11)"
    assert eff.ablation.knockouts == (((3,), 2, 7),)
    # the menu's Restore brings the clean run back
    next(a for a in head_menu(w.state, 3, 1, 2, 7, w).actions() if a.text().startswith("Restore 2")).trigger()
    assert not eff.ablation.active
    qtbot.waitUntil(lambda: not is_changed(w.state.result), timeout=WAIT)
    np.testing.assert_allclose(w.state.result.attentions, clean, atol=1e-6)
    w.worker.wait_idle()
