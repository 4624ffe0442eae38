"""File > Open model (Ctrl+O) takes a model however it is stored: a .gguf file opens itself, and
a Hugging Face folder's config.json or .safetensors file opens the folder; Ctrl+Shift+G still
offers GGUF files."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from gguf_files import gguf_tensors, write_gguf
from tiny import FIXTURES
from windows import WAIT, open_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", text="5, 17, 3")
    yield w
    w.worker.wait_idle()


def press(qtbot, w, key, mods=Qt.KeyboardModifier.ControlModifier):
    w.text_box.setFocus()
    qtbot.keyClick(w.text_box, key, mods)


def test_ctrl_o_opens_a_gguf_file_and_a_folder_by_its_config_or_weights(window, qtbot, tmp_path, monkeypatch):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    gguf = write_gguf(tmp_path / "tiny.gguf", cfg, tensors)
    folder = FIXTURES / "llama_gqa"
    weights = sorted(folder.glob("*.safetensors"))[0]
    asked, picks = [], [str(gguf), str(folder / "config.json"), str(window.state.model.path), str(weights)]
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: asked.append(("folder",)) or "")
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda *a, **k: asked.append(a[1:]) or (picks.pop(0), ""))
    press(qtbot, window, Qt.Key.Key_O)
    qtbot.waitUntil(lambda: window.state.model.path == gguf and window.state.result is not None, timeout=WAIT)
    filters = asked[0][-1]
    assert all(f in filters.split(";;")[0] for f in ("*.gguf", "config.json", "*.safetensors")), filters
    press(qtbot, window, Qt.Key.Key_O)  # config.json: its folder opens
    qtbot.waitUntil(lambda: window.state.model.path == folder, timeout=WAIT)
    press(qtbot, window, Qt.Key.Key_O)  # back to MiniLM, then a weights file opens its folder
    qtbot.waitUntil(lambda: window.state.model.path != folder, timeout=WAIT)
    press(qtbot, window, Qt.Key.Key_O)
    qtbot.waitUntil(lambda: window.state.model.path == folder, timeout=WAIT)
    assert ("folder",) not in asked and len(asked) == 4

    # Ctrl+Shift+G is the GGUF picker as before
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: asked.append(a[1:]) or ("", ""))
    press(qtbot, window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert asked[-1][-1].startswith("GGUF models (*.gguf)")


def test_ctrl_o_on_another_file_names_it_and_never_opens_a_model_beside_it(window, qtbot, tmp_path, monkeypatch):
    """A file that is not a model, in a folder with no config.json that holds a .gguf, is refused by
    its own name (the window keeps its model); a GGUF without its extension opens as itself."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    folder = tmp_path / "downloads"
    folder.mkdir()
    write_gguf(folder / "other.gguf", cfg, tensors)
    notes = folder / "notes.txt"
    notes.write_text("not a model", encoding="utf-8")
    blob = tmp_path / "blobs" / "sha256-abc"
    blob.parent.mkdir()
    write_gguf(blob, cfg, tensors)
    before, picks = window.state.model, [str(notes), str(blob)]
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (picks.pop(0), ""))
    press(qtbot, window, Qt.Key.Key_O)
    qtbot.waitUntil(lambda: "notes.txt" in window.statusBar().currentMessage(), timeout=WAIT)
    window.worker.wait_idle()
    assert window.state.model is before, window.statusBar().currentMessage()
    press(qtbot, window, Qt.Key.Key_O)
    qtbot.waitUntil(lambda: window.state.model.path == blob, timeout=WAIT)
