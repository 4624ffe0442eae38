"""A view exported from a model opened by path (a GGUF file given as a file, not a name) reopens in
a fresh window: the sidecar keeps the model's name and its absolute path, File -> Open view loads
that path, and a file moved since is named in the message (`attnviz export`'s sidecar:
tests/cli/test_export_sidecar_path.py). A relative path is from the sidecar's folder, the model on
screen by another spelling of its path is not loaded again, a path not on this machine falls back
to the model's name (and says so), and a view the model cannot show says why in sentences."""

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



def gguf(tmp_path) -> Path:
    (tmp_path / "models").mkdir()
    return spm_model(tmp_path / "models" / "s.gguf")


def sidecar_of(out: Path, model: str, **fields) -> Path:
    """A sidecar at `out` of head 0.1 of the model named `model` showing TEXT, with `fields`."""
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "model": model, "text": TEXT,
        "tokens": [], "layer": 0, "head": 1, "scope": "head", "colormap": "viridis",
        "scale_mode": "shared", "hide_first": False, **fields}))
    return out


def test_a_relative_model_path_is_taken_from_the_sidecars_folder_not_the_current_one(
        qtbot, tmp_path, monkeypatch):
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s",
                       model_path="../models/s.gguf", colormap="plasma")
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")  # (../models from here is not there)
    w = reopened(qtbot, tmp_path, sidecar, "s", model)
    assert w.state.colormap == "plasma" and w.state.focus == (0, 1)


def test_the_model_on_screen_by_another_spelling_of_its_path_is_not_loaded_again(
        qtbot, tmp_path, monkeypatch):
    model = gguf(tmp_path)
    (tmp_path / "models" / "x").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "models")
    monkeypatch.chdir(tmp_path)
    w = open_window(qtbot, tmp_path / "w.ini", model="link/s.gguf", text="Another text.")
    assert w.state.model_path == str(model)  # (the file the symlink leads to)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s",
                       model_path=str(tmp_path / "models" / "x" / ".." / "s.gguf"), colormap="plasma")
    w.open_view(str(sidecar))
    assert not w.state.loading  # shown at once, on the model already there
    assert w.state.colormap == "plasma" and w.state.text == TEXT
    assert w.state.model_source == "link/s.gguf" and not widget(w, "error_banner").isVisible()


def test_a_model_path_not_on_this_machine_reopens_the_model_of_its_name(qtbot, tmp_path):
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "all-MiniLM-L6-v2",
                       model_path=str(tmp_path / "elsewhere" / "all-MiniLM-L6-v2"), colormap="plasma")
    w = open_window(qtbot, tmp_path / "w.ini", model=str(model))
    w.open_view(str(sidecar))
    qtbot.waitUntil(lambda: w.state.model_name == "all-MiniLM-L6-v2" and w.state.text == TEXT
                    and not w.state.loading, timeout=WAIT)
    assert w.state.colormap == "plasma" and w.state.focus == (0, 1)
    banner = widget(w, "error_banner")
    assert banner.isVisible() and banner.text() == (
        f"{tmp_path / 'elsewhere' / 'all-MiniLM-L6-v2'} is not on this computer; opened "
        "all-MiniLM-L6-v2 by its name instead."), banner.text()


def test_a_moved_view_is_not_shown_on_a_model_of_its_name_opened_from_another_path(
        qtbot, tmp_path):
    from attnviz.engine.reading.registry import _minilm_dir

    copy = tmp_path / "ft" / "all-MiniLM-L6-v2"  # (another model of that name, opened by path)
    copy.parent.mkdir()
    copy.symlink_to(_minilm_dir())
    w = open_window(qtbot, tmp_path / "w.ini", model=str(copy), text="Another text.")
    assert w.state.model_name == "all-MiniLM-L6-v2" and w.state.model_path is not None
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "all-MiniLM-L6-v2",
                         model_path=str(tmp_path / "elsewhere" / "all-MiniLM-L6-v2"))
    w.open_view(str(sidecar))
    assert w.state.loading == "all-MiniLM-L6-v2"  # the model of its name, not the one on screen
    qtbot.waitUntil(lambda: w.state.text == TEXT and not w.state.loading, timeout=WAIT)
    assert w.state.model_source == "all-MiniLM-L6-v2" and w.state.model_path is None
    assert "opened all-MiniLM-L6-v2 by its name instead" in widget(w, "error_banner").text()


def test_an_older_view_without_a_model_path_opens_and_says_it_was_matched_by_name(qtbot, tmp_path):
    """A sidecar saved before views kept model_path still opens on a model of its name opened by
    path, and the banner says it was matched by name alone (it may be another file); on a model
    opened by that name nothing is said."""
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s", colormap="plasma")
    w = open_window(qtbot, tmp_path / "w.ini", model=str(model), text="Another text.")
    w.open_view(str(sidecar))
    assert not w.state.loading  # shown at once, on the model of its name already there
    assert w.state.colormap == "plasma" and w.state.text == TEXT and w.state.focus == (0, 1)
    banner = widget(w, "error_banner")
    assert banner.isVisible() and banner.text() == (
        "The view was saved without its model's path and was matched by the name s: the model "
        f"shown is {model}, which may be another file than the one it was saved from."), banner.text()
    older = sidecar_of(tmp_path / "views" / "minilm.png.json", "all-MiniLM-L6-v2")
    w.load_model("all-MiniLM-L6-v2")
    qtbot.waitUntil(lambda: w.state.model_name == "all-MiniLM-L6-v2" and not w.state.loading,
                    timeout=WAIT)
    w.open_view(str(older))
    assert w.state.text == TEXT and not banner.isVisible()


def test_a_view_the_model_on_screen_cannot_show_says_why_in_sentences(qtbot, tmp_path):
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s", layer=99)
    w = open_window(qtbot, tmp_path / "w.ini", model=str(model), text="Another text.")
    w.open_view(str(sidecar))
    banner = widget(w, "error_banner")
    assert banner.isVisible()
    assert w.state.n_layer == 1
    assert banner.text() == (f"Could not open view {sidecar}. Layer 99 is out of range: s has "
                             "1 layer (0..0). The view was left as it was.")
    assert w.state.text == "Another text."


def test_a_head_the_model_lacks_is_named_with_the_model(qtbot, tmp_path):
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s", head=99)
    w = open_window(qtbot, tmp_path / "w.ini", model=str(model), text="Another text.")
    w.open_view(str(sidecar))
    n = w.state.n_head
    assert widget(w, "error_banner").text() == (
        f"Could not open view {sidecar}. Head 99 is out of range: s has {n} heads per layer "
        f"(0..{n - 1}). The view was left as it was.")


def test_a_sidecar_that_fails_its_check_is_named_once(qtbot, tmp_path):
    """open_sidecar's refusal names the file it read; the banner's lead does not name it again
    ("Could not open view x. x: scale_mode ..." said it twice)."""
    model = gguf(tmp_path)
    sidecar = sidecar_of(tmp_path / "views" / "head.png.json", "s", scale_mode="loud")
    w = open_window(qtbot, tmp_path / "w.ini", model=str(model), text="Another text.")
    for given in (sidecar, sidecar.with_suffix("")):  # the sidecar, or the picture it is beside
        w.open_view(str(given))
        text = widget(w, "error_banner").text()
        assert text.startswith(f"Could not open the view. {sidecar}: scale_mode 'loud' is not one of "), text
        assert text.count(str(given)) == 1 and text.count("head.png") == 1, text
    assert w.state.text == "Another text."
