"""The real window on MiniLM, offscreen: launch, typing, stale results, hover, layers, focus, loading,
settings. Settings live in a per-test INI file, never the user's."""

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from attnviz.engine.reading.registry import DEFAULT_TEXT

from windows import WAIT, drain_events, hover_plot, open_window, scores_settled, tip_shown, wait_for_text, widget


def view_to_widget(view_box, graphics_view, x, y):
    return graphics_view.mapFromScene(view_box.mapViewToScene(QPointF(x, y)))


def test_window_opens_on_minilm_with_the_sentence_computed(window):
    st = window.state
    assert st.model_name == "all-MiniLM-L6-v2"
    assert window.text_box.toPlainText() == DEFAULT_TEXT
    assert st.result.text == DEFAULT_TEXT
    assert st.result.labels[2] == "keys"
    T = len(st.result.tokens)
    assert window.grid.layout_.T == T and window.grid.update_count >= 1
    assert widget(window, "tokens_label").text() == f"{T} tokens"
    assert window.token_strip.labels[:3] == ["[CLS]", "the", "keys"]
    assert window.windowTitle() == "attnviz — all-MiniLM-L6-v2"
    from attnviz.ui.menus import about_html

    about = about_html(window.state.model)
    assert "all-MiniLM-L6-v2" in about and "apache-2.0" in about.lower()


def test_typing_updates_the_grid_to_the_new_tokens(window, qtbot, minilm):
    window.text_box.clear()
    qtbot.keyClicks(window.text_box, "Cats sleep.")
    wait_for_text(qtbot, window, "Cats sleep.")
    expect = minilm.run("Cats sleep.")
    assert window.state.result.tokens == expect.tokens == ["[CLS]", "cats", "sleep", ".", "[SEP]"]
    lo = window.grid.layout_
    assert lo.T == 5
    shown = window.state.shown().region([0], [0]).values[0, 0]
    tile = window.grid.img.image[lo.y0[0]:lo.y0[0] + 5, lo.x0[0]:lo.x0[0] + 5]
    np.testing.assert_allclose(shown, expect.attentions[0, 0], atol=1e-5)
    assert np.unravel_index(tile.argmax(), tile.shape) == np.unravel_index(
        expect.attentions[0, 0].argmax(), (5, 5))


def test_three_rapid_edits_end_with_the_last_text(window, qtbot):
    shown = []
    window.state.sigResultChanged.connect(lambda r: shown.append(r.text if r is not None else None))
    for text in ("A dog", "A dog barks", "A dog barks at the moon."):
        window.set_text(text)
    wait_for_text(qtbot, window, "A dog barks at the moon.")
    window.worker.wait_idle()
    drain_events()  # anything still queued arrives now
    assert window.state.result.text == "A dog barks at the moon."
    assert shown[-1] == "A dog barks at the moon."
    assert "A dog" not in shown and "A dog barks" not in shown  # stale results never reach the state


def test_hover_readout_equals_the_engines_number(window, qtbot):
    g = window.grid
    r = window.state.result
    if window.roles_panel is not None:  # its badges arrive from its own worker; let them land first
        qtbot.waitUntil(lambda: window.state.head_labels is not None, timeout=WAIT)
    x, y = g.cell_center(0, 3, 6, 2)  # L0 H3, query "are", key "keys"
    pos = view_to_widget(g.vb, g.gw, x, y)
    qtbot.mouseMove(g.gw.viewport(), pos)
    qtbot.waitUntil(lambda: g.hover_text != "", timeout=WAIT)
    expect = f"L0 H3  are → keys  {r.attentions[0, 3, 6, 2]:.2f}"
    labels = window.state.head_labels
    if labels and labels[0][3]:  # the roles panel's badge follows the number
        expect += f"  · {labels[0][3]}"
    assert g.hover_text == expect
    assert window.statusBar().currentMessage() == expect
    assert tip_shown(g.gw.toolTip()) == expect


