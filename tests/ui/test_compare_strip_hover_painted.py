"""The Compare panel's token strip's hover names the token whose cell the pixel under the pointer
shows: with every position's top-1 flipped, each cell is painted with its frame, and every pixel
of the strip is hovered. Each frame's pixels name its token, and a token is named on no pixel
outside its frame (the paper between two cells names none). (The hover took a cell's unrounded
edges, its right and bottom edges in, while Qt paints the frame between its edges rounded to whole
pixels: a frame's first column named no token, the paper past its last one named it.)"""

import re

import pytest
from PySide6.QtCore import Qt

from attnviz.figures import compare as F
from windows import drain_events, toy_compared_with_checkpoint

TEXT = "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n"
FLIP = (F.FLIP.red(), F.FLIP.green(), F.FLIP.blue())
TOKEN = re.compile(r"token (\d+) ")


@pytest.fixture
def compared(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def _boxes(image, named, keep) -> dict[int, list[int]]:
    """{token: [left, top, right, bottom]} of the pixels of the strip image that `keep` keeps, by
    the token the hover names on each (None: none)."""
    boxes: dict = {}
    for y in range(image.height()):
        for x in range(image.width()):
            c = image.pixelColor(x, y)
            if keep((c.red(), c.green(), c.blue())):
                t = named[y][x]
                b = boxes.setdefault(t, [x, y, x, y])
                b[:] = [min(b[0], x), min(b[1], y), max(b[2], x), max(b[3], y)]
    return boxes


@pytest.mark.parametrize("dock_width", [400, 333])
def test_the_strip_hover_names_the_token_each_pixel_shows(compared, qtbot, dock_width):
    w = compared
    w.resize(1200, 800)
    w.resizeDocks([w.compare_dock], [dock_width], Qt.Orientation.Horizontal)
    panel, c = w.compare_panel, w.worker.compare_jobs.comparison
    # every position flipped: every cell painted with its frame, whose edges show the cell's
    c.doc["flips"] = [{"position": t, "a_token": "a", "b_token": "b"} for t in range(c.result.n_tokens)]
    panel.strip.update()
    drain_events()
    image = panel.strip.grab().toImage()
    assert image.devicePixelRatio() == 1
    cells = panel.strip_cells
    assert len(cells) == c.result.n_tokens and len({r.top() for r in cells}) > 1  # wrapped rows
    assert any(r.left() != int(r.left()) or r.right() != int(r.right()) for r in cells)  # fractional edges

    def token(x, y):
        m = TOKEN.match(panel.strip.hover(float(x), float(y)) or "")
        return None if m is None else int(m[1])
    named = [[token(x, y) for x in range(image.width())] for y in range(image.height())]
    framed = _boxes(image, named, lambda rgb: rgb == FLIP)
    assert None not in framed, framed[None]  # a frame's pixel named no token
    everywhere = _boxes(image, named, lambda rgb: True)
    everywhere.pop(None, None)
    assert sorted(framed) == list(range(len(cells)))
    wrong = {t: (everywhere[t], framed[t]) for t in framed if everywhere[t] != framed[t]}
    assert not wrong, wrong
