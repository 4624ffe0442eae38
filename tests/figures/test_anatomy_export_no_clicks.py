"""The exported anatomy figure says what its colours mean and nothing of clicks: "click a slice to
focus its head" is the panel's, where a click does that, never a picture's. (The export printed it.)"""

import xml.etree.ElementTree as ET

import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


@pytest.mark.parametrize("name, colours", [
    ("gpt2", "coloured by head"),
    ("llama_gqa", "coloured by KV group: query heads that share a KV head share its colour")])
def test_the_exported_anatomy_says_its_colours_and_no_click(qapp, name, colours):
    model = load_model(FIXTURES / name)
    view = anatomy.make_anatomy_view(model, model.run(ids=IDS, request=RunRequest(inputs=True)), 1, 0)
    svg = anatomy.svg_bytes(view, 1200)[0]
    painted = " ".join(e.text for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text)
    assert colours in painted and "click" not in painted.lower(), painted
    png = anatomy.layout(view, 1200)  # what png_bytes lays out
    assert [t.text for t in png.texts if "coloured by" in t.text] == [colours]
    panel = anatomy.layout(view, 1200, text_px=13)  # the panel's: its click focuses a head
    assert [t.text for t in panel.texts if "coloured by" in t.text] == [f"{colours}; click a slice to focus its head"]
