"""The window at its first-start size (1400 x 860), at 1280 x 800 and at 1024 x 700: every side tab's name can be
read whole (the tabs run down the window's edge and scroll when there are more than fit), no
panel's widgets are cut off by its dock, no label or button shows less than its whole text, a
panel taller or wider than its dock shows the scroll bar that reaches the rest, the grid's head
titles are inside the grid's view box (which clips them), the Corpus panel shows every head of its
heatmap and both its titles, the Compare panel paints every tile title whole and every row of its
token strip, and the focus view labels every token when they fit, else says which ones it labels. Every dock the window can
show is raised and checked (Compare and Corpus opened first); any tab other sessions add is
checked the same way."""

import pytest
from PySide6.QtCore import QPoint, QRect, QRectF
from PySide6.QtWidgets import (
    QAbstractButton, QAbstractScrollArea, QDockWidget, QLabel, QScrollArea,
    QStyleOptionTab, QTabBar, QWidget,
)

from attnviz.figures import compare as F
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import IOI, TOY, WAIT, drain_events, grid_titles_cut, hover, open_window, tip_shown

SIZES = [(1400, 860), (1280, 800), (1024, 700)]
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


def _shown_in(child: QWidget, frame: QWidget) -> bool:
    """`child` is shown within `frame` (not on a hidden page, not behind another tab)."""
    return child.isVisibleTo(frame) and not child.isWindow()


def _unreachable(frame: QWidget) -> list[str]:
    """Scroll areas in `frame` whose content outgrows them with no scroll bar shown to reach it."""
    bad = []
    for area in frame.findChildren(QAbstractScrollArea):
        if not _shown_in(area, frame):
            continue
        port = area.viewport().size()
        inner = area.widget().size() if isinstance(area, QScrollArea) and area.widget() else None
        for bar, over in ((area.verticalScrollBar(), inner is not None and inner.height() > port.height() + 1),
                          (area.horizontalScrollBar(), inner is not None and inner.width() > port.width() + 1)):
            if (over or bar.maximum() > bar.minimum()) and not bar.isVisible():
                bad.append(f"{type(area).__name__} {area.objectName()} scrolls with no scroll bar shown")
    return bad


def _scrolls_across(frame: QWidget) -> list[str]:
    """Panels in `frame` wider than the dock that holds them (read only by scrolling across)."""
    return [f"{type(a.widget()).__name__} {a.widget().width()} px in {a.viewport().width()} px"
            for a in frame.findChildren(QScrollArea)
            if _shown_in(a, frame) and a.widget() is not None and a.widget().width() > a.viewport().width() + 1]


def _cut_text(frame: QWidget) -> list[str]:
    """Labels and buttons in `frame` smaller than their text needs (a label that elides its text
    on purpose sets the elided text, so it passes)."""
    bad = []
    for label in frame.findChildren(QLabel):
        if not _shown_in(label, frame) or not label.text():
            continue
        if label.wordWrap():
            need_w, need_h = 0, label.heightForWidth(label.width())
        else:
            hint = label.minimumSizeHint()
            need_w, need_h = hint.width(), hint.height()
        if need_w > label.width() + 1 or need_h > label.height() + 1:
            bad.append(f"label {label.text()[:40]!r} {label.width()} x {label.height()}, "
                       f"needs {need_w} x {need_h}")
    for button in frame.findChildren(QAbstractButton):
        if not _shown_in(button, frame) or not button.text() or isinstance(button.parent(), QTabBar):
            continue
        need = button.fontMetrics().horizontalAdvance(button.text().replace("&", ""))
        if need > button.contentsRect().width():
            bad.append(f"button {button.text()!r} {button.width()} px wide, its text {need} px")
    return bad


