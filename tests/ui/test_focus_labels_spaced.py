"""The focus view's token labels are spaced for the view box as it is laid out: the row labels'
axis widens once it has its labels, and the colour bar's axis with its ends' digits, which narrows
the view box after its labels were chosen; the labels are chosen again for its new size, so two
labels are never closer than a line of their text."""

import types

import numpy as np
from PySide6.QtGui import QFontMetricsF

from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.focus import FocusView
from windows import drain_events

T = 30


def _state() -> AppState:  # a head of T tokens whose first label is long, as <|endoftext|> is
    labels = ["<|endoftext|>" if i == 0 else f"tok{i}" for i in range(T)]
    attn = np.tril(np.random.default_rng(0).random((1, 1, T, T))).astype(np.float32)
    st = AppState()
    st.set_result(types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels, text="x",
                                        offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(1)))
    return st


def test_the_labels_are_a_line_apart_in_the_view_box_as_laid_out(qtbot):
    st = _state()
    fv = FocusView(st)
    qtbot.addWidget(fv)
    fv.resize(420, 520)
    fv.show()
    st.set_focus(0, 0)
    _assert_a_line_apart(fv)
    fv.resize(330, 400)  # (the dock made smaller)
    _assert_a_line_apart(fv)
    fv.resize(900, 900)
    _assert_a_line_apart(fv)
    assert fv.label_steps == (1, 1)  # (room for each again: every token labelled)


def _assert_a_line_apart(fv) -> None:
    for _ in range(5):
        drain_events()
    line = QFontMetricsF(fv.key_axis.style["tickFont"]).height()  # (the font the labels are painted in)
    rows, cols = fv.label_steps
    apart = (rows * fv.vb.height() / T, cols * fv.vb.width() / T)  # px between labelled rows, columns
    assert min(apart) >= line, f"labels {apart[0]:.1f} px (rows), {apart[1]:.1f} px (columns) apart for " \
        f"{line:.1f} px lines, every {fv.label_steps} labelled, the view box {fv.vb.width():.0f} x {fv.vb.height():.0f}"
