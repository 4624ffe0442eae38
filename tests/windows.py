"""The real window in the UI tests: opened offscreen on MiniLM (unless told) with per-test settings
in an INI file, never the user's."""

from PySide6.QtCore import QSettings

WAIT = 30000
# the long-text window tests (test_long_window.py, test_long_panels.py): a short prompt, and a
# paragraph they repeat past a lowered dense limit
PROMPT = "The keys to the cabinet are on the"
PARAGRAPH = ("Mr and Mrs Dursley, of number four, Privet Drive, were proud to say that they were "
             "perfectly normal, thank you very much. They were the last people you'd expect to be "
             "involved in anything strange or mysterious, because they just didn't hold with such "
             "nonsense. ")
# the tests of the docks' layout and raised tabs across restarts (test_raised_tabs.py,
# test_compare_corpus_docks_placed.py, test_panels_later.py): a small decoder, so What heads do predicts
TEXTBOOK = "attnviz-textbook"
CAT = "The cat sat on the mat because the cat"
# the Patching tests (test_patching_panel.py, test_patching_controls.py): the toy decoder and its
# clean text
TOY = "attnviz-toy-stdlib"
IOI = "When Mary and John went to the store, John gave a drink to"


def open_window(qtbot, settings_path, **kw):
    """The window on MiniLM (a first start opens SmolLM2: test_ui_gguf.py), its first heatmaps and
    side panels built."""
    from attnviz.ui.app import create_window

    kw.setdefault("model", "all-MiniLM-L6-v2")
    w = create_window(settings=QSettings(str(settings_path), QSettings.Format.IniFormat), **kw)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
    return w


def toy_window(qtbot, settings_path, text):
    """The window on the toy decoder with its training checkpoints loaded (Compare against one of
    them, the checkpoint slider), its first heatmaps and side panels built."""
    w = open_window(qtbot, settings_path, model=TOY, text=text)
    qtbot.waitUntil(lambda: w.state.checkpoints is not None, timeout=WAIT)
    return w


def toy_compared_with_checkpoint(qtbot, settings_path, text):
    """toy_window compared with its checkpoint 0 (Compare's B), the comparison of `text` in, its
    next-token numbers too; a generator for a fixture: the window, then Compare closed."""
    from attnviz.ui.machinery.compare_jobs import BSource
    from attnviz.ui.panels.compare_menu import open_compare

    w = toy_window(qtbot, settings_path, text)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    w.worker.wait_idle()
    yield w
    jobs.close()
    w.worker.wait_idle()


def toy_compared_with_itself(qtbot, settings_path, text):
    """toy_window compared with the toy decoder itself loaded again (Compare's B: every A − B is
    0), the comparison of `text` in; a generator for a fixture: the window, then Compare closed."""
    from attnviz.ui.machinery.compare_jobs import BSource
    from attnviz.ui.panels.compare_menu import open_compare

    w = toy_window(qtbot, settings_path, text)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text
                    and jobs.comparison.doc is not None, timeout=WAIT)
    w.worker.wait_idle()
    yield w
    jobs.close()
    w.worker.wait_idle()


def compare_tiles_image(qtbot, panel, mode):
    """The Compare panel's tiles in `mode` ("A", "B", "A-B") as painted -> (image, device pixel
    ratio), once its tiles are titled for that mode."""
    from attnviz.ui.machinery.compare_jobs import MODE_TITLES

    panel.jobs.set_mode(mode)
    qtbot.waitUntil(lambda: panel.tile_rects != [] and panel.tile_titles[0].startswith(MODE_TITLES[mode] + " "),
                    timeout=WAIT)
    drain_events()
    image = panel.tiles.grab().toImage()
    return image, image.devicePixelRatio()


def grid_pixel(g, x: float, y: float) -> tuple[int, int, int]:
    """The grid's painted colour on the screen pixel that shows the mosaic pixel holding image
    point (x, y) (grid_aim)."""
    c = g.gw.viewport().grab().toImage().pixelColor(grid_aim(g, x, y))
    return c.red(), c.green(), c.blue()


