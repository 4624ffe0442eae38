"""The window on SmolLM2: the Generate panel drives a generation (the tokens equal the engine's greedy
ones, the text grows in the box with the new tokens marked, the heatmaps follow), the step slider
scrubs the steps (the token's row in every head of the layer, its top-10, the KV bytes equal to the
calculator's), Stop and an edit of the text end it; a text over the dense limit shows as the long
view, whose tiles are the block maxima of the dense pattern, whose wheel and dragged rectangle zoom
to the exact weights, and whose hover reads the exact weight, and a keystroke at its end runs
its new tokens only; Hide first token and Value-weighted change what the long view shows and
paints as they change the grid."""

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from attnviz.engine.calc.from_config import kv_cache_needed
from attnviz.engine.computing.generate import generate, kv_bytes_per_position, kv_positions
from attnviz.engine.computing.longdoc import dense_bytes
from attnviz.engine.computing.patterns import drop_first_key, value_weighted
from attnviz.figures.overview import colour_index, tops
from attnviz.ui.views.long_panes import colour_table
from attnviz.ui.machinery.long_jobs import new_text
from windows import PARAGRAPH, PROMPT, WAIT, drain_events, open_window, widget
from attnviz.engine.computing.request import RunRequest

LONG = PARAGRAPH * 8


@pytest.fixture
def win(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    yield w
    w.state.generation.stop()
    w.worker.wait_idle()


@pytest.fixture(scope="module")
def dense_long(smollm2):
    """SmolLM2's dense run of LONG with its value norms, made once for the tests that compare the
    long view with it (they only read it: its arrays are read-only)."""
    full = smollm2.run(LONG, request=RunRequest(use_cache=False, values=True))
    full.attentions.flags.writeable = False
    full.value_norms.flags.writeable = False
    return full


def test_generation_grows_the_text_and_the_slider_scrubs_its_steps(win, qtbot, smollm2):
    w, gen, panel = win, win.state.generation, win.generate_panel
    panel.n_spin.setValue(4)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    want = generate(smollm2, PROMPT, max_new=4)
    assert [s.id for s in gen.steps] == want.new_ids and gen.stopped == want.stopped == "max_new"
    text = new_text(smollm2, PROMPT, want.prompt_ids, want.new_ids)
    assert len(text) > len(PROMPT) and w.text_box.toPlainText() == gen.text == text
    sels = w.text_box.extraSelections()  # the new tokens marked in the box
    assert len(sels) == 1 and sels[0].cursor.selectedText() == text[len(PROMPT):]
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=WAIT)

    cfg = smollm2.config
    panel.slider.setValue(1)
    step = gen.steps[1]
    assert gen.shown == 1 and step.T == len(want.prompt_ids) + 1
    assert step.kv_bytes == kv_cache_needed(cfg, step.T)
    assert f"{step.kv_bytes:,} bytes" in panel.kv_label.text() and "calculator" in panel.kv_label.text()
    assert all(t in panel.top_label.text() for t in step.top_tokens[:3])
    # the row the step's token was chosen from, in every head of the layer: a full recompute's last row
    full = smollm2.run(ids=want.prompt_ids + want.new_ids[:1], request=RunRequest(use_cache=False)).attentions
    for layer in (0, 17):
        w.state.set_layer(layer)
        np.testing.assert_allclose(panel.rows_view.rows, full[layer, :, -1], atol=1e-5, rtol=0)
    _, y = panel.curve.getData()  # what the arrays hold: the tokens' bytes and the room after them
    assert np.allclose(y, [s.kv_held / 2 ** 20 for s in gen.steps])
    assert all(s.kv_held >= s.kv_bytes for s in gen.steps) and gen.steps[1].kv_held > gen.steps[1].kv_bytes
    per, T0 = kv_bytes_per_position(cfg), len(want.prompt_ids)  # within what the guard counts
    for before, s in zip(gen.steps, gen.steps[1:]):
        held, peak = kv_positions(T0, s.T)
        assert s.kv_held <= held * per and (s.kv_held == before.kv_held or before.kv_held + s.kv_held <= peak * per)
    assert panel.marker.value() == 2  # the second step, counted from 1 as the label and the axis count

    w.state.set_model(None)  # another model: the steps were this one's, and go
    assert gen.steps == [] and gen.shown == -1 and panel.kv_label.text() == ""


