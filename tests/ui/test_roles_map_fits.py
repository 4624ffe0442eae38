"""Head roles' Overview map at the dock's default width (a first start's 440 px): every head's
column in sight, none cut by the map's edge, each label whole, and no sideways scroll bar."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from PySide6.QtGui import QFontMetrics  # noqa: E402

from attnviz.ui.panels.roles_views import column_texts  # noqa: E402
from windows import WAIT, open_window  # noqa: E402

TEXT = "Dr Zorblax met Mrs Okkadine. Later, Dr Zorblax thanked Mrs Okkadine."


@pytest.mark.parametrize("model, n_head", [("SmolLM2-135M-Instruct", 9), ("all-MiniLM-L6-v2", 12)])
def test_roles_map_fits_the_default_dock_width(qtbot, tmp_path, smollm2, model, n_head):
    w = open_window(qtbot, tmp_path / "s.ini", model=model, text=TEXT)
    w.roles_dock.show()
    w.roles_dock.raise_()
    panel = w.roles_panel
    panel.tabs.setCurrentWidget(panel.overview)
    ov = panel.overview.map
    qtbot.waitUntil(lambda: ov.columnCount() == n_head and ov.isVisible(), timeout=WAIT)
    assert w.roles_dock.width() <= 460  # (the default width: nothing saved in this test's settings)
    view, header = ov.viewport(), ov.horizontalHeader()
    qtbot.waitUntil(lambda: header.length() <= view.width() and not ov.horizontalScrollBar().isVisible(),
                    timeout=WAIT)
    for c in range(n_head):  # each column whole inside the viewport, its label and cells unclipped
        x = ov.columnViewportPosition(c)
        assert 0 <= x and x + ov.columnWidth(c) <= view.width(), (c, x, ov.columnWidth(c), view.width())
        # (each text in the font it is drawn in: the focused head's header label is bold)
        widths = [QFontMetrics(f).horizontalAdvance(t) for t, f in column_texts(ov, c)]
        assert ov.columnWidth(c) >= max(widths) + 2