def test_layer_switch_by_keyboard_and_spinbox(window, qtbot):
    st = window.state
    qtbot.keyClick(window.grid, Qt.Key.Key_PageDown)
    assert st.layer == 1 and widget(window, "layer_spin").value() == 1
    assert window.grid.titles()[0].split("  ")[0] == "L1 H0"  # then a role badge
    lo = window.grid.layout_
    T = lo.T
    tile = window.grid.img.image[lo.y0[2]:lo.y0[2] + T, lo.x0[2]:lo.x0[2] + T]
    assert np.unravel_index(tile.argmax(), tile.shape) == np.unravel_index(
        st.result.attentions[1, 2].argmax(), (T, T))
    qtbot.keyClick(window.text_box, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    assert st.layer == 2
    qtbot.keyClick(window.text_box, Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier)
    widget(window, "layer_spin").setValue(5)
    assert st.layer == 5
    qtbot.keyClick(window.grid, Qt.Key.Key_PageDown)
    assert st.layer == 5  # the last layer stays the last


def test_click_opens_focus_view_and_arrows_move_it(window, qtbot):
    g = window.grid
    st = window.state
    x, y = g.cell_center(0, 4, 1, 1)
    qtbot.mouseClick(g.gw.viewport(), Qt.MouseButton.LeftButton, pos=view_to_widget(g.vb, g.gw, x, y))
    qtbot.waitUntil(lambda: st.focus == (0, 4), timeout=WAIT)
    fv = window.focus_view
    assert window.focus_dock.isVisible()
    np.testing.assert_array_equal(fv.img.image, st.result.attentions[0, 4])
    assert "L0 H4" in fv.title.text()
    left = fv.axis_labels()[0]
    assert left[:3] == ["[CLS]", "the", "keys"]
    qtbot.keyClick(g, Qt.Key.Key_Right)
    assert st.focus == (0, 5)
    qtbot.keyClick(g, Qt.Key.Key_Left)
    qtbot.keyClick(g, Qt.Key.Key_Left)
    assert st.focus == (0, 3)
    np.testing.assert_array_equal(fv.img.image, st.result.attentions[0, 3])


def test_token_strip_picks_the_query_row(window, qtbot):
    strip = window.token_strip
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=strip.token_rect(6).center())
    assert window.state.query_pos == 6
    assert window.grid.query_line.isVisible()
    assert widget(window, "query_label").text() == "Query: are (#6)"
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=strip.token_rect(6).center())
    assert window.state.query_pos is None


def test_failed_model_load_keeps_the_previous_model(window, qtbot, tmp_path):
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text("{ this is not json")
    before = window.state.result
    window.load_model(str(bad))
    qtbot.waitUntil(lambda: widget(window, "error_banner").isVisible(), timeout=WAIT)
    msg = widget(window, "error_banner").text()
    assert str(bad) in msg and "Still showing all-MiniLM-L6-v2" in msg
    assert window.state.model_name == "all-MiniLM-L6-v2" and window.state.result is before
    window.set_text("Still works.")
    wait_for_text(qtbot, window, "Still works.")


def test_long_text_is_truncated_with_a_notice_and_empty_text_is_valid(window, qtbot):
    window.set_text("word " * 600)
    qtbot.waitUntil(lambda: window.state.result.truncated, timeout=WAIT)
    assert widget(window, "text_notice").isVisible()
    assert "512" in widget(window, "text_notice").text() and "602" in widget(window, "text_notice").text()
    window.set_text("")
    wait_for_text(qtbot, window, "")
    assert window.state.result.tokens == ["[CLS]", "[SEP]"]
    assert not widget(window, "text_notice").isVisible()
    assert window.grid.layout_.T == 2