def test_a_seeded_draw_repeats_the_engines_tokens(win, qtbot, smollm2):
    gen, panel = win.state.generation, win.generate_panel
    panel.n_spin.setValue(3)
    panel.temp_spin.setValue(0.8)
    panel.top_p_spin.setValue(0.9)
    panel.seed_spin.setValue(7)
    panel.start()
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    want = generate(smollm2, PROMPT, max_new=3, temperature=0.8, top_p=0.9, seed=7)
    assert [s.id for s in gen.steps] == want.new_ids


def test_an_encoder_generates_nothing(window):
    panel = window.generate_panel
    assert not panel.generate_button.isEnabled() and "encoder" in panel.status.text()


def test_stop_and_an_edit_end_a_generation(win, qtbot):
    w, gen, panel = win, win.state.generation, win.generate_panel
    panel.n_spin.setValue(200)
    panel.go_on_check.setChecked(True)
    panel.start()
    qtbot.waitUntil(lambda: len(gen.steps) >= 1, timeout=WAIT)
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    assert not gen.running and gen.stopped == "stopped" and panel.generate_button.isEnabled()
    n = len(gen.steps)
    w.worker.wait_idle()
    drain_events()  # a step still in flight lands now, or never
    assert len(gen.steps) == n < 200

    panel.start()
    qtbot.waitUntil(lambda: len(gen.steps) >= 1, timeout=WAIT)
    w.text_box.setPlainText("Something else")
    assert not gen.running and gen.stopped == "edited" and w.text_box.extraSelections() == []
    w.worker.wait_idle()
    drain_events()
    assert w.state.text == "Something else"


def wheel(widget, pos: QPointF, notches: int) -> None:
    ev = QWheelEvent(pos, widget.mapToGlobal(pos), QPoint(0, 0), QPoint(0, 120 * notches),
                     Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
                     False)
    QApplication.sendEvent(widget, ev)


def test_a_long_text_zooms_from_block_maxima_to_the_exact_weights(win, qtbot, smollm2, dense_long):
    w, lg = win, win.state.long
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    w.state.set_layer(3)
    w.set_text(LONG)
    ready = lambda: (lg.run is not None and lg.pane is not None and lg.tiles is not None  # noqa: E731
                     and lg.pane.region == lg.region and lg.tiles.region == lg.region)
    qtbot.waitUntil(ready, timeout=WAIT)
    view = widget(w, "long_view")
    assert w.grid_stack.currentWidget() is view and w.state.result is None
    dense_run = dense_long
    dense = dense_run.attentions  # [n_layer, n_head, T, T]
    T = lg.T
    # the token strip shows the long text's tokens (not "no tokens" while the long view shows)
    strip = w.token_strip
    assert strip.labels == dense_run.labels and len(strip.labels) == T
    painted = strip.grab().toImage()
    assert len({painted.pixel(x, y) for x in range(0, painted.width(), 7)
                for y in range(0, painted.height(), 3)}) > 3  # token boxes, not one grey line
    assert "long view" in w.focus_view.title.text()  # not "click a head": one is focused there
    assert T == dense.shape[-1] > 100
    n = lg.tiles.values.shape[1]  # the tiles: each cell the max of its block of the whole pattern
    assert n < T and lg.tiles.values.shape == (cfg.n_head, n, n)
    edges = (np.arange(n) * T) // n
    want = np.maximum.reduceat(np.maximum.reduceat(dense[3], edges, axis=2), edges, axis=1)
    np.testing.assert_allclose(lg.tiles.values, want, atol=1e-5, rtol=0)

    pane = view.pane
    rect = pane.head_rect()
    old = lg.pane
    wheel(pane, rect.center(), 3)  # zoom in about the pane's centre
    r0, r1, c0, c1 = lg.region
    assert r1 - r0 < T and c1 - c0 < T and r0 <= T // 2 < r1 and c0 <= T // 2 < c1
    assert lg.pane is old  # the last image stays until the new one is computed
    qtbot.waitUntil(ready, timeout=WAIT)

    a = rect.topLeft() + QPointF(rect.width() * 0.30, rect.height() * 0.40)  # drag a small rectangle
    b = rect.topLeft() + QPointF(rect.width() * 0.45, rect.height() * 0.55)
    qtbot.mousePress(pane, Qt.MouseButton.LeftButton, pos=a.toPoint())
    qtbot.mouseMove(pane, pos=b.toPoint())
    qtbot.mouseRelease(pane, Qt.MouseButton.LeftButton, pos=b.toPoint())
    qtbot.waitUntil(ready, timeout=WAIT)
    r0, r1, c0, c1 = lg.region
    assert r1 - r0 < 40 and c1 - c0 < 40 and lg.pane.exact
    head = lg.head()
    np.testing.assert_allclose(lg.pane.values[0], dense[3, head, r0:r1, c0:c1], atol=1e-5, rtol=0)
    labels = lg.run.result.labels
    shown = view.key_strip.text()  # the token strip follows, as many keys as its two lines hold
    assert shown.startswith(f"keys {c0:,}..{c1 - 1:,}:  {labels[c0]} {labels[c0 + 1]}")
    assert " ".join(labels[c0:c1]) in view.key_strip.full
    assert "exact weights" in view.info.text()

    rect = pane.head_rect()  # (the exact weights' token labels have taken their room)
    p = rect.topLeft() + QPointF(rect.width() * 0.7, rect.height() * 0.8)  # hover: the exact weight
    qtbot.mouseMove(pane, pos=p.toPoint())
    _, q, k = pane.tokens_at(QPointF(p.toPoint()))
    assert f"(q {q:,}, k {k:,})  {float(dense[3, head, q, k]):.4g}" in view.readout.text()

    view.whole_button.click()  # the whole pattern again, now each cell a block's mean
    view.reduce_combo.setCurrentIndex(1)
    qtbot.waitUntil(lambda: ready() and lg.tiles.reduce == "mean", timeout=WAIT)
    assert lg.region == (0, T, 0, T)
    n = lg.tiles.values.shape[1]
    edges = (np.arange(n) * T) // n
    sums = np.add.reduceat(np.add.reduceat(dense[3], edges, axis=2), edges, axis=1)
    sizes = np.diff([*edges, T])
    np.testing.assert_allclose(lg.tiles.values, sums / np.outer(sizes, sizes), atol=1e-5, rtol=0)

    w.set_text(PROMPT)  # a short text: the dense grid again
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == PROMPT, timeout=WAIT)
    assert lg.run is None and w.grid_stack.currentWidget() is w.grid


