"""A panel's export starts where the last export went and is remembered for the next: the long
view's Export picture… writes into a folder, and the Patching tab's and Compare's export dialogs
then open in that folder (they once opened in the folder the app was started from)."""

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from attnviz.ui.views.long_view import LongView
from windows import long_view_shown


def test_the_next_export_opens_where_the_long_view_s_picture_was_written(window, qtbot, tmp_path, monkeypatch):
    long_view_shown(window, qtbot, "The cat sat on the mat near the old red door. " * 24, (1400, 900))
    figs = tmp_path / "figures"
    figs.mkdir()
    asked = []

    def save(_parent, _title, start, *_a, **_k):
        asked.append(start)
        return (str(figs / "long.png"), "") if len(asked) == 1 else ("", "")  # (then: cancelled)
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(save))
    view = window.findChild(LongView)
    qtbot.waitUntil(view.export_button.isEnabled, timeout=30000)
    view.export_button.click()
    assert (figs / "long.png").is_file()
    window.patching_panel.export_dialog()
    assert Path(asked[1]).parent == figs and Path(asked[1]).name == "patching.png"
    window.worker.wait_idle()
