"""A model whose sliding window is only in some layers (Gemma 3's local layers; its global ones see
every earlier key): an edge past the window is knocked out in the global layers only, from the
Ablation tab and the grid's menu, and the grid shows it there; in the local layers alone it is
refused in words that name the window. The tab's line on a knockout done (in the text's colour) goes
once another ablation or another text is on."""

from PySide6.QtCore import Qt

from attnviz.engine.analysing.effects import is_changed
from attnviz.figures.style import WARNING
from tiny import tiny_text_decoder
from windows import WAIT, open_window

TYPES = ["sliding_attention", "sliding_attention", "full_attention"]  # window 4 in layers 0 and 1


def test_an_edge_past_the_window_is_knocked_out_in_the_global_layer(qtbot, tmp_path):
    from attnviz.ui.panels.ablation_panel import head_menu

    model = tiny_text_decoder(tmp_path / "local", n_layer=3, sliding_window=4, layer_types=TYPES)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(model), text="the cat sat on the mat",
                    panels=("predict",))
    cfg = w.state.model.config
    assert [cfg.window(i) for i in range(3)] == [4, 4, None] and w.state.result.n_tokens > 10
    clean = w.state.result.attentions.copy()
    assert clean[2, :, 10, 2].min() > 0 and clean[1, :, 10, 2].max() == 0
    labels = w.state.result.labels
    edge = f"10 '{labels[10]}' → 2 '{labels[2]}'"
    # the menu on a local layer's cell offers the global layer, named; on the global one, that layer
    texts = [a.text() for a in head_menu(w.state, 0, 1, 10, 2, w).actions()]
    assert [t for t in texts if t.startswith("Knock out")] == [f"Knock out {edge} in layer 2"]
    texts = [a.text() for a in head_menu(w.state, 2, 1, 10, 2, w).actions()]
    assert [t for t in texts if t.startswith("Knock out")] == [f"Knock out {edge} in layer 2"]
    # an edge inside the window: every layer sees it
    texts = [a.text() for a in head_menu(w.state, 0, 1, 10, 8, w).actions()]
    assert sum(t.startswith("Knock out") and t.endswith("in every layer") for t in texts) == 1
    w.predict_dock.show()
    ab, eff = w.predict_panel.ablation_panel, w.state.effects
    ab.knock_edit.setText("10-2 in 0-1")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == (f"the edge 10→2 is not one a query sees in {w.state.model.name}'s "
                                 "layers 0-1 (keys at or before the query, within 4); layer 2 sees it: type 10-2 alone to knock it out where a query sees it")
    assert not eff.ablation.active
    ab.knock_edit.setText("10-2")  # every layer: the global one takes it
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == "knocked out 10→2 in layer 2 only: a query in the local layers sees keys within 4 of it"
    assert WARNING not in ab.message.styleSheet()  # (done, not refused: the text's own colour)
    assert eff.ablation.knockouts == (((2,), 10, 2),)
    qtbot.waitUntil(lambda: is_changed(w.state.result), timeout=WAIT)
    shown = w.state.result.attentions
    assert shown[2, :, 10, 2].max() == 0 and abs(shown[2, :, 10].sum(axis=-1) - 1).max() < 1e-4
    assert (shown[:2] == clean[:2]).all()
    qtbot.waitUntil(lambda: "knocked out 10→2 in layer 2" in w.ablation_bar.label.text(), timeout=WAIT)
    w.worker.wait_idle()
    # the line is about that knockout: another ablation or another text clears it
    ab.restore_button.click()
    assert not eff.ablation.active and ab.message.text() == ""
    ab.knock_edit.setText("10-2 in 1-2")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert ab.message.text() == "knocked out 10→2 in layer 2 only: a query in layer 1 sees keys within 4 of it"
    eff.toggle_head(0, 0)  # (the grid's menu)
    assert ab.message.text() == ""
    ab.knock_edit.setText("10-2 in 0-1")
    qtbot.keyClick(ab.knock_edit, Qt.Key.Key_Return)
    assert WARNING in ab.message.styleSheet() and ab.message.text().startswith("the edge 10→2 is not")
    w.set_text("the dog sat on the mat")
    assert ab.message.text() == ""
    w.worker.wait_idle()
