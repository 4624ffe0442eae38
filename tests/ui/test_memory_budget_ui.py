"""Models > Memory budget: the size typed applies to the loaded model at once (its results
unchanged) and to later loads, and is remembered; a size below one layer or not a size is refused
with a message, changing nothing, and so is a bare number below 1 MiB ("512": 512 bytes, when
512M was meant)."""

import numpy as np
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QInputDialog, QMessageBox

from attnviz.engine import load_model
from attnviz.engine.reading import memory_budget as MB
from windows import WAIT, wait_for_text


def test_memory_budget_menu(window, qtbot, monkeypatch, settings_path):
    w = window
    answers, warned = [("8M", True)], []
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: answers.pop(0))
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: warned.append(a[2]))
    try:
        assert w.menus.memory_budget_action in w.menus.models_menu.extra
        w.menus.memory_budget_action.trigger()
        model = w.state.model
        assert model.weights.layers.kept == 0 and "0 of 6 layers kept" in model.memory
        assert MB.chosen_budget() == 8 << 20
        assert QSettings(settings_path, QSettings.Format.IniFormat).value("memory_budget") == "8M"
        w.set_text("the keys to the cabinet are here")
        wait_for_text(qtbot, w, "the keys to the cabinet are here")
        want = load_model("all-MiniLM-L6-v2", budget=None).run("the keys to the cabinet are here")
        np.testing.assert_array_equal(w.state.result.attentions, want.attentions)
        for bad in ("1K", "lots", "512"):
            answers.append((bad, True))
            w.menus.memory_budget_action.trigger()
        assert len(warned) == 3 and "less than one layer" in warned[0] and "not a size" in warned[1]
        # a bare 512 is not taken as 512 bytes: the message says so and what to type for megabytes
        assert "'512' would be 512 bytes: type 512M for megabytes" in warned[2]
        assert MB.chosen_budget() == 8 << 20 and model.weights.layers.budget == 8 << 20
    finally:
        MB.set_memory_budget(None)


def test_the_dialog_shows_the_w_o_grams_the_model_keeps(window, qtbot, monkeypatch):
    """The dialog's Now line: the layers, and once Value-weighted has run, each layer's per-head
    W_O Grams the model keeps, with their bytes; auto is said to leave out what the model needs
    besides its layers."""
    w, asked = window, []
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: asked.append(a[2]) or ("", False))
    model = w.state.model
    w.menus.memory_budget_action.trigger()
    assert "Grams" not in asked[0] and f"Now: {model.weights.layers.describe()}" in asked[0]
    assert "less 1 GiB and what the model needs besides its layers" in asked[0]
    w.state.set_value_weighted(True)
    qtbot.waitUntil(lambda: w.state.result.value_norms is not None, timeout=WAIT)
    w.menus.memory_budget_action.trigger()
    c = model.config
    assert asked[1].endswith(f"Now: {model.weights.layers.describe()}; per-head W_O Grams kept for "
                             f"{c.n_layer} of {c.n_layer} layers ({MB.format_bytes(MB.grams_bytes(c))})")
