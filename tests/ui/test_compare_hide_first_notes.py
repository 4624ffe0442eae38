"""Under Hide first token the Compare panel says on screen what its tiles and its numbers follow:
the JSD map and the summary are over every key, the option not applied (its caption and the summary
say so, in the exported picture too), and a line under the tiles says what their dark grey cells
are. (The tiles followed the option while the map and "moved most" did not, and only
docs/compare.md said so; nothing said what the dark cells meant.)"""

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, drain_events, painted_texts, toy_window

TEXT = "the cat sat on the mat and the cat"
EVERY_KEY = "JSD over every key (Hide first token not applied)"


@pytest.fixture
def compared(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    w.compare_dock.raise_()
    yield w
    jobs.close()
    w.worker.wait_idle()


def _map_painted(qtbot, panel):
    area = panel.parentWidget().parentWidget()  # (panel -> viewport -> the dock's QScrollArea)

    def settled():  # (a narrow dock's panel scrolls: the map in view, where it is painted)
        area.ensureWidgetVisible(panel.map, 0, 0)
        drain_events()
        return (panel.map_layout is not None and panel.map_layout.width == panel.map.width()
                and panel.map_layout.height == panel.map.height())
    qtbot.waitUntil(settled, timeout=WAIT)


@pytest.mark.parametrize("dock", [260, 700])
def test_the_jsd_map_and_summary_say_they_are_over_every_key(compared, qtbot, monkeypatch, tmp_path, dock):
    w = compared
    st, panel = w.state, w.compare_panel
    w.resize(1400, 900)
    w.resizeDocks([w.compare_dock], [dock], Qt.Orientation.Horizontal)
    _map_painted(qtbot, panel)
    said = " ".join(painted_texts(panel.head_map(), panel.map_layout, monkeypatch))
    assert "Hide first token" not in said and "Hide first token" not in panel.summary.text()

    st.set_hide_first(True)

    def said():  # the map's texts as last painted (it repaints a moment after the tiles)
        _map_painted(qtbot, panel)
        return " ".join(painted_texts(panel.head_map(), panel.map_layout, monkeypatch))
    qtbot.waitUntil(lambda: EVERY_KEY in said(), timeout=WAIT)  # whole, in the caption as painted
    assert panel.summary.text().startswith(EVERY_KEY + ": mean head JSD"), panel.summary.text()

    # the exported picture holds the map as painted, its caption with it
    path = tmp_path / "compare.png"
    panel.export(path)
    image = QImage(str(path))
    dpr = panel.devicePixelRatio()
    origin = panel.map.mapTo(panel, QPoint(0, 0))
    shown = panel.map.grab().toImage().convertToFormat(image.format())
    part = image.copy(int(origin.x() * dpr), int(origin.y() * dpr), shown.width(), shown.height())
    assert part == shown


BLANK_NOTE = "Magenta: no value (the first key, hidden, or a row with no weight left once it is hidden)"


def test_the_panel_says_what_its_dark_cells_are(compared, qtbot, tmp_path):
    w = compared
    st, panel = w.state, w.compare_panel
    w.resize(1400, 900)

    def notes():  # the panel's lines of text on screen
        drain_events()
        return [lab.text() for lab in panel.findChildren(QLabel) if lab.isVisible()]
    assert BLANK_NOTE not in notes()
    st.set_hide_first(True)
    qtbot.waitUntil(lambda: BLANK_NOTE in notes(), timeout=WAIT)
    label = next(lab for lab in panel.findChildren(QLabel) if lab.text() == BLANK_NOTE)
    # under the tiles, above the token strip
    assert panel.tiles.geometry().bottom() < label.geometry().top() < panel.strip.geometry().top()

    path = tmp_path / "compare.png"
    panel.export(path)
    image = QImage(str(path))
    dpr = panel.devicePixelRatio()
    origin = label.mapTo(panel, QPoint(0, 0))
    shown = label.grab().toImage().convertToFormat(image.format())
    assert image.copy(int(origin.x() * dpr), int(origin.y() * dpr), shown.width(), shown.height()) == shown
    st.set_hide_first(False)
    qtbot.waitUntil(lambda: BLANK_NOTE not in notes(), timeout=WAIT)