def test_typing_at_the_end_of_a_long_text_runs_only_its_new_tokens(win, qtbot, smollm2):
    """The second long run takes the first's tokens up to the edit (at most its last one or two
    change with the new text's tokens) and its patterns are the dense run's of the new text."""
    w, lg = win, win.state.long
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)
    w.set_text(LONG)
    qtbot.waitUntil(lambda: lg.run is not None and lg.run.result.text == LONG, timeout=WAIT)
    first = lg.run
    w.set_text(LONG + "The end")
    qtbot.waitUntil(lambda: lg.run is not None and lg.run.result.text == LONG + "The end", timeout=WAIT)
    run = lg.run
    assert 0 < run.result.cache_reused < run.patterns.T and run.result.cache_reused >= first.patterns.T - 2
    dense = smollm2.run(LONG + "The end", request=RunRequest(use_cache=False)).attentions
    for layer in (0, 29):
        np.testing.assert_allclose(run.patterns.rows(layer, 0, run.patterns.T), dense[layer], atol=1e-5, rtol=0)


def shown_pattern(full, layer: int, hide_first: bool, weighted: bool) -> np.ndarray:
    """[n_head, T, T]: a dense run's layer as the grid shows it (patterns.value_weighted, then
    drop_first_key), a hidden first key as 0 (token coordinates)."""
    att = full.attentions[layer]
    if weighted:
        att = value_weighted(att, full.value_norms[layer])
    if hide_first:
        att = np.concatenate([np.zeros_like(att[..., :1]), drop_first_key(att)], axis=-1)
    return att


def pixel_of_cell(pane, region, q: int, k: int) -> int:
    """The ARGB the pane paints at the centre of token pair (q, k) of `region`."""
    r0, r1, c0, c1 = region
    rect = pane.head_rect()
    x = rect.left() + (k - c0 + 0.5) * rect.width() / (c1 - c0)
    y = rect.top() + (q - r0 + 0.5) * rect.height() / (r1 - r0)
    return pane.grab().toImage().pixel(int(x), int(y))


