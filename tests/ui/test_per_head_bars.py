"""Under Per-head scale each colour bar reads what docs/window.md says it does: the grid's 0 to 1
(weight ÷ head max), the focus view's 0 to the focused head's largest weight (attention weight),
and an exported figure of that head 0 to 1 (weight ÷ head max)."""

import re
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from attnviz.figures import heatmaps
from attnviz.figures.data import make_view
from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.focus import FocusView
from attnviz.ui.views.grid import HeatmapGrid
from windows import axis_labels, drain_events

DOC = Path(__file__).resolve().parents[2] / "docs" / "window.md"


def _result():
    T = 4
    att = np.full((1, 2, T, T), 0.1, np.float32)
    att[0, 1, 3, 2] = 0.87  # head 1's largest weight
    att[0, 0, 2, 1] = 0.46  # head 0's
    labels = [f"t{i}" for i in range(T)]
    return types.SimpleNamespace(attentions=att, labels=labels, tokens=labels, text="x", input_ids=np.arange(T),
                                 offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(2))


def _bar(cbar) -> tuple[str, str, str]:
    """(lowest label, highest label, title) the bar's axis paints."""
    drain_events()
    axis = cbar.getAxis("right")
    texts = sorted((t for t, _ in axis_labels(axis)), key=float)
    return texts[0], texts[-1], axis.labelText


def test_each_bar_reads_what_the_guide_says_under_per_head_scale(qtbot):
    doc = " ".join(DOC.read_text().split())
    assert ("the grid's bar (*weight ÷ head max*) reads 0 to 1" in doc
            and "the focus view's bar (*attention weight*) reads 0 to that head's largest weight" in doc
            and "the focused head's too, reads 0 to 1 (*weight ÷ head max*)" in doc)
    st = AppState()
    st.set_scale_mode("per-head")
    grid, focus = HeatmapGrid(st), FocusView(st)
    for w in (grid, focus):
        qtbot.addWidget(w)
        w.resize(700, 600)
        w.show()
    st.set_result(_result())
    st.set_focus(0, 1)
    assert _bar(grid.cbar) == ("0.00", "1.00", "weight \u00f7 head max")
    assert _bar(focus.cbar) == ("0.00", "0.87", "attention weight")
    view = make_view(st.result, model="m", scope="head", layer=0, head=1, scale_mode="per-head")
    svg = heatmaps.svg_bytes(view, 900)[0]
    texts = [e.text.strip() for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text]
    numbers = sorted((t for t in texts if re.fullmatch(r"\d+\.\d+", t)), key=float)
    assert (numbers[0], numbers[-1]) == ("0.00", "1.00") and "weight \u00f7 head max" in texts
