"""A keystroke's run goes ahead of a long job on the pool. A template probe pauses between two
layers or sentences (Runner.give_way), the keystroke's heatmaps are shown, and the probe goes on
from where it was: its progress (layers run, then sentences scored) never goes back, and its
scores are those of a probe run at one go (its sentences are fixed by its seed, whatever the text). Compare's induction probe
gives way the same. The lens grid, which depends on the text, stops instead and is made for the
keystroke's run."""

import threading

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from attnviz.engine.analysing import probes as P
from attnviz.ui.machinery.runner import Runner
from jobs_in_turn import AtWork, long_then_short
from windows import IOI, PROMPT, TOY, WAIT, open_window, scores_settled, toy_window

HOLD_S = 10  # a held step lets go after this at the latest (the test has failed by then)


def test_a_key_typed_while_a_probe_runs_is_shown_first_and_the_probe_goes_on(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "s.ini", text=PROMPT)  # (MiniLM: the toy's vocabulary lacks the words)
    st = w.state
    assert scores_settled(w.worker)
    inside, released, real = threading.Event(), threading.Event(), P._diff

    def held(*a, **k):  # the probe's first sentence holds until the keystroke's run waits on the pool
        if not inside.is_set():
            inside.set()
            while not released.wait(0.005) and w.worker.running("compute") is None:
                pass
        return real(*a, **k)
    monkeypatch.setattr(P, "_diff", held)
    seen = []  # what reached the window, in order
    st.sigResultChanged.connect(lambda r: seen.append(("result", None if r is None else r.text)))
    st.sigProbeProgress.connect(lambda done, n: seen.append(("progress", done, n)))
    st.sigHeadScoresChanged.connect(lambda: st.template_scores is not None and seen.append(("scores",)))
    st.set_role_options(source="agreement")  # as the roles panel's source box does
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    try:
        qtbot.waitUntil(inside.is_set, timeout=WAIT)  # the probe is at work on the pool
        qtbot.keyClick(w.text_box, "x")
        qtbot.waitUntil(lambda: st.template_scores is not None, timeout=WAIT)
    finally:
        released.set()
    assert ("result", PROMPT + "x") in seen
    assert seen.index(("result", PROMPT + "x")) < seen.index(("scores",))  # the keystroke first
    L, n = st.model.config.n_layer, P.N_ITEMS
    total = n * (L + 1)  # the pass's layers (n steps each), then each sentence scored
    progress = [e[1:] for e in seen if e[0] == "progress"]  # on from where it was, across the pause
    assert progress == [(n * k, total) for k in range(L + 1)] + [(n * L + k, total) for k in range(1, n + 1)]
    assert seen.index(("progress", n * L + 1, total)) < seen.index(("result", PROMPT + "x"))
    at_one_go = P.run_template_probe(st.model, "agreement")
    ts = st.template_scores
    for name in ("score", "accuracy", "far", "near"):
        assert np.array_equal(getattr(ts, name), getattr(at_one_go, name)), name
    assert (ts.n_items, ts.n_skipped) == (at_one_go.n_items, at_one_go.n_skipped)
    assert w.grid.drawn is st.result and st.result.text == PROMPT + "x"
    assert scores_settled(w.worker)


