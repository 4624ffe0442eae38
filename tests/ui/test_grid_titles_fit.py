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

N_HEAD, T = 6, 5


def painted_titles(g) -> list[tuple[str, str]]:
    """(text painted, tooltip) of each head title on screen, left to right, top down."""
    items = [t for t in g.gw.scene().items() if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()
             and t.text().startswith(("L7", "H"))]
    return [(t.text(), t.toolTip()) for t in sorted(items, key=lambda t: (round(t.scenePos().y()), t.scenePos().x()))]


@pytest.mark.parametrize("width, height, short", [(330, 110, True), (1400, 420, False)])
def test_titles_too_wide_for_their_tiles_drop_the_layer_not_their_end(qtbot, width, height, short):
    att = np.full((8, N_HEAD, T, T), 1 / T, dtype=np.float32)
    labels = [f"t{i}" for i in range(T)]
    st = AppState()
    g = HeatmapGrid(st)
    qtbot.addWidget(g)
    g.resize(width, height)
    g.show()
    qtbot.waitExposed(g)
    st.set_layer(7)
    with qtbot.waitSignal(st.sigResultChanged):
        st.set_result(SimpleNamespace(attentions=att, labels=labels, tokens=labels, text="x",
                                      offsets=[(i, i + 1) for i in range(T)], kv_group=np.arange(N_HEAD)))
    full = [f"L7 H{h}" for h in range(N_HEAD)]
    qtbot.waitUntil(lambda: sorted(t for t, _ in painted_titles(g)) ==
                    sorted(f"H{h}" if short else f"L7 H{h}" for h in range(N_HEAD)), timeout=5000)
    shown = painted_titles(g)
    assert not any("\u2026" in text for text, _ in shown), shown
    assert sorted(tip for _, tip in shown) == (sorted(full) if short else [""] * N_HEAD)
    assert g.titles() == full  # (what the titles say, whatever their room)
