"""The head-roles panel, offscreen: scores, overview, filter, overlay, find, and the plain statements."""

import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402

from attnviz.engine.analysing import find as F, heads as H
from attnviz.engine import load_model  # noqa: E402
from attnviz.engine.reading.textbook import TEXTBOOK_NAME  # noqa: E402
from attnviz.figures.style import ROLE_COLORS  # noqa: E402
from attnviz.ui.app import assemble  # noqa: E402
from attnviz.ui.panels.roles_panel import RolesPanel  # noqa: E402
from attnviz.ui.machinery.state import AppState  # noqa: E402
from windows import scores_settled, shown_label  # noqa: E402

TEXT = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def textbook_model():
    return load_model(TEXTBOOK_NAME)


def type_text(qtbot, state, text):
    """Type `text` and wait for the runner's result of it."""
    state.set_text(text)
    qtbot.waitUntil(lambda: state.result is not None and state.result.text == text, timeout=30000)


def wait_scores(qtbot, state):
    """Wait until the state holds the chosen source's scores (the text's of the result shown)."""
    def done():
        if state.role_options.source == "text":
            return state.text_scores is not None and state.scores_result is state.result and not state.scores_stale
        return state.probe_scores is not None
    qtbot.waitUntil(done, timeout=60000)


def _panel(qtbot, model, text=TEXT, parent=None):
    state, worker = assemble()  # the app's one state and runner: the runner scores, the panel shows
    panel = RolesPanel(state, parent)
    if parent is None:
        qtbot.addWidget(panel)
    state.set_model(model)
    type_text(qtbot, state, text)
    wait_scores(qtbot, state)
    return state, panel, worker


