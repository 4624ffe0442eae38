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
