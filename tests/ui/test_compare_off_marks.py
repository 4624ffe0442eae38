"""With a head switched off and Compare open, the grid's B and A − B show both models' clean runs:
no "switched off" cross over the head's tile there, the orange bar says the grid shows the clean
runs (not the changed run), and the selector's "(clean runs …)" note shows only outside mode A.
Back in A, the changed run: its cross, the bar naming the grid, no note."""

from __future__ import annotations

import pytest

from attnviz.ui.views.grid_compare import CLEAN_RUNS
from windows import WAIT, drain_events, toy_compared_with_checkpoint

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def with_step0(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def test_the_clean_runs_shown_in_b_and_a_minus_b_carry_no_off_marks(with_step0, qtbot):
    w = with_step0
    st, g, jobs, bar = w.state, w.grid, w.worker.compare_jobs, w.ablation_bar
    off = (0, 2)
    st.set_layer(0)
    st.effects.toggle_head(*off)
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result is st.result
                    and st.effects.run_of(st.result) is not None, timeout=WAIT)
    for mode, side in (("A", ""), ("B", "B"), ("A-B", "A \u2212 B"), ("A", "")):
        g.mode_selector.buttons[mode].click()
        qtbot.waitUntil(lambda m=mode: g.shown_mode == m and g.drawn is st.result, timeout=WAIT)
        drain_events()
        title = g.titles()[off[1]]
        bar_text = bar.label.text()
        if mode == "A":  # the changed run: its cross and its title's "· off"
            assert "\u00b7 off" in title, title
            assert g.off_marks.isVisible() and not g.off_marks.path().isEmpty()
            assert "The grid, " in bar_text and "clean runs" not in bar_text, bar_text
            assert not g.mode_selector.clean.isVisible()
        else:
            assert title == f"{side} L0 H2", title
            assert not g.off_marks.isVisible() and g.off_marks.path().isEmpty()
            assert "The grid, " not in bar_text, bar_text  # (not among what shows the changed run)
            assert f"The grid shows {side} of both models' clean runs." in bar_text, bar_text
            assert g.mode_selector.clean.isVisible() and CLEAN_RUNS in g.mode_selector.clean.text()


def test_while_a_new_step_is_compared_the_bar_and_note_say_what_the_grid_shows(with_step0, qtbot):
    """A moved to another training step in A − B: until the new comparison is in, the grid shows A's
    run with its cross, so the bar names the grid among the changed run's views and the selector
    has no "(clean runs …)" note; once it is in, A − B of the clean runs again."""
    w = with_step0
    st, g, jobs, bar = w.state, w.grid, w.worker.compare_jobs, w.ablation_bar
    st.set_layer(0)
    st.effects.toggle_head(0, 2)
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result is st.result
                    and st.effects.run_of(st.result) is not None, timeout=WAIT)
    g.mode_selector.buttons["A-B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "A-B", timeout=WAIT)
    st.set_checkpoint(16)  # (its comparison is let go: comparing afresh)
    # (A's last run, A − B's clean one, until step 16's is in: no cross on a run with none off)
    assert jobs.comparison is None and g.shown_mode == "A" and not g.off_marks.isVisible()
    assert g.mode_selector.waiting.isVisible() and not g.mode_selector.clean.isVisible()
    bar_text = bar.label.text()
    assert "The grid, " in bar_text and "clean runs" not in bar_text, bar_text
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result is st.result
                    and g.shown_mode == "A-B" and g.drawn is st.result, timeout=WAIT)
    drain_events()
    assert not g.off_marks.isVisible() and g.mode_selector.clean.isVisible()
    assert "The grid shows A \u2212 B of both models' clean runs." in bar.label.text(), bar.label.text()
