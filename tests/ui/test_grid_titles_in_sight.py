"""The layer view's head titles lie inside the grid at every row, the top row too, where a short
text gives each token many screen pixels (MiniLM on the agreement sentence: 12 tokens a side): the
room above a tile row is as tall as a title on screen and the focus frame's margin under it."""

import pytest

from windows import drain_events, grid_titles_cut, open_window

AGREEMENT = "The keys to the cabinet are on the table."


@pytest.mark.parametrize("size", [(1500, 950), (1200, 800), (1900, 1100)])
def test_every_head_title_is_inside_the_grid(qtbot, tmp_path, size):
    w = open_window(qtbot, tmp_path / "a.ini", text=AGREEMENT)
    w.resize(*size)
    w.state.set_layer(3)
    w.state.set_query(w.state.result.labels.index("are"))
    w.state.set_focus(3, 1)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    assert grid_titles_cut(w) == []
