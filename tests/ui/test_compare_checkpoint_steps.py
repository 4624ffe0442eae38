"""Compare and A's training step (the toy model's checkpoints): moving A to another step
recompares B (unchanged) against the new A, every number of the panel the new A's as
`attnviz compare --checkpoint I --against-checkpoint J` gives them (it kept the old step's patterns
and mixed two steps' numbers); a B picked from the Compare menu's checkpoints opens while A is at
an earlier step (it was refused: A's step folder lists no checkpoints); the panel and the JSD
map name each side's step (its title, painted at the dock's width and narrower, keeps both
steps); an export records A's step, and File > Open view shows it again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.computing.checkpoints import checkpoint_words
from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare

WAIT = 30000
TEXT = "the cat sat on the mat and the cat sat"


@pytest.fixture
def window(toy_compare_window):
    return toy_compare_window(TEXT)


def settled(qtbot, w, a):
    """The comparison of TEXT with `a` (a Model: A's step) as A, its next-token numbers and probe in."""
    jobs = w.worker.compare_jobs

    def done():
        c = jobs.comparison
        return (c is not None and c.doc is not None and c.doc["kld"] is not None and jobs.induction is not None
                and c.result.text == TEXT and w.state.model is a and c.pair.a.model is a)
    qtbot.waitUntil(done, timeout=WAIT)
    w.worker.wait_idle()
    return jobs.comparison


def cli_numbers(a, b, ids) -> dict:
    """What `attnviz compare --json` reports for A and B on `ids` (commands/compare_cmd.compare_report)."""
    return C.compare(models_pair(a, b, ids, C.compare_trace), C.probe_pair(a, b))


def shown_matches(w, want) -> None:
    """The panel's summary and induction line read `want`'s numbers, as the command line's."""
    panel = w.compare_panel
    jsd = np.asarray(want["heads_jsd"])
    said = panel.summary.text()
    assert f"mean head JSD {plain_number(jsd.mean())} bits" in said, said
    assert f"KL(A\u2016B) mean {want['kld_stats']['mean']:.4g}" in said, said
    assert f"same top-1 {want['same_top1']:.1%}" in said, said
    ind = want["induction"]
    assert panel.induction.text().startswith(
        f"Induction heads on the probe (strength \u2265 {ind['threshold']:g} in A): survived {len(ind['survived'])}")
    assert f"lost {len(ind['lost'])}" in panel.induction.text()


def test_a_new_step_of_a_is_compared_again(window, qtbot):
    w, st = window, window.state
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    c32 = settled(qtbot, w, st.model)
    b = jobs.b
    shown_matches(w, cli_numbers(st.model, b, c32.result.input_ids))

    st.set_checkpoint(16)
    a16 = st.checkpoints.model(16)
    c16 = settled(qtbot, w, a16)
    assert jobs.b is b  # B unchanged
    want = cli_numbers(a16, b, c16.result.input_ids)
    np.testing.assert_allclose(c16.doc["heads_jsd"], want["heads_jsd"], atol=1e-6)
    np.testing.assert_allclose(c16.doc["kld"], want["kld"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(c16.a_attentions, models_pair(a16, b, c16.result.input_ids, C.compare_trace)
                               .a.attentions, atol=1e-6)
    assert jobs.induction["a"] == want["induction"]["a"]
    shown_matches(w, want)
    # the numbers are the new step's, not the last one's
    assert not np.allclose(c16.doc["heads_jsd"], c32.doc["heads_jsd"], atol=1e-3)
    assert f"A: attnviz-toy-stdlib{checkpoint_words(a16)}   B: attnviz-toy-stdlib{checkpoint_words(b)}" \
        == w.compare_panel.title.text()


def test_a_checkpoint_b_opens_with_a_at_an_earlier_step(window, qtbot, tmp_path):
    w, st = window, window.state
    jobs = w.worker.compare_jobs
    st.set_checkpoint(16)
    a16 = st.checkpoints.model(16)
    w.worker.wait_idle()
    open_compare(w, BSource("checkpoint", 0))
    c = settled(qtbot, w, a16)
    assert jobs.note == "" and jobs.identity["checkpoint"]["index"] == 0
    words16, words0 = checkpoint_words(a16), checkpoint_words(jobs.b)
    assert words16.startswith(" at checkpoint 16 of 0..32 (step ") and words0 == " at checkpoint 0 of 0..32 (step 0)"
    panel = w.compare_panel
    assert panel.title.text() == f"A: attnviz-toy-stdlib{words16}   B: attnviz-toy-stdlib{words0}"
    step16 = words16.removeprefix(" at checkpoint 16 of 0..32 ")
    hm = panel.head_map()
    assert hm.title == (f"Attention JSD, checkpoint 16 {step16} against checkpoint 0 (step 0), "
                        "attnviz-toy-stdlib's checkpoints 0..32")
    # the map's title as painted, at the dock's width and narrower, keeps what tells B from A
    qtbot.waitUntil(lambda: panel.map_layout is not None, timeout=WAIT)
    for lay in (panel.map_layout, headmap.layout_fit(hm, 300, 300)):
        painted = headmap.title_shown(hm, lay)
        assert f"checkpoint 16 {step16} against checkpoint 0 (step 0)" in painted, painted
    shown_matches(w, cli_numbers(a16, jobs.b, c.result.input_ids))

    # the export records A's step; File > Open view shows that step and compares it again
    path = tmp_path / "cmp.json"
    panel.export(path)
    view = json.loads(path.read_text())
    assert view["checkpoint"]["index"] == 16 and view["compare"]["a"]["checkpoint"]["index"] == 16
    assert view["compare"]["a"]["name"] == f"attnviz-toy-stdlib{words16}"
    st.set_checkpoint(32)
    settled(qtbot, w, st.checkpoints.model(32))
    w.apply_view(view, str(path))
    settled(qtbot, w, a16)
    assert st.checkpoint == 16 and jobs.identity["checkpoint"]["index"] == 0
    assert panel.title.text() == f"A: attnviz-toy-stdlib{words16}   B: attnviz-toy-stdlib{words0}"


def test_a_new_step_of_a_shows_no_b_or_a_minus_b_of_the_old_step(window, qtbot):
    """Until the new A's comparison is in, the grid shows no B or A − B picture of the old A: A's last
    run (the old step's until the new A's is in), the selector saying so without claiming the new
    step; then the new A − B."""
    w, st, g = window, window.state, window.grid
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w, st.model)
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is st.result, timeout=WAIT)
    assert g.titles()[0] == "A \u2212 B L0 H0" and not g.mode_selector.waiting.isVisible()
    old = st.result
    st.set_checkpoint(16)  # (A's comparison is let go as A changes: nothing of it is on screen now)
    assert g.shown_mode == "A" and g.titles()[0].startswith("L0 H0"), g.titles()  # (A's last run)
    assert g.drawn is old  # (the step A left: the new A's run is not in yet)
    assert g.mode_selector.waiting.isVisible()
    assert g.mode_selector.waiting.text() == "(comparing\u2026: A's last run shown meanwhile)"
    settled(qtbot, w, st.checkpoints.model(16))
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is st.result, timeout=WAIT)
    assert g.titles()[0] == "A \u2212 B L0 H0" and not g.mode_selector.waiting.isVisible()


