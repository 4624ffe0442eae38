"""The layer view's head titles lie inside the grid at every row, the top row too, where a short
text gives each token many screen pixels (MiniLM on the agreement sentence: 12 tokens a side): the
room above a tile row is as tall as a title on screen and the focus frame's margin under it."""

import pytest
from PySide6.QtWidgets import QGraphicsSimpleTextItem

from windows import drain_events, open_window

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
    view = w.grid.gw
    shown = w.grid.titles()
    titles = [t for t in view.scene().items()
              if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()
              and (t.text() in shown or t.toolTip() in shown)]
    assert len(titles) == len(shown) == w.state.model.config.n_head
    port = view.mapFromScene(w.grid.vb.sceneBoundingRect()).boundingRect()  # (the view box clips its items)
    for t in titles:  # (drawn unscaled in screen pixels: the item's device transform places it)
        r = t.deviceTransform(view.viewportTransform()).mapRect(t.boundingRect()).toAlignedRect()
        assert port.contains(r), f"{t.text()!r} at {r.getRect()} is cut by the grid's view box {port.getRect()}"
