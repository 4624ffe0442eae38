"""The Patching tab in the real window (offscreen) on the toy decoder: Corrupt proposes the engine's
text and says what it swapped; two texts of different lengths are refused in one line with their
tokens aligned; the painted maps (head_out, resid, head_out_by_pos) have the colours of the
engine's effects (patching.py run here on its own) and hover reads them; a click on a head shows its
two patterns and focuses it; a newer Run wins over an older one and Cancel stops one; the export
writes the picture, its sidecar and the numbers."""

import json
import threading

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from attnviz.engine.analysing import patching as PT
from attnviz.figures import compare as C
from attnviz.figures import patching as fig
from attnviz.figures.headmap import colour
from attnviz.figures.style import FOCUS
from attnviz.ui.machinery.patch_jobs import PATCH_KIND, SEP
from windows import IOI, WAIT, drain_events, open_window

TEXT = IOI


@pytest.fixture
def win(patching_window):
    return patching_window


def _run(qtbot, w, what, layer=0):
    p = w.patching_panel
    p.what_box.setCurrentText(what)
    p.layer_box.setValue(layer)
    with qtbot.waitSignal(w.patch_jobs.sigChanged, timeout=WAIT):
        qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.patch_jobs.result is not None and not w.patch_jobs.running, timeout=WAIT)
    qtbot.waitUntil(lambda: p.map.view is not None and p.map.view.what == what, timeout=WAIT)
    p.map.repaint()
    return p


def _engine(w, what, layer=None):
    m = w.state.model
    p = w.patching_panel
    ids_c, ids_d = m.encode(TEXT)[0], m.encode(p.corrupt_box.text())[0]
    return PT.patch(m, ids_c, ids_d, what, layers=None if layer is None else [layer])


def _pixel(widget, x, y):
    return widget.grab().toImage().pixelColor(int(x), int(y))


def _assert_painted(p, values, lim):
    image = p.map.grab().toImage()
    rows, cols = values.shape
    for r in range(rows):
        for c in range(cols):
            x, y = p.map.cell_center(r, c)
            want = colour(float(values[r, c]), lim)
            got = image.pixelColor(int(x), int(y))
            assert (got.red(), got.green(), got.blue()) == (want.red(), want.green(), want.blue()), (r, c)


def test_corrupt_proposes_a_swap_and_says_what(qtbot, win):
    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    want = PT.propose_corrupt(win.state.model, TEXT)
    assert p.corrupt_box.text() == want.text
    assert p.swapped.text() == "S" + want.describe()[1:]
    assert p.clean_label.text() == TEXT


def test_texts_of_different_lengths_are_refused_with_the_tokens_aligned(qtbot, win):
    p = win.patching_panel
    m = win.state.model
    corrupt = "When Mary and John went to the big store, John gave a drink to"
    p.corrupt_box.setText(corrupt)
    tc, td = m.encode(TEXT)[1], m.encode(corrupt)[1]
    lc, ld = m.labels(m.encode(TEXT)[0]), m.labels(m.encode(corrupt)[0])
    assert len(tc) != len(td)
    qtbot.waitUntil(lambda: p.aligned.text() != "", timeout=WAIT)
    assert p.note.text() == (f"the clean text is {len(tc)} tokens and the corrupted text {len(td)}: "
                             "patching needs texts of one length")
    assert not p.run()  # Run refuses in the same line, nothing starts
    assert not win.patch_jobs.running and win.patch_jobs.result is None
    assert p.note.text().startswith(f"the clean text is {len(tc)} tokens and the corrupted text {len(td)}")
    lines = p.aligned.text().split("\n")
    assert len(lines) == 3
    # each column as wide as its wider token: the two rows' separators line up up to where they part
    first = next(i for i, (a, b) in enumerate(zip(tc, td)) if a != b)
    cols_c = lines[0][len("corrupted "):].split(SEP)
    cols_d = lines[1][len("corrupted "):].split(SEP)
    assert [c.strip() for c in cols_c[:first]] == list(lc[:first])
    assert [c.strip() for c in cols_d] == list(ld)
    assert [len(a) for a in cols_c] == [len(b) for b in cols_d]
    start = len("corrupted ") + sum(len(c) + 1 for c in cols_c[:first])
    assert lines[2][:start].strip() == "" and lines[2][start] == "^"


