"""The Generate panel's Top-p and Seed only change a draw: at temperature 0 (greedy) they are
greyed, and they come back as soon as the temperature is raised."""

from windows import IOI, TOY, open_window


def test_top_p_and_seed_are_greyed_while_greedy(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    panel = w.generate_panel
    assert panel.temp_spin.value() == 0.0
    assert not panel.top_p_spin.isEnabled() and not panel.seed_spin.isEnabled()
    panel.temp_spin.setValue(0.7)
    assert panel.top_p_spin.isEnabled() and panel.seed_spin.isEnabled()
    panel.temp_spin.setValue(0.0)
    assert not panel.top_p_spin.isEnabled() and not panel.seed_spin.isEnabled()
    w.worker.wait_idle()
