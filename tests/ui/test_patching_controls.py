"""The Patching tab's position, target and alt, and what it shows once the texts change (the real
window, offscreen, on the toy decoder): a position picked in its box is the metric's P (the numbers
equal the engine's run at that P, the painted map has them, the line beside the box names the
token); one outside the text is refused in one line; typed target and alt are the metric's; a map
whose texts have changed since is dimmed under a line naming the texts it was computed for, and
is bright again when they are back or Run computes the new ones; the click on a head frames it in
the grid (painted); Open view restores the position, target and alt."""

import json

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QTextCursor
from PySide6.QtWidgets import QApplication

from attnviz.engine.analysing import patching as PT
from attnviz.figures.headmap import colour
from attnviz.figures.style import FOCUS
from attnviz.ui.panels.patching_maps import DIM
from attnviz.ui.panels.patching_panel import LAST
from windows import IOI, WAIT

TEXT = IOI
CORRUPT = "When John and Mary went to the store, John gave a drink to"  # the toy's tokens differ at 3..10


@pytest.fixture
def win(patching_window):
    patching_window.patching_panel.corrupt_box.setText(CORRUPT)
    return patching_window


def _run(qtbot, w, what):
    p = w.patching_panel
    p.what_box.setCurrentText(what)
    with qtbot.waitSignal(w.patch_jobs.sigChanged, timeout=WAIT):
        qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.patch_jobs.running, timeout=WAIT)
    assert w.patch_jobs.result is not None, w.patch_jobs.note
    qtbot.waitUntil(lambda: p.map.view is not None and p.map.view.what == what, timeout=WAIT)
    return p


def _ids(w):
    m = w.state.model
    return m.encode(TEXT)[0], m.encode(CORRUPT)[0]


def _rgb(c: QColor):
    return c.red(), c.green(), c.blue()


def _dimmed(c: QColor) -> QColor:
    """What the tab paints over a cell of colour c when its texts have changed."""
    image = QImage(1, 1, QImage.Format.Format_RGB32)
    image.fill(c)
    p = QPainter(image)
    p.fillRect(0, 0, 1, 1, DIM)
    p.end()
    return image.pixelColor(0, 0)


def _painted(p, values, dim=False):
    """Each cell's colour at its centre, as painted, against the effect's colour (dimmed or not)."""
    image = p.map.grab().toImage()
    lim = float(np.abs(values[np.isfinite(values)]).max())
    got, want = [], []
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            x, y = p.map.cell_center(r, c)
            cell = colour(float(values[r, c]), lim)
            got.append(_rgb(image.pixelColor(int(x), int(y))))
            want.append(_rgb(_dimmed(cell) if dim else cell))
    return got, want


def test_a_position_picked_in_its_box_is_the_metrics_p(qtbot, win):
    p = win.patching_panel
    m = win.state.model
    ids_c, ids_d = _ids(win)
    labels = m.labels(ids_c)
    T = len(ids_c)
    assert p.position_box.value() == LAST and p.position_box.text() == "last token"
    qtbot.waitUntil(lambda: p.position_label.text() != "", timeout=WAIT)
    assert p.position_label.text() == f"P = {T - 1} '{labels[-1]}': the next token after it is scored"
    P = T - 3
    p.position_box.setValue(P)
    assert p.position_label.text() == f"P = {P} '{labels[P]}': the next token after it is scored"
    p = _run(qtbot, win, "resid")
    want = PT.patch(m, ids_c, ids_d, "resid", P)
    assert win.patch_jobs.result.metric == want.metric and want.metric.position == P
    np.testing.assert_array_equal(p.map.view.effect, want.effect)
    assert (want.effect[:, P + 1:] == 0).all()  # later positions cannot reach P
    got, painted = _painted(p, want.effect)
    assert got == painted
    mt = want.metric
    assert p.sides_label.text().startswith(f"At {P}: ")
    assert f"clean {mt.diff_clean:+.4f}, corrupted {mt.diff_corrupt:+.4f}".replace("-", "\u2212") in p.sides_label.text()
    assert p.map.view.metric_line().startswith(f"at {P} '{labels[P]}': ")


