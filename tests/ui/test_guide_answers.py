"""What the guide bar answers when no head of the loaded model does what the sample looks for: it
says which bar the strongest head misses, with the numbers compared against that bar; where no
head is even a candidate, "Show me" is off and says why."""

from attnviz.engine.analysing import samples
from attnviz.engine.analysing.samples import SAMPLES, Sample
from attnviz.engine.reading import textbook
from attnviz.figures.style import GOOD, WARNING
from windows import WAIT, open_window


def sample(title):
    return next(x for x in SAMPLES if x.title == title)


def answered(qtbot, w, s) -> str:
    """The guide bar's answer to sample `s`, once found (plain text)."""
    bar = w.guide_bar
    w.set_text(s.text)
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == s.text
                    and "Finding" not in bar.answer.text() and bool(bar.answer.text()), timeout=WAIT)
    return bar.answer.text()


def test_minilms_repeated_names_answer_says_the_score_misses_chance_not_the_threshold(qtbot, settings_path):
    """MiniLM's strongest duplicate-token head on the repeated-names sample has strength 0.600, over
    the 0.5 threshold; its score misses chance + 0.1. The answer says so, in the warning colour."""
    w = open_window(qtbot, settings_path)
    text = answered(qtbot, w, sample("Repeated names"))
    assert "has strength 0.600, over the threshold 0.5, but score 0.100, under its chance score " \
           "0.009 + 0.1 = 0.109." in text, text
    assert f"color:{WARNING}" in text
    w.worker.wait_idle()


def test_a_sample_that_repeats_too_little_points_to_the_probe_as_the_window_names_it(
        qtbot, settings_path, monkeypatch):
    """A sample whose text repeats too few tokens for a duplicate-token strength: the answer points
    to the probe by the Head roles panel's own words for it, never by a command-line flag."""
    few = Sample("few", "The cat and the dog saw the bird.", "look", roles=("duplicate",))
    monkeypatch.setattr(samples, "SAMPLES", (*SAMPLES, few))
    w = open_window(qtbot, settings_path)
    text = answered(qtbot, w, few)
    source = w.roles_panel.source
    item = source.itemText(source.findData("probe"))
    assert "only 2 query rows have a cell of its detection pattern" in text, text
    assert f"Head roles \u2192 Score on \u2192 {item}) repeats every token" in text, text
    assert w.roles_dock.windowTitle() == "Head roles" and "--" not in text
    w.worker.wait_idle()


def test_with_no_candidate_show_me_is_off_says_why_and_focuses_nothing(qtbot, settings_path):
    """The textbook model knows too few of the repeated-names sample's words to give any head a
    duplicate-token strength: the answer names no head, and Show me is off (its tooltip says
    why), so a click focuses nothing (it focused L0 H0)."""
    from PySide6.QtCore import Qt

    w = open_window(qtbot, settings_path, model=textbook.TEXTBOOK_NAME)
    bar = w.guide_bar
    text = answered(qtbot, w, sample("Repeated names"))
    assert "unknown to the vocabulary" in text and "L0 H0" not in text, text
    qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
    assert not bar.show_button.isEnabled()
    assert bar.show_button.toolTip().startswith("No head to show: no head of this model has any "
                                                "strength for what this sample looks for")
    before = w.state.focus
    qtbot.mouseClick(bar.show_button, Qt.MouseButton.LeftButton)
    bar.show_head()  # (what the button runs)
    assert w.state.focus == before and before is None
    w.worker.wait_idle()


def test_minilms_induction_sample_says_its_head_is_no_induction_head(qtbot, settings_path):
    """MiniLM answers the made-up-names (induction) sample with its duplicate-token head: the answer
    says there is no induction head and names that head as the closest, in the warning colour, not
    in the colour of a finding."""
    w = open_window(qtbot, settings_path)
    text = answered(qtbot, w, sample("Made-up names, repeated (induction)"))
    assert "No induction head on this sample; the closest: L2 H9, a duplicate-token head (strength " \
           "0.67, score 0.29, chance 0.01)." in text, text
    assert f"color:{WARNING}" in text and GOOD not in text
    assert "closest candidate" in w.guide_bar.show_button.toolTip()
    w.worker.wait_idle()


def test_after_the_guides_head_is_switched_off_the_answer_says_so_and_names_one_still_on(
        qtbot, settings_path):
    """Switching off the head the guide names: the changed run's answer names the strongest head
    still on, says the one before is switched off in this run, and Show me focuses the head named
    (it named the head switched off again, its pattern being drawn as before)."""
    from PySide6.QtCore import Qt

    from attnviz.engine.analysing.effects import Ablation
    from attnviz.engine.reading.registry import TOY_MODEL

    s = sample("Repeated random sequence")
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=s.text)
    bar, st = w.guide_bar, w.state
    qtbot.waitUntil(lambda: bar.current is not None and bar.current.claimed, timeout=WAIT)
    l, h = bar.current.layer, bar.current.head
    st.effects.set_ablation(Ablation(heads=((l, h),)))
    qtbot.waitUntil(lambda: "<b>Changed run:</b>" in bar.answer.text() and bar.current is not None,
                    timeout=WAIT)
    text = bar.answer.text()
    assert f"Switched off in this run: L{l} H{h}, which clears the induction bar." in text, text
    assert not text.startswith(f"<span style='color:{GOOD}'><b>Changed run:</b> L{l} H{h}:"), text
    new = (bar.current.layer, bar.current.head)
    assert new != (l, h) and f"<b>Changed run:</b> L{new[0]} H{new[1]}: induction strength" in text
    qtbot.mouseClick(bar.show_button, Qt.MouseButton.LeftButton)
    assert st.focus == new
    w.worker.wait_idle()


def test_the_textbooks_agreement_answer_names_no_head_and_show_me_is_off(qtbot, settings_path):
    """The textbook decoder's best head for 'are' -> 'keys' gives it 1.5e-6 over the other queries,
    far under the Find bar: the answer names no head, even as the closest (it named L0 H1 and
    'Show me' focused it), says no head comes close, and Show me is off, saying why."""
    w = open_window(qtbot, settings_path, model=textbook.TEXTBOOK_NAME)
    bar = w.guide_bar
    text = answered(qtbot, w, sample("Agreement"))
    assert "nor comes close (by 0.05): the most any head gives" in text and "Closest" not in text, text
    assert "L0 H" not in text and "L1 H" not in text and f"color:{WARNING}" in text, text
    qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
    assert not bar.show_button.isEnabled()
    assert bar.show_button.toolTip() == ("No head to show: no head of this model comes close to what this "
                                         "sample looks for (the answer says why)")
    w.worker.wait_idle()
