"""Value-weighted attention as the window shows it, checked against a direct computation
(a_qk * ||v_k W_O(h)||, rows renormalised) on a tiny GQA fixture and on MiniLM (what
`attnviz attention --value-weighted` writes: tests/cli/test_attention_value_weighted_cli.py)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from by_hand import direct
from tiny import FIXTURES
from windows import WAIT, open_window


@pytest.fixture
def tiny_window(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(FIXTURES / "llama_gqa"), text="3, 1, 4, 1, 5, 9, 2, 6")
    yield w
    w.worker.wait_idle()


def test_grid_and_focus_view_show_the_value_weighted_pattern(tiny_window, qtbot):
    w = tiny_window
    st = w.state
    plain = st.shown().region().values.copy()
    assert st.result.value_norms is None  # off: the runs compute no value norms
    st.set_value_weighted(True)
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    norms, vw = direct(load_model(FIXTURES / "llama_gqa"), st.result.input_ids)
    np.testing.assert_allclose(st.shown().region().values, vw, atol=1e-5)
    assert not np.allclose(plain, vw, atol=1e-3)
    st.set_focus(1, 5)
    qtbot.waitUntil(lambda: w.focus_view.img.image is not None and w.focus_view.img.image.shape == (8, 8),
                    timeout=WAIT)
    np.testing.assert_allclose(w.focus_view.img.image, vw[1, 5], atol=1e-5)
    assert "value-weighted" in w.focus_view.title.text()
    text = w.grid.readout_at(1, 5, 7, 2)
    assert f"{vw[1, 5, 7, 2]:.2f}" in text and "value-weighted" in text
    # typing keeps it: the next run computes the norms again
    w.set_text("3, 1, 4, 1, 5")
    qtbot.waitUntil(lambda: len(st.result.tokens) == 5 and st.result.value_norms is not None,
                    timeout=WAIT)
    st.set_value_weighted(False)
    np.testing.assert_allclose(st.shown().region().values, st.result.attentions, atol=0)


def test_the_export_dialog_writes_what_the_view_shows_and_open_view_brings_it_back(tiny_window, qtbot,
                                                                                 tmp_path):
    """Value-weighted on: the dialog's box is ticked and the .npy holds the grid's own numbers;
    off, the box still exports the weighted view (the dialog runs the model again for the norms);
    the image's sidecar turns the window's Value-weighted view on again when opened."""
    from attnviz.ui.export import ExportDialog

    w = tiny_window
    st = w.state
    st.set_value_weighted(True)
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    dlg = ExportDialog(st, w, w.settings)
    qtbot.addWidget(dlg)
    assert dlg.value_weighted.isChecked()
    dlg.scope.setCurrentIndex(dlg.scope.findData("all"))
    dlg.path_edit.setText(str(tmp_path / "shown.npy"))
    dlg.path_edit.textEdited.emit(dlg.path_edit.text())  # as typing it does
    assert dlg.do_export()
    np.testing.assert_allclose(np.load(tmp_path / "shown.npy"), st.shown().region().values, rtol=1e-6)
    assert w.settings.value("export/folder") == str(tmp_path.resolve())  # the window's settings

    st.set_value_weighted(False)
    w.set_text("3, 1, 4, 1")  # a run with the view off computes no norms
    qtbot.waitUntil(lambda: len(st.result.tokens) == 4, timeout=WAIT)
    assert st.result.value_norms is None
    dlg = ExportDialog(st, w, w.settings)
    qtbot.addWidget(dlg)
    assert not dlg.value_weighted.isChecked()
    dlg.value_weighted.setChecked(True)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    dlg.path_edit.setText(str(tmp_path / "layer.png"))
    assert dlg.do_export()
    _, vw = direct(load_model(FIXTURES / "llama_gqa"), st.result.input_ids)
    side = tmp_path / "layer.png.json"
    assert '"value_weighted": true' in side.read_text()
    w.open_view(str(side))
    assert st.value_weighted
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    np.testing.assert_allclose(st.shown().region().values, vw, atol=1e-5)
