"""With Hide first token on, a grid tile drawn smaller than its rows pools them, several rows to a
pixel. A pooled pixel shows the defined rows of its block alone (an undefined row, 0/0, has no
number to pool) and is blank only where every row of it is undefined; its hover reads the weight
of a defined row of the block, as the colour does. (Over a block of zeros that held a decoder's
undefined first row, the hover said "undefined" while the pixel was coloured as 0.)"""

from PySide6.QtGui import QColor

from attnviz.figures.style import BACKGROUND
from windows import TOY, WAIT, drain_events, grid_pixel, hover_grid, open_window

TEXT = "the cat sat on a mat. " * 12  # 122 tokens of the toy decoder


def test_a_pooled_pixel_over_the_undefined_first_row_reads_its_defined_rows(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=TEXT)
    w.resize(1200, 800)  # (tiles of 2 rows a pixel, each pixel on the screen a square of them)
    st, g = w.state, w.grid
    st.set_hide_first(True)
    st.set_view_mode("all")
    qtbot.waitUntil(lambda: g.drawn is st.result and st.shown().hide_first, timeout=WAIT)
    drain_events()
    lo = g.layout_
    assert lo.pool > 1 and st.shown().undefined(0, 1, 0) and not st.shown().undefined(0, 1, 1)
    i = lo.heads.index((0, 1))
    x0, y0 = int(lo.x0[i]), int(lo.y0[i])
    background = QColor(BACKGROUND)
    blank = (background.red(), background.green(), background.blue())
    # the first pooled row: query rows 0 (undefined) .. pool - 1 (defined); its last pixel holds
    # keys after them all (causal: every weight 0), the colour of 0, not blank
    x, y = x0 + lo.T - 0.5, y0 + 0.5
    assert grid_pixel(g, x, y) != blank
    assert grid_pixel(g, x, y) == grid_pixel(g, x0 + lo.T - 0.5, y0 + 1.5)  # (0 there too)
    tip = hover_grid(qtbot, g, x, y)
    assert "undefined" not in tip and "  0.00" in tip, tip
    w.worker.wait_idle()
