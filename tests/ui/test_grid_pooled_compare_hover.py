"""The grid in A − B or B with its tiles pooled (several tokens a pixel): the hover over a pixel
reads the cell whose value the pixel shows, the block's difference of largest size (A − B) or
B's largest weight (B), not A's largest weight in the block, which is another cell's."""

import numpy as np
import pytest

from attnviz.figures.numbers import signed
from attnviz.ui.views import grid_compare as GC
from windows import WAIT, drain_events, hover_grid, toy_compared_with_checkpoint

TEXT = "the cat sat on a mat. " * 12  # 122 tokens of the toy decoder


@pytest.fixture
def compared(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


@pytest.mark.parametrize("mode", ["A-B", "B"])
def test_a_pooled_pixels_hover_reads_the_value_it_shows(compared, qtbot, mode):
    w = compared
    w.resize(1200, 800)  # (tiles of 2 rows a pixel)
    st, g, jobs = w.state, w.grid, w.worker.compare_jobs
    st.set_view_mode("all")
    jobs.set_mode(mode)
    qtbot.waitUntil(lambda: g.drawn is st.result and g.shown_mode == mode and g.layout_.pool > 1,
                    timeout=WAIT)
    drain_events()
    lo, a, layer = g.layout_, st.shown(), 1
    drawn = GC.compare_values(jobs, st.result, a, [layer], lo.pool).values[0]  # [n_head, n, n] as drawn
    p = lo.pool
    # pixels where A's largest weight in the block is another cell than the one drawn
    spots = [(h, qi, kj) for h, qi, kj in zip(*np.nonzero(np.abs(drawn) > 0.01))
             if mode == "B" or abs(_a_minus_b(jobs, layer, h, *a.strongest_in_block(layer, h, qi * p, kj * p, p))
                                   - drawn[h, qi, kj]) > 1e-3][:12]
    assert len(spots) >= 4, spots
    for h, qi, kj in spots:
        i = lo.heads.index((layer, h))
        tip = hover_grid(qtbot, g, lo.x0[i] + kj + 0.5, lo.y0[i] + qi + 0.5)
        # (the value the pixel shows first, after the cell's tokens, then the other two)
        want = signed(drawn[h, qi, kj]) if mode == "A-B" else f"{drawn[h, qi, kj]:.4f}"
        assert f"  {want}  (A " in tip, (h, qi, kj, tip)


def _a_minus_b(jobs, layer, head, q, k) -> float:
    c = jobs.comparison
    return float(c.a_attentions[layer, head, q, k]) - float(c.b_attentions[layer, head, q, k])