def test_a_position_outside_the_text_is_refused_in_one_line(qtbot, win):
    p = win.patching_panel
    T = len(_ids(win)[0])
    p.position_box.setValue(T)
    qtbot.waitUntil(lambda: p.position_label.text() == f"outside the {T} tokens (0..{T - 1})", timeout=WAIT)
    assert not p.run()
    assert p.note.text() == f"position {T} is outside the {T} tokens (0..{T - 1}, or -1..-{T} from the end)"
    assert not win.patch_jobs.running and win.patch_jobs.result is None


def test_typed_target_and_alt_are_the_metrics(qtbot, win):
    p = win.patching_panel
    m = win.state.model
    ids_c, ids_d = _ids(win)
    target, alt = 7, int(m.tokenizer.raw.token_to_id(m.tokenizer.raw.id_to_token(11)))
    p.target_edit.setText(f"#{target}")
    p.alt_edit.setText(m.tokenizer.raw.id_to_token(alt))  # the tokenizer's own spelling
    p = _run(qtbot, win, "head_out")
    want = PT.patch(m, ids_c, ids_d, "head_out", None, target, alt)
    got = win.patch_jobs.result
    assert (got.metric.target, got.metric.alt) == (target, alt)
    assert got.metric == want.metric
    np.testing.assert_array_equal(got.effect, want.effect)


def test_a_map_of_texts_changed_since_is_dimmed_and_says_which_texts(qtbot, win):
    p = _run(qtbot, win, "head_out")
    values = win.patch_jobs.result.effect
    got, want = _painted(p, values)
    assert got == want and p.stale.isHidden() and p.sides_label.isEnabled()
    # the corrupted box edited: the map dimmed, a line names the texts it is for
    qtbot.keyClicks(p.corrupt_box, " again")
    assert len(TEXT) <= 60 and len(CORRUPT) <= 60  # (quoted whole)
    line = (f"Shown for the clean text \u201c{TEXT}\u201d and the corrupted text \u201c{CORRUPT}\u201d. "
            "The corrupted text has changed since: Run computes it for the new ones.")
    assert p.stale.isVisible() and p.stale.text() == line
    assert not p.sides_label.isEnabled()
    got, want = _painted(p, values, dim=True)
    assert got == want and got != _painted(p, values)[1]
    x, y = p.map.cell_center(0, 0)  # the hover read-out says so too
    QApplication.sendEvent(p.map, QMouseEvent(QEvent.Type.MouseMove, QPointF(x, y), p.map.mapToGlobal(QPointF(x, y)),
                                              Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                                              Qt.KeyboardModifier.NoModifier))
    assert p.map.hover_text == f"L0 H0: effect {values[0, 0]:+.4f} (computed before the change the line above names)".replace("-", "\u2212")
    # back to the texts it was computed for: bright again
    p.corrupt_box.setText(CORRUPT)
    assert p.stale.isHidden() and p.sides_label.isEnabled()
    got, want = _painted(p, values)
    assert got == want
    # the clean text typed in the sentence box
    win.text_box.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClicks(win.text_box, " her")
    qtbot.waitUntil(lambda: win.state.text == TEXT + " her", timeout=WAIT)
    assert p.stale.text().endswith("The clean text has changed since: Run computes it for the new ones.")
    assert _painted(p, values, dim=True)[0] == _painted(p, values, dim=True)[1]
    # Run computes the new texts' map: not dimmed, no line
    p.corrupt_box.setText(CORRUPT + " her")
    p = _run(qtbot, win, "head_out")
    assert win.patch_jobs.ask.clean == TEXT + " her"
    assert p.stale.isHidden() and p.sides_label.isEnabled()
    got, want = _painted(p, win.patch_jobs.result.effect)
    assert got == want


