"""The window's colour bar (grid_items.colour_bar: the grid's and the focus view's) and an exported
figure's colour bar write the same weights the same way: the same labels, 0 to the largest weight,
read off what each paints (the axis' laid-out labels; the SVG's text)."""

import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
import pytest

from attnviz.figures import heatmaps
from attnviz.figures.data import make_view
from attnviz.ui.views.grid_items import colour_bar, update_bar
from windows import axis_labels

NUMBER = re.compile(r"\d+(\.\d+)?")


def exported_labels(top: float) -> list[str]:
    """The numbers an exported layer figure (SVG) paints: its colour bar's labels, for weights whose
    largest is `top` (the token labels and titles hold letters)."""
    att = np.full((1, 2, 4, 4), top / 4, dtype=np.float32)
    att[0, 1, 3, 2] = top
    result = SimpleNamespace(text="fake text", tokens=["ta", "tb", "tc", "td"], labels=["ta", "tb", "tc", "td"],
                             input_ids=np.arange(4), attentions=att, kv_group=np.arange(2))
    svg = heatmaps.svg_bytes(make_view(result, model="m", scope="layer", layer=0), 900)[0]
    texts = [e.text.strip() for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text]
    return sorted((t for t in texts if NUMBER.fullmatch(t)), key=float)


@pytest.mark.parametrize("top", [0.9996, 0.87, 0.63, 0.37, 0.046, 1.37])
def test_the_window_and_the_export_write_a_bars_labels_alike(qtbot, top):
    widget = pg.GraphicsLayoutWidget()
    qtbot.addWidget(widget)
    widget.resize(200, 600)  # (tall: pyqtgraph leaves out no step)
    bar = colour_bar("viridis", widget.font())
    widget.addItem(bar)
    widget.show()
    update_bar(bar, None, (0.0, float(np.float32(top))), "attention weight")
    qtbot.wait(1)
    shown = sorted((text for text, _box in axis_labels(bar.getAxis("right"))), key=float)
    assert len(shown) >= 3 and shown == exported_labels(top)
