"""The side tabs after the Training step slider moves: what each shows is computed on the step
shown, or says in visible text which step it was computed on (a tab that kept an earlier step's
numbers unmarked mixed two steps: Circuits' copying map, Patching's map and predictions)."""

from __future__ import annotations

import pytest

from attnviz.engine.analysing import circuits as C
from attnviz.figures.numbers import signed
from windows import WAIT, drain_events, toy_window

TEXT = "def add(a, b): return a + b"
CORRUPT = "def add(a, c): return a + c"


@pytest.fixture
def window(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    yield w
    w.worker.wait_idle()


def _copying_line(model, layer, head):
    c = C.circuits(model).copying
    return f"L{layer} H{head}: OV copying {signed(float(c[layer, head]), 3)}, rank"


def test_circuits_shows_the_scores_of_the_step_the_slider_is_at(window, qtbot):
    st, panel = window.state, window.circuits_panel
    window.circuits_dock.show()
    window.circuits_dock.raise_()
    st.show_head(1, 0)
    last = _copying_line(st.model, 1, 0)
    qtbot.waitUntil(lambda: panel.partners.text().startswith(last), timeout=WAIT)
    first = _copying_line(st.checkpoints.model(0), 1, 0)
    assert first != last
    window.training_panel.slider.setValue(0)
    qtbot.waitUntil(lambda: panel.partners.text().startswith(first), timeout=WAIT)
    window.training_panel.slider.setValue(st.checkpoints.last)  # back: the last step's, kept
    qtbot.waitUntil(lambda: panel.partners.text().startswith(last), timeout=WAIT)


def test_a_patching_map_of_another_step_is_dimmed_under_a_line_naming_both_steps(window, qtbot):
    from PySide6.QtCore import Qt

    st, p, jobs = window.state, window.patching_panel, window.patch_jobs
    window.patching_dock.show()
    window.patching_dock.raise_()
    p.corrupt_box.setText(CORRUPT)
    p.what_box.setCurrentText("head_out")
    qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: jobs.result is not None and not jobs.running, timeout=WAIT)
    qtbot.waitUntil(lambda: p.map.view is not None, timeout=WAIT)
    sides = p.sides_label.text()
    cell = p.map.cell_center(0, 0)
    bright = p.map.grab().toImage().pixelColor(int(cell[0]), int(cell[1]))
    assert p.stale.isHidden() and p.sides_label.isEnabled()
    last, five = st.checkpoints.infos[-1].step, st.checkpoints.infos[5].step
    window.training_panel.slider.setValue(5)
    qtbot.waitUntil(lambda: st.checkpoint == 5, timeout=WAIT)
    assert p.stale.isVisible() and p.stale.text() == (
        f"Shown for training step {last:,}; the model is at step {five:,} now: Run computes it for "
        "that step.")
    assert not p.sides_label.isEnabled() and p.sides_label.text() == sides
    dimmed = p.map.grab().toImage().pixelColor(int(cell[0]), int(cell[1]))
    assert dimmed != bright
    # Run: that step's map and predictions, bright
    qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: jobs.result is not None and not jobs.running, timeout=WAIT)
    assert jobs.ask.model is st.checkpoints.model(5)
    assert p.stale.isHidden() and p.sides_label.isEnabled() and p.sides_label.text() != sides
    # back to the last step: the step-5 map is dimmed again
    window.training_panel.slider.setValue(st.checkpoints.last)
    qtbot.waitUntil(lambda: p.stale.isVisible(), timeout=WAIT)
    assert p.stale.text().startswith(f"Shown for training step {five:,}; the model is at step {last:,} now")


def test_a_patching_run_under_way_as_the_slider_moves_ends_and_shows_dimmed(window, qtbot, monkeypatch):
    """The patched runs held at their first batch while the slider moves: the run ends (its
    progress bar goes) and its map shows, dimmed under the step it was computed on."""
    import threading

    from attnviz.engine.analysing import patching as PT

    st, p, jobs = window.state, window.patching_panel, window.patch_jobs
    window.patching_dock.show()
    window.patching_dock.raise_()
    gate = threading.Event()
    run_batch = PT.run_batch

    def held(*args, **kw):
        gate.wait(3 * WAIT / 1000)
        return run_batch(*args, **kw)

    monkeypatch.setattr(PT, "run_batch", held)
    try:
        p.corrupt_box.setText(CORRUPT)
        p.what_box.setCurrentText("head_out")
        assert p.run()
        qtbot.waitUntil(lambda: jobs.sides is not None, timeout=WAIT)
        window.training_panel.slider.setValue(5)
        qtbot.waitUntil(lambda: st.checkpoint == 5 and p.stale.isVisible(), timeout=WAIT)
    finally:
        gate.set()
    qtbot.waitUntil(lambda: not jobs.running and p.map.view is not None, timeout=WAIT)
    assert p.progress.isHidden() and p.stale.text().startswith("Shown for training step ")