def test_settings_persist_across_a_restart(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    w.set_text("Settings survive.")
    wait_for_text(qtbot, w, "Settings survive.")
    w.state.set_layer(3)
    w.state.set_colormap("magma")
    w.state.set_view_mode("all")
    # the offscreen screen is 800 x 600 and the window is about as wide: check the height, which
    # restoreGeometry keeps exactly when it fits
    w.resize(w.width(), 480)
    assert w.height() == 480
    w.close()
    w2 = open_window(qtbot, settings_path)
    wait_for_text(qtbot, w2, "Settings survive.")
    assert w2.text_box.toPlainText() == "Settings survive."
    assert w2.state.layer == 3 and widget(w2, "layer_spin").value() == 3
    assert w2.state.colormap == "magma" and widget(w2, "cmap_combo").currentText() == "magma"
    assert w2.state.view_mode == "all" and widget(w2, "all_check").isChecked()
    assert w2.state.model_name == "all-MiniLM-L6-v2"
    assert w2.height() == 480
    w2.close()


def test_open_view_restores_a_sidecar(window, qtbot, tmp_path):
    export_data = pytest.importorskip("attnviz.figures.data")
    import json

    doc = {"kind": export_data.SIDECAR_KIND, "version": export_data.SIDECAR_VERSION,
           "model": "all-MiniLM-L6-v2", "text": "Views come back.", "tokens": [], "layer": 4,
           "head": 7, "scope": "head", "colormap": "inferno", "scale_mode": "per-head",
           "hide_first": True, "view_mode": "layer"}
    path = tmp_path / "fig.png.json"
    path.write_text(json.dumps(doc))
    window.open_view(str(path))
    wait_for_text(qtbot, window, "Views come back.")
    st = window.state
    assert (st.layer, st.focus, st.colormap, st.scale_mode, st.hide_first) == (
        4, (4, 7), "inferno", "per-head", True)
    assert window.focus_view.title.text().startswith("<b>L4 H7</b>")
    window.open_view(str(tmp_path / "missing.png"))
    assert widget(window, "error_banner").isVisible() and "missing.png" in widget(window, "error_banner").text()


def test_samples_menu_shortcuts_and_export_dialog(window, qtbot, monkeypatch):
    titles = [a.text() for a in window.samples_menu.actions()]
    assert titles == ["Agreement", "Repeated names", "Pronouns", "Repeated random sequence",
                      "Made-up names, repeated (induction)", "Long paragraph"]
    window.samples_menu.actions()[1].trigger()
    assert window.text_box.toPlainText().startswith("When Mary and John")
    wait_for_text(qtbot, window, window.text_box.toPlainText())
    assert window.menus.export_action.shortcut().toString() == "Ctrl+E"
    assert window.menus.open_folder_action.shortcut().toString() == "Ctrl+O"
    export = pytest.importorskip("attnviz.ui.export")
    opened = []
    monkeypatch.setattr(export.ExportDialog, "exec", lambda self: opened.append(self) or 0)
    window.menus.export_action.trigger()
    assert len(opened) == 1 and opened[0].parent() is window


def test_focus_view_draws_the_overlay(window):
    st = window.state
    st.set_focus(2, 5)
    T = len(st.result.tokens)
    mask = np.zeros((T, T), bool)
    mask[np.arange(1, T), np.arange(T - 1)] = True  # previous-token pattern
    st.set_overlay(mask)
    xs, ys = window.focus_view.overlay.getData()
    assert sorted(zip(ys.tolist(), xs.tolist())) == [(q + 0.5, q - 0.5) for q in range(1, T)]
    st.set_overlay(None)
    assert len(window.focus_view.overlay.getData()[0]) == 0


def test_token_strip_grows_once_results_pause_and_shows_the_newest_tokens_meanwhile(window, qtbot):
    strip = window.token_strip
    one_line = strip.height()
    text = "When Mary and John went to the market on Saturday morning, John bought fresh bread " \
           "and cheese while Mary looked for apples along the river."
    window.set_text(text)
    wait_for_text(qtbot, window, text)
    labels = window.state.result.labels
    T = len(labels)
    assert strip.labels == labels
    if strip.height() == one_line:  # the resize waits for a pause: the newest tokens are shown
        on_strip = {strip.index_at(QPoint(x, y)) for x in range(0, strip.width(), 3)
                    for y in range(0, strip.height(), 3)}
        assert 0 not in on_strip  # the first tokens make way for the newest
        last = strip.token_rect(T - 1)
        assert strip.rect().contains(last) and strip.index_at(last.center()) == T - 1
    qtbot.waitUntil(lambda: strip.height() > one_line, timeout=WAIT)
    assert strip.index_at(strip.token_rect(0).center()) == 0
    assert strip.rect().contains(strip.token_rect(T - 1))
    window.set_text(DEFAULT_TEXT)
    wait_for_text(qtbot, window, DEFAULT_TEXT)
    qtbot.waitUntil(lambda: strip.height() == one_line, timeout=WAIT)


def test_side_panels_behind_other_tabs_wait_and_catch_up_when_selected(window, qtbot):
    calc, roles = window.calc_panel, window.roles_panel
    if calc is None or roles is None:
        pytest.skip("side panels not installed")
    window.focus_dock.raise_()
    qtbot.waitUntil(lambda: calc.visibleRegion().isEmpty(), timeout=WAIT)  # nothing of it on screen
    text = "Mary gave John a book."
    window.set_text(text)
    wait_for_text(qtbot, window, text)
    T = len(window.state.result.tokens)
    assert f"{T} tokens" not in calc.sentence_label.text()  # hidden: not refilled per result
    window.calc_dock.raise_()
    qtbot.waitUntil(lambda: f"{T} tokens" in calc.sentence_label.text(), timeout=WAIT)
    roles.tabs.setCurrentWidget(roles.find)
    assert roles.find.find_from.count() != T  # Find waits while the roles tab is not selected
    window.roles_dock.raise_()
    qtbot.waitUntil(lambda: roles.find.find_from.count() == T, timeout=WAIT)
    scores_settled(window.worker)


def test_focus_follows_a_layer_change_in_the_one_layer_view(window, qtbot):
    st, g, fv = window.state, window.grid, window.focus_view
    st.set_layer(3)
    st.set_focus(3, 1)
    qtbot.keyClick(g, Qt.Key.Key_PageDown)
    assert st.layer == 4 and st.focus == (4, 1)
    assert fv.title.text().startswith("<b>L4 H1</b>")
    np.testing.assert_array_equal(fv.img.image, st.result.attentions[4, 1])
    qtbot.keyClick(window.text_box, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    assert st.focus == (5, 1)
    qtbot.keyClick(g, Qt.Key.Key_Right)
    assert (st.layer, st.focus) == (5, (5, 2))  # stays on the layer shown
    widget(window, "layer_spin").setValue(0)
    assert st.focus == (0, 2)


def test_out_of_range_view_says_so_and_changes_nothing_and_success_clears_the_banner(
        window, qtbot, tmp_path):
    export_data = pytest.importorskip("attnviz.figures.data")
    import json

    st = window.state
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text("{ this is not json")
    window.load_model(str(bad))
    qtbot.waitUntil(lambda: widget(window, "error_banner").isVisible(), timeout=WAIT)

    doc = {"kind": export_data.SIDECAR_KIND, "version": export_data.SIDECAR_VERSION,
           "model": "all-MiniLM-L6-v2", "text": "Half a view.", "tokens": [], "layer": 99,
           "head": 50, "scope": "head", "colormap": "inferno", "scale_mode": "per-head",
           "hide_first": True, "view_mode": "layer"}
    path = tmp_path / "far.png.json"
    path.write_text(json.dumps(doc))
    before = (st.text, st.layer, st.focus, st.colormap, st.scale_mode, st.hide_first)
    window.open_view(str(path))
    msg = widget(window, "error_banner").text()
    assert widget(window, "error_banner").isVisible() and str(path) in msg
    assert f"{path}. Layer 99 is out of range" in msg and "6 layers (0..5)" in msg
    assert msg.endswith(". The view was left as it was.")
    assert (st.text, st.layer, st.focus, st.colormap, st.scale_mode, st.hide_first) == before
    doc.update(layer=2, head=50)
    path.write_text(json.dumps(doc))
    window.open_view(str(path))
    assert "Head 50 is out of range" in widget(window, "error_banner").text() and st.layer == before[1]
    for key, value in (("colormap", "nope"), ("scale_mode", "sideways"), ("view_mode", "3d")):
        path.write_text(json.dumps({**doc, "layer": 2, "head": 3, key: value}))
        window.open_view(str(path))  # shown as recorded or not at all: never half with the old colormap
        msg = widget(window, "error_banner").text()
        assert msg.startswith("Could not open") and f"{key} '{value}' is not one of " in msg
        assert (st.text, st.layer, st.focus, st.colormap, st.scale_mode, st.hide_first) == before

    doc.update(layer=2, head=3)
    path.write_text(json.dumps(doc))
    window.open_view(str(path))  # a success clears the stale banner
    assert not widget(window, "error_banner").isVisible() and widget(window, "error_banner").text() == ""
    assert (st.layer, st.focus, st.colormap) == (2, (2, 3), "inferno")


def test_messages_end_with_exactly_one_period(window, qtbot, tmp_path):
    from attnviz.ui.views.notices import sentence

    assert [sentence(m) for m in ("open it again", "open it again.", "Why?")] == [
        "open it again.", "open it again.", "Why?"]
    folder = tmp_path / "pt"
    folder.mkdir()
    import json

    (folder / "config.json").write_text(json.dumps(window.state.model.config.raw))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")  # a pickle's first bytes (never unpickled)
    window.load_model(str(folder))
    qtbot.waitUntil(lambda: widget(window, "error_banner").isVisible(), timeout=WAIT)
    msg = widget(window, "error_banner").text()
    assert "never unpickles" in msg and "open the folder again. Still showing" in msg
    assert ".." not in msg and msg.endswith("Still showing all-MiniLM-L6-v2.")


def test_a_bin_file_that_is_no_pickle_is_not_called_one(window, qtbot, tmp_path):
    junk = tmp_path / "model.bin"
    junk.write_bytes(bytes(range(7, 256)) * 4)  # neither torch.save's zip nor a pickle
    window.load_model(str(junk))
    banner = widget(window, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible(), timeout=WAIT)
    assert banner.text() == (
        f"Could not load model {junk}. model.bin is not a model file attnviz can read: it is not a "
        "PyTorch checkpoint (neither torch.save's zip nor a pickle), a GGUF file or safetensors. "
        "attnviz opens a GGUF file (.gguf) or a model folder holding config.json and .safetensors "
        "weights. Still showing all-MiniLM-L6-v2.")


def test_hide_first_token_shows_the_same_gap_in_the_grid_and_the_focus_view(window, qtbot):
    from PySide6.QtCore import QRectF

    st, g, fv = window.state, window.grid, window.focus_view
    st.set_layer(1)
    st.set_focus(1, 2)
    T = len(st.result.tokens)
    assert fv.img.mapRectToParent(fv.img.boundingRect()) == QRectF(0, 0, T, T)
    st.set_hide_first(True)
    shown = st.shown().region([1], [2]).values[0, 0]  # [T, T - 1]: the first key column dropped
    np.testing.assert_array_equal(fv.img.image, shown)
    assert fv.img.mapRectToParent(fv.img.boundingRect()) == QRectF(1, 0, T - 1, T)  # a gap at key 0
    lo = g.layout_
    tile = g.img.image[lo.y0[2]:lo.y0[2] + T, lo.x0[2]:lo.x0[2] + T]
    assert (tile[:, 0] == 0).all() and (tile[:, 1:] >= 1).all()
    # both read-outs name the hidden column and give the same numbers elsewhere
    hover_plot(qtbot, fv.vb, fv.gw, 0.5, 3.5)
    assert fv.hover_text == g.readout_at(1, 2, 3, 0) and fv.hover_text.endswith("(hidden)")
    hover_plot(qtbot, fv.vb, fv.gw, 4.5, 3.5)
    assert fv.hover_text == g.readout_at(1, 2, 3, 4)
    assert fv.hover_text.split("  ")[2].startswith(f"{shown[3, 3]:.2f}")  # key 4 is column 3
    st.set_hide_first(False)
    np.testing.assert_array_equal(fv.img.image, st.result.attentions[1, 2])
    assert fv.img.mapRectToParent(fv.img.boundingRect()) == QRectF(0, 0, T, T)


def test_file_shortcuts_work_from_the_sentence_box_and_models_menu_checks_the_current_one(
        window, qtbot, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    asked = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: asked.append("folder") or "")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: asked.append("view") or ("", ""))
    assert window.menus.open_view_action.shortcut().toString() == "Ctrl+Shift+O"
    window.text_box.setFocus()
    qtbot.keyClick(window.text_box, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    mods = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    qtbot.keyClick(window.text_box, Qt.Key.Key_O, mods)
    assert asked == ["view", "view"]  # Ctrl+O: File > Open model's file picker (a .gguf, or a folder's config.json)
    assert window.text_box.toPlainText() == DEFAULT_TEXT  # no 'o' typed into the sentence

    with qtbot.waitSignal(window.worker.sigModelsFound, timeout=30000):  # the scan runs on the worker
        window.menus.models_menu.aboutToShow.emit()
    checked = [a.text() for a in window.menus.models_menu.actions() if a.isChecked()]
    assert len(checked) == 1 and checked[0].startswith("all-MiniLM-L6-v2  (bert")
    assert sum(a.isCheckable() for a in window.menus.models_menu.actions()) >= 2  # MiniLM and the textbook