def focus_pixel(f, k: float, q: float) -> tuple[int, int, int]:
    """The focus view's painted colour on the screen pixel showing view point (key k, query q)."""
    from PySide6.QtCore import QPointF

    p = f.gw.mapFromScene(f.vb.mapViewToScene(QPointF(k, q)))
    c = f.gw.viewport().grab().toImage().pixelColor(p.x(), p.y())
    return c.red(), c.green(), c.blue()


def grid_aim(g, x: float, y: float):
    """The grid's viewport pixel that shows the mosaic pixel holding image point (x, y): Qt paints
    the mosaic into its rect rounded to whole pixels, each screen pixel the mosaic pixel at its
    centre, so the one nearest that pixel's centre shows it (a mosaic pixel a screen pixel or
    more: grid_fit)."""
    import math

    from PySide6.QtCore import QPoint

    box = g.gw.viewportTransform().mapRect(g.img.sceneBoundingRect())
    at = []
    for lo, hi, n, v in ((box.left(), box.right(), g.img.width(), x),
                         (box.top(), box.bottom(), g.img.height(), y)):
        a, b = math.floor(lo + 0.5), math.floor(hi + 0.5)
        at.append(math.floor(a + (math.floor(v) + 0.5) * (b - a) / n))
    return QPoint(*at)


def hover_grid(qtbot, g, x: float, y: float) -> str:
    """The grid's tooltip with the pointer on the screen pixel that shows the mosaic pixel holding
    image point (x, y) (grid_aim)."""
    _hover_taken(qtbot, g.gw, lambda: grid_aim(g, x, y))
    return g.gw.toolTip()


def raised_titles(w) -> list[str]:
    """The raised tab's name in each tab bar of the window's docks on screen (Qt hides the bars it
    keeps unused)."""
    from PySide6.QtWidgets import QTabBar

    return [bar.tabText(bar.currentIndex()) for bar in w.findChildren(QTabBar)
            if bar.parent() is w and bar.isVisible() and bar.currentIndex() >= 0]


def in_sight(widget) -> bool:
    """Shown, and not covered: a dock whose tab is not raised is visible with an empty region."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def widget(w, name: str):
    """The one widget of window `w` with object name `name` (the sentence box, the error banner,
    the layer spin box...), found in the window as a user finds it, not through an attribute."""
    from PySide6.QtWidgets import QWidget

    found = w.findChildren(QWidget, name)
    assert len(found) == 1, f"{len(found)} widgets named {name!r} in the window"
    return found[0]


def scores_settled(worker, msecs: int = WAIT) -> bool:
    """Score now what waits for typing to pause, and wait for the runner's jobs to end."""
    worker.flush_scores()
    return worker.wait_idle(msecs)


def wait_for_text(qtbot, w, text):
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=WAIT)


def drain_events():
    """Deliver every event already posted to the main thread: the results of jobs that have ended
    (they arrive queued), pending layouts and geometry changes. After this, a result that has not
    arrived never will from those jobs; no fixed wait can say as much."""
    from PySide6.QtCore import QCoreApplication

    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()


def grid_titles_cut(w) -> list[str]:
    """The layer view's head titles as drawn, each whole (not ended in an ellipsis) and inside the
    grid's view box, which clips its items (the viewport around it is larger): what is wrong, one
    line each; a title missing or one too many is wrong too."""
    from PySide6.QtWidgets import QGraphicsSimpleTextItem

    view, shown = w.grid.gw, w.grid.titles()
    titles = [t for t in view.scene().items()  # the scene's text items that are head titles
              if isinstance(t, QGraphicsSimpleTextItem) and t.isVisible()
              and (t.text() in shown or t.toolTip() in shown)]  # (shown short: whole in the tooltip)
    bad = [] if len(titles) == len(shown) == w.state.model.config.n_head else [
        f"{len(titles)} titles drawn, {len(shown)} named, {w.state.model.config.n_head} heads"]
    port = view.mapFromScene(w.grid.vb.sceneBoundingRect()).boundingRect()
    for t in titles:  # (drawn unscaled in screen pixels: the item's device transform places it)
        r = t.deviceTransform(view.viewportTransform()).mapRect(t.boundingRect()).toAlignedRect()
        if "\u2026" in t.text():
            bad.append(f"{t.text()!r} is cut short of {t.toolTip()!r}")
        if not port.contains(r):
            bad.append(f"{t.text()!r} at {r.getRect()} is cut by the grid's view box {port.getRect()}")
    return bad