def _compare_painted_whole(panel, scroll: QScrollArea | None) -> list[str]:
    """The Compare panel's tiles, focused head and token strip, each scrolled into view and painted
    there: every title whole and inside its canvas, every strip cell (each row) inside the strip."""
    bad = []
    for canvas in (panel.tiles, panel.strip, panel.focus):
        if scroll is not None:
            scroll.ensureWidgetVisible(canvas, 0, 0)  # as a user scrolls to it
        drain_events()
        canvas.repaint()  # (a canvas scrolled into view paints at once where the platform is slower)
    c = panel.jobs.comparison
    layer = min(panel.state.layer, c.b_attentions.shape[0] - 1)
    from attnviz.engine.computing.patterns import head_title
    from attnviz.ui.machinery.compare_jobs import MODE_TITLES

    want = [f"{MODE_TITLES[panel.jobs.mode]} {head_title(layer, h)}" for h in range(c.b_attentions.shape[1])]
    l, h = panel.state.focus
    want_focus = [f"A {head_title(l, h)}", f"B {head_title(l, h)}", f"A \u2212 B {head_title(l, h)}"]
    for canvas, titles, rects, full in ((panel.tiles, panel.tile_titles, panel.tile_rects, want),
                                        (panel.focus, panel.focus_titles, panel.focus_rects, want_focus)):
        if titles != full:
            bad.append(f"tile titles painted {titles}, not {full}")
        box = QRectF(canvas.rect())
        for t, r in zip(titles, rects):
            title_box = QRectF(r.left(), r.top() - 14, F.title_width(t), 14)
            if not box.contains(title_box) or not box.contains(r):
                bad.append(f"tile {t!r} at {r.getRect()} outside {box.getRect()}")
    box = QRectF(panel.strip.rect())
    if len(panel.strip_cells) != c.result.n_tokens:
        bad.append(f"{len(panel.strip_cells)} strip cells for {c.result.n_tokens} tokens")
    bad += [f"strip cell {t} at {r.getRect()} outside {box.getRect()}"
            for t, r in enumerate(panel.strip_cells) if not box.contains(r)]
    return bad


@pytest.fixture(scope="module")
def quantized_once(shared_quantized):
    """Compare's quantized twin of SmolLM2 made once for every size: the window's B a new Model
    over it each time (tests/shared_models.py)."""
    from attnviz.engine.computing import quantized

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quantized, "quantized_model", shared_quantized)
        yield


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_no_panel_is_cut_and_every_tab_reads_whole(qtbot, tmp_path, smollm2, scan_dir, quantized_once,
                                                    size):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    w.resize(*size)
    w.open_scan(str(scan_dir))
    qtbot.waitUntil(lambda: w.corpus_panel.scan is not None, timeout=WAIT)
    assert w.state.result.n_tokens == 46
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "Q8_0"))  # (SmolLM2 against itself quantized: 9 heads a layer)
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.doc is not None
                    and jobs.comparison.result.n_tokens == 46 and jobs.induction is not None,
                    timeout=WAIT * 4)
    try:
        _check_every_dock(qtbot, w, size)
    finally:
        jobs.close()
        w.worker.wait_idle()


def _dock_whole(w, dock, size) -> None:
    """The dock's content whole, on each page of the tabs inside it (What heads do's Next token,
    DLA and Ablation; Head roles' Overview, Scores and Find), each page's name whole."""
    from PySide6.QtWidgets import QTabWidget

    inner = [t for t in dock.findChildren(QTabWidget) if _shown_in(t, dock)]
    for tabs in inner:
        shown = tabs.currentIndex()
        for i in range(tabs.count()):
            tabs.setCurrentIndex(i)
            w.worker.wait_idle()
            drain_events()
            drain_events()
            bar = tabs.tabBar()
            opt = QStyleOptionTab()
            bar.initStyleOption(opt, i)
            assert opt.text == tabs.tabText(i), f"tab {tabs.tabText(i)!r} reads {opt.text!r} at {size}"
            _page_whole(w, dock, f"{dock.windowTitle()} > {tabs.tabText(i)}", size)
        tabs.setCurrentIndex(shown)
    if not inner:
        _page_whole(w, dock, dock.windowTitle(), size)