def test_a_click_on_a_head_frames_it_in_the_grid(qtbot, win):
    from attnviz.ui.views.mosaic import focus_margin, tile_index

    p = _run(qtbot, win, "head_out")
    (l, h), _effect = PT.ranked(win.patch_jobs.result, 1)[0]
    x, y = p.map.cell_center(l, h)
    assert win.state.focus != (l, h)
    qtbot.mouseClick(p.map, Qt.MouseButton.LeftButton, pos=QPoint(int(x), int(y)))
    grid = win.grid
    qtbot.waitUntil(lambda: grid.layout_ is not None and tile_index(grid.layout_, l, h) is not None
                    and grid.focus_rect.isVisible(), timeout=WAIT)
    lo = grid.layout_
    i = tile_index(lo, l, h)
    m = focus_margin(lo.T)
    image = grid.gw.grab().toImage()
    want = QColor(FOCUS)
    found = 0
    for t in np.linspace(0.1, 0.9, 9):  # along the frame's top edge, just off the tile
        at = grid.gw.mapFromScene(grid.vb.mapViewToScene(QPointF(lo.x0[i] + t * lo.T, lo.y0[i] - m)))
        found += any(_rgb(QColor(image.pixel(at.x(), at.y() + dy))) == _rgb(want) for dy in (-1, 0, 1))
    assert found >= 7


def test_open_view_restores_the_position_target_and_alt(qtbot, win, tmp_path):
    p = win.patching_panel
    p.position_box.setValue(5)
    p.target_edit.setText("#7")
    p = _run(qtbot, win, "mlp_out")
    written = p.export(tmp_path / "patch.png")
    side = json.loads(written[1].read_text())
    # as asked: the alt left to its default
    assert (side["patch_position"], side["patch_target"], side["patch_alt"]) == (5, "#7", "")
    assert (side["position"], side["target"]) == (5, 7)
    p.position_box.setValue(LAST)
    p.target_edit.setText("")
    p.alt_edit.setText("#3")
    win.open_view(str(written[1]))
    assert p.position_box.value() == 5 and p.target_edit.text() == "#7" and p.alt_edit.text() == ""


def test_typing_goes_on_while_a_run_works_and_its_map_then_shows_dimmed(qtbot, win, monkeypatch):
    """The patched runs held at their first batch: the sentence box's text still reaches the grid
    meanwhile; the run, let go, shows its map dimmed under the texts it was computed for."""
    import threading

    gate = threading.Event()
    run_batch = PT.run_batch

    def held(*args, **kw):
        gate.wait(3 * WAIT / 1000)  # (longer than any wait here: a blocked grid fails, not races)
        return run_batch(*args, **kw)

    monkeypatch.setattr(PT, "run_batch", held)
    try:
        p = win.patching_panel
        p.what_box.setCurrentText("head_out")
        assert p.run()
        qtbot.waitUntil(lambda: win.patch_jobs.sides is not None, timeout=WAIT)  # the two runs are made
        win.text_box.moveCursor(QTextCursor.MoveOperation.End)
        qtbot.keyClicks(win.text_box, " her")
        qtbot.waitUntil(lambda: win.state.result is not None and win.state.result.text == TEXT + " her", timeout=WAIT)
        assert win.patch_jobs.running and p.progress.isVisible()
        assert p.stale.text().endswith("The clean text has changed since: Run computes it for the new ones.")
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not win.patch_jobs.running and p.map.view is not None, timeout=WAIT)
    assert win.patch_jobs.ask.clean == TEXT and p.map.dim and p.stale.isVisible()
    got, want = _painted(p, win.patch_jobs.result.effect, dim=True)
    assert got == want


def test_mlp_out_of_the_attention_only_toy_says_its_mlps_are_zeros(qtbot, win):
    """The toy's MLPs are stored as zeros: the map's line (on screen and in an export) says so."""
    p = _run(qtbot, win, "mlp_out")
    line = p.map.view.metric_line()
    assert line.endswith(". Note: attnviz-toy-stdlib's MLPs are stored as zeros (an attention-only "
                         "model): each writes exactly 0, so patching its output changes nothing"), line
    p = _run(qtbot, win, "resid")
    assert "Note:" not in p.map.view.metric_line()


def test_target_and_alt_say_how_a_token_is_typed_on_hover(win):
    """Hovering Target or Alt gives the token rule (plain text is text, #N an id: the command
    line's words) and what an empty box means. (Only the placeholder spoke, of the default.)"""
    from attnviz.engine.analysing.predict import TOKEN_RULE

    p = win.patching_panel
    assert p.target_edit.toolTip() == f"A token: {TOKEN_RULE}. Empty: the clean top-1."
    assert p.alt_edit.toolTip() == f"A token: {TOKEN_RULE}. Empty: the corrupted top-1 (its 2nd if the same)."
    assert p.target_edit.placeholderText() == "the clean top-1"