def hover(widget, pos) -> None:
    """The pointer moved to `pos` (widget coordinates, no button held), delivered to the widget as
    Qt delivers a move (QTest.mouseMove may send none after a click at the same point)."""
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QMouseEvent
    from PySide6.QtWidgets import QApplication

    local = QPointF(pos)
    event = QMouseEvent(QEvent.Type.MouseMove, local, QPointF(widget.mapToGlobal(local)),
                        Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)




def hover_plot(qtbot, view_box, graphics_view, x: float, y: float) -> None:
    """The pointer moved over point (x, y) of a pyqtgraph view box (its data coordinates): moved
    again until the scene takes a move (pyqtgraph drops moves closer together than its rate limit)."""
    from PySide6.QtCore import QPointF

    _hover_taken(qtbot, graphics_view,
                 lambda: graphics_view.mapFromScene(view_box.mapViewToScene(QPointF(x, y))))


def _hover_taken(qtbot, graphics_view, aim) -> None:
    """The pointer moved to viewport pixel aim() until the scene takes a move."""
    def move() -> bool:  # (aimed again each time: a layout may move the view meanwhile)
        hover(graphics_view.viewport(), aim())
        return bool(taken)

    scene, taken = graphics_view.scene(), []
    scene.sigMouseMoved.connect(taken.append)  # after the views' own slots
    try:
        qtbot.waitUntil(move, timeout=WAIT)
    finally:
        scene.sigMouseMoved.disconnect(taken.append)


def axis_labels(axis) -> list:
    """[(text, box in the axis' coordinates)] of each tick label a pyqtgraph axis paints (the draw
    specs AxisItem.paint draws from)."""
    from PySide6.QtGui import QImage, QPainter

    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(text, box) for box, _flags, text in specs[2]]



def long_view_shown(window, qtbot, text: str, size=None):
    """`text` typed into `window` as a long text (any text over 40 tokens: the dense limit set so),
    its long view's tiles and large head drawn for the region shown -> the state's LongState."""
    from attnviz.engine.computing.longdoc import dense_bytes

    cfg = window.state.model.config
    if size is not None:
        window.resize(*size)
    window.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    window.set_text(text)
    lg = window.state.long
    qtbot.waitUntil(lambda: lg.run is not None and lg.pane is not None and lg.tiles is not None
                    and lg.pane.region == lg.region and lg.tiles.region == lg.region, timeout=WAIT)
    return lg


def painted_texts(hm, lay, monkeypatch) -> list[str]:
    """Every text figures.headmap.paint draws for the map `hm` laid out as `lay`, in order."""
    from PySide6.QtGui import QColor, QImage, QPainter

    from attnviz.figures import headmap
    said = []
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    p = QPainter(image)
    monkeypatch.setattr(p, "drawText", lambda *a: said.append(a[-1]), raising=False)
    headmap.paint(p, hm, lay, background=QColor("white"))
    p.end()
    return said


def dla_shown(qtbot, settings_path):
    """The toy decoder's window on IOI at 1500 x 950, What heads do raised on its DLA tab ->
    (the window, the DLA view); the caller waits for what it reads."""
    w = open_window(qtbot, settings_path, model=TOY, text=IOI, panels=("predict",))
    w.resize(1500, 950)
    w.predict_dock.show()
    w.predict_dock.raise_()
    panel = w.predict_panel
    panel.tabs.setCurrentWidget(panel.dla_view)
    return w, panel.dla_view


def tip_shown(tip: str) -> str:
    """A tooltip's text as Qt shows it: rich text where Qt reads it so (a tag on its first line)."""
    from PySide6.QtGui import QTextDocument
    from PySide6.QtGui import Qt as QtG
    if not QtG.mightBeRichText(tip):
        return tip
    doc = QTextDocument()
    doc.setHtml(tip)
    return doc.toPlainText()


