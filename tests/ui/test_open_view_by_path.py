"""A view exported from a model opened by path (a GGUF file given as a file, not a name) reopens in
a fresh window: the sidecar keeps the model's name and its absolute path, File -> Open view loads
that path, and a file moved since is named in the message (`attnviz export`'s sidecar:
tests/cli/test_export_sidecar_path.py)."""

import json
import sys
from pathlib import Path

from PySide6.QtCore import Qt

from attnviz.ui.export import ExportDialog
from windows import WAIT, open_window, widget

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import spm_model  # noqa: E402

TEXT = "The keys to the cabinet are on the table."


def reopened(qtbot, tmp_path, sidecar: Path, name: str, model: Path):
    """A fresh window (on MiniLM) given the view: it shows the model opened from `model`, with the
    view's text."""
    w = open_window(qtbot, tmp_path / "b.ini")
    w.open_view(str(sidecar))
    qtbot.waitUntil(lambda: w.state.model_name == name and w.state.result is not None
                    and w.state.text == TEXT and not w.state.loading, timeout=WAIT)
    assert w.windowTitle() == f"attnviz — {name}"
    assert w.state.model_source == str(model) and w.state.model_path == str(model)
    assert not widget(w, "error_banner").isVisible()
    return w


def test_a_view_exported_from_a_model_opened_by_path_reopens_it_and_names_it_once_moved(
        qtbot, tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    model = spm_model(folder / "s.gguf")
    monkeypatch.chdir(tmp_path)  # opened by a relative path: the sidecar holds the absolute one
    a = open_window(qtbot, tmp_path / "a.ini", model="models/s.gguf", text=TEXT)
    name = a.state.model_name
    a.state.set_colormap("plasma")
    dlg = ExportDialog(a.state, a, a.settings, a.worker.compare_jobs)
    qtbot.addWidget(dlg)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    out = tmp_path / "views" / "layer.png"
    out.parent.mkdir()
    dlg.path_edit.setText(str(out))
    dlg.path_edit.textEdited.emit(str(out))
    with qtbot.waitSignal(a.state.sigStatus, timeout=WAIT):
        qtbot.mouseClick(dlg.export_button, Qt.MouseButton.LeftButton)
    sidecar = out.with_name("layer.png.json")
    doc = json.loads(sidecar.read_text())
    assert (doc["model"], doc["model_path"]) == (name, str(model))

    b = reopened(qtbot, tmp_path, sidecar, name, model)
    assert b.state.colormap == "plasma"

    # moved since: the window says which path it tried, and keeps what it shows
    model.rename(folder / "elsewhere.gguf")
    b.load_model("all-MiniLM-L6-v2")
    qtbot.waitUntil(lambda: b.state.model_name == "all-MiniLM-L6-v2" and not b.state.loading, timeout=WAIT)
    b.open_view(str(sidecar))
    banner = widget(b, "error_banner")
    qtbot.waitUntil(lambda: banner.isVisible() and not b.state.loading, timeout=WAIT)
    assert f"No GGUF file at {model}" in banner.text(), banner.text()
    assert b.state.model_name == "all-MiniLM-L6-v2"

