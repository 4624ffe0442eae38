"""The side panels on a long text (shown by the long view; its patterns are computed on demand): the
Head roles panel's scores, labels and map are the dense scores of the same text, under the exclusion
options too, and go stale when the text changes; Find ranks every head as on the dense run; the
calculator's sentence line counts the long text's tokens."""

import numpy as np
import pytest
from PySide6.QtCore import Qt

from attnviz.engine.analysing import find as F, heads as H
from attnviz.engine.computing.longdoc import dense_bytes
from attnviz.ui.panels.roles_views import COLUMNS, DIGITS
from windows import PARAGRAPH, PROMPT, WAIT, open_window, scores_settled, widget
from attnviz.engine.computing.request import RunRequest

LONG = PARAGRAPH * 4
# the window multiplies on the quantised blocks (the kernels), the reference run on its float32 copy
# (BLAS): the same weights to float32 rounding (docs/models.md), each weight within this fraction of
# itself after 30 layers; distance, a mean of |q - k| weighted by them, then moves by that fraction of
# its size, entropy (bits, -sum a log2 a) by that fraction of (its size + 1/ln 2 bits)
WEIGHT_RTOL = 1e-4
METRIC_TOL = {"distance": (0.0, WEIGHT_RTOL), "entropy": (WEIGHT_RTOL / np.log(2), WEIGHT_RTOL)}


@pytest.fixture
def win(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    if w.roles_panel is None:
        pytest.skip("side panels not installed")
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    qtbot.waitUntil(lambda: (w.roles_dock.raise_(), not w.roles_panel.visibleRegion().isEmpty())[1],
                    timeout=WAIT)
    yield w
    w.worker.wait_idle()


@pytest.fixture(scope="module")
def dense_long(smollm2):
    """SmolLM2's dense run of LONG, made once for the tests that compare the panels with it (they
    only read it: its patterns are read-only)."""
    full = smollm2.run(LONG, request=RunRequest(use_cache=False))  # [n_layer, n_head, T, T]
    full.attentions.flags.writeable = False
    return full


def show_long(qtbot, w, text):
    """Type `text` (over the lowered dense limit) and wait until the long view shows its run."""
    w.set_text(text)
    qtbot.waitUntil(lambda: w.state.long.run is not None and w.state.long.run.result.text == text,
                    timeout=WAIT)
    assert w.state.result is None and w.grid_stack.currentWidget() is widget(w, "long_view")


def wait_scored(qtbot, w, excluded=(False, False)):
    """Wait until the roles panel shows the scores of the text shown (not greyed), scored with the
    exclusions `excluded` (first token, current token)."""
    panel, st = w.roles_panel, w.state
    scores_settled(w.worker)
    qtbot.waitUntil(lambda: (st.head_scores is not None and not st.scores_stale
                             and (st.head_scores.exclude_bos, st.head_scores.exclude_current_token)
                             == excluded
                             and panel.score_table.table.isEnabled()
                             and panel.score_table.table.rowCount() > 0), timeout=WAIT)


def table_scores(panel):
    """{(layer, head): (role label, {score name: value shown})} from the Scores tab's rows."""
    t, out = panel.score_table.table, {}
    for row in range(t.rowCount()):
        cell = lambda c: t.item(row, c).data(Qt.ItemDataRole.DisplayRole)  # noqa: E731
        out[(int(cell(0)), int(cell(1)))] = (t.item(row, 2).text(),
                                            {name: cell(3 + j) for j, name in enumerate(COLUMNS[3:])})
    return out


def check_shown(w, dense, hs):
    """The panel shows `dense`'s scores: every table row (to its column's decimals), the map's size, the summary's
    counts; and the state's scores (what the table rounds) equal them: the role scores within 1e-5,
    distance and entropy within METRIC_TOL (atol, rtol)."""
    panel = w.roles_panel
    for name in H.ROLES:  # shares of each row's weight
        np.testing.assert_allclose(hs.scores[name], dense.scores[name], atol=1e-5, rtol=0,
                                   err_msg=name)
    for name in H.METRICS:  # tokens and bits (up to ~100)
        atol, rtol = METRIC_TOL[name]
        np.testing.assert_allclose(hs.scores[name], dense.scores[name], atol=atol, rtol=rtol,
                                   err_msg=name)
    for role in H.ROLES:
        np.testing.assert_allclose(hs.chance[role], dense.chance[role], atol=1e-5, rtol=0)
        np.testing.assert_allclose(hs.strength[role], dense.strength[role], atol=1e-5, rtol=0)
    assert hs.labels == dense.labels and w.state.head_labels == dense.labels  # the badges
    shown = table_scores(panel)
    n_layer, n_head = len(dense.labels), len(dense.labels[0])
    assert len(shown) == n_layer * n_head
    for (l, h), (label, values) in shown.items():
        assert label == dense.labels[l][h]
        for name, v in values.items():
            d = float(dense.scores[name][l, h])  # half the shown decimal, plus the bounds above
            atol, rtol = METRIC_TOL.get(name, (1e-5, 0.0))
            assert abs(v - d) <= 0.5 * 10.0 ** -DIGITS[name] + atol + rtol * abs(d), (l, h, name)
    ov = panel.overview.map
    assert (ov.rowCount(), ov.columnCount()) == (n_layer, n_head)
    counts = ", ".join(f"{n} {r}" for r in H.ROLES if (n := sum(row.count(r) for row in dense.labels)))
    assert f"Labels on this text: {counts or 'none'}" in panel.summary.text()


def test_head_roles_of_a_long_text_are_its_dense_scores(win, qtbot, smollm2, dense_long):
    w, st, panel = win, win.state, win.roles_panel
    show_long(qtbot, w, LONG)
    wait_scored(qtbot, w)
    full = dense_long
    assert full.n_tokens == st.long.T > 100
    unknown = H.unknown_token_ids(smollm2)
    check_shown(w, H.score_result(full, unknown_ids=unknown), st.head_scores)
    assert "induction" in [b for row in st.head_labels for b in row]  # the text repeats itself

    panel.exclude_bos.setChecked(True)  # the exclusion options rescore the long run
    panel.exclude_current.setChecked(True)
    wait_scored(qtbot, w, (True, True))
    check_shown(w, H.score_result(full, exclude_bos=True, exclude_current_token=True,
                                  unknown_ids=unknown), st.head_scores)

    longer = LONG + "The end."  # another long text: the old scores grey until the new ones come
    # the panels are told of a new run's stale scores after its frame: wait for that word
    with qtbot.waitSignal(st.sigHeadScoresChanged, timeout=WAIT,
                          check_params_cb=lambda: st.long.run is not None
                          and st.long.run.result.text == longer):
        w.set_text(longer)
    assert not panel.score_table.table.isEnabled() or st.scores_result is st.text_result
    wait_scored(qtbot, w, (True, True))
    full2 = smollm2.run(longer, request=RunRequest(use_cache=False))
    assert full2.n_tokens == st.long.T > full.n_tokens
    check_shown(w, H.score_result(full2, exclude_bos=True, exclude_current_token=True,
                                  unknown_ids=unknown), st.head_scores)

    w.set_text(PROMPT)  # a short text again: the dense run's scores
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == PROMPT, timeout=WAIT)
    wait_scored(qtbot, w, (True, True))
    assert st.long.run is None
    check_shown(w, H.score_result(st.result, exclude_bos=True, exclude_current_token=True,
                                  unknown_ids=unknown), st.head_scores)


