"""The "What heads do" panel in the real window (offscreen): the prediction at the query token with
the numbers the engine gives, the logit lens with its label, DLA whose hover gives each head's number
and whose click focuses the head in the grid, switching heads off from the grid (Alt+click, the
context menu) and the panel's list, with the changed run marked and named everywhere and one click
back to the clean run; an encoder says in one line that it predicts nothing; the scan reports
progress, ranks heads and can be cancelled."""

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from attnviz.engine.analysing.effects import Ablation, analyse, window_run
from attnviz.engine.analysing.predict import attribute
from attnviz.engine.analysing.samples import SAMPLES
from attnviz.ui.machinery.tuning import wide_blas
from windows import WAIT, open_window, wait_for_text, widget

NAMES = next(s.text for s in SAMPLES if "induction" in s.title)


def _table(t):
    return [[t.item(r, c).text() if t.item(r, c) else "" for c in range(t.columnCount())]
            for r in range(t.rowCount())]


def _shown(w):
    w.predict_dock.show()
    w.predict_dock.raise_()
    return w.predict_panel


def _analysed(qtbot, w, changed=None):
    eff = w.state.effects

    def ready():
        w.worker.effects_jobs.flush()
        a = eff.analysis
        return (a is not None and eff.run is not None and eff.run.result is w.state.result
                and (changed is None or (a.changed is not None) == changed)
                and a.ablation == eff.ablation)
    qtbot.waitUntil(ready, timeout=WAIT)
    w.worker.wait_idle()
    return eff.analysis


@pytest.fixture
def smol(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=NAMES,
                    panels=("predict",))
    yield w
    w.worker.wait_idle()


