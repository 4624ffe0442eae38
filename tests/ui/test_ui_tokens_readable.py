"""Tokens in the window read as text on a byte-level BPE decoder: the token strip, the focus view's
axes and the hover read-out show "·keys", never "Ġkeys" or "�"; the hover keeps the raw pieces."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF  # noqa: E402

from attnviz.engine.reading.registry import WINDOW_MODEL  # noqa: E402
from attnviz.ui.views.tokens import TokenStrip  # noqa: E402
from windows import WAIT, open_window  # noqa: E402

TEXT = "The keys to the cabinet are on the table. 杰 🙂"


def test_tokens_read_as_text_in_strip_axes_and_hover(qtbot, settings_path):
    w = open_window(qtbot, settings_path, model=WINDOW_MODEL, text=TEXT)
    r = w.state.result
    strip = w.findChild(TokenStrip)
    assert strip.labels[:3] == ["The", "·keys", "·to"]  # what the strip paints
    assert not any("Ġ" in lab or "\ufffd" in lab for lab in strip.labels)
    assert "<B0>杰" in strip.labels and "·🙂" in strip.labels
    # the focus view's axes
    w.state.set_focus(0, 0)
    fv = w.focus_view
    qtbot.waitUntil(lambda: len(fv.axis_labels()[0]) > 0, timeout=WAIT)
    left = fv.axis_labels()[0]
    assert "·keys" in left and not any("Ġ" in t for t in left)
    # hover over L0 H0, query "·keys" (1), key "The" (0): labels, then the raw pieces
    g = w.grid
    x, y = g.cell_center(0, 0, 1, 0)
    pos = g.gw.mapFromScene(g.vb.mapViewToScene(QPointF(x, y)))
    qtbot.mouseMove(g.gw.viewport(), pos)
    qtbot.waitUntil(lambda: g.hover_text != "", timeout=WAIT)
    assert g.hover_text.startswith("L0 H0  ·keys → The  ")
    assert g.hover_text.endswith("[Ġkeys → The]")
    assert r.tokens[1] == "Ġkeys"
    w.worker.wait_idle()
