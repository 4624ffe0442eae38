"""The Corpus panel's layer x head map paints a head whose statistic no text gave a value (the
induction and duplicate scores of texts mostly unknown to the model) in the no-value colour every
view uses (style.no_value_colour) and names it in a line over the map, never as a mean of 0 on the
colour scale, as the scan-report figure does."""

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor

from attnviz.figures.data import DEFAULT_COLORMAP
from attnviz.figures.style import no_value_colour, no_value_word
from windows import WAIT

MISSING = QColor(*no_value_colour(DEFAULT_COLORMAP)).name()  # a head with no value, as every view paints it
TEXTS = ["quantum flux capacitor overheats rapidly again", "zebras juggle purple lanterns quietly tonight"]


@pytest.fixture(scope="module")
def scan_dir(tmp_path_factory):
    """A scan by the textbook model, which knows 40 words: each text is mostly <|unk|>, so its
    duplicate and induction scores are null."""
    from attnviz.corpus.scan import scan

    root = tmp_path_factory.mktemp("scan")
    (root / "c.txt").write_text("\n".join(TEXTS) + "\n")
    scan(root / "out", "attnviz-textbook", root / "c.txt", batch=2, examples=2, in_process=True,
         progress_stream=open("/dev/null", "w"))
    return root / "out"


def _pixel(panel, layer, head) -> QColor:
    image = panel.heat_w.grab().toImage()
    p = panel.heat_w.mapFromScene(panel.heat_w.vb.mapViewToScene(QPointF(head + 0.5, layer + 0.5)))
    return image.pixelColor(p.x(), p.y())


def test_a_statistic_no_text_gave_is_grey_and_named(window, qtbot, scan_dir):
    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    assert np.isnan(panel.scan.means["induction"]).all() and np.isfinite(panel.scan.means["previous"]).all()
    panel.set_stat("induction")
    qtbot.wait(50)
    assert panel.heat_w.plot.titleLabel.text == "mean induction per head"
    assert panel.heat_note.isVisible() and panel.heat_note.text() == f"Map: no text gave a value ({no_value_word(DEFAULT_COLORMAP)})."
    tip = panel.stat_box.toolTip()  # (never "its mean over 0 texts")
    assert tip == ("the statistic the heatmap shows: no text gave a value (a text with more than "
                   "20% unknown tokens gives no duplicate or induction value, and each of the 2 "
                   "scanned has)"), tip
    assert _pixel(panel, 1, 2).name() == QColor(MISSING).name()
    panel.set_stat("previous")
    qtbot.wait(50)
    assert panel.heat_w.plot.titleLabel.text == "mean previous per head" and not panel.heat_note.isVisible()
    assert _pixel(panel, 1, 2).name() != QColor(MISSING).name()


def test_the_scatter_never_counts_a_missing_statistic_as_zero(window, qtbot, scan_dir):
    """The scatter places the heads without induction and duplicate (no text gave them a value)
    and says so; a head's tooltip and the picked head's line read "no value", never 0."""
    from windows import hover_plot

    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None and panel.scan.path == scan_dir, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    assert panel.scatter_note.isVisible()
    assert panel.scatter_note.text() == "Scatter: duplicate, induction: no value, not used."
    panel.set_stat("induction")
    panel.pick_head(1, 2)
    assert panel.examples_title.text().startswith("L1 H2 (mean induction no value)")
    spot = next(p for p in panel.scatter_w.points.points() if tuple(p.data()) == (1, 2))
    hover_plot(qtbot, panel.scatter_w.plot.getViewBox(), panel.scatter_w, spot.pos().x(), spot.pos().y())
    vb = panel.scatter_w.plot.getViewBox()  # (pyqtgraph puts a point's tip on its view box)
    qtbot.waitUntil(lambda: "L1 H2: " in vb.toolTip(), timeout=WAIT)
    tip = next(t for t in vb.toolTip().split("\n\n") if t.startswith("L1 H2: "))
    assert "induction no value" in tip and "duplicate no value" in tip
    assert "previous no value" not in tip


def test_the_map_with_no_values_stays_in_a_1024_pixel_window(window, qtbot, scan_dir):
    """Its note in the title made the plot wider than the dock: the colour bar went off-screen.
    (It has no colour bar now: no text gave a value.)"""
    window.resize(1024, 700)
    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    panel.set_stat("induction")
    qtbot.wait(50)
    assert window.width() <= 1024
    view = panel.heat_w.vb.sceneBoundingRect()  # (its colour bar hidden: it has no values)
    assert view.right() <= panel.heat_w.viewport().width()
    assert panel.heat_w.plot.titleLabel.text == "mean induction per head"