def test_head_out_map_is_painted_with_the_engine_effects_and_a_click_shows_the_head(qtbot, win):
    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p = _run(qtbot, win, "head_out")
    want = _engine(win, "head_out")
    np.testing.assert_array_equal(p.map.view.effect, want.effect)
    lim = float(np.abs(want.effect).max())
    _assert_painted(p, want.effect, lim)
    m = want.metric
    assert f"clean {m.diff_clean:+.4f}, corrupted {m.diff_corrupt:+.4f}".replace("-", "\u2212") in p.sides_label.text()
    # hover reads the number
    l, h = PT.ranked(want, 1)[0][0]
    x, y = p.map.cell_center(l, h)
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    ev = QMouseEvent(QEvent.Type.MouseMove, QPointF(x, y), p.map.mapToGlobal(QPointF(x, y)),
                     Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(p.map, ev)
    assert p.map.hover_text == f"L{l} H{h}: effect {want.effect[l, h]:+.4f}".replace("-", "\u2212")
    # a click: the head focused in the grid, its pattern on both texts painted side by side
    qtbot.mouseClick(p.map, Qt.MouseButton.LeftButton, pos=QPoint(int(x), int(y)))
    assert win.state.focus == (l, h)
    assert p.shown  # the tab stays up: the click does not raise the focus view over it
    image = p.patterns.grab().toImage()  # (paints it)
    assert len(p.patterns.rects) == 2
    s = win.patch_jobs.sides
    T = s.attentions_clean.shape[-1]
    for rect, att in zip(p.patterns.rects, (s.attentions_clean[l, h], s.attentions_corrupt[l, h])):
        rgb = C.weight_rgb(att, win.state.colormap)
        for q, k in ((T - 1, 0), (T - 1, T - 1), (T // 2, 1)):
            px = image.pixelColor(int(rect.left() + (k + 0.5) * rect.width() / T),
                                  int(rect.top() + (q + 0.5) * rect.height() / T))
            assert (px.red(), px.green(), px.blue()) == tuple(int(v) for v in rgb[q, k])
    # the focused head outlined in the map
    assert p.map.view.focus == (l, h)
    lay = p.map.layout_()
    edge = _pixel(p.map, lay.xs[h] - 1, y)
    assert edge.name() == FOCUS


def test_resid_and_by_pos_maps_have_token_labels_and_the_engine_numbers(qtbot, win):
    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p = _run(qtbot, win, "resid")
    want = _engine(win, "resid")
    np.testing.assert_array_equal(p.map.view.values, want.effect)
    _assert_painted(p, want.effect, float(np.abs(want.effect).max()))
    m = win.state.model
    toks = m.labels(m.encode(TEXT)[0])
    assert toks == list(win.state.result.labels)  # the grid's labels
    assert p.map.view.col_labels() == [fig.axis_label(t) for t in toks]
    p = _run(qtbot, win, "head_out_by_pos", layer=1)
    want = _engine(win, "head_out_by_pos", layer=1)
    np.testing.assert_array_equal(p.map.view.values, want.effect[1])
    assert np.isnan(p.map.view.effect[0]).all()
    _assert_painted(p, want.effect[1], float(np.abs(want.effect[1]).max()))
    assert p.map.view.row_labels()[3] == f"3 {fig.axis_label(toks[3])}"


def test_the_newest_run_wins_and_cancel_stops_a_run(qtbot, win):
    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p.what_box.setCurrentText("head_out_by_pos")
    assert p.run()
    p.what_box.setCurrentText("mlp_out")
    assert p.run()
    qtbot.waitUntil(lambda: win.patch_jobs.result is not None, timeout=WAIT)
    assert win.patch_jobs.result.what == "mlp_out"
    assert p.run()
    qtbot.mouseClick(p.cancel_button, Qt.MouseButton.LeftButton)
    assert not win.patch_jobs.running and p.note.text() == "Cancelled"
    assert p.progress.isHidden()
    # the cancelled job's own thread stops at its next step; then all it posted has arrived
    qtbot.waitUntil(lambda: not any(t.name.startswith(f"attnviz-{PATCH_KIND}-")
                                    for t in threading.enumerate()), timeout=WAIT)
    drain_events()
    # the map shown before the cancelled run is back, with its own texts' sides
    assert win.patch_jobs.result.what == "mlp_out" and p.map.view.what == "mlp_out"
    assert p.note.text() == "Cancelled"


def test_a_run_refused_on_its_thread_keeps_the_last_good_map(qtbot, win):
    qtbot.mouseClick(win.patching_panel.corrupt_button, Qt.MouseButton.LeftButton)
    p = _run(qtbot, win, "head_out")
    before = p.map.grab().toImage()
    effect = p.map.view.effect.copy()
    sides = p.sides_label.text()
    p.target_edit.setText("#7")
    p.alt_edit.setText("#7")  # (the same token: refused by the metric, on the run's thread)
    assert p.run()
    qtbot.waitUntil(lambda: not win.patch_jobs.running and "same token (7)" in p.note.text(), timeout=WAIT)
    assert not p.note.text().startswith("Patching failed"), p.note.text()
    np.testing.assert_array_equal(p.map.view.effect, effect)
    assert p.sides_label.text() == sides
    # shown dimmed under a line naming the settings it was computed for
    assert "the target and alt have changed since" in p.stale.text()
    assert p.map.grab().toImage() != before


def test_a_setting_unlike_the_maps_dims_it_and_says_which(qtbot, win):
    """The map shown is of one what, direction, position, target and alt: a box changed since (say
    a target typed, a run of it refused) dims it under a line naming what changed; set back, the
    map reads as before."""
    qtbot.mouseClick(win.patching_panel.corrupt_button, Qt.MouseButton.LeftButton)
    p = _run(qtbot, win, "head_out")
    assert p.stale.isHidden()
    effect = p.map.view.effect
    lim = float(np.abs(effect).max())
    _assert_painted(p, effect, lim)
    p.direction_box.setCurrentText("noise")
    p.alt_edit.setText("7")
    assert p.stale.text().startswith("Shown for head_out (denoise) at ")
    assert "the direction and alt have changed since" in p.stale.text()
    assert not p.sides_label.isEnabled()
    with pytest.raises(AssertionError):  # (dimmed)
        _assert_painted(p, effect, lim)
    p.direction_box.setCurrentText("denoise")
    p.alt_edit.setText("")
    assert p.stale.isHidden() and p.sides_label.isEnabled()
    _assert_painted(p, effect, lim)


def test_export_writes_the_picture_its_sidecar_and_the_numbers(qtbot, win, tmp_path):
    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    p = _run(qtbot, win, "head_out")
    written = p.export(tmp_path / "patch.png")
    assert [x.name for x in written] == ["patch.png", "patch.png.json"] or len(written) == 2
    side = json.loads(written[1].read_text())
    assert side["view"] == "patching" and side["what"] == "head_out"
    assert side["text"] == TEXT and side["corrupt"] == p.corrupt_box.text()
    np.testing.assert_array_equal(np.asarray(side["effect"]), win.patch_jobs.result.effect)
    p.export(tmp_path / "patch.json")
    doc = json.loads((tmp_path / "patch.json").read_text())
    for key in ("tokens_clean", "tokens_corrupt", "position", "target", "alt", "diff_clean",
                "diff_corrupt", "direction", "what", "effect"):
        assert key in doc
    p.export(tmp_path / "patch.svg")
    assert (tmp_path / "patch.svg").read_text().lstrip().startswith("<?xml")
    # Open view restores the corrupted text and what was patched
    p.corrupt_box.setText("")
    p.what_box.setCurrentText("resid")
    win.open_view(str(written[1]))
    assert p.corrupt_box.text() == side["corrupt"] and p.what_box.currentText() == "head_out"


def test_progress_counts_every_patched_run_on_a_thread_of_its_own(qtbot, win):
    from attnviz.ui.machinery.patch_jobs import PATCH_KIND
    from attnviz.ui.machinery.runner import THREAD

    p = win.patching_panel
    qtbot.mouseClick(p.corrupt_button, Qt.MouseButton.LeftButton)
    seen = []
    win.patch_jobs.sigProgress.connect(lambda done, total: seen.append((done, total)))
    p.what_box.setCurrentText("mlp_out")
    assert p.run()
    assert win.worker.running(PATCH_KIND).lane == THREAD  # not the pool typing runs on
    assert p.progress.isVisible()
    qtbot.waitUntil(lambda: win.patch_jobs.result is not None, timeout=WAIT)
    m = win.state.model
    total = m.config.n_layer * len(m.encode(TEXT)[0])  # every layer, every position up to the last
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert p.progress.isHidden()


def test_an_encoder_is_refused_in_one_line(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "e.ini", text=TEXT, panels=("patching",))  # MiniLM
    p = w.patching_panel
    # up front, as What heads do and Generate: one line why, the controls off, no position scored
    assert p.refused.isVisibleTo(p) and p.refused.text() == (
        "all-MiniLM-L6-v2 is an encoder, so it predicts no next token, and patching measures how the "
        "prediction of the next token changes. Open a decoder from the Models menu to patch one.")
    assert not any(c.isEnabled() for c in (p.run_button, p.corrupt_button, p.corrupt_box, p.position_box,
                                          p.target_edit, p.alt_edit, p.what_box, p.direction_box))
    p.check_lengths()
    w.worker.wait_idle()
    drain_events()
    assert p.position_label.text() == ""
    p.corrupt_box.setText(TEXT.replace("John gave", "Mary gave"))
    assert not p.run()
    assert p.note.text().endswith("patching measures how the next token's prediction changes") and "\n" not in p.note.text()
    assert w.patch_jobs.result is None and not w.patch_jobs.running
