"""The focus view with no head focused says "Click a head in the grid…" and draws no colour bar:
a 0..1 scale beside an empty frame would scale nothing. Once a head is
shown its bar is; with the focus cleared it goes again."""

from PySide6.QtGui import QColor

from attnviz.figures.style import BACKGROUND
from windows import WAIT, drain_events


def _bar_colours(f) -> set[str]:
    """The colours painted where the focus view's colour bar (its axis and title too) sits."""
    drain_events()
    image = f.gw.viewport().grab().toImage()
    rect = f.gw.mapFromScene(f.cbar.sceneBoundingRect()).boundingRect()
    return {image.pixelColor(x, y).name() for x in range(max(rect.left(), 0), min(rect.right(), image.width()))
            for y in range(max(rect.top(), 0), min(rect.bottom(), image.height()), 3)}


def test_no_colour_bar_until_a_head_is_shown(window, qtbot):
    st, f = window.state, window.focus_view
    window.focus_dock.show()
    window.focus_dock.raise_()
    assert st.focus is None and f.title.text() == "Click a head in the grid to look at it here."
    background = QColor(BACKGROUND).name()
    assert _bar_colours(f) == {background}
    st.set_focus(0, 1)
    qtbot.waitUntil(lambda: "L0 H1" in f.title.text(), timeout=WAIT)
    assert len(_bar_colours(f) - {background}) > 10  # the colormap's colours and the ticks
    st.set_focus(None)
    qtbot.waitUntil(lambda: "Click a head" in f.title.text(), timeout=WAIT)
    assert _bar_colours(f) == {background}
