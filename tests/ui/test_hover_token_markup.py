"""The heads grid's and the focus view's hovers show a key such as Llama's '<s>' as it is: read as
rich text, 'L0 H3  are → <s>' lost the token and struck out the rest of the line. Each view is
hovered over a cell without the token, then over one with it, by moves sent to the view itself
(hover_plot): a second qtbot.mouseMove to the point the pointer is already at delivers no move, so
the read-out would stay the one before."""

from windows import hover_plot, tip_shown


def test_the_grid_and_focus_views_hover_shows_a_markup_like_key(window, qtbot):
    st, g, fv = window.state, window.grid, window.focus_view
    st.result.labels[0] = "<s>"  # MiniLM's first token, [CLS], read as Llama's
    st.set_focus(0, 3)
    for view_box, view, at, cell in ((g.vb, g.gw, g.cell_center, (0, 3)), (fv.vb, fv.gw, None, ())):
        for k in (1, 0):  # key 1, then key 0 ('<s>') of query 2
            x, y = at(*cell, 2, k) if at else (k + 0.5, 2.5)
            hover_plot(qtbot, view_box, view, x, y)
        shown = tip_shown(view.toolTip())
        assert shown.startswith(f"L0 H3  {st.result.labels[2]} → <s>  "), (view.toolTip(), shown)