def _page_whole(w, dock, page, size) -> None:
    name = dock.windowTitle()
    assert dock.isVisible() and dock.widget().isVisible()
    assert _outside(dock.widget(), dock) == [], f"{page}: widgets cut off at {size}"
    assert _unreachable(dock) == [], f"{page}: content out of reach at {size}"
    assert _scrolls_across(dock) == [], f"{page}: wider than its dock at {size}"
    assert _cut_text(dock) == [], f"{page}: text cut at {size}"
    assert _map_titles_readable(dock) == [], f"{page}: a map's title cannot be read whole at {size}"
    if name == "Compare":
        scroll = dock.widget() if isinstance(dock.widget(), QScrollArea) else None
        assert _compare_painted_whole(w.compare_panel, scroll) == [], f"Compare painted cut at {size}"
        assert _map_titles_readable(dock) == [], f"Compare: its map's title cannot be read at {size}"
    if name == "Generate" and not w.generate_panel.gen.steps:
        w.generate_panel.plot.grab()  # (painted: the view box sets its auto range as it paints)
        (x0, _), (y0, _) = w.generate_panel.plot.getPlotItem().viewRange()
        assert x0 >= 0 and y0 >= 0, f"the empty KV plot shows steps from {x0:g}"
    if name == "Why here?":
        assert _why_heading_whole(w.why_panel.canvas) == [], f"Why here? heading cut at {size}"
    if name == "Patching" and w.patching_panel.map.view is not None:
        assert _patch_map_whole(w.patching_panel.map) == [], f"Patching map cut at {size}"


def _map_titles_readable(frame: QWidget) -> list[str]:
    """Every layers x heads map shown in `frame` (What heads do's DLA and scan, Circuits, Compare's
    JSD map) paints its title and caption whole, or ends them in an ellipsis and gives them whole
    on hover."""
    from attnviz.figures import headmap
    from attnviz.ui.panels.compare_panel import ComparePanel
    from attnviz.ui.panels.dla_view import HeadMapView

    views = [v for v in frame.findChildren(HeadMapView) if _shown_in(v, frame)]
    for v in views:
        v.grab()  # (painted: its layout is made as it paints)
    maps = [(v, v.map, v.lay) for v in views]
    maps += [(p.map, p.head_map(), p.map_layout) for p in frame.findChildren(ComparePanel)
             if _shown_in(p.map, frame) and p.map_layout is not None]
    bad = []
    for box, hm, lay in maps:
        if hm is None or lay is None or (headmap.title_shown(hm, lay) == hm.title
                                         and headmap.caption_shown(hm, lay) == headmap.caption(hm, lay)):
            continue
        hover(box, QPoint(20, 6))  # on the title's first line
        if tip_shown(box.toolTip()) != headmap.whole_title(hm, lay).replace("\u00a0", " "):  # (as read back)
            bad.append(f"{hm.title!r} painted {headmap.title_shown(hm, lay)!r}, hover {box.toolTip()!r}")
    return bad


def _why_heading_whole(canvas) -> list[str]:
    """Why here?'s title and subtitle (the score and the model) fit their lines' box: each wrapped
    as it is painted is no wider than the box (painting clips a longer line at the box's edge,
    mid-letter), and the painted box lies inside the canvas."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QFontMetricsF

    from attnviz.figures.render import figure_font
    from attnviz.figures.why import WRAPPED

    canvas.repaint()
    lay, view, s = canvas.lay, canvas.view, canvas.lay.scale
    bad = []
    for rect, font, text in ((lay.title, figure_font(13 * s, bold=True), view.title()),
                             (lay.subtitle, figure_font(11 * s), view.subtitle())):
        wrapped = QFontMetricsF(font).boundingRect(QRectF(0, 0, rect.width(), 1e6), WRAPPED, text)
        if wrapped.width() > rect.width() + 0.01 or rect.right() > canvas.width():
            bad.append(f"{text!r} is {wrapped.width():.1f} px wide in a box of {rect.width():.1f} "
                       f"ending at {rect.right():.1f} of {canvas.width()}")
    return bad


def _patch_map_whole(box) -> list[str]:
    """The Patching map's title and metric line, as painted (wrapped), end above its column labels
    and inside its width; its cells inside the box."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QFontMetricsF

    from attnviz.figures.render import figure_font

    wrapped = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)  # each line whole, wrapped

    box.repaint()
    lay, view, bad = box.layout_(), box.view, []
    title = QFontMetricsF(figure_font(11, bold=True)).boundingRect(
        QRectF(4, 2, lay.width - 8, 1e6), wrapped, view.title())
    metric = QFontMetricsF(figure_font(9)).boundingRect(
        QRectF(4, title.bottom() + 2, lay.width - 8, 1e6), wrapped, view.metric_line())
    labels_top = lay.top - QFontMetricsF(figure_font(9)).height() - 4
    for name, r in (("title", title), ("metric line", metric)):
        if r.right() > box.width() or r.bottom() > labels_top + 0.5:
            bad.append(f"{name} {r.getRect()} past {box.width()} x {labels_top:.0f}")
    rows, cols = view.values.shape
    right, bottom = lay.xs[-1] + lay.cell_w, lay.ys[-1] + lay.cell_h
    if right > box.width() or bottom > box.height():
        bad.append(f"cells reach {right:.0f} x {bottom:.0f} in {box.width()} x {box.height()}")
    return bad


