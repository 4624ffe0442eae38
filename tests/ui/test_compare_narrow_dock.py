"""The Compare panel fits a narrow dock: at 320 px its row of A | B | A − B, Export… and Stop
comparing wraps, so the panel is no wider than the dock's scroll area, nothing scrolls sideways,
every button lies whole inside what the area shows, and the tiles' colour bar labels are painted
inside it too. In a wide dock the row stays one line, the actions at its right end."""

import pytest
from PySide6.QtCore import QRect, Qt

from windows import drain_events, toy_compared_with_checkpoint

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def w(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def _shown(w, width: int):
    """The compare dock raised at `width` px: (the panel, its scroll area), laid out."""
    w.resize(1500, 950)
    w.compare_dock.raise_()
    w.worker.compare_jobs.set_mode("A-B")
    w.resizeDocks([w.compare_dock], [width], Qt.Orientation.Horizontal)
    drain_events()
    panel = w.compare_panel
    return panel, panel.parentWidget().parentWidget()  # (panel -> viewport -> QScrollArea)


def test_a_narrow_dock_shows_every_button_whole_and_nothing_scrolls_sideways(w):
    panel, area = _shown(w, 320)
    view = area.viewport()
    assert view.width() <= 330, view.width()
    assert not area.horizontalScrollBar().isVisible(), (panel.width(), view.width())
    assert panel.width() <= view.width(), (panel.width(), view.width())
    seen = QRect(0, 0, view.width(), view.height())
    for b in (*panel.mode_buttons.buttons(), panel.export_button, panel.stop_button):
        at = QRect(b.mapTo(view, b.rect().topLeft()), b.size())
        assert b.isVisible() and seen.contains(at), (b.text(), at, seen)
    # the colour bar's labels: dark ink right of the tiles, every bit of it inside the dock
    image = panel.tiles.grab().toImage()
    ink = [x for x in range(image.width()) for y in range(0, image.height(), 3)
           if image.pixelColor(x, y).lightness() < 100]
    right = panel.tiles.mapTo(view, panel.tiles.rect().topLeft()).x() + max(ink)
    assert right < view.width(), (right, view.width())


def test_a_wide_dock_keeps_the_row_on_one_line_with_the_actions_at_its_right(w):
    panel, area = _shown(w, 700)
    row = [b.geometry() for b in (*panel.mode_buttons.buttons(), panel.export_button, panel.stop_button)]
    # (one line: every button's vertical extent overlaps every other's)
    assert all(a.top() <= b.bottom() and b.top() <= a.bottom() for a in row for b in row), row
    assert panel.stop_button.geometry().right() >= panel.tiles.geometry().right() - 2
