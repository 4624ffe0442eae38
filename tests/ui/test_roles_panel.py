"""The head-roles panel, offscreen: scores, overview, filter, overlay, find, and the plain statements."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from attnviz.engine import heads as H  # noqa: E402
from attnviz.engine import load_model  # noqa: E402
from attnviz.engine.textbook import TEXTBOOK_NAME  # noqa: E402
from attnviz.figures.style import ROLE_COLORS  # noqa: E402
from attnviz.ui.roles_panel import RolesPanel  # noqa: E402
from attnviz.ui.state import AppState  # noqa: E402

TEXT = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def textbook_model():
    return load_model(TEXTBOOK_NAME)


def _panel(qtbot, model, text=TEXT):
    state = AppState()
    panel = RolesPanel(state)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.sigScored, timeout=30000, check_params_cb=lambda hs: hs is not None):
        state.set_model(model)
        state.set_text(text)
        state.set_result(model.run(text))
    return state, panel


def test_scores_labels_and_overview_on_text(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    hs = panel.scores
    expected = H.score_result(state.result)
    assert hs.labels == expected.labels
    assert state.head_labels == expected.labels  # badges for the grid
    ov = panel.overview.map
    assert (ov.rowCount(), ov.columnCount()) == (6, 12)
    prev = ov.item(0, 2)
    assert prev.text() == "prev"
    assert prev.background().color().name() == ROLE_COLORS["previous"]
    assert "previous token: 0.916" in prev.toolTip()
    assert panel.score_table.table.rowCount() == 72
    # the statement for roles no head clears, with the best figure
    summary = panel.summary.text()
    assert "induction: this text repeats too few tokens" in summary.lower()
    # the number printed is the number the label is tested on: strength, with score and chance
    l, h, strength = hs.best_strength("self")
    assert f"No head of this model clears the self (current token) threshold (0.5, and chance + " \
           f"0.1) on this text: the strongest is L{l} H{h} at strength {strength:.3f} (score " \
           f"{hs.scores['self'][l, h]:.3f}, chance {hs.chance['self'][l, h]:.3f})." in summary
    assert strength < H.THRESHOLDS["self"]


def test_sort_and_filter_by_role(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    panel.score_table.filter.setCurrentIndex(panel.score_table.filter.findData("previous"))
    assert panel.score_table.visible_heads() == [(0, 2)]
    assert "Previous token: D[q, q-1]" in panel.score_table.definitions.toPlainText()
    assert "Induction" not in panel.score_table.definitions.toPlainText()
    panel.score_table.filter.setCurrentIndex(0)
    assert len(panel.score_table.visible_heads()) == 72
    col = 3 + H.SCORE_NAMES.index("sink")
    panel.score_table.table.sortItems(col, Qt.SortOrder.DescendingOrder)
    top = panel.score_table.visible_heads()[0]
    assert top == hs_best(panel.scores, "sink")
    values = [panel.score_table.table.item(r, col).data(Qt.ItemDataRole.DisplayRole)
              for r in range(panel.score_table.table.rowCount())]
    assert values == sorted(values, reverse=True)


def hs_best(hs, name):
    return hs.best(name)[:2]


def test_clicks_focus_and_overlay_draws_the_detection_pattern(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    panel.overview.map.cellClicked.emit(0, 2)
    assert state.focus == (0, 2) and state.layer == 0
    assert state.overlay is None  # no role picked yet
    panel.overview.set_overlay_role("previous")
    T = len(state.result.labels)
    np.testing.assert_array_equal(state.overlay, np.eye(T, k=-1, dtype=bool))
    assert "L0 H2: previous" in panel.overview.focus_note.text()
    panel.overview.set_overlay_role("duplicate")  # "the" repeats: cells from each later "the" to earlier ones
    assert {tuple(c) for c in np.argwhere(state.overlay)} == {(4, 1), (8, 1), (8, 4)}
    state.set_focus(None)
    assert state.overlay is None


def test_find_ranks_heads_and_click_focuses(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    find = panel.find
    hits = find.set_find("are", "keys")
    assert hits == H.find(state.result, 6, 2)
    assert hits[0].weight >= 0.5
    assert find.find_table.rowCount() == 72
    assert find.find_table.item(0, 1).text() == f"L{hits[0].layer} H{hits[0].head}"
    find.find_table.cellClicked.emit(0, 1)
    assert state.focus == (hits[0].layer, hits[0].head)
    assert state.query_pos == 6
    assert find.set_find("are", "the") is None
    assert "occurs 3 times" in find.find_status.text()
    assert find.find_table.rowCount() == 0
    # picking a query row elsewhere (the focus view) moves Find's query
    find.set_find("are", "the@4")
    state.set_query(9)
    assert find.find_to.currentIndex() == 4
    assert find.find_from.currentIndex() == 9 and find.hits == H.find(state.result, 9, 4)



def test_find_is_its_own_view_of_the_state(qtbot, minilm):
    """Find without the roles panel: it follows the state's result and query itself, and a click
    writes the focus and the query back."""
    from attnviz.ui.find_panel import FindPanel

    state = AppState()
    find = FindPanel(state, shown=lambda: True)
    qtbot.addWidget(find)
    state.set_model(minilm)
    state.set_result(minilm.run(TEXT))
    T = len(state.result.labels)
    assert find.find_from.count() == T and find.hits == H.find(state.result, T - 1, 0)
    state.set_query(6)
    assert find.hits == H.find(state.result, 6, 0)
    find.find_table.cellClicked.emit(0, 1)
    assert state.focus == (find.hits[0].layer, find.hits[0].head) and state.query_pos == 6
    assert find.find_table.item(0, 1).toolTip() == ""  # no scores given: no role in its tooltip

def test_probe_on_textbook_labels_every_head(qtbot, textbook_model):
    state, panel = _panel(qtbot, textbook_model, "the cat sat")
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        panel.set_source("probe")
    assert panel.scores.labels == [["previous", "duplicate", "self"], ["induction", "sink", "mixed"]]
    # the grid's badges sit on the typed sentence: each says it comes from the probe
    assert state.head_labels == [[f"{x} (probe)" for x in row] for row in panel.scores.labels]
    assert "repeated twice" in panel.summary.text()
    assert "A causal model cannot attend to the next token." in panel.summary.text()
    panel.overview.map.cellClicked.emit(1, 0)
    assert "built as induction" in panel.overview.focus_note.text()
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        panel.set_source("text")
    assert panel.scores.labels[0][1] == "sink"  # no repeats: the duplicate head parks on BOS


def test_probe_on_minilm_says_no_induction_head(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        panel.set_source("probe")
    hs = panel.scores
    l, h, strength = hs.best_strength("induction")
    assert (f"No head of this model clears the induction threshold (0.5, and chance + 0.1) on the "
            f"probe: the strongest is L{l} H{h} at strength {strength:.3f} (score "
            f"{hs.scores['induction'][l, h]:.3f}, chance {hs.chance['induction'][l, h]:.3f}).") \
        in panel.summary.text()


def test_no_model_and_model_change_clear_everything(qtbot, minilm, textbook_model):
    state = AppState()
    panel = RolesPanel(state)
    qtbot.addWidget(panel)
    assert panel.scores is None and "Open a model" in panel.summary.text()
    with qtbot.waitSignal(panel.sigScored, timeout=30000, check_params_cb=lambda hs: hs is not None):
        state.set_model(minilm)
        state.set_result(minilm.run(TEXT))
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        state.set_model(textbook_model)
    assert panel.scores is None and state.head_labels is None
    assert panel.overview.map.rowCount() == 0 and panel.find.find_table.rowCount() == 0


def test_table_starts_in_layer_order(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    assert panel.score_table.visible_heads()[:3] == [(0, 0), (0, 1), (0, 2)]


def test_find_waits_while_hidden_and_catches_up(qtbot, minilm):
    """In a window whose roles dock is not shown, typing does not refill Find; showing its tab does."""
    from PySide6.QtWidgets import QWidget

    host = QWidget()  # the panel is not its own window and not shown: not on screen
    qtbot.addWidget(host)
    state = AppState()
    panel = RolesPanel(state, host)
    find = panel.find
    state.set_model(minilm)
    state.set_result(minilm.run(TEXT))
    assert find.find_from.count() == 0 and find.find_table.rowCount() == 0
    other = "Mary gave John a book."
    state.set_result(minilm.run(other))
    panel.tabs.setCurrentWidget(find)  # not on screen: still waits
    assert find.find_from.count() == 0
    host.show()
    qtbot.waitExposed(host)
    labels = state.result.labels
    assert [find.find_from.itemText(i) for i in range(find.find_from.count())] == \
        [f"{lab}@{i}" for i, lab in enumerate(labels)]
    T = len(labels)
    assert find.hits == H.find(state.result, T - 1, 0) and find.find_table.rowCount() == 72
    # while shown, each new result refills Find at once (same picks), reusing the table's rows
    state.set_result(minilm.run(TEXT))
    assert find.find_from.count() == len(state.result.labels)
    assert find.hits == H.find(state.result, T - 1, 0)
    assert find.find_table.item(0, 1).text() == f"L{find.hits[0].layer} H{find.hits[0].head}"
    assert find.find_table.item(0, 2).data(Qt.ItemDataRole.DisplayRole) == \
        round(float(find.hits[0].specificity), 4)
    assert find.find_table.item(0, 3).data(Qt.ItemDataRole.DisplayRole) == \
        round(float(find.hits[0].weight), 4)
    panel.wait_idle()


def test_probe_scores_of_the_old_model_are_dropped_on_model_change(qtbot, minilm, textbook_model):
    """Probe scores of a 2x3 model must not label the hits of a 6x12 model found right after the
    switch (IndexError in the Find table before)."""
    state, panel = _panel(qtbot, textbook_model, "the cat sat")
    find = panel.find
    with qtbot.waitSignal(panel.sigScored, timeout=30000, check_params_cb=lambda hs: hs is not None):
        panel.set_source("probe")
    assert (panel.scores.n_layer, panel.scores.n_head) == (2, 3)
    state.set_model(minilm)
    assert panel.scores is None and state.head_labels is None  # at once, while the probe reruns
    state.set_result(minilm.run(TEXT))
    hits = find.set_find("keys@2", "the@1")
    assert len(hits) == 72 and find.find_table.rowCount() == 72
    assert all(find.find_table.item(i, 1).toolTip() == "" for i in range(72))
    with qtbot.waitSignal(panel.sigScored, timeout=30000, check_params_cb=lambda hs: hs is not None):
        pass
    assert (panel.scores.n_layer, panel.scores.n_head) == (6, 12)
    find.run_find()
    hit = find.hits[5]
    assert find.find_table.item(5, 1).toolTip() == panel.scores.labels[hit.layer][hit.head]
    panel.wait_idle()


def test_stale_labels_go_at_once_and_come_back_for_the_new_text(qtbot, minilm):
    state, panel = _panel(qtbot, minilm)
    panel.show()
    assert state.head_labels is not None
    new = "Cats sleep on the warm mat."
    state.set_text(new)
    state.set_result(minilm.run(new))
    # the previous text's badges must not sit on the new heatmaps while it is being scored
    assert state.head_labels is None
    assert not panel.score_table.table.isEnabled() and "Updating" in panel.summary.text()
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        pass
    assert panel.score_table.table.isEnabled() and "Updating" not in panel.summary.text()
    assert state.head_labels == H.score_result(state.result, unknown_ids=H.unknown_token_ids(minilm)).labels
    panel.wait_idle()


def test_template_probe_from_the_panel(qtbot, minilm):
    from attnviz.engine import probes as P

    state, panel = _panel(qtbot, minilm)
    panel.show()
    with qtbot.waitSignal(panel.sigScored, timeout=60000, check_params_cb=lambda hs: panel.template is not None):
        panel.set_source("agreement")
    ts = panel.template
    assert ts.kind == "agreement" and ts.n_items + ts.n_skipped == P.N_ITEMS
    text = panel.summary.text()
    assert "Subject-verb agreement" in text and f"{ts.n_items} sentences scored" in text
    hits = ts.labelled()
    if hits:
        l, h = hits[0][:2]
        assert state.head_labels[l][h] == "agreement (probe)"
        assert f"L{l} H{h} (score {hits[0][2]:.2f}" in text
    else:
        assert "No head passes" in text
    assert sum(bool(x) for row in state.head_labels for x in row) == len(hits)
    panel.set_source("text")
    with qtbot.waitSignal(panel.sigScored, timeout=30000):
        pass
    assert panel.scores is not None and "agreement (probe)" not in str(state.head_labels)
    panel.wait_idle()


def test_roles_scores_are_jobs_of_the_windows_one_runner(qtbot):
    """Issue 11 item 1: the panel has no job machinery of its own; its scores are 'roles' jobs of
    the runner it is given, and only the newest request's scores arrive."""
    import attnviz.ui.roles_panel as RP
    from attnviz.ui.state import AppState
    from attnviz.ui.worker import Worker

    assert not hasattr(RP, "_Relay") and not hasattr(RP, "_Task")
    state = AppState()
    worker = Worker(state)
    panel = RP.RolesPanel(state, worker=worker)
    qtbot.addWidget(panel)
    assert panel.worker is worker
    submitted = []
    real = worker.submit
    worker.submit = lambda kind, *a, **k: (submitted.append(kind), real(kind, *a, **k))[1]
    from attnviz.engine import load_model
    state.set_model(load_model("attnviz-textbook"))
    state.set_result(state.model.run("the cat sat on the mat"))
    panel.rescore()
    panel.rescore()  # the first one's scores must never be shown after the second's
    assert panel.wait_idle()
    qtbot.waitUntil(lambda: panel.scores is not None, timeout=10000)
    assert submitted and set(submitted) == {RP.JOB_KIND}
