"""The Export dialog (attnviz.ui.export.ExportDialog) on MiniLM: it writes the focus head and
remembers the folder, starts in a folder that is never the working directory, and a failed export
shows why in the dialog and leaves the folder exactly as it was."""

import errno
import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt

from attnviz.figures import data as export_data
from attnviz.figures.data import open_sidecar
from attnviz.ui.export import ExportDialog, default_folder
from attnviz.ui.machinery.state import AppState
from export_files import SENTENCE, SMALL, Calls, old_pair, snapshot
from windows import WAIT


@pytest.fixture(autouse=True)
def _nothing_remembered(qapp):
    """Each test starts from no remembered export choices (another file's export in this process
    would leave its scope and folder in the process's settings)."""
    QSettings("attnviz", "attnviz").remove("export")


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE)


@pytest.fixture
def state(qapp, minilm, run):
    st = AppState()
    st.set_model(minilm)
    st.set_text(SENTENCE)
    st.set_result(run)
    st.set_layer(4)
    st.set_focus(3, 1)
    st.set_colormap("plasma")
    return st


@pytest.fixture
def pair(qapp, run, tmp_path):
    """tmp_path with an earlier export fig.png + fig.png.json (head 0) and an unrelated file."""
    return old_pair(run, tmp_path)


def _dialog(qtbot, state, path):
    """The dialog set to export the focus head, SMALL pixels wide, to `path`."""
    dlg = ExportDialog(state, None)
    qtbot.addWidget(dlg)
    dlg.scope.setCurrentIndex(dlg.scope.findData("head"))
    dlg.width_box.setValue(SMALL)
    dlg.path_edit.setText(str(path))
    dlg.path_edit.textEdited.emit(str(path))  # as typing it does
    return dlg


def test_dialog_exports_focus_head_and_remembers_folder(qtbot, state, run, tmp_path):
    dlg = ExportDialog(state, None)
    qtbot.addWidget(dlg)
    assert dlg.scope.currentData() == "head"
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    dlg.width_box.setValue(900)
    out = tmp_path / "focus.png"
    dlg.path_edit.setText(str(out))
    with qtbot.waitSignal(state.sigStatus, timeout=WAIT) as status:
        qtbot.mouseClick(dlg.export_button, Qt.MouseButton.LeftButton)
    assert "focus.png" in status.args[0]
    assert dlg.result() == dlg.DialogCode.Accepted
    meta = open_sidecar(out)
    assert (meta["layer"], meta["head"], meta["colormap"], meta["width"]) == (3, 1, "plasma", 900)
    assert QSettings("attnviz", "attnviz").value("export/folder") == str(tmp_path.resolve())

    # the next dialog starts in the remembered folder, with the format in the name
    dlg2 = ExportDialog(state, None)
    qtbot.addWidget(dlg2)
    assert Path(dlg2.path_edit.text()).parent == tmp_path.resolve()
    dlg2.format.setCurrentIndex(dlg2.format.findData("csv"))
    assert dlg2.path_edit.text().endswith(".csv") and not dlg2.width_box.isEnabled()