def shown_label(label) -> str:
    """A QLabel's text as Qt shows it: plain, or as rich text where its format (auto) reads it so."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import Qt as QtG

    text = label.text()
    rich = label.textFormat() == Qt.TextFormat.RichText or (
        label.textFormat() == Qt.TextFormat.AutoText and QtG.mightBeRichText(text))
    return tip_shown("<qt>" + text + "</qt>") if rich else text


def scan_map_shown(qtbot, width: int, height: int):
    """Corpus's map (corpus_views.ScanMap) alone, shown at width x height and exposed."""
    from attnviz.ui.panels.corpus_views import ScanMap
    view = ScanMap()
    qtbot.addWidget(view)
    view.resize(width, height)
    view.show()
    qtbot.waitExposed(view)
    return view



def rgb(c) -> tuple[int, int, int]:
    """A QColor (a grabbed pixel's) as (r, g, b), as figures.style gives colours."""
    return c.red(), c.green(), c.blue()


def patch_map_shown(qtbot, view, width: int, height: int):
    """The Patching tab's map (patching_maps.PatchMap) alone, shown at width x height, exposed, then
    given `view` (a figures.patching.PatchView)."""
    from attnviz.ui.panels.patching_maps import PatchMap
    m = PatchMap(lambda *_: None)
    qtbot.addWidget(m)
    m.resize(width, height)
    m.show()
    qtbot.waitExposed(m)
    m.set_view(view)
    return m


def diagonal_result(attn):
    """A stand-in run showing `attn` [1, n_head, T, T] on the bare grid (bare_grid): tokens t0..t(T-1)."""
    import types

    import numpy as np

    T = attn.shape[-1]
    labels = [f"t{i}" for i in range(T)]
    return types.SimpleNamespace(attentions=attn, labels=labels, tokens=labels,
                                 offsets=[(i, i + 1) for i in range(T)],
                                 kv_group=np.arange(attn.shape[1]), text="x")


def bare_grid(qtbot, mode: str):
    """A HeatmapGrid on its own state, 900 x 500 px, shown, in view `mode` -> (state, grid)."""
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.views.grid import HeatmapGrid

    st = AppState()
    g = HeatmapGrid(st)
    qtbot.addWidget(g)
    g.resize(900, 500)
    g.show()
    qtbot.waitExposed(g)
    st.set_view_mode(mode)
    return st, g


def bare_focus(qtbot, st):
    """A FocusView on `st` (a result set), 420 x 520 px, shown, on head (0, 0) -> the view."""
    from attnviz.ui.views.focus import FocusView

    fv = FocusView(st)
    qtbot.addWidget(fv)
    fv.resize(420, 520)
    fv.show()
    qtbot.waitExposed(fv)
    st.set_focus(0, 0)
    return fv


def tile_side_on_screen(g) -> float:
    """Screen pixels the grid's first tile spans across."""
    from PySide6.QtCore import QPointF

    lo = g.layout_
    a, b = (g.gw.mapFromScene(g.img.mapToScene(QPointF(x, lo.y0[0]))) for x in (lo.x0[0], lo.x0[0] + lo.T))
    return float(b.x() - a.x())


def shown_pattern_pair(qtbot, att, width: int, height: int):
    """The Patching panel's clean and corrupted patterns (PatternPair) of head (0, 0), `att`
    [1, 1, T, T] on both sides, tokens w0..w(T-1), shown width x height px -> (the pair, its
    grabbed image)."""
    import types

    from attnviz.ui.panels.patching_maps import PatternPair

    labels = tuple(f"w{i}" for i in range(att.shape[-1]))
    panel = types.SimpleNamespace(
        jobs=types.SimpleNamespace(sides=types.SimpleNamespace(attentions_clean=att, attentions_corrupt=att),
                                   ask=types.SimpleNamespace(labels_clean=labels, labels_corrupt=labels)),
        state=types.SimpleNamespace(colormap="viridis"))
    pair = PatternPair(panel)
    qtbot.addWidget(pair)
    pair.resize(width, height)
    pair.head = (0, 0)
    pair.show()
    qtbot.waitExposed(pair)
    return pair, pair.grab().toImage()


def figure_words(monkeypatch, module) -> list:
    """The words `module`'s figures draw from now on, in order (its QPainter recorded)."""
    from PySide6.QtGui import QPainter

    drawn = []

    class Recording(QPainter):
        def drawText(self, *args):
            drawn.append(args[-1])
            return super().drawText(*args)

    monkeypatch.setattr(module, "QPainter", Recording)
    return drawn
