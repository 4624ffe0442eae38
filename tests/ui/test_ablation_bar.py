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
