"""The Calculator at a 300-px dock: every table cell's text is painted whole, wrapped inside its
column (the Shapes table's formulas whole, never cut as "[n_kv_head·d_hea"), and the tables fit
the panel."""

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QFontMetrics

from attnviz.ui.panels.calc_panel import CalcPanel

PAD = 6  # a cell's text margins, both sides together (2 × (PM_FocusFrameHMargin + 1))


def cut_cells(table) -> list[str]:
    """The cells whose wrapped text is wider than their column or taller than their row, and the
    columns past the table's visible width."""
    fm = QFontMetrics(table.font())
    cut = []
    shown = [c for c in range(table.columnCount()) if not table.isColumnHidden(c)]
    right = sum(table.columnWidth(c) for c in shown)
    if right > table.viewport().width():
        cut.append(f"columns {right} px wide in {table.viewport().width()} px")
    cells = [(-1, c, table.horizontalHeaderItem(c).text()) for c in shown]
    cells += [(r, c, table.item(r, c).text()) for r in range(table.rowCount()) for c in shown]
    for r, c, text in cells:
        w = table.columnWidth(c) - PAD
        box = fm.boundingRect(QRect(0, 0, w, 10_000), int(Qt.TextFlag.TextWordWrap), text)
        h = table.horizontalHeader().height() if r < 0 else table.rowHeight(r)
        if box.width() > w or box.height() > h:
            cut.append(f"{text!r}: {box.width()}×{box.height()} in {w}×{h}")
    return cut


@pytest.mark.parametrize("preset, batch", [("llama-2-7b", 1), ("llama-3-8b", 1), ("gemma-2-9b", 1),
                                           ("deepseek-v3", 1), ("all-minilm-l6-v2", 1000),
                                           ("all-minilm-l6-v2", 10_000)])
def test_every_table_cell_is_whole_at_300_px(qtbot, preset, batch):
    panel = CalcPanel()
    qtbot.addWidget(panel)
    panel.resize(300, 900)
    panel.show()
    panel.preset_combo.setCurrentIndex(panel.preset_combo.findData(preset))
    panel.spins["batch"].setValue(batch)  # (a batch of 1,000 widened the cache column's header)
    qtbot.waitUntil(lambda: panel.shapes_table.viewport().width() < 300)
    for table in (panel.shapes_table, panel.compare_table):
        header = table.horizontalHeader()  # (a header given more lines grows at the next layout)
        qtbot.waitUntil(lambda: header.height() >= header.sizeHint().height())
        table.fit_height()
        cut = cut_cells(table)
        assert cut == [], "\n".join(cut)