def test_scores_labels_and_overview_on_text(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    hs = state.head_scores
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
    assert f"No head of this model clears the self (current token) bar on this text: the " \
           f"strongest, L{l} H{h}, has strength {strength:.3f}, under the threshold 0.5" in summary
    assert f"score {hs.scores['self'][l, h]:.3f}" in summary and f"chance score {hs.chance['self'][l, h]:.3f}" in summary
    assert strength < H.THRESHOLDS["self"]


def test_sort_and_filter_by_role(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    panel.score_table.filter.setCurrentIndex(panel.score_table.filter.findData("previous"))
    assert panel.score_table.visible_heads() == [(0, 2)]
    assert "Previous token: D[q, q-1]" in panel.score_table.definitions.toPlainText()
    assert "Induction" not in panel.score_table.definitions.toPlainText()
    panel.score_table.filter.setCurrentIndex(0)
    assert len(panel.score_table.visible_heads()) == 72
    col = 3 + H.SCORE_NAMES.index("sink")
    panel.score_table.table.sortItems(col, Qt.SortOrder.DescendingOrder)
    top = panel.score_table.visible_heads()[0]
    assert top == hs_best(state.head_scores, "sink")
    values = [panel.score_table.table.item(r, col).data(Qt.ItemDataRole.DisplayRole)
              for r in range(panel.score_table.table.rowCount())]
    assert values == sorted(values, reverse=True)


def hs_best(hs, name):
    return hs.best(name)[:2]


def test_clicks_focus_and_overlay_draws_the_detection_pattern(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    panel.overview.map.cellClicked.emit(0, 2)
    assert state.focus == (0, 2) and state.layer == 0
    assert state.overlay is None  # no role picked yet
    panel.overview.set_overlay_role("previous")
    T = len(state.result.labels)
    np.testing.assert_array_equal(state.overlay, np.eye(T, k=-1, dtype=bool))
    assert "L0 H2: previous" in panel.overview.focus_note.text()
    # the label's number is its strength; the scores after it are named as scores (a head labelled
    # by a strength can have a larger score in another role)
    hs = state.head_scores
    note = panel.overview.focus_note.text()
    assert f"L0 H2: previous, strength {hs.strength['previous'][0, 2]:.3f}" in note
    assert f"scores: previous {hs.scores['previous'][0, 2]:.3f}" in note
    panel.overview.set_overlay_role("duplicate")  # "the" repeats: cells from each later "the" to earlier ones
    assert {tuple(c) for c in np.argwhere(state.overlay)} == {(4, 1), (8, 1), (8, 4)}
    state.set_focus(None)
    assert state.overlay is None


def test_find_ranks_heads_and_click_focuses(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    find = panel.find
    hits = find.set_find("are", "keys")
    assert hits == F.find(state.result, 6, 2)
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
    assert find.find_from.currentIndex() == 9 and find.hits == F.find(state.result, 9, 4)



def test_finds_negative_specificities_are_painted_with_the_windows_minus(qtbot, minilm):
    """A head that gives the key less than the other queries do has a negative specificity: its
    cell paints "−", as every number in the window is written; the cell's value, which Ctrl+C
    copies, stays a number (its text an ASCII "-" a program reads back)."""
    from PySide6.QtGui import QGuiApplication, QKeySequence
    from PySide6.QtWidgets import QStyleOptionViewItem

    state, panel, worker = _panel(qtbot, minilm)
    table = panel.find.find_table
    hits = panel.find.set_find("are", "keys")
    row = next(r for r, hit in enumerate(hits) if round(float(hit.specificity), 3) < 0)
    index = table.model().index(row, 2)
    opt = QStyleOptionViewItem()
    table.itemDelegateForIndex(index).initStyleOption(opt, index)  # the text the cell paints
    assert opt.text == f"{float(hits[row].specificity):.3f}".replace("-", "\u2212")
    table.setCurrentCell(row, 2)
    QGuiApplication.clipboard().clear()
    qtbot.keySequence(table, QKeySequence.StandardKey.Copy)
    assert float(QGuiApplication.clipboard().text()) == round(float(hits[row].specificity), 3)


def test_find_in_a_decoder_refuses_a_key_after_the_query_instead_of_ranking_zeros(qtbot, textbook_model):
    """In a causal model 'the'@1 cannot see 'sat'@3: every head's weight is 0, so the panel says so
    and lists no ranking; a key before the query is ranked again."""
    state, panel, worker = _panel(qtbot, textbook_model, "the cat sat on the mat")
    find = panel.find
    assert find.set_find("the@1", "sat@3") is None
    assert find.find_table.rowCount() == 0
    assert "'sat'@3 comes after the query 'the'@1" in find.find_status.text()
    assert "weight 0" in find.find_status.text()
    hits = find.set_find("the@5", "sat@3")
    assert find.find_table.rowCount() == len(hits) == 6
    assert find.find_table.item(0, 1).text() == f"L{hits[0].layer} H{hits[0].head}"

def test_find_is_its_own_view_of_the_state(qtbot, minilm):
    """Find without the roles panel: it follows the state's result and query itself, and a click
    writes the focus and the query back."""
    from attnviz.ui.panels.find_panel import FindPanel

    state = AppState()
    find = FindPanel(state, shown=lambda: True)
    qtbot.addWidget(find)
    state.set_model(minilm)
    state.set_result(minilm.run(TEXT))
    T = len(state.result.labels)
    assert find.find_from.count() == T and find.hits == F.find(state.result, T - 1, 0)
    state.set_query(6)
    assert find.hits == F.find(state.result, 6, 0)
    find.find_table.cellClicked.emit(0, 1)
    assert state.focus == (find.hits[0].layer, find.hits[0].head) and state.query_pos == 6
    assert find.find_table.item(0, 1).toolTip() == ""  # no scores given: no role in its tooltip

def test_probe_on_textbook_labels_every_head(qtbot, textbook_model):
    state, panel, worker = _panel(qtbot, textbook_model, "the cat sat")
    panel.set_source("probe")
    assert state.role_options.source == "probe" and panel.source.currentData() == "probe"
    wait_scores(qtbot, state)
    hs = state.head_scores
    assert hs.labels == [["previous", "duplicate", "self"], ["induction", "sink", "mixed"]]
    # the grid's badges sit on the typed sentence: each says it comes from the probe
    assert state.head_labels == [[f"{x} (probe)" for x in row] for row in hs.labels]
    assert "repeated twice" in panel.summary.text()
    assert "A causal model cannot attend to the next token." in panel.summary.text()
    panel.overview.map.cellClicked.emit(1, 0)
    assert "built as induction" in panel.overview.focus_note.text()
    panel.set_source("text")  # the typed text's scores are in the state all along
    assert state.head_scores.labels[0][1] == "sink"  # no repeats: the duplicate head parks on BOS
    assert panel.overview.map.item(0, 1).text() == "sink"


def test_probe_on_minilm_says_no_induction_head(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    panel.set_source("probe")
    wait_scores(qtbot, state)
    hs = state.head_scores
    l, h, strength = hs.best_strength("induction")
    assert (f"No head of this model clears the induction bar on the probe: the strongest, "
            f"L{l} H{h}, has strength {strength:.3f}, under the threshold 0.5") \
        in panel.summary.text()


def test_no_model_and_model_change_clear_everything(qtbot, minilm, textbook_model):
    state, worker = assemble()
    panel = RolesPanel(state)
    qtbot.addWidget(panel)
    assert state.head_scores is None and "Open a model" in panel.summary.text()
    state.set_model(minilm)
    type_text(qtbot, state, TEXT)
    wait_scores(qtbot, state)
    assert panel.overview.map.rowCount() == 6
    state.set_model(textbook_model)
    assert state.head_scores is None and state.head_labels is None
    assert panel.overview.map.rowCount() == 0 and panel.find.find_table.rowCount() == 0
    scores_settled(worker)


def test_table_starts_in_layer_order(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    assert panel.score_table.visible_heads()[:3] == [(0, 0), (0, 1), (0, 2)]


def test_find_waits_while_hidden_and_catches_up(qtbot, minilm):
    """In a window whose roles dock is not shown, typing does not refill Find; showing its tab does."""
    from PySide6.QtWidgets import QWidget

    host = QWidget()  # the panel is not its own window and not shown: not on screen
    qtbot.addWidget(host)
    state, panel, worker = _panel(qtbot, minilm, parent=host)
    find = panel.find
    assert find.find_from.count() == 0 and find.find_table.rowCount() == 0
    other = "Mary gave John a book."
    type_text(qtbot, state, other)
    panel.tabs.setCurrentWidget(find)  # not on screen: still waits
    assert find.find_from.count() == 0
    host.show()
    qtbot.waitExposed(host)
    labels = state.result.labels
    assert [find.find_from.itemText(i) for i in range(find.find_from.count())] == \
        [f"{lab}@{i}" for i, lab in enumerate(labels)]
    T = len(labels)
    assert find.hits == F.find(state.result, T - 1, 0) and find.find_table.rowCount() == 72
    # while shown, each new result refills Find at once (the same tokens picked: [SEP], last, to
    # [CLS]), reusing the table's rows
    type_text(qtbot, state, TEXT)
    assert find.find_from.count() == len(state.result.labels)
    assert find.hits == F.find(state.result, len(state.result.labels) - 1, 0)
    assert find.find_table.item(0, 1).text() == f"L{find.hits[0].layer} H{find.hits[0].head}"
    assert find.find_table.item(0, 2).data(Qt.ItemDataRole.DisplayRole) == \
        round(float(find.hits[0].specificity), 3)
    assert find.find_table.item(0, 3).data(Qt.ItemDataRole.DisplayRole) == \
        round(float(find.hits[0].weight), 3)
    scores_settled(worker)


def test_probe_scores_of_the_old_model_are_dropped_on_model_change(qtbot, minilm, textbook_model):
    """Probe scores of a 2x3 model must not label the hits of a 6x12 model found right after the
    switch (IndexError in the Find table before)."""
    state, panel, worker = _panel(qtbot, textbook_model, "the cat sat")
    find = panel.find
    panel.set_source("probe")
    wait_scores(qtbot, state)
    assert (state.head_scores.n_layer, state.head_scores.n_head) == (2, 3)
    state.set_model(minilm)
    assert state.head_scores is None and state.head_labels is None  # at once, while the probe reruns
    type_text(qtbot, state, TEXT)
    hits = find.set_find("keys@2", "the@1")
    assert len(hits) == 72 and find.find_table.rowCount() == 72
    wait_scores(qtbot, state)
    assert (state.head_scores.n_layer, state.head_scores.n_head) == (6, 12)
    find.run_find()
    hit = find.hits[5]
    # the grid's badge of that head: a label from the probe's sentences says so
    assert find.find_table.item(5, 1).toolTip() == f"{state.head_scores.labels[hit.layer][hit.head]} (probe)"
    scores_settled(worker)


def test_stale_labels_go_at_once_and_come_back_for_the_new_text(qtbot, minilm):
    state, panel, worker = _panel(qtbot, minilm)
    panel.show()
    assert state.head_labels is not None
    new = "Cats sleep on the warm mat."
    seen = []  # the panel as each change of the scores reaches it (its own slot runs first)
    state.sigHeadScoresChanged.connect(
        lambda: seen.append((panel.score_table.table.isEnabled(), "Updating" in panel.summary.text())))
    with qtbot.waitSignal(state.sigResultChanged, timeout=30000,
                          check_params_cb=lambda r: r is not None and r.text == new):
        state.set_text(new)
    # the previous text's badges must not sit on the new heatmaps while it is being scored: gone
    # when the result is (the grid reads them as it draws it); the panels are told after that frame
    assert state.head_labels is None and state.scores_stale
    wait_scores(qtbot, state)
    assert seen[0] == (False, True)  # greyed and "Updating" until the new text's scores came
    assert panel.score_table.table.isEnabled() and "Updating" not in panel.summary.text()
    assert state.head_labels == H.score_result(state.result, unknown_ids=H.unknown_token_ids(minilm)).labels
    scores_settled(worker)


def test_template_probe_from_the_panel(qtbot, minilm):
    from attnviz.engine.analysing import probes as P

    state, panel, worker = _panel(qtbot, minilm)
    panel.show()
    shown = []  # the summary as each step's progress reaches it
    state.sigProbeProgress.connect(lambda *_: shown.append(panel.summary.text()))
    panel.set_source("agreement")
    assert state.head_scores is None and "Running the agreement probe on 60 sentences" in panel.summary.text()
    qtbot.waitUntil(lambda: state.template_scores is not None, timeout=60000)
    L, n = minilm.config.n_layer, P.N_ITEMS
    steps = [re.fullmatch(r"Running the agreement probe: (.+) \((\d+)%\)…", t) for t in shown]
    assert all(steps), shown
    words, percent = [m[1] for m in steps], [int(m[2]) for m in steps]
    # the pass's layers, then the sentences scored: moving all along, never back, 100% at the end
    assert words == [f"{k} of {L} layers run" for k in range(L + 1)] + [
        f"{k} of {n} sentences scored" for k in range(1, n + 1)]
    assert percent == sorted(percent) and percent[0] == 0 and percent[-1] == 100
    assert 100 not in percent[:-1] and len({p for p in percent if 0 < p < 100}) >= L - 1
    ts = state.template_scores
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
    assert state.head_scores is not None and "agreement (probe)" not in str(state.head_labels)
    scores_settled(worker)


def test_the_overview_says_what_fills_the_map_while_there_is_none(qtbot, minilm):
    """No blank box in the map's place: while a probe runs, and after a template probe (which
    labels heads by one question, not by role), a note says what the map shows and when; the map
    comes back with role scores."""
    state, panel, worker = _panel(qtbot, minilm)
    panel.show()
    ov = panel.overview
    assert ov.map.isVisible() and not ov.empty_note.isVisible()
    panel.set_source("agreement")
    assert not ov.map.isVisible() and ov.empty_note.isVisible()
    note = ov.empty_note.text()
    assert "template probe" in note and "once it has run" in note and "listed above" in note
    qtbot.waitUntil(lambda: state.template_scores is not None, timeout=60000)
    assert not ov.map.isVisible() and ov.empty_note.text() == note
    panel.set_source("probe")  # (its scores come on the runner's pool, after this)
    assert ov.empty_note.isVisible() and "once the probe's heads are scored" in ov.empty_note.text()
    wait_scores(qtbot, state)
    assert ov.map.isVisible() and not ov.empty_note.isVisible()
    assert (ov.map.rowCount(), ov.map.columnCount()) == (minilm.config.n_layer, minilm.config.n_head)
    panel.set_source("text")
    assert ov.map.isVisible() and ov.map.rowCount() == minilm.config.n_layer
    scores_settled(worker)


def test_roles_scores_are_jobs_of_the_apps_one_runner(qtbot, textbook_model, monkeypatch):
    """Every job behind the panel's scores runs on the app's one runner, which writes them into the
    state; the panel only shows them (a runner of its own would submit jobs too, and be seen)."""
    import attnviz.ui.panels.roles_panel as RP
    from attnviz.ui.machinery.runner import Runner
    from attnviz.ui.machinery.effects_jobs import ANALYSIS_KIND
    from attnviz.ui.machinery.score_jobs import PROBE_KIND, SCORES_KIND

    submitted = []
    real = Runner.submit
    monkeypatch.setattr(Runner, "submit", lambda self, kind, *a, **k: (
        submitted.append((self, kind)), real(self, kind, *a, **k))[1])
    state, worker = assemble()
    panel = RP.RolesPanel(state)
    qtbot.addWidget(panel)
    state.set_model(textbook_model)
    type_text(qtbot, state, "the cat sat on the mat")
    wait_scores(qtbot, state)
    kinds = [kind for _, kind in submitted]
    assert SCORES_KIND in kinds and PROBE_KIND not in kinds
    panel.set_source("probe")
    wait_scores(qtbot, state)
    kinds = [kind for _, kind in submitted]
    # (ANALYSIS_KIND: the runner analyses a model's first run ahead for What heads do, on a timer)
    assert PROBE_KIND in kinds and set(kinds) <= {"compute", SCORES_KIND, PROBE_KIND, "checkpoints",
                                                  ANALYSIS_KIND}
    assert {runner for runner, _ in submitted} == {worker}  # one runner: the app's
    assert scores_settled(worker)


def test_overlay_leaves_out_the_unknown_tokens_the_score_leaves_out(qtbot, textbook_model):
    # "zebra" and "piano" are both <|unk|> in the textbook's 40 words: the same id, two words
    text = "the zebra sat on the piano"
    state, panel, worker = _panel(qtbot, textbook_model, text)
    ids = np.asarray(state.result.input_ids)
    unk = [i for i, t in enumerate(state.result.labels) if t == "<|unk|>"]
    assert len(unk) == 2 and ids[unk[0]] == ids[unk[1]]
    panel.overview.map.cellClicked.emit(0, 1)
    panel.overview.set_overlay_role("duplicate")
    cells = {tuple(int(x) for x in c) for c in np.argwhere(state.overlay)}
    assert (unk[1], unk[0]) not in cells  # two unknown words are not copies of each other
    the = [i for i, t in enumerate(state.result.labels) if t == "the"]
    assert (the[1], the[0]) in cells


def test_find_shows_its_numbers_rounded_once_and_no_minus_zero(qtbot, textbook_model, monkeypatch):
    """Find's specificity and weight read as they are to 3 digits: 0.0004996 is 0.000 (not rounded
    to 0.0005 first, then to 0.001), and a small negative value is 0.000, not -0.000."""
    state, panel, worker = _panel(qtbot, textbook_model, "the cat sat on the mat")
    hits = [F.HeadHit(0, 0, 0.0004996, -3e-5), F.HeadHit(0, 1, 0.2504, 0.12349)]
    monkeypatch.setattr(F, "find", lambda *_args: hits)
    assert panel.find.set_find("the@5", "sat@3") == hits
    table = panel.find.find_table

    def shown(row, col):  # as the table's delegate writes the cell
        index = table.model().index(row, col)
        return table.itemDelegateForIndex(index).displayText(index.data(), table.locale())
    assert [[shown(row, col) for col in (2, 3)] for row in range(2)] == [["0.000", "0.000"], ["0.123", "0.250"]]


def test_find_shows_the_tokens_it_fills_from_their_start_and_keeps_a_typed_boxs_cursor(qtbot, minilm):
    """Find shows the tokens it fills in (a new result, a pick from the list) from their start, but
    the box the user typed in and ended with Enter keeps its cursor where it was, while Find kept
    the text as typed (typing on goes where it was)."""
    state, panel, worker = _panel(qtbot, minilm)
    find = panel.find
    find.catch_up()
    edits = (find.find_from.lineEdit(), find.find_to.lineEdit())
    assert all(e.text() and e.cursorPosition() == 0 for e in edits)
    find.find_to.setCurrentIndex(2)  # a pick from the list
    find.find_to.activated.emit(2)
    assert find.find_to.currentText() == "keys@2" and edits[1].cursorPosition() == 0
    edits[1].setCursorPosition(len(edits[1].text()))
    at = edits[1].cursorPosition()
    edits[1].editingFinished.emit()  # Enter in the box
    assert find.find_to.currentText() == "keys@2" and edits[1].cursorPosition() == at > 0


def test_finds_line_shows_a_token_label_that_looks_like_markup(qtbot, minilm):
    """A token such as Llama's '<s>' is shown in Find's line as the strip labels it (read as rich
    text, it vanished and struck out the rest of the line)."""
    state, panel, worker = _panel(qtbot, minilm)
    find = panel.find
    find.catch_up()
    state.text_result.labels[0] = "<s>"
    find.set_find("are", "@0")
    assert "to '<s>'@0 (key)" in shown_label(find.find_status)


def test_the_overview_tooltip_never_rounds_a_strength_onto_its_threshold(qtbot, textbook_model):
    """The textbook's L0 H1 has a sink strength of 0.499992 on this text, under the 0.5 bar: its
    Overview tooltip reads 0.49999, as the heads table prints it, never 0.500."""
    state, panel, worker = _panel(qtbot, textbook_model, "the cat sat on the mat . the cat sat on the mat")
    assert 0.4999 < float(state.head_scores.strength["sink"][0, 1]) < 0.5
    tip = panel.overview.map.item(0, 1).toolTip()
    assert "strength 0.49999)" in tip and "strength 0.500)" not in tip
