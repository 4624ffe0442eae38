"""A head is typed as the window names it: the Ablation tab takes "L1 H2" and "L1H2" as well as
"1.2", and a head it cannot read is refused with both forms named."""

from PySide6.QtCore import Qt

from windows import IOI, TOY, open_window


def test_the_ablation_tab_takes_the_window_s_head_names(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=IOI, panels=("predict",))
    w.predict_dock.show()
    ab, eff = w.predict_panel.ablation_panel, w.state.effects
    for typed, head in (("L1 H2", (1, 2)), ("l0h3", (0, 3)), ("1.0, L0 H1", (1, 0))):
        ab.head_edit.setText(typed)
        qtbot.keyClick(ab.head_edit, Qt.Key.Key_Return)
        assert ab.message.text() == "" and head in eff.ablation.heads, (typed, ab.message.text())
    assert (0, 1) in eff.ablation.heads
    ab.head_edit.setText("head one")
    qtbot.keyClick(ab.head_edit, Qt.Key.Key_Return)
    assert ab.message.text() == ("head 'head one' is not LAYER.HEAD or L<layer> H<head>, e.g. 18.6 "
                                 "or L18 H6")
    w.worker.wait_idle()