def test_the_prediction_shows_the_engines_top_tokens_at_the_query(smol, qtbot, smollm2):
    w = smol
    panel = _shown(w)
    _analysed(qtbot, w)
    model = w.state.model
    ref = analyse(model, window_run(model, NAMES))  # the engine on its own, last token
    rows = _table(panel.top_table)
    assert rows[0][:2] == [ref.label(ref.clean.top_ids[0]), f"{np.exp(ref.clean.top_logprobs[0]):.3f}"]
    assert [r[0] for r in rows] == [ref.label(i) for i in ref.clean.top_ids]
    assert panel.top_table.isColumnHidden(2)
    # the token strip's query picks another position: the second "ok" of Plumbrook predicts "."
    labels = w.state.result.labels
    q = max(i for i, t in enumerate(labels) if t == "ok")
    w.state.toggle_query(q)
    qtbot.waitUntil(lambda: f"(token {q})" in panel.header.text(), timeout=WAIT)
    ref = analyse(model, window_run(model, NAMES), position=q)
    assert _table(panel.top_table)[0][0] == ref.label(ref.clean.top_ids[0]) == "."
    # the lens: labelled, one row per layer, its last layer the prediction itself
    assert panel.lens_title.text().startswith("logit lens (raw: the final norm applied to each layer)")
    assert panel.lens_title.text().endswith("p and rank of ‘.’")  # the target named, quoted
    lens = _table(panel.lens_table)
    assert len(lens) == model.config.n_layer and lens[-1][1] == "."
    assert lens[-1][3] == f"{np.exp(ref.clean.logprobs[ref.target]):.3f}" and lens[-1][4] == "1"
    # the full layer x position grid, on demand
    assert not panel.grid_table.isVisible()
    qtbot.mouseClick(panel.grid_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(panel.grid_table.isVisible, timeout=WAIT)
    assert panel.grid_table.rowCount() == model.config.n_layer
    assert panel.grid_table.columnCount() == len(labels)
    assert panel.grid_table.item(model.config.n_layer - 1, q).text().startswith(". ")


def test_the_lens_grid_asked_for_before_a_keystrokes_run_is_in_is_the_new_texts(smol, qtbot):
    """A click on "Full layer × position grid" right after a keystroke, while the new text's run is
    still on its way, shows the grid of the new text: one column per new token, and it stays (a
    grid of the text before would be cleared when the new run arrives, and the click lost). The
    header names the query token as the window labels it (quotes, no repr escapes)."""
    w = smol
    panel = _shown(w)
    _analysed(qtbot, w)
    new = NAMES + " and Plumbrook's"
    w.set_text(new)
    assert w.state.result.text == NAMES  # (the new text's run is not in: no event has been processed)
    panel.grid_button.click()

    def grid_of_the_new_text():
        r, t = w.state.result, panel.grid_table
        return (t.isVisible() and r.text == new and t.columnCount() == r.n_tokens
                and [t.horizontalHeaderItem(i).text() for i in range(r.n_tokens)]
                == [f"{i} {label}" for i, label in enumerate(r.labels)])
    qtbot.waitUntil(grid_of_the_new_text, timeout=WAIT)
    w.worker.wait_idle()
    assert grid_of_the_new_text()
    assert panel.grid_table.rowCount() == w.state.model.config.n_layer
    q = w.state.result.labels.index("'s")
    w.state.toggle_query(q)
    qtbot.waitUntil(lambda: f"(token {q})" in panel.header.text(), timeout=WAIT)
    assert panel.header.text().startswith(f"Next token after &#x27;&#x27;s&#x27; (token {q})")


def test_dla_hover_gives_each_heads_number_and_a_click_focuses_it(smol, qtbot):
    w = smol
    panel = _shown(w)
    panel.tabs.setCurrentWidget(panel.dla_view)
    a = _analysed(qtbot, w)
    view = panel.dla_view
    qtbot.waitUntil(lambda: view.map is not None, timeout=WAIT)
    model = w.state.model
    run = window_run(model, NAMES)
    ref = attribute(model, model.lm_head(), run.clean, None, a.target, a.alt)
    assert abs(ref.total() - ref.logit_diff) < 1e-3
    x, y = view.cell_center(18, 6)
    qtbot.mouseMove(view, QPoint(int(x), int(y)))
    qtbot.waitUntil(lambda: view.hover_text.startswith("L18 H6:"), timeout=WAIT)
    assert view.hover_text == f"L18 H6: {ref.heads[18, 6]:+.4f} logit".replace("-", "\u2212")
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, pos=QPoint(int(x), int(y)))
    assert w.state.focus == (18, 6) and w.state.layer == 18
    assert panel.isVisible()  # the panel stays up: the grid shows the head
    assert w.grid.focus_rect.isVisible()
    img = view.grab().toImage()
    assert img.pixelColor(int(x), int(y)).name() != "#ffffff"  # the cell is painted


