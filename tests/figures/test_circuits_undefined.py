"""A head whose W_E W_V W_O W_U is exactly zero has no copying score (0 / 0): the Circuits view
says so for it in place of +0.000 and a rank, paints its cell the no-value colour the caption
names, its hover says why, and the numbers hold null (JSON) or nothing (CSV); a head that writes
nothing for a token lists no top tokens."""

import json

import numpy as np
from PySide6.QtGui import QColor, QImage, QPainter

from attnviz.engine.analysing import circuits as C
from attnviz.figures import circuits as fig, headmap

COPYING = np.array([[0.5, np.nan], [-0.25, 1.0]])
COMPOSITION = {m: np.zeros((2, 2, 2, 2)) for m in C.MODES}


def _view(focus, ov=None):
    return fig.CircuitsView("m", COPYING, "", COMPOSITION, None, focus, {}, ov, False)


def test_a_head_with_no_score_is_said_painted_and_written_as_none(qapp):
    lines = _view((0, 1)).lines()
    assert lines[0] == f"L0 H1: no OV copying score: {C.HEAD_ZERO_OV}."
    assert _view((0, 0)).lines()[0] == "L0 H0: OV copying +0.500, rank 2 of 3 heads with a score (1: the highest)."
    hm = fig.copying_map(_view((0, 0)))
    assert hm.scale_text().endswith(f"; {headmap.ABSENT[0]}: no value")
    assert headmap.readout(hm, ("head", 0, 1)) == f"L0 H1: no score: {C.HEAD_ZERO_OV}"
    lay = headmap.layout(hm, 400, 300)
    img = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(img)
    headmap.paint(p, hm, lay, background=QColor("white"))
    p.end()
    x, y = headmap.cell_center(hm, lay, 0, 1)
    c = img.pixelColor(int(x), int(y))
    assert (c.red(), c.green(), c.blue()) == headmap.ABSENT[1]
    x, y = headmap.cell_center(hm, lay, 1, 0)
    c = img.pixelColor(int(x), int(y))
    assert (c.red(), c.green(), c.blue()) != headmap.ABSENT[1]
    doc = json.loads(fig.number_bytes(_view(None), "json"))
    assert doc["copying"] == [[0.5, None], [-0.25, 1.0]] and doc["no_copying"] == f"null: {C.HEAD_ZERO_OV}"
    assert fig.number_bytes(_view(None), "csv").decode().splitlines()[1] == "L0,0.5,"


def test_a_head_that_writes_nothing_lists_no_top_tokens():
    view = _view((1, 0), ov=(1, 0, 11, "cat", [], None))
    assert view.lines()[-1] == f"L1 H0 attending to 'cat' writes no top tokens: {C.WRITES_NOTHING}."
    assert fig.numbers(view)["ov_top"] == [] and fig.numbers(view)["no_ov_top"] == C.WRITES_NOTHING


def test_a_composition_of_0_over_0_is_no_partner_and_is_said(qapp):
    """A pair whose earlier W_V W_O or later W_Q W_Kᵀ / W_K W_Qᵀ / W_V W_O is zero has no score:
    the focused head's partners leave it out (not a 0.000 ranked with the rest), count it n/a and
    say why, painted whole in the figure; JSON holds null."""
    import xml.etree.ElementTree as ET

    comp = {m: np.zeros((2, 2, 2, 2)) for m in C.MODES}
    comp["q"][0, :, 1, 0] = [np.nan, 0.25]
    comp["v"][0, :, 1, 0] = np.nan
    view = fig.CircuitsView("m", COPYING, "", comp, None, (1, 0), {}, None, False)
    lines = view.lines()
    assert lines[2:] == [
        "  Q-composition (reads them in its queries): L0 H1 0.250 (1 of 2 earlier heads n/a)",
        "  K-composition (reads them in its keys): L0 H0 <0.001, L0 H1 <0.001",
        "  V-composition (reads them in its values): none (2 of 2 earlier heads n/a)",
        f"  n/a: {C.ZERO_COMPOSITION}."]
    svg = fig.svg_bytes(view, 800)[0]
    painted = " ".join(e.text.strip() for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text)
    assert f"n/a: {C.ZERO_COMPOSITION}." in " ".join(painted.split())  # (wrapped, not cut short)
    assert "L0 H0 <0.001, L0 H1 <0.001" in painted
    doc = json.loads(fig.number_bytes(view, "json"))
    assert doc["composition"]["q"][0][0][1] == [None, 0.0] and doc["partners"]["v"] == []
    assert doc["no_composition"] == f"null: {C.ZERO_COMPOSITION}"
    assert "no_composition" not in json.loads(fig.number_bytes(_view(None), "json"))


def test_a_small_composition_score_never_reads_as_exactly_0(qapp):
    """A partner's score is written to 3 decimals, and one that rounds to 0 there as <0.001 (float32
    makes an exact 0 a little more: the textbook's 1.1e-6): never 0.000, in the tab's lines and the
    painted figure alike."""
    import xml.etree.ElementTree as ET

    comp = {m: np.zeros((2, 2, 2, 2)) for m in C.MODES}
    comp["q"][0, :, 1, 0] = [0.0123, 1.13e-6]
    comp["k"][0, :, 1, 0] = [0.0004, 0.0006]
    view = fig.CircuitsView("m", COPYING, "", comp, None, (1, 0), {}, None, False)
    assert view.lines()[2:4] == ["  Q-composition (reads them in its queries): L0 H0 0.012, L0 H1 <0.001",
                                 "  K-composition (reads them in its keys): L0 H1 0.001, L0 H0 <0.001"]
    svg = fig.svg_bytes(view, 800)[0]
    painted = " ".join(e.text.strip() for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text)
    assert "L0 H0 0.012, L0 H1 <0.001" in painted and "0.000" not in painted
