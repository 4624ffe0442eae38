"""The exported Circuits figure of a model without a copying map (an encoder; a decoder whose file
lacks its unembedding) paints the sentences that say why in place of the map: whole (not cut or
elided), wrapped inside the figure's width, in a box tall enough for every wrapped line, above
the lines that follow (the figure two lines taller than its last, as with a map), with every
wrapped line inked and none spilling below the box."""

import shutil

import numpy as np
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QFontMetricsF, QImage, QPainter
from safetensors.numpy import load_file, save_file

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C
from attnviz.figures import circuits as fig
from tiny import FIXTURES


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    folder = tmp_path_factory.mktemp("c") / "nohead"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    t = load_file(folder / "model.safetensors")
    del t["lm_head.weight"]
    save_file(t, str(folder / "model.safetensors"))
    out = {}
    for key, path in (("encoder", "all-MiniLM-L6-v2"), ("nohead", folder)):
        m = load_model(path)
        out[key] = fig.circuits_view(C.circuits(m), model=m.name, focus=(1, 0))
    return out


def _painted(view, lay, monkeypatch):
    """(rect, flags, text, the painter's font) of each drawText of the figure's paint."""
    said = []
    canvas = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(canvas)
    monkeypatch.setattr(p, "drawText", lambda rect, flags, text: said.append(
        (QRectF(rect), int(flags), text, p.font())), raising=False)
    fig.paint(p, view, lay)
    p.end()
    return said


def _ink_runs(png: bytes, top: int, bottom: int, left: int, right: int) -> list[tuple[int, int]]:
    """Runs of pixel rows in [top, bottom) that hold ink (a pixel darker than the white paper)
    between columns left and right: one run a line of text."""
    img = QImage.fromData(png).convertToFormat(QImage.Format.Format_Grayscale8)
    px = np.frombuffer(img.constBits(), np.uint8, count=img.sizeInBytes()).reshape(
        img.height(), img.bytesPerLine())[:, :img.width()]
    inked = (px[top:bottom, left:right] < 200).any(axis=1)
    runs, start = [], None
    for y, on in enumerate(inked):
        if on and start is None:
            start = y
        elif not on and start is not None:
            runs.append((top + start, top + y))
            start = None
    if start is not None:
        runs.append((top + start, bottom))
    return runs


@pytest.mark.parametrize("key", ["encoder", "nohead"])
@pytest.mark.parametrize("width", [520, 900])
def test_the_no_map_sentences_are_whole_and_inside_the_figure(qapp, views, monkeypatch, key, width):
    view = views[key]
    assert view.copying is None and view.no_map().endswith(".")
    png, lay = fig.png_bytes(view, width)
    said = _painted(view, lay, monkeypatch)
    (at,) = [i for i, (_r, _f, text, _font) in enumerate(said) if text.startswith("No copying map.")]
    rect, flags, text, font = said[at]
    assert text == view.no_map()  # whole: not elided, not cut to a line
    figure = QRectF(0, 0, lay.width, lay.height)
    assert figure.contains(rect), (rect, figure)
    fm = QFontMetricsF(font)
    need = fm.boundingRect(QRectF(rect.x(), rect.y(), rect.width(), 1e6), flags, text)
    assert need.width() <= rect.width() and need.height() <= rect.height() + 0.5, (need, rect)
    n_lines = round(need.height() / fm.lineSpacing())
    assert n_lines >= 2  # (the sentences are longer than a line at these widths: they wrap)
    after = said[at + 1:]
    assert after and all(r.top() >= rect.bottom() for r, *_ in after)  # the list lines below them
    assert all(figure.contains(r) for r, *_ in after)
    assert lay.height - after[-1][0].bottom() >= 2 * lay.line_h - 1  # the margin a figure with a map has
    runs = _ink_runs(png, int(rect.top()), int(after[0][0].top()), int(rect.left()), int(rect.right()))
    assert len(runs) == n_lines, runs  # every wrapped line inked, once
    assert runs[-1][1] <= rect.bottom() + 1  # nothing painted below the box