def test_a_new_step_of_a_that_fails_to_compare_is_not_said_to_be_comparing(window, qtbot, monkeypatch):
    """A comparison of the new step that fails: the selector says there is none (the panel's note
    says why), not that it is still comparing; the next one that comes in clears it."""
    from attnviz.engine.analysing import pair

    w, st, g = window, window.state, window.grid
    open_compare(w, BSource("checkpoint", 0))
    settled(qtbot, w, st.model)
    follow = pair.Follower.follow

    def fails(*args, **kw):
        raise RuntimeError("no room")
    monkeypatch.setattr(pair.Follower, "follow", fails)
    st.set_checkpoint(16)
    qtbot.waitUntil(lambda: w.compare_panel.note.text().startswith("Could not compare. "), timeout=WAIT)
    assert g.shown_mode == "A" and g.mode_selector.waiting.isVisible()
    assert g.mode_selector.waiting.text() == "(could not compare: A's last run shown)"
    monkeypatch.setattr(pair.Follower, "follow", follow)
    st.set_checkpoint(8)
    assert g.mode_selector.waiting.text() == "(comparing\u2026: A's last run shown meanwhile)"
    settled(qtbot, w, st.checkpoints.model(8))
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is st.result, timeout=WAIT)
    assert not g.mode_selector.waiting.isVisible() and w.compare_panel.note.text() == ""
