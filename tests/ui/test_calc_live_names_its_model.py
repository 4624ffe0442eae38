"""The Calculator's live KV cache line is the loaded model's engine cache: while the figures above
it are another layout's (a preset picked, or Custom numbers), it names the loaded model."""

from PySide6.QtGui import QTextDocument

from attnviz.engine import load_model
from attnviz.ui.machinery.state import AppState
from attnviz.ui.panels.calc_panel import LOADED, CalcPanel
from tiny import tiny_llama


def plain(rich: str) -> str:
    doc = QTextDocument()
    doc.setHtml(rich)
    return doc.toPlainText()


def test_the_live_line_names_the_loaded_model_under_another_layout(qtbot, tmp_path):
    st = AppState()
    w = CalcPanel(st)
    qtbot.addWidget(w)
    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2))
    st.set_model(model)
    st.set_result(model.run(ids=[1, 2, 3, 4, 5]))
    lead = f"{model.name} (the loaded model, not the layout above): live KV cache (engine, float32)"
    assert plain(w.live_label.text()).startswith("live KV cache (engine, float32)")  # its own layout
    for preset in ("gemma-2-9b", "deepseek-v3"):
        w.preset_combo.setCurrentIndex(w.preset_combo.findData(preset))
        assert plain(w.live_label.text()).startswith(lead), preset
    w.preset_combo.setCurrentIndex(w.preset_combo.findData(LOADED))
    w.spins["n_layer"].setValue(7)  # Custom numbers on the loaded model: another layout too
    assert plain(w.live_label.text()).startswith(lead)
    w.preset_combo.setCurrentIndex(w.preset_combo.findData(LOADED))
    st.set_result(model.run(ids=[1, 2, 3, 4, 5, 6]))
    assert plain(w.live_label.text()).startswith("live KV cache (engine, float32), its tokens' K and V: 6 tokens")
