"""The guide bar in the real window on MiniLM: a sample says what to look for,
finds its head on the loaded model after computing, and "Show me" focuses that head."""

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.samples import SAMPLES, guide
from attnviz.ui.menus import about_html
from windows import WAIT, drain_events, open_window, wait_for_text


def test_samples_menu_tooltips_say_what_to_look_for(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    tips = [a.toolTip() for a in w.samples_menu.actions()]
    assert tips == [s.look_for for s in SAMPLES]
    w.worker.wait_idle()


def test_a_sample_finds_its_head_and_show_me_focuses_it(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    bar = w.guide_bar
    for s in (SAMPLES[0], next(x for x in SAMPLES if x.roles)):
        w.set_text(s.text)
        wait_for_text(qtbot, w, s.text)
        assert bar.isVisible() and s.look_for in bar.look.text()
        qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
        want = guide(s, w.state.result, H.unknown_token_ids(w.state.model))
        assert bar.current == want and want.message in bar.answer.text()
        bar.show_button.click()
        assert w.state.focus == (want.layer, want.head) and w.state.layer == want.layer
    # the user's own sentence: no guide, no stale answer
    w.set_text(s.text + " Then it rained.")
    assert not bar.isVisible() and bar.current is None and not bar.show_button.isEnabled()
    w.worker.wait_idle()


def test_a_guide_for_an_old_text_is_dropped(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    bar = w.guide_bar
    s = SAMPLES[1]
    w.set_text(s.text)
    w.set_text("my own words")  # before the sample's guide can arrive
    w.worker.wait_idle()
    drain_events()
    assert bar.current is None and not bar.isVisible()


def test_about_lists_the_textbook_vocabulary_and_its_licence(qtbot, settings_path):
    import html

    from attnviz.engine.reading import textbook

    w = open_window(qtbot, settings_path, model=textbook.TEXTBOOK_NAME)
    about = about_html(w.state.model)
    assert html.escape(textbook.vocabulary_line()) in about
    assert f"Licence: {textbook.TEXTBOOK_LICENSE}" in about and "not stated" not in about
    w.worker.wait_idle()


def test_a_guided_sample_is_scored_once_per_result(qtbot, settings_path, monkeypatch):
    """The guide reads the state's typed-text scores: a roles sample's result is scored once (by the
    runner, for the state), not again by the guide."""
    calls = []
    real = H.score_result
    monkeypatch.setattr(H, "score_result", lambda result, *a, **k: (calls.append(result), real(result, *a, **k))[1])
    w = open_window(qtbot, settings_path)
    bar = w.guide_bar
    s = next(x for x in SAMPLES if x.roles)
    w.set_text(s.text)
    wait_for_text(qtbot, w, s.text)
    qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
    w.worker.wait_idle()
    assert [r for r in calls if r is w.state.result] == [w.state.result]
    assert all(calls.count(r) == 1 for r in calls)  # every result scored once
    assert bar.current == guide(s, w.state.result, scores=w.state.text_scores)


def test_the_guide_bar_keeps_its_height_while_its_texts_change(qtbot, settings_path):
    """'Finding the head…', the answer, and the next sample's texts all show in one bar height, and
    every text fits in it (nothing cut)."""
    w = open_window(qtbot, settings_path)
    w.resize(1920, 1080)
    bar = w.guide_bar
    heights = []
    for s in SAMPLES[:4]:
        w.set_text(s.text)

        def fits():  # every text whole in the bar, as laid out
            assert bar.isVisible()
            for label in (bar.look, bar.answer):
                assert label.heightForWidth(label.width()) <= label.height(), label.text()

        qtbot.waitUntil(fits, timeout=WAIT)
        drain_events()
        heights.append(bar.height())
        qtbot.waitUntil(lambda: bar.current is not None or "Finding" not in bar.answer.text(), timeout=WAIT)
        qtbot.waitUntil(fits, timeout=WAIT)
        drain_events()
        heights.append(bar.height())
    assert len(set(heights)) == 1, heights
    w.worker.wait_idle()


def test_with_heads_switched_off_the_guide_and_head_roles_say_they_read_the_changed_run(qtbot, settings_path):
    """Heads switched off: the grid shows the changed run, and the guide's head and Head roles'
    labels are found on it too; both say so, and say it no more once the clean run is back."""
    from attnviz.engine.analysing.effects import Ablation
    from attnviz.engine.reading.registry import TOY_MODEL

    s = next(x for x in SAMPLES if x.title == "Repeated random sequence")
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=s.text)
    bar, roles, st = w.guide_bar, w.roles_panel, w.state
    w.roles_dock.show()
    w.roles_dock.raise_()
    qtbot.waitUntil(lambda: bar.current is not None and "Labels on this text:" in roles.summary.text(),
                    timeout=WAIT)
    assert "Changed run" not in bar.answer.text()
    st.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(lambda: "Labels on this text's changed run:" in roles.summary.text()
                    and "<b>Changed run:</b> L" in bar.answer.text(), timeout=WAIT)
    assert "head roles, the guide, prediction, lens, DLA, Anatomy and Why here?" in w.ablation_bar.label.text()
    st.effects.restore_clean()
    qtbot.waitUntil(lambda: "Labels on this text:" in roles.summary.text()
                    and "Changed run" not in bar.answer.text() and bar.current is not None, timeout=WAIT)
    w.worker.wait_idle()
