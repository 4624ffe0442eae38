"""The window on the toy model with checkpoints: the training-step slider moves every
heatmap through training, fast; the role badges follow it; export records the step; sweeping all
steps does not grow memory. Offscreen, settings in a per-test INI file."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QSettings

from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.figures.data import open_sidecar
from attnviz.figures.numbers import signed
from attnviz.ui.app import create_window
from windows import scores_settled, toy_window
from attnviz.engine.computing.request import RunRequest

WAIT = 30000
# the window's "Repeated random sequence" sample: in its second half an induction head attends to
# the word after each word's first copy (the toy model's best head: strength 0.03 at step 0, 0.71
# at the end, labelled from step 1180)
REPEATED = ("violet anchor nine tulip gravel comet lantern otter violet anchor nine tulip gravel comet "
            "lantern otter")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.fixture
def window(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", REPEATED)
    yield w
    w.worker.wait_idle()


def go_to(qtbot, w, i):
    """Move the slider to checkpoint i and wait for that checkpoint's heatmaps."""
    st = w.state
    want = st.checkpoints.model(i)
    w.training_panel.slider.setValue(i)
    qtbot.waitUntil(lambda: w.last_request is not None and w.last_request.model is want
                    and st.result is not None and w.last_request.text == st.result.text,
                    timeout=WAIT)


def test_the_panel_shows_for_a_model_with_checkpoints_at_the_last_step(window):
    st, panel = window.state, window.training_panel
    n = len(st.checkpoints)
    assert panel.isVisible() and panel.slider.maximum() == n - 1 and panel.slider.value() == n - 1
    assert st.checkpoint == n - 1 and st.model is st.checkpoints.base
    last = st.checkpoints.infos[-1]
    assert f"step {last.step:,}" in panel.step_label.text()
    said = panel.score_label.text()  # both losses with their unit, as the curves' axis has it
    assert f"training loss {last.train_loss:.3f} nats" in said
    assert f"ICL score {signed(last.icl_score, 3)} nats" in said
    assert panel.marker.value() == last.step
    xs, ys = panel.induction_curve.getData()
    assert len(xs) == n and ys[-1] == pytest.approx(last.induction_score)


def test_the_icl_axis_writes_its_negative_numbers_with_the_windows_minus(window):
    """The ICL score falls below 0 as the model learns: its axis paints those ticks with "−", as
    every number in the window is written (pyqtgraph's own ticks wrote "-")."""
    from PySide6.QtGui import QImage, QPainter

    from windows import drain_events

    drain_events()
    axis = window.training_panel.plot.getPlotItem().getAxis("left")
    image = QImage(200, 200, QImage.Format.Format_ARGB32)
    p = QPainter(image)
    try:
        texts = [spec[2] for spec in axis.generateDrawSpecs(p)[2]]  # (rect, flags, text) painted
    finally:
        p.end()
    assert any(t.startswith("\u2212") for t in texts), texts
    assert not any("-" in t for t in texts), texts


def test_the_slider_moves_every_heatmap_through_training(window, qtbot):
    st = window.state
    final = st.result.attentions.copy()
    go_to(qtbot, window, 0)
    assert st.checkpoint == 0 and window.training_panel.marker.value() == 0
    expect = st.checkpoints.model(0).run(REPEATED, request=RunRequest(use_cache=False)).attentions
    np.testing.assert_allclose(st.result.attentions, expect, atol=1e-5)
    assert not np.allclose(st.result.attentions, final, atol=1e-3)
    tile = window.grid.img.image  # the grid repainted with the new step's patterns
    assert tile is not None
    go_to(qtbot, window, st.checkpoints.last)
    np.testing.assert_allclose(st.result.attentions, final, atol=1e-5)


