"""Head roles' Overview map and Scores table at the dock's default width (a first start's 440 px):
every column in sight, none cut by the table's edge, each label and number whole, and no sideways
scroll bar; the Scores table's short headers give the full names in their tooltips."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from PySide6.QtCore import QLocale, QRect, Qt  # noqa: E402
from PySide6.QtGui import QFontMetrics  # noqa: E402
from PySide6.QtWidgets import QStyle, QStyleOptionHeader  # noqa: E402

from attnviz.engine.analysing import heads as H  # noqa: E402
from attnviz.ui.panels.roles_views import DIGITS, Compact, num_item  # noqa: E402
from attnviz.ui.views.column_fit import column_texts  # noqa: E402
from windows import WAIT, open_window  # noqa: E402

TEXT = "Dr Zorblax met Mrs Okkadine. Later, Dr Zorblax thanked Mrs Okkadine."


def roles_tab(qtbot, tmp_path, model, tab: str):
    """A window on `model` with the Head roles dock shown at its default width, on its `tab`."""
    w = open_window(qtbot, tmp_path / "s.ini", model=model, text=TEXT)
    w.roles_dock.show()
    w.roles_dock.raise_()
    panel = w.roles_panel
    panel.tabs.setCurrentWidget(getattr(panel, tab))
    return w, panel


@pytest.mark.parametrize("model, n_head", [("SmolLM2-135M-Instruct", 9), ("all-MiniLM-L6-v2", 12)])
def test_roles_map_fits_the_default_dock_width(qtbot, tmp_path, smollm2, model, n_head):
    w, panel = roles_tab(qtbot, tmp_path, model, "overview")
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


def _label_width(header, c: int, width: int) -> int:
    """The width the style gives section `c`'s label when the section is `width` px wide: less its
    margins, and its sort arrow where the section is the sorted one (as QHeaderView paints it)."""
    opt = QStyleOptionHeader()
    opt.initFrom(header)
    opt.orientation = Qt.Orientation.Horizontal
    opt.state |= QStyle.StateFlag.State_Horizontal
    opt.rect = QRect(0, 0, width, header.height())
    opt.sortIndicator = QStyleOptionHeader.SortIndicator.SortUp if header.sortIndicatorSection() == c \
        else QStyleOptionHeader.SortIndicator.None_
    return header.style().subElementRect(QStyle.SubElement.SE_HeaderLabel, opt, header).width()


@pytest.mark.parametrize("model, n_head", [("SmolLM2-135M-Instruct", 9), ("all-MiniLM-L6-v2", 12)])
def test_scores_table_fits_the_default_dock_width(qtbot, tmp_path, smollm2, model, n_head):
    w, panel = roles_tab(qtbot, tmp_path, model, "score_table")
    t = panel.score_table.table
    qtbot.waitUntil(lambda: t.rowCount() > 0 and t.isVisible(), timeout=WAIT)
    assert w.roles_dock.width() <= 460  # (the default width: nothing saved in this test's settings)
    view, header = t.viewport(), t.horizontalHeader()
    for sort_by in (0, t.columnCount() - 2):  # by layer (the first view), then by distance
        t.sortItems(sort_by, Qt.SortOrder.DescendingOrder)
        qtbot.waitUntil(lambda: header.length() <= view.width() and not t.horizontalScrollBar().isVisible(),
                        timeout=WAIT)
        for c in range(t.columnCount()):  # each column whole inside the viewport
            x = t.columnViewportPosition(c)
            assert 0 <= x and x + t.columnWidth(c) <= view.width(), (c, x, t.columnWidth(c), view.width())
            (label, bold), *cells = column_texts(t, c)  # (each as its delegate shows it, in its font)
            assert _label_width(header, c, t.columnWidth(c)) >= QFontMetrics(bold).horizontalAdvance(label), label
            assert t.columnWidth(c) >= max(QFontMetrics(f).horizontalAdvance(x) for x, f in cells) + 2
    # no information lost: the full names in the headers' tooltips, every number to 3 decimals in its
    # cell's (more where its lead over chance needs them: heads.chance_texts)
    titles = [t.horizontalHeaderItem(c).toolTip() for c in range(t.columnCount())]
    assert [tip.split(":")[0] for tip in titles] == ["Layer", "Head", "Role"] + [H.TITLES[n] for n in H.SCORE_NAMES]
    hs = w.state.head_scores
    for r in range(t.rowCount()):
        l, h = (int(t.item(r, c).data(Qt.ItemDataRole.DisplayRole)) for c in (0, 1))
        for j, name in enumerate(H.SCORE_NAMES):
            v = float(hs.scores[name][l, h]) + 0.0
            c = float(hs.chance[name][l, h]) if name in hs.chance else np.nan
            shown = f"{v:.3f}" if np.isnan(c) else H.chance_texts(v, c)[0]  # (more where 3 would mislead)
            assert f"{H.TITLES[name]}: {shown}" in t.item(r, 3 + j).toolTip()
            # the cell: the score rounded once, to the digits shown (no leading zero below 1)
            text = t.itemDelegateForColumn(3 + j).displayText(t.item(r, 3 + j).data(Qt.ItemDataRole.DisplayRole),
                                                              QLocale())
            want = f"{v:.{DIGITS[name]}f}"
            want = want[1:] if want.startswith("0.") else "-" + want[2:] if want.startswith("-0.") else want
            assert text == want, (name, v, text)


def test_a_scores_cell_shows_its_value_rounded_once_and_no_negative_zero(qtbot):
    from PySide6.QtWidgets import QTableWidget

    table = QTableWidget()
    qtbot.addWidget(table)

    def shown(value, name):
        item = num_item(value, DIGITS[name])
        delegate = Compact(DIGITS[name], table)
        return delegate.displayText(item.data(Qt.ItemDataRole.DisplayRole), QLocale())

    assert shown(1.2449, "distance") == "1.24"  # (rounded to 3 first, 1.245, it read 1.25)
    assert shown(-0.0, "entropy") == ".00"  # (one-hot rows' entropy is -0.0)
    assert shown(0.0994, "previous") == ".099"
    assert shown(-0.25, "previous") == "\u2212.250"  # (the window's minus, its leading zero left out too)


@pytest.mark.parametrize("model, n_head", [("SmolLM2-135M-Instruct", 9), ("all-MiniLM-L6-v2", 12)])
def test_roles_map_reads_whole_in_a_1024_pixel_window(qtbot, tmp_path, smollm2, model, n_head):
    """In the window's default 1024 x 700 size the Overview map's role names read whole ("sink",
    not "si…", in MiniLM's twelve narrow columns): each cell's text, in the font its delegate
    draws it in, fits its cell beside the style's margins, in a font no smaller than 6.5 points."""
    from PySide6.QtGui import QFontMetricsF
    from PySide6.QtWidgets import QStyleOptionViewItem

    from attnviz.ui.views.column_fit import text_margins

    w = open_window(qtbot, tmp_path / "s.ini", model=model, text=TEXT)
    w.resize(1024, 700)
    w.roles_dock.show()
    w.roles_dock.raise_()
    panel = w.roles_panel
    panel.tabs.setCurrentWidget(panel.overview)
    ov = panel.overview.map
    qtbot.waitUntil(lambda: ov.columnCount() == n_head and ov.isVisible(), timeout=WAIT)
    qtbot.waitUntil(lambda: not ov.horizontalScrollBar().isVisible(), timeout=WAIT)
    texts = set()
    for r in range(ov.rowCount()):
        for c in range(n_head):
            index = ov.model().index(r, c)
            opt = QStyleOptionViewItem()
            opt.initFrom(ov.viewport())
            opt.rect = ov.visualRect(index)
            ov.itemDelegateForIndex(index).initStyleOption(opt, index)  # (what the style draws: text, font)
            texts.add(opt.text)
            drawn = QFontMetricsF(opt.font).horizontalAdvance(opt.text) + text_margins(ov)
            assert drawn <= opt.rect.width() and opt.font.pointSizeF() >= 6.5, (r, c, opt.text, drawn, opt.rect)
    assert "sink" in texts
