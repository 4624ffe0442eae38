"""The tab bars of the window's docked side panels: every name whole, and every tab in sight
without scrolling wherever the names fit the bar at all.

The tabs run down the window's edge, where the names have the window's height (along the bottom
of a 440 px dock there is room for a few). A tab is its name plus the style's padding (24 px in
Fusion, eight to ten tabs' worth of a 700 px bar), so the padding shares out the room the names
leave: the style's own where the bar has room, less where it has not, down to MIN_SPACE. Past that
the bar scrolls, its names still whole (as where a dock placed below the tabs leaves them part of
the dock area's height; Why here? sits inside the Focus head tab so it does not)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QTabBar

MIN_SPACE = 8  # px of padding a tab keeps around its name (4 at each end)


class SideTabStyle(QProxyStyle):
    """The application's style, but for the padding of a side tab bar's tabs (module docstring)."""

    def pixelMetric(self, metric, option=None, widget=None) -> int:
        own = super().pixelMetric(metric, option, widget)
        if metric != QStyle.PixelMetric.PM_TabBarTabHSpace or not isinstance(widget, QTabBar):
            return own
        return tab_space(widget, own)


def tab_space(bar: QTabBar, own: int) -> int:
    """The padding of each tab of `bar`: `own` where every name fits with it, else what the room
    left by the names shares out evenly, at least MIN_SPACE (then the bar scrolls)."""
    n = bar.count()
    if n == 0 or own <= MIN_SPACE:
        return own
    vertical = bar.shape() in (QTabBar.Shape.RoundedEast, QTabBar.Shape.RoundedWest,
                               QTabBar.Shape.TriangularEast, QTabBar.Shape.TriangularWest)
    room = bar.height() if vertical else bar.width()
    fm = bar.fontMetrics()
    names = sum(fm.size(Qt.TextFlag.TextShowMnemonic, bar.tabText(i)).width() for i in range(n))
    return max(MIN_SPACE, min(own, (room - names) // n))


def side_tab_style() -> SideTabStyle:
    """The one SideTabStyle of the application (a child of it: it outlives every window's bars)."""
    app = QApplication.instance()
    style = app.findChild(SideTabStyle)
    if style is None:
        style = SideTabStyle()
        style.setParent(app)
    return style


def make_readable(bar: QTabBar) -> None:
    """A side tab bar as the module docstring says: names never elided, padding shared out, the
    scroll arrows left for when even the least padding is too much."""
    bar.setElideMode(Qt.TextElideMode.ElideNone)
    bar.setUsesScrollButtons(True)
    bar.setExpanding(False)
    if bar.style() is not side_tab_style():
        bar.setStyle(side_tab_style())
