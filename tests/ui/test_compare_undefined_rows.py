"""Compare's A − B in the grid under Hide first token: a row with no weight left once the first key
is hidden (a decoder's first query) has no difference. It is in the no-value colour the grid paints
an undefined row in, not the white of A = B, and its hover says it is undefined; the rows either side
has weight in read their difference (white would read as "A equals B")."""

import pytest

from attnviz.figures.numbers import signed
from attnviz.figures.style import no_value_colour
from windows import WAIT, drain_events, grid_pixel, hover_grid, tip_shown, toy_compared_with_itself

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def itself(qtbot, tmp_path):
    yield from toy_compared_with_itself(qtbot, tmp_path / "s.ini", TEXT)


def test_an_undefined_row_of_a_minus_b_is_blank_not_white(itself, qtbot):
    w = itself
    st, g, c = w.state, w.grid, w.worker.compare_jobs.comparison
    st.set_hide_first(True)
    g.mode_selector.buttons["A-B"].click()
    qtbot.waitUntil(lambda: g.shown_mode == "A-B" and g.drawn is c.result and st.shown().hide_first,
                    timeout=WAIT)
    drain_events()
    lo = g.layout_
    T = len(c.result.tokens)
    assert lo.pool == 1 and lo.T == T and st.shown().undefined(0, 1, 0)
    x0, y0 = int(lo.x0[1]), int(lo.y0[1])  # L0 H1's tile
    blank = no_value_colour(st.colormap)
    assert grid_pixel(g, x0 + 0.5, y0 + 1.5) == blank  # (the hidden key's column)
    assert [grid_pixel(g, x0 + k + 0.5, y0 + 0.5) for k in range(1, T)] == [blank] * (T - 1)
    zero = grid_pixel(g, x0 + 1.5, y0 + 1.5)  # A = B: the map's white
    assert min(zero) > 240 and [grid_pixel(g, x0 + k + 0.5, y0 + 1.5) for k in range(1, T)] == [zero] * (T - 1)
    tip = hover_grid(qtbot, g, x0 + 2.5, y0 + 0.5)
    tip = tip_shown(tip)  # (as shown: the hover leads with the side its pixel shows)
    assert tip.startswith("A \u2212 B L0 H1  ") and (
        "  A \u2212 B undefined: no weight left once the first key is hidden in A and B" in tip), tip
    tip = hover_grid(qtbot, g, x0 + 1.5, y0 + 1.5)
    a = float(st.shown().weight(0, 1, 1, 1))  # (the renormalised weight the tile shows)
    assert "undefined" not in tip and f"  {signed(0.0)}  (A {a:.4f}, B {a:.4f})" in tip, tip
