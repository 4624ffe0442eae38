"""Models > Memory budget: the size typed applies to the loaded model at once (its results
unchanged) and to later loads, and is remembered; a size below one layer or not a size is refused
with a message, changing nothing, and so is a bare number below 1 MiB ("512": 512 bytes, when
512M was meant). Its Now line names what the model keeps beside its layers, with the bytes."""

import shutil

import numpy as np
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QInputDialog, QMessageBox

from attnviz.engine import load_model
from attnviz.engine.computing.logits import FILL_PASSES
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.byte_sizes import format_bytes
from safetensors.numpy import load_file, save_file
from tiny import FIXTURES
from windows import WAIT, open_window, wait_for_text


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
    assert asked[1].endswith(f"Now: {model.weights.layers.describe()}; also kept: W_O Grams for "
                             f"{c.n_layer} of {c.n_layer} layers ({format_bytes(MB.grams_bytes(c))})")


def _now_line(w, monkeypatch) -> str:
    """The Memory budget dialog's Now line, the dialog cancelled."""
    asked = []
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: asked.append(a[2]) or ("", False))
    w.menus.memory_budget_action.trigger()
    return asked[0].split("\nNow: ", 1)[1]


def test_the_dialog_names_the_unembeddings_float32_copy_once_kept(qtbot, settings_path, monkeypatch):
    """A BF16 Llama's unembedding stays in the file until prediction keeps a float32 copy of it:
    from then on the Now line names it with its bytes."""
    w = open_window(qtbot, settings_path, model=str(FIXTURES / "llama_bf16"), text="1, 2, 3")
    try:
        w.worker.wait_idle()
        model = w.state.model
        c, line = model.config, model.weights.layers.describe()
        head = model.lm_head()
        assert head.w_u.rows_held == 0 and _now_line(w, monkeypatch) == line
        head.w_u.expect_passes(FILL_PASSES + 1)  # as a generation of more steps asks
        head.logits(np.ones((1, c.d_model), np.float32))
        assert _now_line(w, monkeypatch) == (f"{line}; also kept: unembedding as float32 "
                                             f"({format_bytes(4 * c.vocab_size * c.d_model)})")
    finally:
        w.worker.wait_idle()


def test_the_dialog_names_float32_embeddings_once_and_the_grams(qtbot, settings_path, monkeypatch, tmp_path):
    """GPT-2 in F16: its embeddings converted to float32 at load, the unembedding tied to them
    counted once; then Value-weighted's Grams after them."""
    folder = shutil.copytree(FIXTURES / "gpt2", tmp_path / "f16")
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({k: v.astype(np.float16) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    w = open_window(qtbot, settings_path, model=str(folder), text="1, 2, 3")
    try:
        model = w.state.model
        c, line = model.config, model.weights.layers.describe()
        tables = (f"embeddings and tied unembedding as float32 "
                  f"({format_bytes(4 * (c.vocab_size + c.max_positions) * c.d_model)})")
        assert _now_line(w, monkeypatch) == f"{line}; also kept: {tables}"
        w.state.set_value_weighted(True)
        qtbot.waitUntil(lambda: w.state.result.value_norms is not None, timeout=WAIT)
        assert _now_line(w, monkeypatch) == (f"{line}; also kept: {tables}, W_O Grams for 2 of 2 "
                                             f"layers ({format_bytes(MB.grams_bytes(c))})")
    finally:
        w.worker.wait_idle()