def test_the_probes_progress_shown_goes_on_across_a_key_typed_in_its_pass(qtbot, tmp_path, monkeypatch):
    """A key typed while the probe's packed pass is at its third layer: the roles panel shows the
    layers run before the keystroke's heatmaps, then the next, never going back, up to 100%."""
    from attnviz.engine.computing import model as M

    w = open_window(qtbot, tmp_path / "s.ini", text=PROMPT)
    st, panel = w.state, w.roles_panel
    w.roles_dock.show()
    w.roles_dock.raise_()
    assert scores_settled(w.worker)
    inside, released, real = threading.Event(), threading.Event(), M.forward_packed

    def held(cfg, weights, seqs, stop=None, progress=None):  # holds once 2 layers are run
        def layer_done(i, n):
            progress(i, n)
            if i == 2 and not inside.is_set():
                inside.set()
                while not released.wait(0.005) and w.worker.running("compute") is None:
                    pass
        return real(cfg, weights, seqs, stop, None if progress is None else layer_done)
    monkeypatch.setattr(M, "forward_packed", held)
    shown = []  # the keystroke's result and the roles panel's summary as the progress reaches it
    st.sigResultChanged.connect(lambda r: r is not None and shown.append(r.text))
    st.sigProbeProgress.connect(lambda *_: shown.append(panel.summary.text()))
    st.set_role_options(source="agreement")
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    try:
        qtbot.waitUntil(inside.is_set, timeout=WAIT)
        qtbot.keyClick(w.text_box, "x")
        qtbot.waitUntil(lambda: st.template_scores is not None, timeout=WAIT)
    finally:
        released.set()
    L, at = st.model.config.n_layer, shown.index(PROMPT + "x")
    assert shown[at - 1].startswith(f"Running the agreement probe: 2 of {L} layers run (")
    assert shown[at + 1].startswith(f"Running the agreement probe: 3 of {L} layers run (")
    percent = [int(t.rsplit("(", 1)[1].split("%")[0]) for t in shown[:at] + shown[at + 1:]]
    assert percent == sorted(percent) and 0 < percent[at - 1] < percent[-1] == 100
    assert scores_settled(w.worker)


def test_a_job_that_gives_way_lets_the_jobs_waiting_on_the_pool_go_first(qtbot):
    """A job on the pool that calls give_way between its steps pauses while another waits; the
    other runs and its result comes first; then the first goes on. One thread works at a time."""
    runner = Runner()
    started, queued = threading.Event(), threading.Event()
    work = AtWork()

    def working(name):  # a step's compute, a moment long
        work.step(name, lambda: threading.Event().wait(0.05))

    def long_job():
        for step in range(3):
            if step == 0:
                started.set()
                queued.wait(HOLD_S)  # the short job is submitted meanwhile
            working(f"long {step}")
            runner.give_way()
        return "long"

    def short_job():
        working("short")
        return "short"
    results = long_then_short(qtbot, runner, long_job, short_job, started, queued)
    assert results == ["short", "long"] and work.steps == ["long 0", "short", "long 1", "long 2"]
    assert work.most == 1 and runner.pool.maxThreadCount() == 1
    assert runner.give_way() is False  # nothing waits: no pause


def test_a_job_made_stale_stops_at_its_next_step_without_giving_way_first(qtbot):
    """giving_way's stop(): a job no longer the newest of its kind (its model or options changed)
    stops at once, even with a job waiting on the pool, which then runs."""
    runner = Runner()
    started, queued = threading.Event(), threading.Event()
    ran, said, results = [], [], []
    old = runner.claim("probe")

    def old_job():
        started.set()
        queued.wait(HOLD_S)
        said.append((runner.giving_way("probe", old)(), list(ran)))
    runner.submit("probe", old_job, lambda *_: None, job_id=old)
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    runner.claim("probe")  # a newer probe is asked for: the old job is stale from here
    runner.submit("short", lambda: ran.append("short") or "short",
                  lambda _r, value, _e: results.append(value))
    queued.set()
    qtbot.waitUntil(lambda: results == ["short"], timeout=WAIT)
    assert said == [(True, [])]  # stopped before the waiting job ran, not paused for it


