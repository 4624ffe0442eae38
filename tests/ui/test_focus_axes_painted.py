"""What the focus view paints on its axes: a label over every key column, a long first key
(<|endoftext|>) included, and a colour bar whose top end is labelled at the value it stands for."""

import types

import numpy as np
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor

from attnviz.figures.style import BACKGROUND
from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.focus import FocusView
from windows import axis_labels, drain_events


def _focus_view(qtbot, state, size):
    fv = FocusView(state)
    qtbot.addWidget(fv)
    fv.resize(*size)
    fv.show()
    return fv


def _ink_columns(fv) -> list[int]:
    """How many light (text) pixels the key axis paints in a band over each key column's centre."""
    drain_events()
    image = fv.gw.grab().toImage()
    dpr = image.devicePixelRatio()
    dark = QColor(BACKGROUND).lightness() + 60
    axis = fv.gw.mapFromScene(fv.key_axis.sceneBoundingRect()).boundingRect()
    top_of_plot = fv.gw.mapFromScene(fv.vb.sceneBoundingRect().topLeft()).y()
    counts = []
    for k in range(fv.state.result.attentions.shape[-1]):
        x = fv.gw.mapFromScene(fv.vb.mapViewToScene(QPointF(k + 0.5, 0))).x()
        counts.append(sum(image.pixelColor(int(px * dpr), int(y * dpr)).lightness() > dark
                          for px in np.arange(x - 2, x + 2.5, 0.5)
                          for y in range(max(0, axis.top()), int(top_of_plot))))
    return counts


def test_every_key_column_has_its_label_painted_the_first_endoftext_too(qtbot, toy):
    st = AppState()
    st.set_model(toy)
    st.set_result(toy.run("violet anchor nine tulip"))
    assert st.result.labels[0] == "<|endoftext|>"
    fv = _focus_view(qtbot, st, (420, 520))  # columns about a label line wide
    st.set_focus(1, 0)
    assert fv.label_steps == (1, 1), "room for a label per token: each key is labelled"
    assert fv.axis_labels()[1] == st.result.labels
    ink = _ink_columns(fv)
    assert all(n > 0 for n in ink), f"key columns with no painted label: {[i for i, n in enumerate(ink) if n == 0]}"


def _bar_texts(fv) -> list[tuple[float, str]]:
    """(y in the view's pixels, text) of each tick label the colour bar's axis paints."""
    drain_events()
    axis = fv.cbar.getAxis("right")
    return [(fv.gw.mapFromScene(axis.mapToScene(box.center())).y(), text) for text, box in axis_labels(axis)]


def test_the_colour_bars_top_end_reads_the_weight_it_stands_for(qtbot):
    T = 6
    attn = np.full((1, 1, T, T), 1.0 / T, np.float32)
    attn[0, 0, 2, :] = [0.99999, 0.00001, 0, 0, 0, 0]  # the largest weight, just under 1
    labels = [f"t{i}" for i in range(T)]
    st = AppState()
    st.set_result(types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                        offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(1)))
    fv = _focus_view(qtbot, st, (600, 500))
    st.set_focus(0, 0)
    lo, hi = fv.cbar.levels()
    assert hi == np.float32(0.99999)
    texts = _bar_texts(fv)
    bar = fv.gw.mapFromScene(fv.cbar.bar.sceneBoundingRect()).boundingRect()
    top = min(texts)  # the label painted highest
    assert top[1] == "1.00", texts  # (in the steps' format, as an exported figure writes it)
    assert abs(top[0] - bar.top()) <= 2, f"'1.00' painted at y {top[0]:.0f}, the bar's top at {bar.top()}"
    assert "0.00" in [t for _, t in texts] and "0.50" in [t for _, t in texts]  # round steps between
