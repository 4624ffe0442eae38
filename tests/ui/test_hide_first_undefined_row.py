"""With Hide first token on, a decoder's first query has no key left (its only key is hidden): its
renormalised row is 0/0, undefined. The heads grid and the focus view paint that row in the colour
of the hidden key's column (the no-value colour), as the exported figure does, and the hover says it is
undefined rather than reading 0.00; an encoder's first row keeps its other keys and is coloured.
(They painted it in the colour of 0.)"""


from windows import TOY, WAIT, drain_events, focus_pixel, grid_pixel, hover_grid, hover_plot, open_window

TEXT = "abcabcab"


def test_a_decoders_first_row_is_blank_and_undefined(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=TEXT)
    st, g, f = w.state, w.grid, w.focus_view
    w.focus_dock.show()
    w.focus_dock.raise_()
    st.set_focus(0, 1)
    st.set_hide_first(True)
    T = len(st.result.tokens)
    qtbot.waitUntil(lambda: g.drawn is st.result and st.shown().hide_first, timeout=WAIT)
    drain_events()
    lo = g.layout_
    assert lo.pool == 1 and lo.T == T
    x0, y0 = int(lo.x0[1]), int(lo.y0[1])  # L0 H1's tile
    gap = grid_pixel(g, x0 + 0.5, y0 + 1.5)  # the hidden key's column: the background
    assert all(grid_pixel(g, x0 + k + 0.5, y0 + 0.5) == gap for k in range(1, T))
    assert grid_pixel(g, x0 + 1.5, y0 + 1.5) != gap  # the second row's first shown key: coloured
    tip = hover_grid(qtbot, g, x0 + 2.5, y0 + 0.5)
    assert "undefined: no weight left once the first key is hidden" in tip and "0.00" not in tip, tip
    tip = hover_grid(qtbot, g, x0 + 1.5, y0 + 1.5)
    assert f"  {float(st.shown().weight(0, 1, 1, 1)):.2f}" in tip and "undefined" not in tip, tip

    def focus_painted() -> bool:
        drain_events()
        gap = focus_pixel(f, 0.5, 1.5)
        return (all(focus_pixel(f, k + 0.5, 0.5) == gap for k in range(1, T))
                and focus_pixel(f, 1.5, 1.5) != gap)

    qtbot.waitUntil(lambda: "L0 H1" in f.title.text(), timeout=WAIT)
    qtbot.waitUntil(focus_painted, timeout=WAIT)
    hover_plot(qtbot, f.vb, f.gw, 3.5, 0.5)
    assert "undefined: no weight left once the first key is hidden" in f.hover_text, f.hover_text
    w.worker.wait_idle()


def test_an_encoders_first_row_keeps_its_colours(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini", text="the cat sat")  # MiniLM: every key seen
    st, g = w.state, w.grid
    st.set_hide_first(True)
    qtbot.waitUntil(lambda: g.drawn is st.result and st.shown().hide_first, timeout=WAIT)
    drain_events()
    lo = g.layout_
    x0, y0 = int(lo.x0[0]), int(lo.y0[0])
    gap = grid_pixel(g, x0 + 0.5, y0 + 0.5)
    assert lo.pool == 1
    assert all(grid_pixel(g, x0 + k + 0.5, y0 + 0.5) != gap for k in range(1, lo.T))
    assert "undefined" not in hover_grid(qtbot, g, x0 + 1.5, y0 + 0.5)
    w.worker.wait_idle()
