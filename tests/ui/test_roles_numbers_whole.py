"""Head roles at a 1024-pixel-wide window (its dock narrower than a first start's 440 px): every
number of the Scores list and of Find's ranking is drawn whole, none cut to ".1…" by a column too
narrow for it and the margins the style keeps beside a cell's text (the list scrolls sideways
where its eleven columns are wider than the dock)."""

from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

from windows import WAIT, drain_events, open_window

TEXT = "The keys to the cabinet are on the table. The keys to the cabinet are"


def cell_text(table, row: int, col: int) -> tuple[str, str]:
    """(a cell's text as its delegate writes it, that text as the style draws it: cut with an
    ellipsis to the room the style gives it in the cell's column)."""
    index = table.model().index(row, col)
    opt = QStyleOptionViewItem()
    opt.initFrom(table)
    table.itemDelegateForIndex(index).initStyleOption(opt, index)
    opt.rect = table.visualRect(index)
    style = table.style()
    room = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, table).width() \
        - 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1)
    return opt.text, opt.fontMetrics.elidedText(opt.text, opt.textElideMode, room)


def cut_cells(table) -> list:
    """(row, column, text, as drawn) of each cell drawn cut."""
    cells = ((r, c, *cell_text(table, r, c)) for r in range(table.rowCount())
             for c in range(table.columnCount()) if table.item(r, c) is not None)
    return [cell for cell in cells if cell[2] != cell[3]]


def test_scores_and_find_numbers_are_whole_at_1024_pixels(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("roles",))
    w.roles_dock.show()
    w.roles_dock.raise_()
    w.resize(1024, 700)
    panel = w.roles_panel
    panel.tabs.setCurrentWidget(panel.score_table)
    scores = panel.score_table.table
    qtbot.waitUntil(lambda: scores.rowCount() == 30 * 9 and scores.isVisible(), timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert w.width() == 1024 and w.roles_dock.width() < 440
    assert not cut_cells(scores), cut_cells(scores)[:5]
    assert scores.horizontalHeader().length() > scores.viewport().width()  # (too many to fit: it scrolls)

    panel.tabs.setCurrentWidget(panel.find)
    hits = panel.find.set_find("·are@15", "·keys@1")
    assert len(hits) == 30 * 9
    drain_events()
    ranking = panel.find.find_table
    assert not cut_cells(ranking), cut_cells(ranking)[:5]
    # the four columns in sight, sharing the width: no sideways scrolling to reach the weights
    assert ranking.horizontalHeader().length() <= ranking.viewport().width()
    w.worker.wait_idle()


def test_finds_line_is_whole_in_a_1024_by_700_window_under_a_long_summary(qtbot, tmp_path):
    """An empty sentence makes the summary seven paragraphs long: at 1024 x 700 the Find tab is
    left its least height, and the line over its ranking is still read whole (not cut mid-line)."""
    from windows import drain_events, open_window

    w = open_window(qtbot, tmp_path / "s.ini")
    w.resize(1024, 700)
    w.roles_dock.show()
    w.roles_dock.raise_()
    panel = w.roles_panel
    panel.tabs.setCurrentWidget(panel.find)
    w.set_text("")
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == "", timeout=30000)
    w.worker.wait_idle()
    drain_events()
    drain_events()
    label = panel.find.find_status
    assert label.text().startswith("From '[SEP]'@1 (query) to '[CLS]'@0 (key)")
    assert label.isVisible() and label.height() + 1 >= label.heightForWidth(label.width()), \
        (label.height(), label.heightForWidth(label.width()))
    assert panel.find.find_table.rowCount() == 72
