"""A text box the program fills shows the text's start, not its end: Patching's corrupted text once
Corrupt proposes one, and What heads do's target once it follows a token set elsewhere (QLineEdit's
setText leaves the cursor, and so the part in sight, at the end). A user's own typing keeps its
cursor where it was typed."""

from PySide6.QtCore import QPoint, Qt

from attnviz.engine.analysing import patching as PT
from windows import IOI, TOY, open_window


def _first_shown(edit) -> int:
    """The index of the first character painted at the box's left edge (the box scrolls its text
    as it paints)."""
    edit.grab()
    r = edit.contentsRect()
    return edit.cursorPositionAt(QPoint(r.left() + 6, r.center().y()))


def _wider_than(edit, text: str) -> bool:
    return edit.fontMetrics().horizontalAdvance(text) > edit.contentsRect().width()


def test_corrupt_shows_the_start_of_its_proposal_and_typing_stays_at_its_end(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    box = p.corrupt_box
    want = PT.propose_corrupt(w.state.model, IOI).text
    w.patching_dock.resize(360, w.patching_dock.height())
    qtbot.waitUntil(lambda: _wider_than(box, want))  # (else every part of it is in sight)
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    assert box.text() == want
    assert _first_shown(box) == 0, f"the box shows {want[_first_shown(box):]!r}"
    box.setFocus()
    box.end(False)
    qtbot.keyClicks(box, " again")
    assert box.cursorPosition() == len(want) + 6 and _first_shown(box) > 0  # (the typing in sight)


def test_a_target_set_elsewhere_shows_its_start(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "w.ini", model=TOY, text=IOI, panels=("predict",))
    w.resize(1400, 1000)
    panel = w.predict_panel
    w.predict_dock.show()
    w.predict_dock.raise_()
    text = "When Mary and John went to the store, John gave a drink to"
    qtbot.waitUntil(lambda: _wider_than(panel.target_edit, text))
    w.state.effects.set_tokens(text, None)
    assert panel.target_edit.text() == text
    assert _first_shown(panel.target_edit) == 0, f"the box shows {text[_first_shown(panel.target_edit):]!r}"
