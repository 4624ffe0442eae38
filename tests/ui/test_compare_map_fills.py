"""The Compare panel's layers x heads JSD map uses the room it has: on SmolLM2 (30 layers x 9 heads)
in the window at its first-start size (1400 x 860) and at 1280 x 800 the map turns its layers
across the wide box, its cells are large enough to click and read, it fills most of the box's width
or height, each painted cell has its head's colour, and a click on a cell's centre focuses that
head (its hover says that head's numbers)."""

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from PySide6.QtTest import QTest

from attnviz.engine.computing.patterns import head_title
from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, drain_events, hover, open_window, tip_shown

SIZES = [(1400, 860), (1280, 800)]
TEXT = "The keys to the cabinet are on the table, and the keys to the cabinet are on the"
MIN_CELL = 10.0  # px: a cell one can aim at and whose layer label (font 0.8 cell) reads
FILL = 0.85  # the map's share of its box's width or height


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_jsd_map_fills_its_box_and_a_click_focuses_the_head(qtbot, tmp_path, smollm2, size):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    w.resize(*size)
    jobs = w.worker.compare_jobs
    try:
        open_compare(w, BSource("quantized", "Q8_0"))
        qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None,
                        timeout=WAIT * 4)
        panel = w.compare_panel
        w.compare_dock.raise_()
        w.worker.wait_idle()

        def settled():  # after every pending event (a scroll bar shown re-lays the panel out)
            drain_events()
            return (panel.map_layout is not None and panel.map_layout.width == panel.map.width()
                    and panel.map_layout.height == panel.map.height())
        qtbot.waitUntil(settled, timeout=WAIT)
        lay, box = panel.map_layout, panel.map
        hm = panel.head_map()
        n_layer, n_head = hm.values.shape
        assert (n_layer, n_head) == (30, 9)
        assert lay.across, f"30 layers x 9 heads in a {box.width()} x {box.height()} box lie across"
        assert lay.cell >= MIN_CELL, f"cells {lay.cell:.1f} px at {size}"
        # the map's extent: from the box's left edge to its last cell, and down to its last row
        x0, _ = lay.origin(0, 0)
        x1, _ = lay.origin(n_layer - 1, 0)
        _, y1 = lay.origin(0, n_head - 1)
        right, bottom = x1 + lay.cell, y1 + lay.cell
        assert right <= box.width() and bottom <= box.height()
        assert max(right / box.width(), bottom / box.height()) >= FILL, (
            f"map {right:.0f} x {bottom:.0f} in a {box.width()} x {box.height()} box at {size}")

        # every head's cell painted in its colour, at its centre (the focus outline is at edges)
        image = box.grab().toImage()
        dpr = image.devicePixelRatio()
        jsd = np.asarray(jobs.comparison.doc["heads_jsd"])
        for l in range(n_layer):
            for h in range(n_head):
                x, y = headmap.cell_center(hm, lay, l, h)
                got = image.pixelColor(int(x * dpr), int(y * dpr))
                want = headmap.colour(float(jsd[l, h]), hm.limit)
                assert got.name() == want.name(), (l, h, got.name(), want.name())

        # a click on a cell's centre focuses that head; the hover names it and its number
        for l, h in ((23, 7), (0, 0), (29, 8)):
            x, y = headmap.cell_center(hm, lay, l, h)
            hover(box, QPointF(x, y))
            text = tip_shown(box.toolTip())  # what the hover shows
            assert text.startswith(f"{head_title(l, h)}:") and f"JSD mean {plain_number(jsd[l, h])} bits" in text
            QTest.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPointF(x, y).toPoint())
            assert w.state.focus == (l, h)
        # between the cells and beside the map: no head
        assert headmap.hit(hm, lay, 2, 2) is None
        assert headmap.hit(hm, lay, right + 1, y1 + lay.cell / 2) is None
    finally:
        jobs.close()
        w.worker.wait_idle()
