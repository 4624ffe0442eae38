"""The layer view's head titles read whole where a user looks for them: too wide for their tiles
(a narrow grid, the 1024-pixel window's "L18 H6  induction"), every title of the view drops the
layer that they all share ("H6  induction"), rather than end in "…" ("L18 H6  ind…"), its whole
text in its tooltip; where the titles fit (a wide grid) each reads whole, the layer with it."""

from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtWidgets import QGraphicsSimpleTextItem

from attnviz.ui.machinery.state import AppState
from attnviz.ui.views.grid import HeatmapGrid
from windows import tip_shown

N_HEAD, T = 6, 5


def painted_titles(g) -> list[tuple[str, str]]:
    """(text painted, tooltip) of each head title on screen, left to right, top down."""
    items = [t for t in g.gw.scene().items() if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()
             and t.text().startswith(("L7", "H"))]
    return [(t.text(), t.toolTip()) for t in sorted(items, key=lambda t: (round(t.scenePos().y()), t.scenePos().x()))]


def layer_grid(qtbot, n_head: int, width: int, height: int, ablation=None):
    """(state, grid) of a grid this size showing layer 7 of 8, n_head heads of uniform rows: a
    run changed by `ablation` where one is given (the grid marks what the run shown switched off)."""
    att = np.full((8, n_head, T, T), 1 / T, dtype=np.float32)
    labels = [f"t{i}" for i in range(T)]
    st = AppState()
    g = HeatmapGrid(st)
    qtbot.addWidget(g)
    g.resize(width, height)
    g.show()
    qtbot.waitExposed(g)
    st.set_layer(7)
    if ablation is not None:
        st.effects.set_ablation(ablation)
    with qtbot.waitSignal(st.sigResultChanged):
        st.set_result(SimpleNamespace(attentions=att, labels=labels, tokens=labels, text="x",
                                      offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(n_head),
                                      trace=SimpleNamespace(edits=ablation.heads if ablation else ())))
    return st, g


@pytest.mark.parametrize("width, height, short", [(330, 110, True), (1400, 420, False)])
def test_titles_too_wide_for_their_tiles_drop_the_layer_not_their_end(qtbot, width, height, short):
    st, g = layer_grid(qtbot, N_HEAD, width, height)
    full = [f"L7 H{h}" for h in range(N_HEAD)]
    qtbot.waitUntil(lambda: sorted(t for t, _ in painted_titles(g)) ==
                    sorted(f"H{h}" if short else f"L7 H{h}" for h in range(N_HEAD)), timeout=5000)
    shown = painted_titles(g)
    assert not any("\u2026" in text for text, _ in shown), shown
    assert sorted(tip for _, tip in shown) == (sorted(full) if short else [""] * N_HEAD)
    assert g.titles() == full  # (what the titles say, whatever their room)


def test_a_shortened_titles_whole_text_shows_where_it_is_hovered(qtbot):
    """A narrow grid (12 heads, four switched off: 'L7 H2  · off' reads 'H2  · off' or less): hovering
    a title shortened or cut shows its whole text as the tooltip the user sees, not the grid's
    "Hover a cell…" help; every title is painted inside the view (the right-most one cut with "…"
    at its edge, not clipped mid-letter)."""
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    from attnviz.engine.analysing.effects import Ablation

    st, g = layer_grid(qtbot, 12, 260, 400, Ablation(heads=tuple((7, h) for h in range(4))))
    qtbot.waitUntil(lambda: any(t.toolTip().endswith("off") for t in g.gw.scene().items()
                                if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()), timeout=5000)
    vp, view = g.gw.viewport(), g.gw.viewportTransform()
    titles = [t for t in g.gw.scene().items() if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()
              and t.text().startswith(("L7", "H"))]
    box = g.vb.deviceTransform(view).mapRect(g.vb.boundingRect())
    for t in titles:  # painted inside the view box, where it is not clipped
        r = t.deviceTransform(view).mapRect(t.boundingRect())
        assert r.right() <= box.right() + 0.5, (t.text(), r.right(), box.right())
    shortened = [t for t in titles if t.toolTip()]
    assert shortened
    for t in shortened:
        at = t.deviceTransform(view).mapRect(t.boundingRect()).center().toPoint()
        qtbot.mouseMove(vp, at)
        qtbot.wait(20)
        QApplication.sendEvent(vp, QHelpEvent(QEvent.Type.ToolTip, at, vp.mapToGlobal(at)))
        assert tip_shown(QToolTip.text()) == t.toolTip(), (t.text(), QToolTip.text())
    at = g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(*g.cell_center(7, 5, 2, 2))))
    qtbot.mouseMove(vp, at)  # a cell: its read-out, as before
    qtbot.wait(20)
    QApplication.sendEvent(vp, QHelpEvent(QEvent.Type.ToolTip, at, vp.mapToGlobal(at)))
    assert tip_shown(QToolTip.text()).startswith("L7 H5"), (QToolTip.text(), g.hover_text, g.gw.toolTip(), at)