def test_the_ablation_scan_goes_with_the_step_it_was_run_on(window, qtbot):
    """As with a new model: the scan ranked the heads of the step it ran on, and goes."""
    from PySide6.QtCore import Qt

    st = window.state
    window.predict_dock.show()
    window.predict_dock.raise_()
    ab, eff = window.predict_panel.ablation_panel, st.effects
    qtbot.mouseClick(ab.scan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: eff.scan is not None and not eff.scan_running, timeout=WAIT)
    assert ab.scan_label.text().startswith("Scanned ") and ab.ranked.rowCount() > 0
    assert ab.scan_button.text() == "Scan again"
    window.training_panel.slider.setValue(5)
    qtbot.waitUntil(lambda: st.checkpoint == 5, timeout=WAIT)
    assert ab.scan_label.text() == "" and ab.scan_view.map is None
    assert ab.scan_button.text() == "Scan every head"


def test_generated_steps_go_with_the_step_that_made_them(window, qtbot):
    """As with a new model: the steps (their tokens, probabilities, patterns) were the old step's."""
    from PySide6.QtCore import Qt

    st, panel, gen = window.state, window.generate_panel, window.state.generation
    window.generate_dock.show()
    window.generate_dock.raise_()
    panel.n_spin.setValue(3)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 3, timeout=WAIT)
    assert panel.status.text().startswith("3 new tokens: ") and panel.slider.isEnabled()
    window.training_panel.slider.setValue(5)
    qtbot.waitUntil(lambda: st.checkpoint == 5, timeout=WAIT)
    assert panel.status.text() == "" and not panel.slider.isEnabled()


def test_a_corpus_scan_of_the_last_step_says_another_steps_files_are_not_its_model(window, qtbot,
                                                                                  tmp_path):
    """The scan is told by the hash of its model's files; each training step has files of its
    own, so the slider moved away from the scanned step gets the note a new model gets."""
    from attnviz.corpus.scan import scan

    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT + "\n" + CORRUPT + "\n")
    scan(tmp_path / "scan", "attnviz-toy-stdlib", corpus, batch=2, examples=2, in_process=True,
         progress_stream=open("/dev/null", "w"))
    window.open_scan(str(tmp_path / "scan"))
    panel, st = window.corpus_panel, window.state
    qtbot.waitUntil(lambda: panel.model_state() == "same", timeout=WAIT)
    assert not panel.model_note.isVisible()
    window.training_panel.slider.setValue(5)
    qtbot.waitUntil(lambda: panel.model_state() == "other", timeout=WAIT)
    assert panel.model_note.isVisible()
    assert "other files under the name attnviz-toy-stdlib" in panel.model_note.text()
    window.training_panel.slider.setValue(st.checkpoints.last)
    qtbot.waitUntil(lambda: not panel.model_note.isVisible(), timeout=WAIT)


def test_why_here_hidden_while_the_slider_moved_shows_the_new_steps_score(window, qtbot):
    """Shown, it follows the new step's run as it follows typing; hidden meanwhile, it computes
    the new step's attribution when shown again (it showed the old step's numbers)."""
    from attnviz.engine.analysing.qk import qk_attribution, qk_trace
    from attnviz.engine.computing.request import RunRequest

    st, jobs, panel = window.state, window.why_jobs, window.why_panel
    st.show_head(1, 0)
    window.why_dock.show()
    jobs.set_cell(1, 0, 5, 3)
    qtbot.waitUntil(lambda: jobs.attribution is not None and not jobs.busy, timeout=WAIT)
    window.why_dock.hide()
    window.training_panel.slider.setValue(5)
    qtbot.waitUntil(lambda: st.checkpoint == 5, timeout=WAIT)
    for _ in range(3):  # every run of the new step in, and what follows each (the panel hidden)
        window.worker.wait_idle()
        drain_events()
        qtbot.wait(100)
    trace = qk_trace()
    st.model.run(TEXT, trace=trace, request=RunRequest(use_cache=False))
    want = qk_attribution(st.model, trace, 1, 0, 5, 3).total()
    assert panel.view().attribution.total() != pytest.approx(want, abs=1e-6)  # the old step's, kept
    window.why_dock.show()
    qtbot.waitUntil(lambda: not jobs.busy and panel.view() is not None
                    and panel.view().attribution.total() == pytest.approx(want, abs=1e-6), timeout=WAIT)
    step = st.checkpoints.infos[5].step
    assert f"attnviz-toy-stdlib \u00b7 step {step:,}" in panel.view().subtitle()
