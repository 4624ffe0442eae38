"""A read-out naming right-to-left tokens keeps its order: 'L0 H0  ש → ##ל  0.09', the weight last
and the arrow from query to key, in the status bar as drawn (a Hebrew label is set apart from the
line, U+2068 ... U+2069); a label never carries a raw bidi control."""

import os
import unicodedata

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF, Qt  # noqa: E402
from PySide6.QtGui import QTextLayout, QTextOption  # noqa: E402

from windows import WAIT, open_window  # noqa: E402


def drawn_x(bar, text: str, part: str) -> float:
    """Where the first character of `part` of `text` is drawn, as the status bar lays it out."""
    layout = QTextLayout(text, bar.font())
    option = QTextOption()
    option.setTextDirection(bar.layoutDirection())
    layout.setTextOption(option)
    layout.beginLayout()
    line = layout.createLine()
    line.setLineWidth(10000)
    layout.endLayout()
    i = text.index(part)
    return min(line.cursorToX(i)[0], line.cursorToX(i + 1)[0])


def test_a_hebrew_readout_keeps_its_weight_last(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini", text="שלום עולם")  # MiniLM
    r, g = w.state.result, w.grid
    w.state.set_layer(0)
    q, k = 1, 2
    qtbot.waitUntil(lambda: g.layout_ is not None, timeout=WAIT)
    lo = g.layout_
    p = g.img.mapToScene(QPointF(float(lo.x0[0]) + k + 0.5, float(lo.y0[0]) + q + 0.5))
    g.plot.scene().sigMouseMoved.emit(p)
    bar = w.statusBar()
    qtbot.waitUntil(lambda: bar.currentMessage().startswith("L0 H0"), timeout=WAIT)
    text = bar.currentMessage()
    weight = f"{float(r.attentions[0, 0, q, k]):.2f}"
    assert text.startswith(f"L0 H0  \u2068{r.labels[q]}\u2069 → \u2068{r.labels[k]}\u2069  {weight}"), text
    # as drawn: the head, then the query, the arrow, the key, then the weight
    xs = [drawn_x(bar, text, part) for part in ("L0", r.labels[q], "→", r.labels[k], weight)]
    assert xs == sorted(xs), (text, xs)
    assert Qt.LayoutDirection.LeftToRight == bar.layoutDirection()


def test_a_bidi_override_in_the_text_never_reaches_a_label(qtbot, tmp_path, smollm2):
    from attnviz.ui.views.mosaic import cell_readout

    w = open_window(qtbot, tmp_path / "s.ini", model="SmolLM2-135M-Instruct", text="Send to \u202eabc def ghi. ok")
    r = w.state.result
    assert not any(unicodedata.category(c) == "Cf" for lab in r.labels for c in lab), r.labels
    T = len(r.labels)
    text = cell_readout(w.state, 0, 0, T - 1, 3)
    weight = f"{float(r.attentions[0, 0, T - 1, 3]):.2f}"
    bar = w.statusBar()
    assert drawn_x(bar, text, weight) > drawn_x(bar, text, "→") > drawn_x(bar, text, "L0"), text


def test_finds_line_keeps_query_before_key_in_hebrew(qtbot, minilm):
    """'From 'ש'@1 (query) to '##ל'@2 (key)': each token set apart, so the line reads in order."""
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.panels.find_panel import FindPanel

    state = AppState()
    find = FindPanel(state, shown=lambda: True)
    qtbot.addWidget(find)
    state.set_model(minilm)
    state.set_result(minilm.run("שלום עולם"))
    r = state.result
    find.set_find(f"{r.labels[1]}@1", f"{r.labels[2]}@2")
    text = find.find_status.text()
    assert text.startswith(f"From '\u2068{r.labels[1]}\u2069'@1 (query) to '\u2068{r.labels[2]}\u2069'@2 (key)"), text
    xs = [drawn_x(find.find_status, text, part) for part in ("From", r.labels[1], "@1", "(query)", r.labels[2], "@2")]
    assert xs == sorted(xs), (text, xs)