def test_switching_a_head_off_shows_the_changed_run_everywhere_and_restores(smol, qtbot):
    w = smol
    panel = _shown(w)
    clean = _analysed(qtbot, w)
    clean_attn = w.state.result.attentions.copy()
    w.state.set_layer(18)
    qtbot.waitUntil(lambda: w.grid.layout_ is not None and w.grid.layout_.heads[0][0] == 18, timeout=WAIT)
    # Alt+click on L18 H6 in the grid
    x, y = w.grid.cell_center(18, 6, 20, 3)
    pos = w.grid.vb.mapViewToScene(QPointF(x, y))
    view_pos = w.grid.gw.mapFromScene(pos)
    qtbot.mouseClick(w.grid.gw.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.AltModifier,
                     view_pos)
    assert w.state.effects.ablation == Ablation(heads=((18, 6),))
    a = _analysed(qtbot, w, changed=True)
    assert w.ablation_bar.isVisible() and "zero-ablated L18 H6" in w.ablation_bar.label.text()
    assert "Changed run: zero-ablated L18 H6" in panel.header.text()
    assert any(t == "L18 H6  induction  · off" or t.startswith("L18 H6") and "off" in t
               for t in w.grid.titles())
    assert w.grid.off_marks.isVisible()
    # the grid shows the changed run: layer 18 head 6 writes nothing, so later layers differ
    r = w.state.result
    np.testing.assert_array_equal(r.attentions[:19], clean_attn[:19])
    assert not np.allclose(r.attentions[19:], clean_attn[19:])
    with wide_blas(True):  # BLAS on every core, as the window runs a causal model (another
        # thread count splits the products' sums otherwise: 1.6e-6 apart)
        ref = window_run(w.state.model, NAMES, ablation=Ablation(heads=((18, 6),)))
    np.testing.assert_allclose(r.attentions, ref.result.attentions, atol=1e-6)
    # the clean prediction stays beside the changed one, with Δ log p of the target
    assert not panel.top_table.isColumnHidden(2)
    rows = _table(panel.top_table)
    assert rows[0][0] == clean.label(clean.clean.top_ids[0])
    d = float(a.changed.logprobs[a.target] - a.clean.logprobs[a.target])
    assert f"= {d:+.3f} nats".replace("-", "\u2212") in panel.delta_label.text()
    assert "-" not in panel.delta_label.text()  # (the log ps beside it too: every minus "−")
    assert "changed run" in panel.lens_title.text()
    assert panel.ablation_panel.head_list.item(0).text() == "L18 H6  (zero)"
    # one click restores the clean run
    qtbot.mouseClick(w.ablation_bar.restore_button, Qt.MouseButton.LeftButton)
    _analysed(qtbot, w, changed=False)
    assert not w.ablation_bar.isVisible() and not w.grid.off_marks.isVisible()
    np.testing.assert_allclose(w.state.result.attentions, clean_attn, atol=1e-6)
    assert panel.top_table.isColumnHidden(2) and panel.delta_label.text() == ""


def test_the_context_menu_and_the_list_switch_heads_off_and_knock_out_edges(smol, qtbot):
    from attnviz.ui.panels.ablation_panel import head_menu

    w = smol
    panel = _shown(w)
    _analysed(qtbot, w)
    eff = w.state.effects
    menu = head_menu(w.state, 18, 6, 40, 20, w)
    texts = [a.text() for a in menu.actions()]
    assert "Switch L18 H6 off (mean)" in texts
    next(a for a in menu.actions() if a.text() == "Switch L18 H6 off (mean)").trigger()
    assert eff.ablation == Ablation(heads=((18, 6),), mode="mean")
    menu = head_menu(w.state, 18, 6, 40, 20, w)
    edge = next(a for a in menu.actions() if a.text().startswith("Knock out") and "every layer" in a.text())
    edge.trigger()
    assert eff.ablation.knockouts == ((tuple(range(30)), 40, 20),)
    a = _analysed(qtbot, w, changed=True)
    assert "mean-ablated L18 H6; knocked out 40→20 in layers 0-29" in w.ablation_bar.label.text()
    assert w.state.result.attentions[:, :, 40, 20].max() == 0
    # the panel's list: add a head by name, remove the first entry
    ab = panel.ablation_panel
    ab.head_edit.setText("3.1")
    qtbot.keyClick(ab.head_edit, Qt.Key.Key_Return)
    assert (3, 1) in eff.ablation.heads
    ab.head_edit.setText("99.1")
    qtbot.keyClick(ab.head_edit, Qt.Key.Key_Return)
    assert "outside this model's layers" in ab.message.text()
    ab.head_list.item(0).setSelected(True)  # L3 H1 sorts first
    qtbot.mouseClick(ab.remove_button, Qt.MouseButton.LeftButton)
    assert eff.ablation.heads == ((18, 6),)
    assert a.ablation.active