def _check_tabs(qtbot, w, size) -> tuple[dict, list[str]]:
    """Raise each tab of the window's dock tab bars: its name whole, its dock's content whole.
    -> (docks by title, titles checked)."""
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
            _dock_whole(w, docks[name], size)
            seen.append(name)
    return docks, seen


def _check_every_dock(qtbot, w, size):
    w.state.set_layer(18)  # (two-digit layers: the longest tile titles)
    w.state.set_focus(18, 8)
    _settle(qtbot, w)
    docks, seen = _check_tabs(qtbot, w, size)
    assert {"Focus head", "Corpus", "What heads do", "Compare", "Patching"} <= set(seen)

    # Why here?, below the tabs once a cell of the focused head asks for it: itself and the
    # focus view above it
    docks["Focus head"].raise_()
    w.why_dock.show()
    w.why_jobs.set_cell(18, 8, 45, 3)
    qtbot.waitUntil(lambda: w.why_jobs.attribution is not None, timeout=WAIT)
    _settle(qtbot, w)
    for dock in (w.why_dock, docks["Focus head"]):
        _dock_whole(w, dock, size)
    assert set(seen) | {"Why here?"} == set(docks), "every dock the window made is checked"
    w.why_dock.hide()

    # the grid's head titles lie whole inside the grid's view box (which clips them)
    docks["Focus head"].raise_()
    _settle(qtbot, w)
    assert grid_titles_cut(w) == [], f"grid titles cut at {size}"

    # the Corpus panel: every head's column and both titles inside their views
    docks["Corpus"].raise_()
    _settle(qtbot, w)
    panel = w.corpus_panel
    for gw, plot in ((panel.heat_w, panel.heat_w.plot), (panel.scatter_w, panel.scatter_w.plot)):
        port = gw.viewport().rect()
        for item in (plot.getViewBox(), plot.titleLabel.item):
            r = gw.mapFromScene(item.sceneBoundingRect()).boundingRect()
            assert port.contains(r), f"{type(item).__name__} {r.getRect()} outside {port.getRect()}"
    x0, x1 = panel.heat_w.vb.viewRange()[0]
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


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_toy_models_tabs_are_whole_with_a_patching_map(qtbot, tmp_path, size):
    """The toy decoder (2 layers x 8 heads) with its Patching map made (Corrupt, then Run): each
    tab raised, its content whole, the map's title and metric line painted whole."""
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text=IOI)
    w.resize(*size)
    _settle(qtbot, w)
    panel = w.patching_panel
    w.patching_dock.raise_()
    panel.propose()
    qtbot.waitUntil(lambda: panel.corrupt_box.text() != "", timeout=WAIT)
    panel.run()
    qtbot.waitUntil(lambda: w.patch_jobs.result is not None and not w.patch_jobs.running
                    and panel.map.view is not None, timeout=WAIT)
    w.state.set_focus(1, 7)
    _settle(qtbot, w)
    try:
        _, seen = _check_tabs(qtbot, w, size)
        assert {"Focus head", "What heads do", "Patching", "Generate"} <= set(seen)
    finally:
        w.patch_jobs.cancel()
        w.worker.wait_idle()