def test_a_key_typed_while_the_lens_grid_is_made_is_shown_first_and_gets_the_grid(
        qtbot, tmp_path, monkeypatch):
    """The lens grid depends on the text: a keystroke stops the grid of the text before it at its
    next layer, its own heatmaps come first, and the grid shown is then the new text's."""
    from attnviz.engine.analysing import predict

    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=IOI, panels=("predict",))
    st, eff = w.state, w.state.effects
    w.predict_dock.show()
    w.predict_dock.raise_()
    panel = w.predict_panel
    qtbot.waitUntil(lambda: eff.run is not None and eff.run.result is st.result, timeout=WAIT)
    assert scores_settled(w.worker)
    inside, released, real = threading.Event(), threading.Event(), predict.log_softmax

    def held(*a, **k):  # the grid's first layer holds until the keystroke's run waits on the pool
        if not inside.is_set():
            inside.set()
            while not released.wait(0.005) and w.worker.running("compute") is None:
                pass
        return real(*a, **k)
    monkeypatch.setattr(predict, "log_softmax", held)
    seen = []
    st.sigResultChanged.connect(lambda r: seen.append(("result", None if r is None else r.text)))
    eff.sigLensGridChanged.connect(lambda: eff.lens_grid is not None and seen.append(
        ("grid", eff.run.result.text)))
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    new = IOI + "x"

    def grid_of_the_new_text():
        r, t = st.result, panel.grid_table
        return t.isVisible() and r.text == new and t.columnCount() == r.n_tokens
    try:
        qtbot.mouseClick(panel.grid_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(inside.is_set, timeout=WAIT)  # the grid of IOI is being made on the pool
        qtbot.keyClick(w.text_box, "x")
        qtbot.waitUntil(grid_of_the_new_text, timeout=WAIT)
    finally:
        released.set()
    assert ("grid", IOI) not in seen  # the old text's grid was never shown
    assert seen.index(("result", new)) < seen.index(("grid", new))
    w.worker.wait_idle()
    assert grid_of_the_new_text() and panel.grid_table.rowCount() == st.model.config.n_layer


def test_a_key_typed_while_compare_runs_its_induction_probe_is_shown_first(qtbot, tmp_path, monkeypatch):
    """Compare's induction probe (once per B) does not depend on the text: it gives way to the
    keystroke's runs between its layers, and its numbers are those of a probe run at one go."""
    from attnviz.engine.analysing import compare as C
    from attnviz.ui.machinery.compare_jobs import BSource
    from attnviz.ui.panels.compare_menu import open_compare

    w = toy_window(qtbot, tmp_path / "s.ini", IOI)
    st, jobs = w.state, w.worker.compare_jobs
    assert scores_settled(w.worker)
    inside, typed, released = threading.Event(), threading.Event(), threading.Event()
    real = C.induction_probe

    def held(model):  # the probe holds before its first layer until the keystroke's run waits
        if not inside.is_set() and threading.current_thread() is not threading.main_thread():
            inside.set()
            # (B's opening runs A's text again first: a run of the old text lets it go on no key)
            while not released.wait(0.005) and not (
                    typed.is_set() and w.worker.running("compute") is not None):
                pass
        return real(model)
    monkeypatch.setattr(C, "induction_probe", held)
    seen = []
    st.sigResultChanged.connect(lambda r: seen.append(("result", None if r is None else r.text)))
    jobs.sigChanged.connect(lambda: jobs.induction is not None and ("induction",) not in seen
                            and seen.append(("induction",)))
    w.text_box.moveCursor(QTextCursor.MoveOperation.End)
    new = IOI + "x"
    try:
        open_compare(w, BSource("checkpoint", 0))
        qtbot.waitUntil(inside.is_set, timeout=WAIT)  # B is open, its induction probe on the pool
        qtbot.keyClick(w.text_box, "x")
        typed.set()
        qtbot.waitUntil(lambda: jobs.induction is not None and jobs.comparison is not None
                        and jobs.comparison.result.text == new, timeout=WAIT)
    finally:
        released.set()
    assert seen.index(("result", new)) < seen.index(("induction",))
    assert jobs.induction == C.induction(C.probe_pair(st.model, jobs.b))
    jobs.close()
    w.worker.wait_idle()
