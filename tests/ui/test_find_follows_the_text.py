"""When the text changes (another sample picked), Find keeps the tokens it was asked about where
the new text has them, and otherwise proposes anew (the last token to the first) with every head
ranked: it never opens on an error about a token typed for the text before, nor on whatever tokens
now sit at the old positions."""

from attnviz.engine.analysing import find as F
from attnviz.ui.machinery.state import AppState

KEYS = "The keys to the cabinet are on the table."
NAMES = "When Mary and John went to the store, John gave a drink to"
AGAIN = "Yes: the keys to the big cabinet are here."


def test_find_keeps_its_tokens_or_proposes_anew(qtbot, minilm):
    from attnviz.ui.panels.find_panel import FindPanel

    state = AppState()
    find = FindPanel(state, shown=lambda: True)
    qtbot.addWidget(find)
    state.set_model(minilm)
    state.set_result(minilm.run(KEYS))
    assert find.set_find("are", "keys") == F.find(state.result, 6, 2)
    state.set_result(minilm.run(AGAIN))  # both tokens in the new text, elsewhere
    r = state.result
    q, k = r.labels.index("are"), r.labels.index("keys")
    assert (q, k) != (6, 2)
    assert (find.find_from.currentText(), find.find_to.currentText()) == (f"are@{q}", f"keys@{k}")
    assert find.hits == F.find(r, q, k) and "every head ranked" in find.find_status.text()
    state.set_result(minilm.run(NAMES))  # neither: proposed anew, no error
    r = state.result
    T = len(r.labels)
    assert (find.find_from.currentIndex(), find.find_to.currentIndex()) == (T - 1, 0)
    assert find.find_status.text().startswith(f"From '{r.labels[T - 1]}'@{T - 1} (query) to '[CLS]'@0")
    assert find.hits == F.find(r, T - 1, 0)
    find.find_from.setEditText("are")  # typed for another text, never entered
    state.set_result(minilm.run(NAMES + " them"))
    assert "not in the text" not in find.find_status.text() and find.hits


def test_a_picked_occurrence_is_not_swapped_for_another_that_moved_to_its_place(qtbot, minilm):
    """The second 'John' picked as the key, then words put before the text: the first 'John' now
    stands where the second stood. Find does not answer about that one under the same box text;
    a token that occurs more than once is proposed anew (its box shows which)."""
    from attnviz.ui.panels.find_panel import FindPanel

    state = AppState()
    find = FindPanel(state, shown=lambda: True)
    qtbot.addWidget(find)
    state.set_model(minilm)
    state.set_result(minilm.run(NAMES))
    second = [i for i, lab in enumerate(state.result.labels) if lab == "john"][1]
    find.set_find(f"to@{len(state.result.labels) - 2}", f"john@{second}")
    state.set_result(minilm.run("Yesterday after a long lunch, " + NAMES))
    r = state.result
    johns = [i for i, lab in enumerate(r.labels) if lab == "john"]
    assert johns[0] == second  # (the first 'John' has moved to where the second stood)
    assert find.find_to.currentText() != f"john@{second}", find.find_to.currentText()


def test_a_box_holding_a_superscript_position_is_read_as_a_token_not_a_crash(minilm):
    from attnviz.ui.panels.find_panel import same_token

    r = minilm.run(KEYS)
    assert same_token(r, "x@\u00b2") is None
