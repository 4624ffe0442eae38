"""Find's marks in the focus view where it pools rows and keys (a text longer than the view has
pixels): each mark lies on the pixel painted with the block that holds its matched cell, read as
the pointer reads it (painted.py), one mark a pixel; unpooled, a mark a cell at its middle."""

import numpy as np
from PySide6.QtCore import QPointF

from attnviz.ui.views.painted import painted_point
from windows import drain_events, open_window

TEXT = " ".join(["the cat sat on a mat and looked at the dog by the door"] * 35)


def _painted_blocks(f) -> list[tuple]:
    """The block, (key, row, width, height) in tokens, painted under each mark's middle."""
    pic, xs, ys = f.picture, *f.overlay.getData()
    out = []
    for x, y in zip(xs, ys):
        p = painted_point(f.gw, f.vb, f.img, f.vb.mapViewToScene(QPointF(x, y)))
        out.append(pic.block(int(p.y()), int(p.x())))
    return out


def test_find_marks_sit_on_the_pooled_pixels_that_hold_them(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "s.ini", text=TEXT)
    st, f = w.state, w.focus_view
    w.resize(1200, 700)
    w.focus_dock.raise_()
    st.set_focus(1, 2)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    T = st.result.n_tokens
    pic = f.picture
    assert pic.pool > 1 and pic.key_pool > 1, "the view pools rows and keys"
    mask = np.zeros((T, T), bool)
    mask[np.arange(T), np.arange(T)] = True  # the diagonal: every row of pixels
    mask[np.arange(1, T), 0] = True  # the first key column
    mask[T - 1, np.arange(T)] = True  # the last query row
    st.set_overlay(mask)
    drain_events()
    held = {pic.block(q, k) for q, k in zip(*np.nonzero(mask))}
    painted = _painted_blocks(f)
    assert set(painted) - held == set(), "marks on pixels that hold no match"
    assert set(painted) == held and len(painted) == len(held)  # every such pixel marked, once

    w.resize(1300, 760)  # another size: the marks follow the pixels
    drain_events()
    drain_events()
    pic = f.picture
    held = {pic.block(q, k) for q, k in zip(*np.nonzero(mask))}
    assert pic.pooled and sorted(_painted_blocks(f)) == sorted(held)
