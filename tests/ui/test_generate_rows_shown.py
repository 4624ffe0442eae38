"""The Generate panel's rows (the row that chose a token, in every head of the layer) follow the
grid's Hide first token: the first key dropped and each row renormalised, the hover naming the key's
true position; a caption says what the strip shows, and that Value-weighted does not apply to it."""

import numpy as np
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from attnviz.engine.computing.patterns import drop_first_key
from windows import IOI, TOY, WAIT, open_window


def _hover(view, key_col: float, head: int):
    area = view.area()
    pos = QPointF(area.left() + (key_col + 0.5) / view.rows.shape[1] * area.width(),
                  area.top() + (head + 0.5) * view.ROW)
    QApplication.sendEvent(view, QMouseEvent(QEvent.Type.MouseMove, pos, view.mapToGlobal(pos),
                                             Qt.MouseButton.NoButton, Qt.MouseButton.NoButton,
                                             Qt.KeyboardModifier.NoModifier))
    return view.hover_text


def test_the_rows_follow_hide_first_token(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    st, gen, panel = w.state, w.state.generation, w.generate_panel
    w.generate_dock.show()
    w.generate_dock.raise_()
    panel.n_spin.setValue(2)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 2, timeout=WAIT)
    st.set_layer(1)
    panel.slider.setValue(1)
    step, view = gen.steps[1], panel.rows_view
    raw = step.rows[1]  # [n_head, T]
    labels = st.model.labels((gen.prompt_ids + [s.id for s in gen.steps])[:step.T])
    np.testing.assert_array_equal(view.rows, raw)
    assert _hover(view, 0, 1) == f"L1 H1 → {labels[0]} (key 0)  {float(raw[1, 0]):.4g}"

    st.set_hide_first(True)
    np.testing.assert_allclose(view.rows, drop_first_key(raw), rtol=1e-6)
    assert _hover(view, 0, 1) == f"L1 H1 → {labels[1]} (key 1)  {float(drop_first_key(raw)[1, 0]):.4g}"
    assert "the first token hidden, each row renormalised" in panel.rows_caption.text()
    st.set_hide_first(False)
    assert panel.rows_caption.text() == "The row that chose it, in every head of layer 1 (each head on its own colour scale):"

    st.set_value_weighted(True)
    assert "Value-weighted does not apply here" in panel.rows_caption.text()
    w.worker.wait_idle()