def test_dialog_shows_why_an_export_failed(qtbot, state, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    dlg = ExportDialog(state, None)
    qtbot.addWidget(dlg)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.path_edit.setText(str(blocker / "grid.svg"))
    dlg.path_edit.textEdited.emit(dlg.path_edit.text())  # as typing it does
    assert dlg.format.currentData() == "svg"
    assert dlg.do_export() is False
    assert "is not a folder" in dlg.error.text() and not dlg.error.isHidden()
    assert dlg.result() != dlg.DialogCode.Accepted
    assert sorted(snapshot(tmp_path)) == ["afile"]


def test_dialog_default_folder_is_never_the_working_directory(qtbot, state, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "Pictures").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_PICTURES_DIR", str(home / "Pictures"))
    cwd = tmp_path / "launched-here"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert default_folder() in (home / "Pictures", home)
    settings = QSettings("attnviz", "attnviz")
    for saved in ("", "relative/sub", str(tmp_path / "gone")):  # none of these is a usable folder
        settings.setValue("export/folder", saved)
        dlg = ExportDialog(state, None)
        qtbot.addWidget(dlg)
        suggested = Path(dlg.path_edit.text())
        assert suggested.is_absolute() and suggested.parent == default_folder()
    dlg.format.setCurrentIndex(dlg.format.findData("csv"))
    dlg.path_edit.setText("bare-name.csv")  # a relative name also lands in the suggested folder
    with qtbot.waitSignal(state.sigStatus, timeout=WAIT) as status:
        qtbot.mouseClick(dlg.export_button, Qt.MouseButton.LeftButton)
    out = default_folder() / "bare-name.csv"
    assert out.is_file() and list(cwd.iterdir()) == []
    assert status.args[0] == f"Exported {out.resolve()}"


def test_dialog_sidecar_is_a_folder(qtbot, state, pair):
    (pair / "fig.png.json").unlink()
    (pair / "fig.png.json").mkdir()
    before = snapshot(pair)
    dlg = _dialog(qtbot, state, pair / "fig.png")
    assert dlg.do_export() is False
    text = dlg.error.text()
    assert text == f"Export failed. Cannot write {pair / 'fig.png.json'}: it is a folder, not a file.", text
    assert "Errno" not in text and not dlg.error.isHidden()
    assert snapshot(pair) == before


def test_dialog_failed_move_then_success(qtbot, state, pair, monkeypatch):
    before = snapshot(pair)
    dlg = _dialog(qtbot, state, pair / "fig.png")
    with monkeypatch.context() as m:
        Calls(m, export_data.os, "replace", 2, PermissionError(errno.EACCES, "Permission denied"))
        assert dlg.do_export() is False
    assert "fig.png.json: permission denied" in dlg.error.text()
    assert snapshot(pair) == before
    assert dlg.do_export() is True
    assert sorted(snapshot(pair)) == ["fig.png", "fig.png.json", "keep.txt"]
    meta = json.loads((pair / "fig.png.json").read_text())
    assert (meta["head"], meta["width"]) == (1, SMALL)


def test_dialog_says_an_os_error_as_the_writer_does(qtbot, state, tmp_path, monkeypatch):
    import attnviz.ui.export as export_ui
    from attnviz.ui.machinery.runner import describe_error

    def refuse(*_a, **_k):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    monkeypatch.setattr(export_ui, "export_result", refuse)
    out = tmp_path / "fig.png"
    dlg = _dialog(qtbot, state, out)
    assert dlg.do_export() is False
    assert dlg.error.text() == f"Export failed. Cannot write {out}: it is a folder, not a file."
    assert describe_error(PermissionError(errno.EACCES, "Permission denied"), writing=out) == (
        f"cannot write {out}: permission denied")


def test_a_jobs_os_error_reads_in_the_words_a_read_or_an_export_uses(tmp_path):
    """An OSError a job met (not writing a named export) reads as its file and validate.os_reason's
    words, a sentence in runner.failure ("Permission denied: x" had the system's own case)."""
    from attnviz.ui.machinery.runner import describe_error, failure

    ckpt = tmp_path / "step1.pt"
    denied = PermissionError(errno.EACCES, "Permission denied", str(ckpt))
    assert describe_error(denied) == f"{ckpt}: permission denied"
    assert failure("Could not read the training checkpoints", describe_error(denied)) == (
        f"Could not read the training checkpoints. {ckpt}: permission denied.")
    full, bare = OSError(errno.ENOSPC, "No space left on device"), PermissionError(errno.EACCES, "Permission denied")
    assert failure("The scan failed", describe_error(full)) == "The scan failed. No space left on device."
    assert failure("The scan failed", describe_error(bare)) == "The scan failed. Permission denied."


def test_dialog_offers_the_anatomy_only_as_an_image(qtbot, state):
    from attnviz.ui.export import ExportDialog

    dlg = ExportDialog(state, None)
    qtbot.addWidget(dlg)
    dlg.format.setCurrentIndex(dlg.format.findData("csv"))
    dlg.scope.setCurrentIndex(dlg.scope.findData("anatomy"))
    assert dlg.format.currentData() == "png" and dlg.path_edit.text().endswith("_anatomy.png")
    enabled = {dlg.format.itemData(i): dlg.format.model().item(i).isEnabled() for i in range(dlg.format.count())}
    assert enabled == {"png": True, "svg": True, "npy": False, "csv": False, "json": False}
    assert not dlg.value_weighted.isEnabled() and not dlg.hide_first.isEnabled()
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    assert all(dlg.format.model().item(i).isEnabled() for i in range(dlg.format.count()))
    assert dlg.value_weighted.isEnabled()


def test_dialog_names_the_shared_scale_as_it_is(qtbot, state, tmp_path):
    """Shared is 0 .. the run's largest weight over every layer and head (the window's): one head
    exported on it has its top above the head's own largest weight, as the dialog says."""
    dlg = _dialog(qtbot, state, tmp_path / "h.png")
    assert dlg.scale.itemText(dlg.scale.findData("shared")) == \
        "Shared (0 \u2026 the run's largest weight, every layer and head)"
    dlg.scale.setCurrentIndex(dlg.scale.findData("shared"))
    assert dlg.do_export(), dlg.error.text()
    levels = export_data.open_sidecar(tmp_path / "h.png")["levels"]
    layer, head = state.focus
    att = state.result.attentions
    assert levels[1] == pytest.approx(float(att.max())) and att[layer, head].max() < att.max()


def test_a_long_paths_file_name_shows_when_the_dialog_opens(qtbot, state, tmp_path):
    """A folder too long for the path box: the box shows the path's end, its file name whole
    (where the name is the part a person checks), and the folder's start is scrolled out."""
    folder = tmp_path.joinpath(*["a_folder_with_a_long_name_for_exports"] * 6)
    folder.mkdir(parents=True)
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    settings.setValue("export/folder", str(folder))
    dlg = ExportDialog(state, None, settings)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitExposed(dlg)
    box = dlg.path_edit
    name = Path(box.text()).name
    assert Path(box.text()).parent == folder and name.endswith(".png")
    fm, room = box.fontMetrics(), box.contentsRect()
    assert fm.horizontalAdvance(box.text()) > room.width()  # (the path does not fit)
    assert not box.grab().isNull()  # (painted as the screen shows it: the box scrolls as it paints)
    y = room.center().y()
    first, last = (box.cursorPositionAt(QPoint(x, y)) for x in (room.left() + 4, room.right() - 4))
    n = len(box.text())
    assert 0 < first <= n - len(name) and last >= n - 1, (first, last, n, name)  # the name, whole


def test_a_name_without_our_extension_is_never_written_as_another_format(qtbot, state, tmp_path):
    """The extension picks the format: a name without one gets the chosen format's (w_noext ->
    w_noext.png and its sidecar), one of no format we write is refused with the formats we do, and
    the folder is left as it was. (The dialog wrote PNG bytes into w_out.txt and w_noext.)"""
    dlg = _dialog(qtbot, state, tmp_path / "w_out.txt")
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.path_edit.setText(str(tmp_path / "w_out.txt"))
    assert dlg.format.currentData() == "png"
    assert dlg.do_export() is False
    assert dlg.error.text() == ("Export failed: cannot export to 'w_out.txt': .txt is not a format attnviz "
                                "writes; end the name in .png, .svg, .npy, .csv, .json (the extension "
                                "picks the format)") and not dlg.error.isHidden()
    assert snapshot(tmp_path) == {}
    dlg.path_edit.setText(str(tmp_path / "w_noext"))
    with qtbot.waitSignal(state.sigStatus, timeout=WAIT) as status:
        assert dlg.do_export() is True
    out = tmp_path / "w_noext.png"
    assert sorted(snapshot(tmp_path)) == ["w_noext.png", "w_noext.png.json"]
    assert status.args[0] == f"Exported {out.resolve()} and w_noext.png.json"
    assert open_sidecar(out)["scope"] == "layer" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
