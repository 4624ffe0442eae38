"""The Corpus map's title in a narrow dock: "mean <stat> per head", else "mean <stat>", else that
cut once to the longest start that fits the map's width with an ellipsis (Qt's elidedText in the
title's own font; nothing where not even the ellipsis fits), never wider than the map, and set at most once per candidate and once cut (it
was shortened one character at a time, set again for each)."""

import numpy as np
import pyqtgraph as pg

from windows import drain_events, scan_map_shown


def _width(text: str, style: dict) -> float:
    """The painted width of a plot title `text` in the title's style."""
    plot = pg.PlotItem()
    plot.setTitle(text, **style)
    return plot.titleLabel.itemRect().width()


def test_a_narrow_maps_title_is_cut_once_to_the_longest_start_that_fits(qtbot):
    from attnviz.figures.style import TEXT

    m = scan_map_shown(qtbot, 600, 300)
    m.draw(np.linspace(0.0, 1.0, 36).reshape(3, 12), "first_token_mass")
    whole, short = "mean first_token_mass per head", "mean first_token_mass"
    titles, real = [], m.plot.setTitle
    m.plot.setTitle = lambda text, **style: (titles.append(text), real(text, **style))
    cut = 0
    for width in range(360, 110, -10):
        m.resize(width, 300)
        drain_events()
        titles.clear()
        m.fit_title()
        shown, room = m.plot.titleLabel.text, m.vb.width()
        assert len(titles) <= 3, (width, titles)
        assert not shown or m.plot.titleLabel.itemRect().width() <= room, (width, shown, room)
        if shown not in (whole, short):
            cut += 1
            if not shown:  # (not even the ellipsis fits)
                assert _width("\u2026", {"color": TEXT}) > room, (width, room)
                continue
            assert shown.endswith("\u2026") and short.startswith(shown[:-1]), shown
            longer = short[:len(shown)] + "\u2026"  # one more letter of it
            assert _width(longer, {"color": TEXT}) > room, (width, shown, room)
            assert m.toolTip() == whole
    assert cut >= 3