def test_an_encoder_says_in_one_line_that_it_predicts_no_next_token(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini", panels=("predict",))
    panel = _shown(w)
    qtbot.waitUntil(lambda: "encoder" in panel.header.text(), timeout=WAIT)
    assert "predicts no next token" in panel.header.text() and panel.top_table.rowCount() == 0
    w.worker.wait_idle()


def test_the_scan_shows_progress_ranks_heads_and_can_be_cancelled(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model="attnviz-textbook", panels=("predict",),
                    text="the cat sat on the mat . the cat sat on the")
    panel = _shown(w)
    ab = panel.ablation_panel
    eff = w.state.effects
    progress = []
    eff.sigScanProgress.connect(lambda done, total: progress.append((done, total)))
    w.worker.effects_jobs.request_scan("text")
    w.worker.effects_jobs.cancel_scan()  # cancelled before it could report: nothing comes
    assert ab.scan_label.text() == "Scan cancelled"
    qtbot.mouseClick(ab.scan_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: eff.scan is not None and not eff.scan_running, timeout=WAIT)
    n = w.state.n_layer * w.state.n_head
    assert progress and progress[-1] == (n, n) and progress[0][0] == 0
    assert ab.progress.value() == n
    ranked = eff.scan.ranked()
    assert ab.ranked.rowCount() == min(n, 20)
    l, h, e = ranked[0]
    assert ab.ranked.item(0, 0).text() == f"L{l} H{h}" and ab.ranked.item(0, 1).text() == f"{e:+.4f}".replace("-", "\u2212")
    assert ab.scan_view.map is not None and "baseline" in ab.scan_view.map.title
    w.worker.wait_idle()


def test_the_views_export_and_open_view_restores_the_ablation_query_and_tokens(qtbot, tmp_path):
    from attnviz.figures.data import open_sidecar
    from attnviz.ui.export import ExportDialog

    text = "the cat sat on the mat . the cat sat on the"
    w = open_window(qtbot, tmp_path / "e.ini", model="attnviz-textbook", panels=("predict",), text=text)
    panel = _shown(w)
    eff = w.state.effects
    eff.set_ablation(Ablation(heads=((1, 0),), mode="mean"))
    w.state.toggle_query(5)
    eff.set_tokens("cat", "")
    a = _analysed(qtbot, w, changed=True)
    assert a.position == 5 and a.label(a.target) == "cat"
    dialog = ExportDialog(w.state, w, w.settings)
    dialog.scope.setCurrentIndex(dialog.scope.findData("dla"))
    dialog.format.setCurrentIndex(dialog.format.findData("png"))
    dialog.path_edit.setText(str(tmp_path / "dla.png"))
    assert dialog.do_export(), dialog.error.text()
    meta = open_sidecar(tmp_path / "dla.png")
    assert meta["view"] == "dla" and meta["position"] == 5 and meta["target"] == a.target
    # back to a clean run on another text, then File -> Open view
    eff.restore_clean()
    eff.set_tokens("", "")
    w.set_text("the dog ran")
    wait_for_text(qtbot, w, "the dog ran")
    w.open_view(str(tmp_path / "dla.png"))
    qtbot.waitUntil(lambda: w.state.query_pos == 5, timeout=WAIT)
    assert eff.ablation == Ablation(heads=((1, 0),), mode="mean")
    assert panel.target_edit.text() == "cat"
    assert panel.tabs.currentWidget() is panel.dla_view and w.ablation_bar.isVisible()
    b = _analysed(qtbot, w, changed=True)
    assert (b.position, b.target, b.alt) == (a.position, a.target, a.alt)
    # an ablation the model does not have: nothing of the view is applied
    bad = dict(meta, ablation={"heads": [[7, 0]], "mode": "zero", "knockouts": []})
    w.apply_view(bad)
    assert "L7 H0" in widget(w, "error_banner").text() and eff.ablation == Ablation(heads=((1, 0),), mode="mean")
    w.worker.wait_idle()


def test_a_keystroke_stops_the_running_analysis_between_blocks(smol, qtbot, monkeypatch):
    """The analysis job asks its stop check between blocks of the unembedding: it says go on while
    the job is the newest, and stop once the text changes, so typing never waits for a whole lens.
    The stopped job's result is never shown."""
    import attnviz.engine.analysing.effects as E

    w = smol
    _shown(w)
    _analysed(qtbot, w)
    seen = []

    def analyse_and_watch(model, run, position=None, target="", alt="", k=10, stop=None):
        seen.append(stop)
        return analyse(model, run, position, target, alt, k)
    monkeypatch.setattr(E, "analyse", analyse_and_watch)
    shown_before = w.state.effects.analysis
    w.worker.effects_jobs.request_analysis()
    w.worker.wait_idle()
    assert len(seen) == 1 and seen[0] is not None and seen[0]() is False
    qtbot.waitUntil(lambda: w.state.effects.analysis is not shown_before, timeout=WAIT)
    w.worker.effects_jobs.request_analysis()
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=WAIT)
    stop = seen[-1]
    assert seen[0]() is True and stop() is False  # a newer analysis made the first one stale
    w.state.set_text(NAMES + " and")  # a keystroke
    assert stop() is True
    w.worker.wait_idle()


