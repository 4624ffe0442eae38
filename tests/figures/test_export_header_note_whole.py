"""An exported heatmap figure's header says all of its notes at any width a user exports: the note
on blank rows under Hide first token wraps onto a line of its own rather than being cut with "…"
(it lost "(in a panel drawn smaller than its cells, pooled with the rows beside it)" at 800, 1200
and 2400 pixels alike)."""

import pytest
from PySide6.QtGui import QFontMetricsF, QImage, QPainter

from attnviz.figures import heatmaps
from attnviz.engine.reading.token_text import quoted
from attnviz.figures.data import make_view

NOTE = ("first token {} hidden, rows renormalised; a row with no other key has no value, magenta (in "
        "a panel drawn smaller than its cells, pooled with the rows beside it)")


def painted_header(view, width: int, monkeypatch) -> list[tuple[str, float, float]]:
    """(text, its width in its font, the width of the box it is drawn in) of each header line painted."""
    _image, lay = heatmaps.render_image(view, width)
    said = []
    canvas = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(canvas)
    monkeypatch.setattr(p, "drawText", lambda rect, _flags, text: said.append(
        (text, QFontMetricsF(p.font()).horizontalAdvance(text), rect.width())), raising=False)
    heatmaps.paint(p, view, lay)
    p.end()
    return said[:len(lay.header_lines)]


@pytest.mark.parametrize("scope", ["head", "all"])
@pytest.mark.parametrize("width", [800, 1200, 2400])
def test_the_blank_rows_note_shows_whole(qapp, toy, monkeypatch, scope, width):
    run = toy.run("abcabcab")
    view = make_view(run, model="toy", scope=scope, layer=0, head=0, hide_first=True)
    assert view.blank().any()
    lines = painted_header(view, width, monkeypatch)
    notes = [text for text, _w, _room in lines[2:]]  # (after the title and the quoted text)
    assert NOTE.format(quoted(view.labels[0])) in " ".join(notes), notes
    assert not any("\u2026" in text for text in notes), notes
    assert all(w <= room for _text, w, room in lines[2:]), lines