def test_a_slider_step_is_one_forward_pass_off_the_window_thread(window, qtbot, monkeypatch):
    """What keeps a step quick, checked by what runs (a timed step fails on a loaded machine): every
    checkpoint was preloaded, so a step reads no file, and it runs that step's model once, on the
    pool, never on the window's thread."""
    import attnviz.engine.computing.checkpoints as C

    st = window.state
    n = len(st.checkpoints)
    reads, runs = [], []
    monkeypatch.setattr(C, "Checkpoint", lambda folder: reads.append(folder))
    for i in range(n):
        model = st.checkpoints.model(i)

        def run(text, *a, i=i, real=model.run, **k):
            runs.append((i, threading.current_thread() is threading.main_thread(), text))
            return real(text, *a, **k)
        monkeypatch.setattr(model, "run", run)
    for i in list(range(n - 2, -1, -1)) + list(range(1, n)):
        runs.clear()
        go_to(qtbot, window, i)
        assert window.worker.wait_idle(WAIT)  # the step's head scores too: they run no model
        assert runs == [(i, False, REPEATED)]
    assert reads == []


def test_role_badges_follow_the_slider(window, qtbot):
    st = window.state
    panel = window.roles_panel
    assert panel is not None

    def badges_for(i):
        go_to(qtbot, window, i)
        scores_settled(window.worker)  # scores the new result now (the panel waits for typing to pause)
        qtbot.waitUntil(lambda: st.head_labels is not None and not st.scores_stale, timeout=WAIT)
        return [b for row in st.head_labels for b in row]

    late = badges_for(st.checkpoints.last)
    early = badges_for(0)
    assert "induction" in late
    assert "induction" not in early
    assert badges_for(st.checkpoints.last) == late


def test_export_of_the_current_step_records_it(window, qtbot, tmp_path):
    from PySide6.QtCore import Qt

    from attnviz.ui.export import ExportDialog

    st = window.state
    go_to(qtbot, window, 4)
    st.set_focus(1, 0)
    dlg = ExportDialog(st, None)
    qtbot.addWidget(dlg)
    assert f"_step{st.checkpoints.infos[4].step}_" in dlg.path_edit.text()
    out = tmp_path / "step.png"
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    dlg.width_box.setValue(600)
    dlg.path_edit.setText(str(out))
    with qtbot.waitSignal(st.sigStatus, timeout=WAIT):
        qtbot.mouseClick(dlg.export_button, Qt.MouseButton.LeftButton)
    meta = open_sidecar(out)
    assert meta["model"] == TOY_MODEL
    assert meta["checkpoint"] == {"index": 4, "step": st.checkpoints.infos[4].step,
                                  "of": len(st.checkpoints)}
    # opening the view goes back to that step
    go_to(qtbot, window, st.checkpoints.last)
    window.open_view(str(out))
    qtbot.waitUntil(lambda: st.checkpoint == 4 and window.last_request.model is st.checkpoints.model(4),
                    timeout=WAIT)


def test_a_view_opened_from_another_model_restores_its_step(window, qtbot, tmp_path):
    from attnviz.figures.write import export_result

    st = window.state
    go_to(qtbot, window, 7)
    out = tmp_path / "v.png"
    export_result(st.result, out, model=st.model_name, scope="layer", layer=0, width=400,
                  checkpoint={"index": 7, "step": st.checkpoints.infos[7].step, "of": len(st.checkpoints)})
    with qtbot.waitSignal(st.sigModelChanged, timeout=WAIT):
        window.load_model("attnviz-textbook")
    window.open_view(str(out))  # loads the toy model again, then its checkpoints, then step 7
    qtbot.waitUntil(lambda: st.checkpoints is not None and st.checkpoint == 7, timeout=WAIT)
    assert window.training_panel.slider.value() == 7


def test_sweeping_every_step_does_not_grow_memory(window, qtbot):
    n = len(window.state.checkpoints)
    sweep = list(range(n)) + list(range(n - 2, 0, -1))
    for i in sweep:  # the first sweep: caches and the grid warm up
        go_to(qtbot, window, i)
    assert window.worker.wait_idle(WAIT)  # measured with no job in flight, both times
    before = rss_bytes()
    for _ in range(3):
        for i in sweep:
            go_to(qtbot, window, i)
    assert window.worker.wait_idle(WAIT)
    grown = rss_bytes() - before
    print(f"RSS growth over 3 sweeps of {len(sweep)} steps: {grown / 2**20:.1f} MiB")
    assert grown < 30 * 2**20


def test_another_model_hides_the_panel(window, qtbot):
    with qtbot.waitSignal(window.state.sigModelChanged, timeout=WAIT):
        window.load_model("attnviz-textbook")
    assert window.state.checkpoints is None and window.state.checkpoint is None
    assert not window.training_panel.isVisible()


