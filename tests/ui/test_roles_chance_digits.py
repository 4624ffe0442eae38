"""Head roles' tooltips print a role score and its chance score with the digits that keep the
score's lead over chance on its true side of the margin a label needs (heads.chance_texts, the rule
heads.strength_text keeps for the strength): a lead of 0.09999 never reads 0.235 beside 0.135."""

from attnviz.engine import load_model
from attnviz.engine.analysing import heads as H
from attnviz.engine.reading.textbook import TEXTBOOK_NAME
from attnviz.ui.app import assemble
from attnviz.ui.panels.roles_panel import RolesPanel
from windows import WAIT

TEXT = "The cat sat on the mat because the cat"


def test_a_score_just_short_of_chance_plus_the_margin_never_reads_as_clearing_it(qtbot):
    state, worker = assemble()
    panel = RolesPanel(state)
    qtbot.addWidget(panel)
    state.set_model(load_model(TEXTBOOK_NAME))
    state.set_text(TEXT)
    qtbot.waitUntil(lambda: state.head_scores is not None and state.scores_result is state.result
                    and state.result is not None and not state.scores_stale, timeout=WAIT)
    hs = state.head_scores
    chance = 0.135
    hs.chance["previous"][0, 1] = chance
    hs.scores["previous"][0, 1] = chance + H.CHANCE_MARGIN - 5e-6  # misses the margin by 5e-6
    hs.chance["previous"][0, 2] = chance
    hs.scores["previous"][0, 2] = chance + H.CHANCE_MARGIN + 0.0004  # clears it
    panel.overview.refresh()
    panel.score_table.refresh()
    near = panel.overview.map.item(0, 1).toolTip()
    assert "previous token: 0.234995  (chance 0.135000, strength " in near, near
    clear = panel.overview.map.item(0, 2).toolTip()
    assert "previous token: 0.235  (chance 0.135, strength " in clear, clear
    table = panel.score_table.table
    col = 3 + list(H.SCORE_NAMES).index("previous")
    tips = {table.item(r, 0).text() + " " + table.item(r, 1).text(): table.item(r, col).toolTip()
            for r in range(table.rowCount())}
    assert tips["0 1"] == ("L0 H1, previous token: 0.234995\nchance 0.135000: the score if this head "
                           "spread its attention evenly"), tips["0 1"]
    assert tips["0 2"].startswith("L0 H2, previous token: 0.235\nchance 0.135: "), tips["0 2"]
    worker.wait_idle()
