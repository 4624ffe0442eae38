"""The exported Circuits figure with no head focused says that none was, and nothing of clicks:
"Focus a head (click it in the grid) ..." is the tab's, where a click does that, never a picture's.
(The export printed it.)"""

import xml.etree.ElementTree as ET

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C
from attnviz.figures import circuits
from tiny import FIXTURES

NONE = "No head was focused, so no composition partners are listed."


def _svg_text(svg: bytes) -> str:
    return " ".join(e.text for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text)


def test_the_exported_circuits_without_a_focus_says_so_and_no_click(qapp, monkeypatch):
    model = load_model(FIXTURES / "llama_gqa")
    view = circuits.circuits_view(C.circuits(model), model=model.name, kv_group=model.kv_group)
    painted = _svg_text(circuits.svg_bytes(view, 900)[0])
    assert NONE in painted and "click" not in painted.lower(), painted
    lines = []  # the lines the PNG lays out and paints (each wrapped to the width)
    wrap = circuits.wrap

    def spy(text, *args, **kw):
        lines.append(text)
        return wrap(text, *args, **kw)
    monkeypatch.setattr(circuits, "wrap", spy)
    assert circuits.png_bytes(view, 900)[0].startswith(b"\x89PNG")
    assert lines == [NONE, NONE]  # (layout, then paint)
    assert view.lines(screen=True) == ["Focus a head (click it in the grid) for its composition partners."]
