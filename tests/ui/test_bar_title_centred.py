"""The focus view's colour-bar title ("attention weight", drawn turned along the bar) is painted
centred on the bar as soon as the view first shows a head, not only after the view is laid out
again (pyqtgraph places an axis title when the axis is resized, and the title is set after that)."""

from PySide6.QtGui import QColor

from attnviz.figures.style import BACKGROUND
from windows import WAIT, drain_events

TOLERANCE = 3  # px: the painted text's extent against the bar's, rounding of both


def _painted_rows(image, x0: int, x1: int, differs) -> list[int]:
    """Rows of `image` with a pixel in columns x0..x1 that `differs` from the background."""
    return [y for y in range(image.height())
            if any(differs(image.pixelColor(x, y)) for x in range(max(x0, 0), min(x1, image.width())))]


def _title_and_bar_centres(view) -> tuple[float, float]:
    """The vertical centres (view pixels) of the title's painted text and of the painted bar."""
    gw = view.gw
    image = gw.grab().toImage()
    dpr = image.devicePixelRatio()
    background = QColor(BACKGROUND)

    def ink(c: QColor) -> bool:  # text: light on the dark background
        return c.lightness() > background.lightness() + 60

    # the columns where the axis draws its title: right of the tick labels, to the axis' edge
    label = gw.mapFromScene(view.cbar.getAxis("right").label.sceneBoundingRect()).boundingRect()
    text_rows = _painted_rows(image, int(label.left() * dpr), int(label.right() * dpr), ink)
    bar = gw.mapFromScene(view.cbar.bar.sceneBoundingRect()).boundingRect()  # the bar's columns
    mid = int(bar.center().x() * dpr)
    bar_rows = _painted_rows(image, mid - 1, mid + 2, lambda c: c.name() != background.name())
    assert text_rows and bar_rows, "the title and the bar are painted"
    return (text_rows[0] + text_rows[-1]) / 2 / dpr, (bar_rows[0] + bar_rows[-1]) / 2 / dpr


def test_the_colour_bar_title_is_painted_centred_on_the_bar_at_first_show(window, qtbot):
    window.state.set_focus(1, 1)
    window.worker.wait_idle()
    drain_events()
    drain_events()
    view = window.focus_view
    assert view.cbar.getAxis("right").labelText == "attention weight"
    title, bar = _title_and_bar_centres(view)
    assert abs(title - bar) <= TOLERANCE, f"title centred at y {title:.0f}, the bar at {bar:.0f}"

    # a new title (value-weighted) is centred as well, with no new layout of the view
    window.state.set_value_weighted(True)
    qtbot.waitUntil(lambda: view.cbar.getAxis("right").labelText != "attention weight", timeout=WAIT)
    window.worker.wait_idle()
    drain_events()
    title, bar = _title_and_bar_centres(view)
    assert abs(title - bar) <= TOLERANCE, f"title centred at y {title:.0f}, the bar at {bar:.0f}"