def find_rows(find):
    """(head title, specificity, weight) of every row of Find's table, top to bottom."""
    t = find.find_table
    return [(t.item(i, 1).text(), t.item(i, 2).data(Qt.ItemDataRole.DisplayRole),
             t.item(i, 3).data(Qt.ItemDataRole.DisplayRole)) for i in range(t.rowCount())]


def test_find_on_a_long_text_ranks_the_heads_as_on_the_dense_run(win, qtbot, smollm2, dense_long):
    w, st, panel = win, win.state, win.roles_panel
    panel.tabs.setCurrentWidget(panel.find)
    show_long(qtbot, w, LONG)
    find = panel.find
    labels = st.long.run.result.labels
    T = len(labels)
    qtbot.waitUntil(lambda: find.find_from.count() == T, timeout=WAIT)  # the long text's tokens
    assert [find.find_to.itemText(i) for i in range(T)] == [f"{lab}@{i}" for i, lab in enumerate(labels)]
    full = dense_long
    cfg = smollm2.config
    for q, k in [(T - 1, 0), (T // 2 + 7, T // 2 - 30), (60, 59)]:
        hits = find.set_find(f"{labels[q]}@{q}", f"@{k}")
        want = F.find(full, q, k)
        assert hits is not None and len(hits) == cfg.n_layer * cfg.n_head
        assert f"'{labels[q]}'@{q} (query) to '{labels[k]}'@{k} (key)" in find.find_status.text()
        rows = find_rows(find)
        assert [r[0] for r in rows[:10]] == [f"L{h.layer} H{h.head}" for h in want[:10]]
        shown = {r[0]: (r[1], r[2]) for r in rows}
        for h in want:  # every head's specificity and weight as on the dense run, to the 3 digits shown
            spec, weight = shown[f"L{h.layer} H{h.head}"]
            assert abs(spec - h.specificity) <= 5e-4 + 1e-5 and abs(weight - h.weight) <= 5e-4 + 1e-5

    st.set_query(T - 3)  # a query row picked elsewhere moves Find's query
    assert find.find_from.currentIndex() == T - 3
    best = F.find(full, T - 3, find.find_to.currentIndex())[0]
    assert find_rows(find)[0][0] == f"L{best.layer} H{best.head}"


def test_the_calculator_counts_the_long_texts_tokens(win, qtbot):
    w, panel = win, win.calc_panel
    if panel is None:
        pytest.skip("side panels not installed")
    qtbot.waitUntil(lambda: (w.calc_dock.raise_(), not panel.visibleRegion().isEmpty())[1], timeout=WAIT)
    short = w.state.result.n_tokens
    assert f"this sentence: <b>{short} tokens" in panel.sentence_label.text()
    assert "live KV cache (engine, float32), its tokens' K and V" in panel.live_label.text()
    show_long(qtbot, w, LONG)
    T = w.state.long.T
    assert T > 100
    assert f"this sentence: <b>{T:,} tokens" in panel.sentence_label.text()
    assert panel.plot.sentence_marker.value() == T
    live = panel.live_label.text()  # the model's cache (the short text's) is not paired with T
    assert f"the long text's {T:,} tokens keep their own K and V" in live and "its tokens'" not in live

    w.set_text(PROMPT)  # the short text again
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == PROMPT, timeout=WAIT)
    assert f"this sentence: <b>{short} tokens" in panel.sentence_label.text()
    assert panel.plot.sentence_marker.value() == short


def test_a_long_texts_scores_never_hold_up_the_next_run(win, qtbot, monkeypatch):
    """The long text's scores run beside the window's runs: while they are under way (held here
    at their start), the next text's run arrives; the scores shown then are the new text's."""
    import threading

    w, st = win, win.state
    started, release = threading.Event(), threading.Event()
    real = H.score_layers

    def held(*args, **kw):
        started.set()
        release.wait(120)
        return real(*args, **kw)
    monkeypatch.setattr(H, "score_layers", held)
    show_long(qtbot, w, LONG)
    w.worker.flush_scores()
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    longer = LONG + "The end."
    try:
        show_long(qtbot, w, longer)  # computed while the first text's scores are under way
        assert st.head_scores is None or st.scores_stale
    finally:
        release.set()
    wait_scored(qtbot, w)
    assert st.scores_result is st.text_result and st.text_result.text == longer
    assert st.head_scores.tokens == list(st.long.run.result.labels)


def test_the_roles_summary_counts_the_layers_a_long_texts_scores_have_done(win, qtbot, monkeypatch):
    import threading

    w, st, panel = win, win.state, win.roles_panel
    release = threading.Event()
    real = H.score_layers

    def held(layer_blocks, *args, **kw):  # layers 0 and 1 scored, then every thread waits
        def gated(layer):
            if layer >= 2:
                release.wait(120)
            return layer_blocks(layer)
        return real(gated, *args, **kw)
    monkeypatch.setattr(H, "score_layers", held)
    try:
        show_long(qtbot, w, LONG)
        w.worker.flush_scores()
        n = st.model.config.n_layer
        qtbot.waitUntil(lambda: (f"Updating: scoring the new text (a long text: 2 of {n} layers done)…"
                                 == panel.summary.text()), timeout=WAIT)  # the short text's scores greyed
    finally:
        release.set()
    wait_scored(qtbot, w)
    assert "a long text:" not in panel.summary.text() and "Labels on this text" in panel.summary.text()


def test_a_long_texts_scores_run_on_every_core_below_the_main_thread(win, qtbot, monkeypatch):
    """The long text's layers are shared out to one thread per core, each below the main thread
    (as the pool's), so the window keeps a core for its paint while they run."""
    import os
    import threading

    from attnviz.engine.parallel import cores
    from attnviz.ui.machinery import tuning

    w, st = win, win.state
    scorings = []  # per scoring: {thread id: its nice value, read while it scores a layer}
    real = H.score_layers
    expected = min(cores(), st.model.config.n_layer)  # one thread per core the process may use

    def watched(layer_blocks, *args, **kw):
        seen = {}
        scorings.append(seen)  # (a scoring replaced by a newer one: the last one counts)
        # each thread holds its first layer until every thread has one: no thread can take them
        # all before another starts, however the machine schedules them; fewer threads break it
        met = threading.Barrier(expected, timeout=WAIT / 1000)

        def blocks(layer):
            me = threading.get_native_id()
            if me not in seen:
                seen[me] = os.getpriority(os.PRIO_PROCESS, me)
                met.wait()
            return layer_blocks(layer)
        return real(blocks, *args, **kw)
    monkeypatch.setattr(H, "score_layers", watched)
    show_long(qtbot, w, LONG)
    w.worker.flush_scores()
    wait_scored(qtbot, w)
    assert st.scores_result is st.text_result
    seen = scorings[-1]
    assert len(seen) == expected
    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())  # (this is the main thread)
    if main + tuning.POOL_NICE <= 19:
        assert set(seen.values()) == {main + tuning.POOL_NICE}