def test_a_keystroke_leaves_the_run_before_it_unanalysed(smol, qtbot, monkeypatch):
    """Once the text has changed, no analysis of the previous text's run starts (it would hold up
    the keystroke's own run on the pool): the analysis waiting for results to pause is dropped,
    and the next analysis is the new text's. (Analyses are counted as they are submitted from the
    keystroke on: one of " and" submitted before it, where a loaded machine let the pause pass
    first, is not this test's case.)"""
    from attnviz.ui.machinery.effects_jobs import ANALYSIS_KIND
    from attnviz.ui.machinery.worker import Worker

    w = smol
    _shown(w)
    _analysed(qtbot, w)
    seen, typed = [], []
    real_submit = Worker.submit

    def submit(self, kind, fn, on_done, request=None, lane="pool", job_id=None):
        if kind == ANALYSIS_KIND and typed:
            seen.append(request[1].result.text)  # request: (model, run, position, target, alt)
        return real_submit(self, kind, fn, on_done, request, lane, job_id)
    monkeypatch.setattr(Worker, "submit", submit)
    w.set_text(NAMES + " and")
    qtbot.waitUntil(lambda: w.state.result.text == NAMES + " and", timeout=WAIT)
    typed.append(True)
    w.set_text(NAMES + " and the")  # a keystroke before the analysis of " and" would start
    w.worker.effects_jobs.request_analysis()  # what the pause timer would call
    w.worker.wait_idle()
    assert seen == []
    qtbot.waitUntil(lambda: seen == [NAMES + " and the"], timeout=WAIT)


def _same_analysis(a, b) -> None:
    """Two analyses with the same numbers, bit for bit."""
    for p, q in ((a.clean, b.clean),):
        assert np.array_equal(p.logprobs, q.logprobs) and np.array_equal(p.top_ids, q.top_ids)
    for field in ("top_ids", "top_logprobs", "target_logprobs", "target_ranks"):
        assert np.array_equal(getattr(a.lens, field), getattr(b.lens, field)), field
    assert np.array_equal(a.dla.heads, b.dla.heads) and a.dla.logit_diff == b.dla.logit_diff
    assert (a.position, a.target, a.alt) == (b.position, b.target, b.alt)


