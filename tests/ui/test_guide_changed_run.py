"""The guide bar labels its head by the run it was found on: a guide found on the clean text is
never called "Changed run:", and one found on the changed run always is, whichever run the grid
shows when it arrives (the guide's job can end after the next run is shown)."""

import threading

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.effects import Ablation
from attnviz.engine.analysing.samples import SAMPLES, guide
from attnviz.engine.reading.registry import TOY_MODEL
from windows import WAIT, open_window

SAMPLE = next(x for x in SAMPLES if x.title == "Repeated random sequence")


def changed_run(result) -> bool:  # heads switched off in it (a run kept no trace: none)
    return bool(getattr(result.trace, "edits", None))


def held_scores(monkeypatch, changed: bool = False):
    """heads.score_result whose first call on a clean run (a changed run: `changed`) waits for the
    returned Event `release`; `inside` is set as it waits; [(result, scores)] of its calls."""
    inside, release, scored, real = threading.Event(), threading.Event(), [], H.score_result

    def score_result(result, *a, **k):
        if changed_run(result) == changed and not inside.is_set():
            inside.set()
            if not release.wait(WAIT / 1000):
                raise TimeoutError("the held scores were never released")
        scores = real(result, *a, **k)
        scored.append((result, scores))
        return scores
    monkeypatch.setattr(H, "score_result", score_result)
    return inside, release, scored


def shown_guides(w) -> list[str]:
    """The guide bar's answer each time a guide arrives."""
    shown = []
    w.state.sigGuideChanged.connect(lambda *_: shown.append(w.guide_bar.answer.text()))
    return shown


def message_on(result, scored) -> str:
    return guide(SAMPLE, result, scores=next(s for r, s in scored if r is result)).message


def test_the_clean_texts_guide_is_never_called_the_changed_runs(qtbot, settings_path, monkeypatch):
    _inside, release, scored = held_scores(monkeypatch)
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=SAMPLE.text)
    shown = shown_guides(w)
    clean = w.state.result
    w.state.effects.set_ablation(Ablation(heads=((0, 0),)))  # while the clean text is scored
    release.set()
    st = w.state
    qtbot.waitUntil(lambda: changed_run(st.result) and st.scores_result is st.result, timeout=WAIT)
    changed = st.result
    on_clean, on_changed = message_on(clean, scored), message_on(changed, scored)
    assert on_clean != on_changed
    qtbot.waitUntil(lambda: on_changed in w.guide_bar.answer.text(), timeout=WAIT)
    assert any(on_clean in s for s in shown), shown  # (the race this test is about was run)
    assert all("Changed run" not in s for s in shown if on_clean in s), shown
    assert any("<b>Clean run:</b>" in s for s in shown if on_clean in s), shown  # beside the changed grid
    assert all("<b>Changed run:</b>" in s for s in shown if on_changed in s), shown
    w.worker.wait_idle()


def test_the_changed_runs_guide_is_called_so_after_the_clean_run_is_back(qtbot, settings_path,
                                                                         monkeypatch):
    inside, release, scored = held_scores(monkeypatch, changed=True)
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=SAMPLE.text)
    st, bar = w.state, w.guide_bar
    qtbot.waitUntil(lambda: bar.current is not None, timeout=WAIT)
    st.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(inside.is_set, timeout=WAIT)
    shown = shown_guides(w)
    changed = st.result
    st.effects.restore_clean()  # while the changed run is scored
    release.set()
    qtbot.waitUntil(lambda: not changed_run(st.result) and st.scores_result is st.result, timeout=WAIT)
    on_clean, on_changed = message_on(st.result, scored), message_on(changed, scored)
    assert on_clean != on_changed
    qtbot.waitUntil(lambda: on_clean in bar.answer.text(), timeout=WAIT)
    assert any(on_changed in s for s in shown), shown  # (the race this test is about was run)
    assert all("<b>Changed run:</b>" in s for s in shown if on_changed in s), shown
    assert "Changed run" not in bar.answer.text() and "Clean run" not in bar.answer.text()  # (the grid's)
    w.worker.wait_idle()
