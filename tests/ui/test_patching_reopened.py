"""File ▸ Open view of an exported Patching map: after the user has changed every box since, the tab
shows again what the map was computed for: the clean and corrupted texts, What, Layer, Direction,
the position (and the token it names), Target and Alt, and the map is no longer dimmed as stale.
The line that says what Corrupt swapped shows only while its texts are the ones in the boxes."""

from PySide6.QtCore import Qt

from attnviz.ui.panels.patching_panel import LAST
from windows import IOI, WAIT

OTHER = "When Tom and Anna went to the park, Anna gave a ball to"


def _settings(p) -> dict:
    """What the tab's boxes show."""
    return {"clean": p.clean_label.text(), "corrupted": p.corrupt_box.text(),
            "what": p.what_box.currentText(), "layer": p.layer_box.text(),
            "layer enabled": p.layer_box.isEnabled(), "direction": p.direction_box.currentText(),
            "position": p.position_box.text(), "target": p.target_edit.text(), "alt": p.alt_edit.text()}


def test_open_view_shows_again_every_box_the_map_was_computed_for(qtbot, patching_window, tmp_path):
    w, p = patching_window, patching_window.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p.what_box.setCurrentText("head_out_by_pos")
    p.layer_box.setValue(1)
    p.direction_box.setCurrentText("noise")
    p.position_box.setValue(LAST)
    p.target_edit.setText("#7")
    p.alt_edit.setText("#3")
    assert p.run()
    qtbot.waitUntil(lambda: not w.patch_jobs.running, timeout=WAIT)
    assert p.map.view is not None, (p.note.text(), p.stale.text())
    qtbot.waitUntil(lambda: w.patch_jobs.result is not None and not w.patch_jobs.running
                    and p.map.view is not None, timeout=WAIT)
    qtbot.waitUntil(lambda: p.position_label.text().startswith("P = "), timeout=WAIT)
    exported = _settings(p)
    said, swapped = p.position_label.text(), p.swapped.text()
    assert p.swapped.isVisible() and swapped.startswith("Swapped ")
    assert exported["layer"] == "layer 1" and exported["layer enabled"]
    written = p.export(tmp_path / "patch.png")
    # the user changes every box, and the window's text
    w.state.set_text(OTHER)
    p.corrupt_box.setText(OTHER.replace("Tom", "Bob"))
    p.what_box.setCurrentText("resid")
    p.layer_box.setValue(0)
    p.direction_box.setCurrentText("denoise")
    p.position_box.setValue(5)
    p.target_edit.setText("")
    p.alt_edit.setText("#9")
    qtbot.waitUntil(lambda: p.position_label.text().startswith("P = ") and p.position_label.text() != said,
                    timeout=WAIT)
    assert p.stale.isVisible() and p.map.dim
    assert not p.swapped.isVisible()  # (what Corrupt swapped is not in the boxes any more)
    assert all(_settings(p)[k] != v for k, v in exported.items() if k != "layer enabled"), _settings(p)
    w.open_view(str(written[1]))
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == IOI, timeout=WAIT)
    assert _settings(p) == exported
    assert p.swapped.isVisible() and p.swapped.text() == swapped  # (the swap is in the boxes again)
    qtbot.waitUntil(lambda: p.position_label.text() == said, timeout=WAIT)
    assert not p.stale.isVisible() and not p.map.dim, p.stale.text()
    assert p.sides_label.isEnabled()