def test_the_first_run_is_analysed_ahead_and_the_panel_shows_it_without_running_anything(
        smol, qtbot, monkeypatch):
    """A causal model's first run keeps what prediction reads and is analysed while What heads do
    is still hidden: shown once the side panels are built, the panel paints that analysis at once,
    with no run of the text and no analysis started, and its numbers are the engine's own run's.
    The grid shows that run's patterns, those of a plain run bit for bit."""
    from attnviz.engine.computing.request import RunRequest

    w = smol
    st, eff = w.state, w.state.effects
    first = st.result
    assert eff.run is not None and eff.run.result is first and eff.run.changed is None
    assert not eff.wanted
    qtbot.waitUntil(lambda: eff.analysis_of(first) is not None, timeout=WAIT)  # the panel hidden
    w.worker.wait_idle()
    a = eff.analysis
    submitted = []
    real = w.worker.submit
    monkeypatch.setattr(w.worker, "submit",
                        lambda kind, *args, **kw: (submitted.append(kind), real(kind, *args, **kw))[1])
    panel = _shown(w)
    qtbot.waitUntil(lambda: eff.wanted and panel.top_table.rowCount() > 0, timeout=WAIT)
    w.worker.wait_idle()
    assert {"compute", "effects"}.isdisjoint(submitted) and eff.analysis is a and st.result is first
    model = st.model
    _same_analysis(a, analyse(model, window_run(model, NAMES)))
    assert _table(panel.top_table)[0][0] == a.label(a.clean.top_ids[0])
    plain = model.run(NAMES, request=RunRequest(truncate=True, use_cache=False))
    assert np.array_equal(first.attentions, plain.attentions)


def test_a_model_switch_analyses_the_new_models_first_run_ahead_too(smol, qtbot, smollm2):
    """Ahead once per model: the first run of the model switched to is analysed with the panel
    hidden, and nothing after it."""
    w = smol
    st, eff = w.state, w.state.effects
    qtbot.waitUntil(lambda: eff.analysis_of(st.result) is not None, timeout=WAIT)
    w.worker.wait_idle()
    st.set_text(NAMES + " and")
    wait_for_text(qtbot, w, NAMES + " and")
    w.worker.wait_idle()
    assert eff.run_of(st.result) is None  # a keystroke's run with the panel hidden: plain
    from attnviz.engine import load_model

    other = load_model(smollm2.path)  # another model object: a switch
    st.set_model(other)
    qtbot.waitUntil(lambda: st.result is not None and eff.run_of(st.result) is not None
                    and eff.analysis_of(st.result) is not None, timeout=WAIT)
    w.worker.wait_idle()
    ahead = eff.analysis
    _same_analysis(ahead, analyse(other, window_run(other, NAMES + " and")))
    st.set_text(NAMES)
    wait_for_text(qtbot, w, NAMES)
    w.worker.effects_jobs.flush()
    w.worker.wait_idle()
    assert eff.run_of(st.result) is None and eff.analysis is ahead  # nothing more while hidden


def test_after_the_first_result_a_keystroke_runs_plain_while_the_panel_is_hidden(smol, qtbot):
    """Only the model's first run keeps the trace: while What heads do is hidden, a keystroke's
    run keeps nothing for it (the panel runs the text again when shown)."""
    w = smol
    eff = w.state.effects
    first_run = eff.run
    w.set_text(NAMES + " and")
    wait_for_text(qtbot, w, NAMES + " and")
    w.worker.wait_idle()
    assert w.state.result.trace is None and eff.run is first_run and eff.run_of(w.state.result) is None
    panel = _shown(w)
    a = _analysed(qtbot, w)  # run again for the panel: the new text's trace
    assert eff.run.result is w.state.result and eff.run.result.text == NAMES + " and"
    _same_analysis(a, analyse(w.state.model, window_run(w.state.model, NAMES + " and")))
    assert panel.top_table.rowCount() > 0


def test_an_encoders_first_run_keeps_nothing_for_what_heads_do(qtbot, tmp_path):
    """An encoder has no next-token head: its first run keeps nothing What heads do reads (no z),
    only the residual stream a Compare opening on that run compares (compare_jobs' kept run)."""
    w = open_window(qtbot, tmp_path / "m.ini", panels=("predict",))
    trace = w.state.result.trace
    assert w.state.effects.run is None
    assert trace is not None and trace.want["resid"] and not trace.want["z"]
    w.worker.wait_idle()
