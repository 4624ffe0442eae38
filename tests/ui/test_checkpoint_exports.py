"""Exports of a model with training checkpoints record the step shown: the Patching, Circuits
and Why here? pictures name it in their title, their sidecars and JSON numbers hold
"checkpoint": {index, step, of}, and File > Open view of such a sidecar moves the Training step
slider back to that step (it opened on the last step, with another step's numbers)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from attnviz.figures import render
from windows import WAIT, figure_words, toy_window

TEXT = "def add(a, b): return a + b"
STEP = 5


@pytest.fixture
def window(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    w.training_panel.slider.setValue(STEP)
    qtbot.waitUntil(lambda: w.state.checkpoint == STEP and w.state.result is not None
                    and w.last_request.model is w.state.model, timeout=WAIT)
    yield w
    w.worker.wait_idle()


def _record(st):
    return {"index": STEP, "step": st.checkpoints.infos[STEP].step, "of": len(st.checkpoints)}


def _assert_recorded(st, written, words):
    _png, sidecar = written
    assert json.loads(sidecar.read_text())["checkpoint"] == _record(st)
    named = f"attnviz-toy-stdlib \u00b7 step {st.checkpoints.infos[STEP].step:,}"
    assert any(named in w for w in words), words


def test_the_patching_export_records_the_step(window, qtbot, tmp_path, monkeypatch):
    st, p, jobs = window.state, window.patching_panel, window.patch_jobs
    window.patching_dock.show()
    window.patching_dock.raise_()
    p.corrupt_box.setText("def add(a, c): return a + c")
    qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: jobs.result is not None and p.map.view is not None, timeout=WAIT)
    words = figure_words(monkeypatch, render)
    _assert_recorded(st, p.export(tmp_path / "p.png"), words)
    (js,) = p.export(tmp_path / "p.json")
    assert json.loads(js.read_text())["checkpoint"] == _record(st)


def test_the_circuits_export_records_the_step(window, qtbot, tmp_path, monkeypatch):
    st = window.state
    window.circuits_dock.show()
    window.circuits_dock.raise_()
    qtbot.waitUntil(lambda: window.circuits_jobs.circuits is not None, timeout=WAIT)
    words = figure_words(monkeypatch, render)
    _assert_recorded(st, window.circuits_panel.export_to(str(tmp_path / "c.png")), words)
    (js,) = window.circuits_panel.export_to(str(tmp_path / "c.json"))
    assert json.loads(js.read_text())["checkpoint"] == _record(st)


def test_the_why_here_export_records_the_step_and_opens_on_it(window, qtbot, tmp_path, monkeypatch):
    st, jobs = window.state, window.why_jobs
    st.show_head(1, 0)
    window.why_dock.show()
    jobs.set_cell(1, 0, 5, 3)
    qtbot.waitUntil(lambda: jobs.attribution is not None and not jobs.busy, timeout=WAIT)
    score = window.why_panel.view().attribution.total()
    words = figure_words(monkeypatch, render)
    written = window.why_panel.export_to(str(tmp_path / "w.png"))
    _assert_recorded(st, written, words)
    (js,) = window.why_panel.export_to(str(tmp_path / "w.json"))
    assert json.loads(js.read_text())["checkpoint"] == _record(st)
    # opened in a window on the last step: the slider moves to the recorded one, whose cell's
    # score is the picture's
    window.training_panel.slider.setValue(st.checkpoints.last)
    qtbot.waitUntil(lambda: st.checkpoint == st.checkpoints.last, timeout=WAIT)
    window.open_view(str(written[0]))
    qtbot.waitUntil(lambda: st.checkpoint == STEP, timeout=WAIT)
    step = st.checkpoints.infos[STEP].step
    assert f"step {step:,}" in window.training_panel.step_label.text()
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == TEXT
                    and window.last_request.model is st.model, timeout=WAIT)
    jobs.set_cell(1, 0, 5, 3)
    qtbot.waitUntil(lambda: jobs.attribution is not None and not jobs.busy
                    and jobs.attributed_by is st.model, timeout=WAIT)
    assert window.why_panel.view().attribution.total() == pytest.approx(score, abs=1e-6)