def test_every_part_keeps_its_least_height_in_a_1024_by_700_window(window, qtbot, scan_dir):
    """The textbook scan in MiniLM's window: its note that the scan is of another model wraps to
    four lines in a 1024 px window's dock, and the map's and the scatter's notes are shown. The
    map, the scatter and the examples each keep their least height, one below the other (the map never
    over the scatter's title, the scatter's note never over its points), and what does not
    fit the dock is reached by its scroll bar; the window keeps its size."""
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtWidgets import QScrollArea

    from windows import drain_events

    window.resize(1024, 700)
    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None and panel.scan.path == scan_dir, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    panel.set_stat("induction")
    qtbot.waitUntil(lambda: panel.model_state() == "other", timeout=WAIT)
    drain_events()
    drain_events()
    assert panel.model_note.isVisible() and panel.heat_note.isVisible() and panel.scatter_note.isVisible()
    assert (window.width(), window.height()) == (1024, 700)

    def box(widget) -> QRect:  # in the panel's coordinates
        return QRect(widget.mapTo(panel, QPoint(0, 0)), widget.size())
    heat, scatter, note = box(panel.heat_w), box(panel.scatter_w), box(panel.scatter_note)
    examples = box(panel.examples.parentWidget())
    for name, r, least in (("map", heat, panel.heat_w.minimumHeight()),
                           ("scatter", scatter, panel.scatter_w.minimumHeight()),
                           ("examples", examples, panel.examples.parentWidget().minimumHeight())):
        assert r.height() >= least, f"{name} {r.getRect()}: less than its least height {least}"
    assert heat.bottom() < scatter.top() and scatter.bottom() < note.top() and note.bottom() < examples.top()
    title = panel.scatter_w.mapFromScene(panel.scatter_w.plot.titleLabel.item.sceneBoundingRect()).boundingRect()
    assert panel.scatter_w.viewport().rect().contains(title)
    (area,) = [a for a in panel.findChildren(QScrollArea) if a.widget() is not None
               and a.widget().isAncestorOf(panel.heat_w)]
    assert area.widget().height() > area.viewport().height() and area.verticalScrollBar().isVisible()
    bar = area.verticalScrollBar()
    bar.setValue(bar.maximum())  # scrolled to the end: the examples in sight
    drain_events()
    assert area.viewport().rect().contains(QRect(panel.examples.mapTo(area.viewport(), QPoint(0, 0)),
                                                 panel.examples.size()))


def test_a_map_no_text_gave_a_value_paints_no_colour_bar(window, qtbot, scan_dir):
    """Its grey cells have no value: no colour bar and no numbers beside them (no bar of a stand-in
    range, 0 to 1); a statistic with values has its bar again."""
    from attnviz.figures.style import BACKGROUND

    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None and panel.scan.path == scan_dir, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()

    def bar_colours() -> set:  # the colours painted right of the map, where a bar and its numbers go
        image = panel.heat_w.grab().toImage()
        view = panel.heat_w.mapFromScene(panel.heat_w.vb.sceneBoundingRect()).boundingRect()
        return {image.pixelColor(x, y).name() for x in range(view.right() + 3, image.width())
                for y in range(view.top(), view.bottom())}
    panel.set_stat("induction")
    qtbot.waitUntil(lambda: panel.heat_note.isVisible(), timeout=WAIT)
    assert bar_colours() == {QColor(BACKGROUND).name()}
    assert _pixel(panel, 1, 2).name() == QColor(MISSING).name()
    panel.set_stat("previous")
    qtbot.waitUntil(lambda: not panel.heat_note.isVisible(), timeout=WAIT)
    assert len(bar_colours()) > 20  # the colour map and its numbers


def test_a_scatter_that_places_no_head_says_so_in_its_title(window, qtbot, scan_dir):
    """Texts gave values, but none to any statistic that places a head: no point is drawn, and the
    title says no head is placed (it kept 'heads by behaviour' and its layer colours' key)."""
    from dataclasses import replace

    from attnviz.engine.analysing.corpus_stats import PROFILE_STATS, place_heads

    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None and panel.scan.path == scan_dir, timeout=WAIT)
    s = panel.scan
    means = {k: np.full_like(v, np.nan) if k in PROFILE_STATS else v for k, v in s.means.items()}
    assert np.isfinite(means["texts"]).all()
    panel.set_scan(replace(s, means=means, coords=place_heads(means)))
    assert len(panel.scatter_w.points.points()) == 0
    assert panel.scatter_w.plot.titleLabel.text == "heads by behaviour: no head placed"
    assert panel.scatter_note.isVisible() and "6 heads not placed" in panel.scatter_note.text()


def test_the_map_follows_the_windows_colormap(window, qtbot, scan_dir):
    """The map is coloured through the window's colormap, changed as the user changes it, a head
    with no value in that colormap's no-value colour, which the line over the map names. (It was
    viridis whatever the window showed.)"""
    from attnviz.figures.style import colormap_colors
    from windows import drain_events, rgb

    window.open_scan(str(scan_dir))
    panel, st = window.corpus_panel, window.state
    qtbot.waitUntil(lambda: panel.scan is not None, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    top = np.unravel_index(np.argmax(panel.scan.means["previous"]), panel.scan.means["previous"].shape)
    for name in ("plasma", "CET-L1"):
        st.set_colormap(name)
        panel.set_stat("induction")
        drain_events()
        assert rgb(_pixel(panel, 1, 2)) == no_value_colour(name)
        assert panel.heat_note.text() == f"Map: no text gave a value ({no_value_word(name)})."
        panel.set_stat("previous")
        drain_events()
        want = colormap_colors(name, 256)[-1].astype(int)  # the top of the map's scale
        assert np.abs(np.subtract(rgb(_pixel(panel, *top)), want)).max() <= 4, name
    panel.set_stat("induction")
    st.set_colormap("viridis")  # a change while the map is shown: its line too
    drain_events()
    assert panel.heat_note.text() == f"Map: no text gave a value ({no_value_word('viridis')})."
    assert rgb(_pixel(panel, 1, 2)) == no_value_colour("viridis")
