"""The orange "Changed run" bar above the grid names the views that show the changed run, and
only those: Head roles while it labels the typed text (not a probe's runs without the edits), the
guide while the text is a sample."""

from attnviz.engine.analysing.effects import Ablation
from attnviz.engine.analysing.samples import SAMPLES
from windows import IOI, TOY, WAIT, open_window


def test_the_bar_names_head_roles_only_while_it_labels_the_typed_text(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    roles, bar, st = w.roles_panel, w.ablation_bar, w.state
    w.roles_dock.show()
    w.roles_dock.raise_()
    roles.source.setCurrentIndex(roles.source.findData("probe"))
    st.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(lambda: "Labels on the probe" in roles.summary.text() and bar.isVisible(),
                    timeout=WAIT)
    text = bar.label.text()
    assert "The grid, prediction, lens, DLA, Anatomy and Why here? show it." in text, text
    assert "head roles" not in text.lower() and "guide" not in text, text  # (IOI is no sample)
    roles.source.setCurrentIndex(roles.source.findData("text"))
    qtbot.waitUntil(lambda: "Labels on this text's changed run:" in roles.summary.text(), timeout=WAIT)
    assert "The grid, head roles, prediction, lens" in bar.label.text()
    w.worker.wait_idle()


def test_the_bar_names_the_guide_while_the_text_is_a_sample(qtbot, settings_path):
    s = next(x for x in SAMPLES if x.title == "Repeated random sequence")
    w = open_window(qtbot, settings_path, model=TOY, text=s.text)
    w.roles_panel.source.setCurrentIndex(w.roles_panel.source.findData("coreference"))
    w.state.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(w.ablation_bar.isVisible, timeout=WAIT)
    text = w.ablation_bar.label.text()
    assert "The grid, the guide, prediction, lens, DLA, Anatomy and Why here? show it." in text, text
    w.worker.wait_idle()


def test_on_an_encoder_the_bar_names_no_next_token_views(qtbot, settings_path):
    """MiniLM predicts no next token: prediction, lens and DLA show no changed run, and the bar does
    not name them."""
    w = open_window(qtbot, settings_path, text=IOI)  # (MiniLM, the window's default in tests)
    w.state.effects.set_ablation(Ablation(heads=((0, 0),)))
    qtbot.waitUntil(lambda: w.ablation_bar.isVisible() and w.state.effects.run is not None
                    and w.state.effects.run.changed is not None, timeout=WAIT)
    text = w.ablation_bar.label.text()
    assert "The grid, head roles, Anatomy and Why here? show it." in text, text
    assert "prediction" not in text and "DLA" not in text, text
    w.worker.wait_idle()


def test_an_ablation_that_does_not_apply_says_the_clean_run_is_shown(qtbot, settings_path):
    """A knockout past the text's end is not applied: the grid shows the clean run, and the bar says
    so instead of naming views that would show a changed run."""
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    w.state.effects.set_ablation(Ablation(knockouts=(((0, 0), 400, 3),)))
    qtbot.waitUntil(lambda: w.ablation_bar.isVisible() and w.state.effects.run is not None
                    and bool(w.state.effects.run.note), timeout=WAIT)
    text = w.ablation_bar.label.text()
    assert "not applied" in text and text.endswith("The clean run is shown."), text
    assert "show it" not in text, text
    w.worker.wait_idle()