def test_the_long_view_shows_hide_first_token_and_value_weighting(win, qtbot, smollm2, dense_long):
    """The two boxes act on a long text as on the grid: the tiles and the pane are the dense run's
    shown pattern under them, the hidden key's column is painted blank, each painted cell has its
    value's colour, hover reads the shown weight."""
    w, lg, view = win, win.state.long, widget(win, "long_view")
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)
    w.state.set_layer(5)
    w.set_text(LONG)
    boxes = {"hide": w.controls.hide_first_check, "weighted": w.controls.value_check}
    full = dense_long  # [n_layer, n_head, T, T], value norms

    def shows(options):
        return lambda: (lg.run is not None and lg.pane is not None and lg.tiles is not None
                        and lg.pane.region == lg.region == lg.tiles.region
                        and lg.pane.options == lg.tiles.options == options)

    qtbot.waitUntil(shows((False, False)), timeout=WAIT)
    assert all(b.isEnabled() for b in boxes.values())
    T = lg.T
    assert T == full.attentions.shape[-1]
    region = (20, 50, 0, 30)  # the first key in its own column: exact cells
    head = lg.head()
    for hide, weighted in [(True, False), (True, True), (False, True), (False, False)]:
        boxes["hide"].setChecked(hide)
        boxes["weighted"].setChecked(weighted)
        lg.reset_zoom()
        qtbot.waitUntil(shows((hide, weighted)), timeout=WAIT)
        want = shown_pattern(full, 5, hide, weighted)
        n = lg.tiles.values.shape[1]  # cells a side: the area's pixels (the layout may settle)
        edges = (np.arange(n) * T) // n
        tiles = np.maximum.reduceat(np.maximum.reduceat(want, edges, axis=2), edges, axis=1)
        np.testing.assert_allclose(lg.tiles.values, tiles, atol=1e-5, rtol=0)
        assert ("first key hidden" in view.info.text()) == hide
        assert ("value-weighted" in view.info.text()) == weighted

        lg.set_region(region)
        qtbot.waitUntil(lambda: shows((hide, weighted))() and lg.pane.exact, timeout=WAIT)
        np.testing.assert_allclose(lg.pane.values[0], want[head, 20:50, :30], atol=1e-5, rtol=0)
        table = colour_table(w.state.colormap)
        idx = colour_index(lg.pane.values, tops(lg.pane.values, "per-head"))[0]
        for q, k in [(25, 0), (30, 1), (44, 7), (49, 29)]:  # painted: each cell its value's colour
            colour = table[0] if hide and k == 0 else table[idx[q - 20, k]]  # 0: blank
            assert pixel_of_cell(view.pane, region, q, k) == colour, (q, k)
        for k in (0, 9):  # hover: the shown weight, or (hidden)
            def hover(k=k):  # (aimed again while the pane's layout settles)
                rect = view.pane.head_rect()
                p = QPointF(rect.left() + (k + 0.5) * rect.width() / 30,
                            rect.top() + 10.5 * rect.height() / 30)
                qtbot.mouseMove(view.pane, pos=p.toPoint())
                return f"(q 30, k {k})" in view.readout.text()
            qtbot.waitUntil(hover, timeout=WAIT)
            text = view.readout.text()
            assert (text.endswith("(hidden)") if hide and k == 0 else
                    text.endswith(f"{float(want[head, 30, k]):.4g}")), text


def test_a_generation_whose_rows_and_kv_would_pass_the_limit_is_refused_before_it_runs(win, monkeypatch):
    """The guard counts each step's rows and the K and V arrays as allocated: their room for the
    next positions, and the old arrays beside a copy (here the rows alone would fit)."""
    import attnviz.ui.machinery.long_jobs as long_jobs
    from attnviz.engine.reading.byte_sizes import format_bytes
    from attnviz.engine.computing.trace import kv_room

    w, gen, panel = win, win.state.generation, win.generate_panel
    c = w.state.model.config
    T = len(w.state.model.prepare(PROMPT).ids)
    rows, kv = long_jobs.generation_bytes(c, T, 20)
    assert rows == 4 * c.n_layer * c.n_head * (20 * T + 20 * 19 // 2)  # SmolLM2: 1,080 bytes a token and step
    last = T + 19  # the tokens the last step reads: the old arrays, with their room, beside the copy
    assert kv == 2 * c.n_layer * c.n_kv_head * c.d_head * 4 * (last - 1 + kv_room(last - 1) + last + kv_room(last))
    monkeypatch.setattr(long_jobs, "ROWS_LIMIT", rows + kv - 1)
    fit = max(m for m in range(20) if sum(long_jobs.generation_bytes(c, T, m)) <= rows + kv - 1)
    panel.n_spin.setValue(20)
    panel.start()
    assert not gen.running and gen.steps == [] and w.state.text == PROMPT
    text = panel.status.text()
    assert f"20 steps after {T} tokens would keep {format_bytes(rows, 'up')} of attention rows" in text
    assert f"and up to {format_bytes(kv, 'up')} of keys and values" in text
    assert text.endswith(f"limit: ask for at most about {fit} new tokens") and 0 < fit < 20
