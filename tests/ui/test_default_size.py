"""The window at its first-start size (1400 x 860) and at 1280 x 800: every side tab's name can be
read whole (the tabs run down the window's edge and scroll when there are more than fit), no
panel's widgets are cut off by its dock, the grid's head titles are inside the grid, the Corpus
panel shows every head of its heatmap and both its titles, and the focus view labels every token
when they fit, else says which ones it labels. Any tab other sessions add is checked the same way."""

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import (
    QAbstractScrollArea, QDockWidget, QGraphicsSimpleTextItem, QStyleOptionTab, QTabBar, QWidget,
)

from windows import WAIT, drain_events, open_window

SIZES = [(1400, 860), (1280, 800)]
# 46 tokens on SmolLM2 (the case: the focus view labelled every other column)
TEXT = ("The keys to the cabinet are on the table, and the cat sat on the mat while the dog "
        "slept by the door. The keys to the cabinet are on the table again and the cat sat on the mat "
        "while the dog slept")


@pytest.fixture(scope="module")
def scan_dir(tmp_path_factory):
    """A MiniLM scan (6 layers x 12 heads), run in this process (no Dask)."""
    from attnviz.corpus.scan import scan

    root = tmp_path_factory.mktemp("scan")
    corpus = root / "c.txt"
    corpus.write_text("the keys to the cabinet are on the table .\na cat sat on the mat .\n")
    scan(root / "out", "all-MiniLM-L6-v2", corpus, batch=2, examples=4, in_process=True,
         progress_stream=open("/dev/null", "w"))
    return root / "out"


def _settle(qtbot, w):
    w.worker.wait_idle()
    drain_events()  # (layouts and pyqtgraph's deferred geometry run from the event loop)
    drain_events()  # (and what those post in turn)


def _outside(widget: QWidget, frame: QWidget) -> list[str]:
    """Visible widgets inside `frame` that reach past its edges (scrolled contents excepted)."""
    bad = []
    box = frame.rect().adjusted(-1, -1, 1, 1)
    for child in frame.findChildren(QWidget):
        if not child.isVisibleTo(frame) or child.isWindow():
            continue
        p = child.parentWidget()
        scrolled = False
        while p is not None and p is not frame:
            if isinstance(p.parentWidget(), QAbstractScrollArea) and p is p.parentWidget().viewport():
                scrolled = True
                break
            p = p.parentWidget()
        if scrolled:
            continue
        r = QRect(child.mapTo(frame, QPoint(0, 0)), child.size())
        if not box.contains(r):
            bad.append(f"{type(child).__name__} {child.objectName() or ''} {r.getRect()} in {box.getRect()}")
    return bad


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_no_panel_is_cut_and_every_tab_reads_whole(qtbot, tmp_path, smollm2, scan_dir, size):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    w.resize(*size)
    w.open_scan(str(scan_dir))
    qtbot.waitUntil(lambda: w.corpus_panel.scan is not None, timeout=WAIT)
    assert w.state.result.n_tokens == 46
    w.state.set_focus(3, 1)
    _settle(qtbot, w)

    bars = [b for b in w.findChildren(QTabBar) if b.parent() is w and b.isVisible() and b.count() > 1]
    assert bars, "the side panels are tabbed"
    docks = {d.windowTitle(): d for d in w.findChildren(QDockWidget)}
    seen = []
    for bar in bars:
        vertical = bar.shape() in (QTabBar.Shape.RoundedEast, QTabBar.Shape.RoundedWest,
                                   QTabBar.Shape.TriangularEast, QTabBar.Shape.TriangularWest)
        for i in range(bar.count()):
            name = bar.tabText(i)
            bar.setCurrentIndex(i)  # raises the dock; a bar that scrolls brings the tab into view
            _settle(qtbot, w)
            rect = bar.tabRect(i)
            length = rect.height() if vertical else rect.width()
            assert length >= bar.fontMetrics().horizontalAdvance(name), f"tab {name!r} is cut short"
            opt = QStyleOptionTab()
            bar.initStyleOption(opt, i)  # the text as the bar paints it (elided where it lacks room)
            assert opt.text == name, f"tab {name!r} reads {opt.text!r}"
            assert bar.rect().contains(rect), f"tab {name!r} lies outside its bar {rect.getRect()}"
            dock = docks[name]
            assert dock.isVisible() and dock.widget().isVisible()
            assert _outside(dock.widget(), dock) == [], f"{name}: widgets cut off at {size}"
            seen.append(name)
    assert {"Focus head", "Corpus", "What heads do"} <= set(seen)

    # the grid's head titles lie inside the grid
    docks["Focus head"].raise_()
    _settle(qtbot, w)
    view = w.grid.gw
    shown = w.grid.titles()
    titles = [t for t in view.scene().items()  # the scene's text items that are head titles
              if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible() and t.text() in shown]
    assert len(shown) == len(titles) == w.state.model.config.n_head
    for t in titles:
        # (drawn unscaled in screen pixels: the item's device transform places it)
        r = t.deviceTransform(view.viewportTransform()).mapRect(t.boundingRect()).toAlignedRect()
        assert view.viewport().rect().contains(r), f"{t.text()!r} at {r.getRect()} is cut"

    # the Corpus panel: every head's column and both titles inside their views
    docks["Corpus"].raise_()
    _settle(qtbot, w)
    panel = w.corpus_panel
    for gw, plot in ((panel.heat_w, panel.heat_plot), (panel.scatter_w, panel.scatter_plot)):
        port = gw.viewport().rect()
        for item in (plot.getViewBox(), plot.titleLabel.item):
            r = gw.mapFromScene(item.sceneBoundingRect()).boundingRect()
            assert port.contains(r), f"{type(item).__name__} {r.getRect()} outside {port.getRect()}"
    x0, x1 = panel.heat_vb.viewRange()[0]
    assert x0 <= 0 and x1 >= 12  # H0..H11

    # the focus view: every token labelled, or it says which
    docks["Focus head"].raise_()
    _settle(qtbot, w)
    fv = w.focus_view
    ticks = fv.axis_labels()
    for n, step in zip((len(ticks[0]), len(ticks[1])), fv.label_steps):
        assert n == len(range(0, 46, step))
    if fv.label_steps == (1, 1):
        assert not fv.label_note.isVisible()
    else:
        assert fv.label_note.isVisible() and "hover" in fv.label_note.text()


def test_the_focus_view_labels_every_token_when_they_fit(window, qtbot):
    window.state.set_focus(0, 0)
    _settle(qtbot, window)
    fv, T = window.focus_view, window.state.result.n_tokens
    assert fv.label_steps == (1, 1) and not fv.label_note.isVisible()
    assert len(fv.axis_labels()[0]) == len(fv.axis_labels()[1]) == T
