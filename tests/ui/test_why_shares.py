"""Why here?'s shares as the panel shows them, on SmolLM2's made-up-names sample (the docs' example):
a score near 0 beside its parts (L25 H0, 45 -> 44: -0.0003) gets no share column and a line saying
why, and nothing is painted past the canvas' right edge; a score below 0 gets shares with a line
saying which sign a share takes; a large part is written with its thousands grouped, whole."""

import re
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPainter

from attnviz.engine.analysing.qk import QKAttribution
from attnviz.engine.analysing.samples import SAMPLES
from attnviz.figures import why
from attnviz.figures.render import figure_font
from windows import WAIT, open_window

TEXT = next(s.text for s in SAMPLES if s.title.startswith("Made-up"))


@pytest.fixture
def smol(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("why",))
    w.why_dock.show()
    yield w
    w.worker.wait_idle()


def _explain(qtbot, w, cell):
    j = w.why_jobs
    j.set_cell(*cell)
    qtbot.waitUntil(lambda: j.cell == cell and j.attribution is not None and not j.busy
                    and w.why_panel.canvas.lay is not None, timeout=WAIT)
    return j.attribution


def _figures_fit(canvas) -> list[str]:
    """Each row's value and share, as painted, end inside the canvas."""
    lay, s = canvas.lay, canvas.lay.scale
    fm = QFontMetricsF(figure_font(12 * s))
    x0 = lay.label_w + 8 * s
    bar_w = max(20 * s, lay.width - x0 - lay.figures_w - 14 * s)
    left = x0 + bar_w + 6 * s
    return [f"{box.figures!r} ends at {left + fm.horizontalAdvance(box.figures):.1f} of {canvas.width()}"
            for box in lay.rows if left + fm.horizontalAdvance(box.figures) > canvas.width()]


def _ink_at_right_edge(view, widths) -> dict:
    """{width: pixels not white in the last 3 columns} of the lists painted as the panel and the
    exports paint them (a text running past the edge is cut there, its glyphs in those columns)."""
    white, out = QColor("white").rgb(), {}
    for width in widths:
        lay = why.layout(view, width)
        image = QImage(width, lay.height, QImage.Format.Format_ARGB32)
        p = QPainter(image)
        why.paint(p, view, lay)
        p.end()
        out[width] = sum(image.pixel(x, y) != white for x in range(width - 3, width)
                         for y in range(lay.height))
    return out


def _value(text: str) -> float:
    return float(text.rstrip("%").replace("\u2212", "-").replace(",", ""))


def _up_to(text: str) -> float:
    return _value(re.search(r"up to \u00b1([0-9.,]+)", text).group(1))


def test_a_score_near_zero_shows_no_shares_and_says_why(smol, qtbot):
    w = smol
    a = _explain(qtbot, w, (25, 0, 45, 44))
    assert abs(a.total()) < 1e-3 and np.abs(a.key_side).max() > 100 * abs(a.total())  # the case
    lines = w.why_panel.canvas.lines()
    assert _ink_at_right_edge(w.why_panel.view(), (418,)) == {418: 0}  # (a cut share column)
    assert lines and not [t for t in lines if "%" in t], lines  # no share column
    note = w.why_panel.note.text()
    assert note.startswith("No shares: the score (\u22120.0003) is near 0 beside its parts"), note
    assert "its values add up to the score" in note
    assert "no shares" in w.why_panel.view().subtitle()  # (the exported picture says it too)
    bound = _up_to(note)  # the largest part the line names covers every row painted, rest rows too
    painted = [abs(_value(b.figures.split()[0])) for b in w.why_panel.canvas.lay.rows]
    assert max(painted) == pytest.approx(bound, rel=5e-3), (note, painted)
    assert _up_to(w.why_panel.view().subtitle()) == bound
    docs = (Path(__file__).parents[2] / "docs" / "why-here.md").read_text(encoding="utf-8")
    assert f"(score \u22120.0003, parts up to \u00b1{bound:.3g})" in " ".join(docs.split())
    assert _figures_fit(w.why_panel.canvas) == []
    widths = (w.why_panel.canvas.width(), 418, 700, 1000)
    assert _ink_at_right_edge(w.why_panel.view(), widths) == dict.fromkeys(widths, 0)


def test_a_score_below_zero_says_which_sign_a_share_takes(smol, qtbot):
    w = smol
    a = _explain(qtbot, w, (25, 0, 45, 40))
    assert a.total() < -0.1  # the case: clear of 0, below it
    note = w.why_panel.note.text()
    assert note.startswith("Shares are of the score, which is below 0: a part that lowers it (blue) "
                           "has a + share"), note
    boxes = w.why_panel.canvas.lay.rows
    assert boxes and all("%" in b.figures for b in boxes)
    for b in boxes:  # as the line says: a blue (negative) part's share is +
        value, share = (float(t.rstrip("%").replace("\u2212", "-").replace(",", ""))
                        for t in b.figures.split())
        assert (share > 0) == (value < 0) or value == 0, b.figures
    assert _figures_fit(w.why_panel.canvas) == []


def test_a_large_part_is_written_whole_with_its_thousands_grouped(qapp):
    table = np.array([[1234.5678, -300.0], [20.0, 45.4322]])  # score 1000: the shares stay in range
    a = QKAttribution(3, 1, 5, 2, 1000.0, ("L0H0", "bias"), table)

    class Result:
        text, labels, input_ids = "", [str(i) for i in range(6)], list(range(6))
    view = why.why_view(a, model="m", result=Result)
    lay = why.layout(view, 300)
    figures = [b.figures for b in lay.rows]
    assert "+1,234.568  +123.5%" in figures, figures
    fm = QFontMetricsF(figure_font(12 * lay.scale))
    assert max(fm.horizontalAdvance(f) for f in figures) <= lay.figures_w
    assert why.layout(view, 300).label_w + lay.figures_w < lay.width
