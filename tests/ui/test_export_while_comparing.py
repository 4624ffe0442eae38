"""File -> Export while Compare's grid shows A − B or B: the export writes model A's weights, and
the dialog says so beside the grid's picture of something else; with the grid on A, nothing to say."""

import json

import numpy as np
import pytest

from attnviz.ui.export import ExportDialog
from windows import toy_compared_with_checkpoint

WAIT = 30000
TEXT = "the cat sat on the mat and the"


@pytest.fixture
def window(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def _dialog(w, monkeypatch) -> ExportDialog:
    """The dialog File -> Export opens (its exec recorded, not run)."""
    seen = []
    monkeypatch.setattr(ExportDialog, "exec", lambda self: seen.append(self) or 0)
    w.export_dialog()
    return seen[0]


def test_the_dialog_says_the_export_is_of_a_while_the_grid_shows_a_minus_b(window, qtbot, tmp_path, monkeypatch):
    w, jobs, st = window, window.worker.compare_jobs, window.state
    assert w.grid.shown_mode == "A-B"  # (Compare opens on A − B)
    dlg = _dialog(w, monkeypatch)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    assert dlg.note.text() == ("The grid shows A − B (Compare); the export writes model A's weights "
                               f"({st.model_name}), as the grid's A shows them.")
    dlg.format.setCurrentIndex(dlg.format.findData("json"))
    dlg.path_edit.setText(str(tmp_path / "a.json"))
    assert dlg.do_export(), dlg.error.text()
    got = np.array(json.loads((tmp_path / "a.json").read_text())["weights"])
    np.testing.assert_allclose(got, st.result.attentions[st.layer], atol=1e-6)  # A's, as the note says

    jobs.set_mode("B")
    dlg = _dialog(w, monkeypatch)
    dlg.scope.setCurrentIndex(dlg.scope.findData("all"))
    assert dlg.note.text().startswith("The grid shows B (Compare)")
    dlg.scope.setCurrentIndex(dlg.scope.findData("anatomy"))
    assert dlg.note.isHidden()  # (the Anatomy is A's in any mode)
    jobs.set_mode("A")
    dlg = _dialog(w, monkeypatch)
    assert dlg.note.isHidden() and dlg.note.text() == ""
