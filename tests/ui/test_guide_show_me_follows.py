"""The guide bar's "Show me" focuses only the head its answer names: once the answer is a failed
guide or a note about the scores instead, the button is off and a click focuses nothing (the guide
shown before it was found on another run)."""

from PySide6.QtCore import Qt

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing import samples
from attnviz.engine.analysing.effects import Ablation
from attnviz.engine.errors import InputError
from attnviz.engine.reading.registry import TOY_MODEL
from windows import WAIT, open_window

SAMPLE = next(x for x in samples.SAMPLES if x.title == "Repeated random sequence")  # a roles sample


def changed_run(result) -> bool:  # heads switched off in it
    return bool(getattr(getattr(result, "trace", None), "edits", None))


def fails_on_the_changed_run(monkeypatch, module, name: str, why: str) -> None:
    """module.name raises InputError(why) when called on a changed run."""
    real = getattr(module, name)

    def call(*a, **k):
        if any(changed_run(x) for x in a):
            raise InputError(why)
        return real(*a, **k)
    monkeypatch.setattr(module, name, call)


def guided_window(qtbot, settings_path):
    """The window on the toy decoder with SAMPLE's guide shown: -> (window, the guide's head)."""
    w = open_window(qtbot, settings_path, model=TOY_MODEL, text=SAMPLE.text)
    bar = w.guide_bar
    qtbot.waitUntil(lambda: bar.current is not None and bar.show_button.isEnabled(), timeout=WAIT)
    return w, (bar.current.layer, bar.current.head)


def assert_show_me_focuses_nothing(qtbot, w, head) -> None:
    st, bar = w.state, w.guide_bar
    assert st.focus != head
    before = st.focus
    assert not bar.show_button.isEnabled()
    qtbot.mouseClick(bar.show_button, Qt.MouseButton.LeftButton)
    bar.show_head()  # (what the button runs)
    assert st.focus == before


def switched_off_with(qtbot, settings_path, message):
    """The guided window, a head switched off, the bar showing `message` for the changed run, and
    Show me focusing nothing -> (window, the clean run's guide head)."""
    w, head = guided_window(qtbot, settings_path)
    w.state.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(lambda: message in w.guide_bar.answer.text(), timeout=WAIT)
    assert changed_run(w.state.result)
    assert_show_me_focuses_nothing(qtbot, w, head)
    return w, head


def test_a_guide_that_fails_leaves_show_me_off(qtbot, settings_path, monkeypatch):
    """The changed run's guide fails: the answer says why, and Show me no longer focuses the clean
    run's head."""
    fails_on_the_changed_run(monkeypatch, samples, "guide", "no guide on this run (test)")
    w, head = switched_off_with(qtbot, settings_path, "no guide on this run (test)")
    bar = w.guide_bar
    w.state.effects.restore_clean()  # the clean run's guide again: Show me focuses its head
    qtbot.waitUntil(bar.show_button.isEnabled, timeout=WAIT)
    qtbot.mouseClick(bar.show_button, Qt.MouseButton.LeftButton)
    assert w.state.focus == head
    w.worker.wait_idle()


def test_a_note_instead_of_a_guide_leaves_show_me_off(qtbot, settings_path, monkeypatch):
    """The changed run's scores fail: the bar shows their note instead of a guide, and Show me no
    longer focuses the clean run's head."""
    fails_on_the_changed_run(monkeypatch, H, "score_result", "No scores on this run (test)")
    w, _ = switched_off_with(qtbot, settings_path, "No scores on this run (test)")
    w.worker.wait_idle()