def test_probe_badges_follow_the_slider_too(window, qtbot):
    st, panel = window.state, window.roles_panel
    panel.set_source("probe")

    def badges_for(i):
        go_to(qtbot, window, i)
        scores_settled(window.worker)
        qtbot.waitUntil(lambda: st.head_labels is not None and st.head_scores is not None
                        and not st.scores_stale, timeout=WAIT)
        return [b for row in st.head_labels for b in row]

    assert any(b.startswith("induction") for b in badges_for(st.checkpoints.last))
    assert not any(b.startswith("induction") for b in badges_for(0))


def test_the_sample_guide_follows_the_slider(window, qtbot):
    bar = window.guide_bar
    assert bar.sample is not None  # REPEATED is the "Repeated random sequence" sample

    def guide_at(i):
        go_to(qtbot, window, i)
        qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
        return bar.current

    assert guide_at(window.state.checkpoints.last).claimed
    early = guide_at(0)
    assert not early.claimed and "induction strength 0.71" not in bar.answer.text()
    assert guide_at(window.state.checkpoints.last).claimed


def test_the_runner_loads_a_models_checkpoints_into_the_state(qtbot):
    """No panel involved: the runner (app.assemble) loads the toy model's checkpoints after the
    model, hands them to the state, and a training step alone starts a run on its weights."""
    from attnviz.ui.app import assemble

    st, worker = assemble()
    worker.load(TOY_MODEL)
    qtbot.waitUntil(lambda: st.checkpoints is not None, timeout=WAIT)
    assert st.checkpoints.base is st.model and st.checkpoint == len(st.checkpoints) - 1
    st.set_text(REPEATED)
    qtbot.waitUntil(lambda: st.result is not None, timeout=WAIT)
    last = st.result
    st.set_checkpoint(0)
    qtbot.waitUntil(lambda: st.result is not last and st.result is not None, timeout=WAIT)
    assert not np.allclose(st.result.attentions, last.attentions)  # step 0's weights
    st.set_model(None)
    assert st.checkpoints is None
    assert worker.wait_idle(WAIT)


def test_the_panel_comes_for_a_model_with_checkpoints_opened_after_one_without(qtbot, tmp_path):
    """The panel is built when the first model with checkpoints comes (a window opened on another
    model shows none): then it shows that model's steps as a window opened on it does."""
    from attnviz.ui.panels.training_panel import TrainingPanel

    w = create_window(model="attnviz-textbook", text=REPEATED,
                      settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    assert not [p for p in w.findChildren(TrainingPanel) if p.isVisible()]
    with qtbot.waitSignal(w.state.sigCheckpointsChanged, timeout=WAIT,
                          check_params_cb=lambda ckpts: ckpts is not None):
        w.load_model(TOY_MODEL)
    panel, n = w.training_panel, len(w.state.checkpoints)
    assert w.findChildren(TrainingPanel) == [panel]
    qtbot.waitUntil(panel.isVisible, timeout=WAIT)
    assert panel.slider.maximum() == n - 1 and panel.slider.value() == n - 1
    assert f"step {w.state.checkpoints.infos[-1].step:,}" in panel.step_label.text()
    w.worker.wait_idle()


def test_the_toy_window_with_its_training_curves_fits_1024_by_700(qtbot, tmp_path):
    """The slider and curves over the grid, the repeated sequence's three rows of tokens and the
    focus view: the window keeps a 1024 x 700 screen's size (the grid's place does not keep the long
    view's least height while the grid is shown, which would make it 743 px tall), the grid and the curves
    both on screen."""
    from windows import drain_events

    w = toy_window(qtbot, tmp_path / "s.ini", REPEATED)
    w.focus_dock.show()
    w.focus_dock.raise_()
    w.resize(1024, 700)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    assert (w.width(), w.height()) == (1024, 700)
    panel = w.training_panel
    assert panel.isVisible() and panel.plot.height() > 100
    grid = w.grid
    assert grid.isVisible() and grid.height() > 150
    bottom = grid.mapTo(w, grid.rect().bottomLeft()).y()
    assert bottom <= w.statusBar().mapTo(w, w.statusBar().rect().topLeft()).y()
