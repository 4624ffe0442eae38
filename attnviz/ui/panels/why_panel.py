"""Why here?: why the focused head attends from one token to another. A left click on a cell of the
focus view picks its query row, as it always did, and this panel follows the clicked cell (the first
click opens it; once closed it stays closed); a right click offers "Why here?", which opens the
panel at that cell. The panel lists the largest query ×
key component pairs with their share of the score, and the query-side and key-side totals
(figures/why.py paints them); the state's marked cell is the one explained (the focus view frames
it), and hovering a row sets the state's outlined heads (the grid outlines them). The
attribution is computed off the main thread (ui/machinery/why_jobs.py) and follows typing."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QFileDialog, QHBoxLayout, QLabel, QMainWindow, QMenu, QPushButton, QScrollArea,
    QSizePolicy, QVBoxLayout, QWidget,
)

from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.engine.computing.patterns import head_key
from attnviz.figures import why as fig
from attnviz.ui.views.fields import plain_label, plain_tip


class WhyCanvas(QWidget):
    """Paints a WhyView at the widget's width; hovering a row emits the heads it names."""

    sigHover = Signal(object)  # tuple of (layer, head)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view: fig.WhyView | None = None
        self.lay: fig.WhyLayout | None = None
        self.hover: fig.RowBox | None = None
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(240)  # the narrowest it lays out: a narrower panel scrolls sideways

    def sizeHint(self) -> QSize:
        return QSize(420, self.lay.height if self.lay is not None else 80)

    def set_view(self, view: fig.WhyView | None) -> None:
        self.view, self.hover = view, None
        self._relayout()

    def _relayout(self) -> None:
        self.lay = None if self.view is None else fig.layout(self.view, max(240, self.width()))
        self.setFixedHeight(self.lay.height if self.lay is not None else 0)
        self.update()

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        if self.view is not None and (self.lay is None or self.lay.width != max(240, self.width())):
            self._relayout()

    def lines(self) -> list[str]:
        """Every row as painted: label, value and share (tests, the read-out)."""
        return [] if self.lay is None else [box.text for box in self.lay.rows]

    def paintEvent(self, _ev) -> None:
        if self.view is None or self.lay is None:
            return
        p = QPainter(self)
        fig.paint(p, self.view, self.lay, self.hover)
        p.end()

    def hover_row(self, y: float) -> None:
        box = None if self.lay is None else fig.row_at(self.lay, y)
        if box is not self.hover:
            self.hover = box
            self.update()
            self.sigHover.emit(() if box is None else fig.heads_of(box.row.components))
            self.setToolTip("" if box is None else plain_tip(box.text))  # (it quotes token labels)

    def mouseMoveEvent(self, ev) -> None:
        self.hover_row(ev.position().y())

    def leaveEvent(self, _ev) -> None:
        self.hover_row(-1.0)


class WhyPanel(QWidget):
    def __init__(self, state, jobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.state, self.jobs = state, jobs
        self.note = plain_label(QLabel())
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.canvas = WhyCanvas()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.canvas)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.export_button = QPushButton("Export\u2026")
        self.export_button.setToolTip("The lists as PNG or SVG (with a JSON sidecar), or the whole "
                                      "table as JSON (the qk-attribution keys) or CSV")
        self.export_button.clicked.connect(self.export_dialog)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(self.export_button, 0, Qt.AlignmentFlag.AlignTop)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(row)
        lay.addWidget(scroll, 1)
        self.setToolTip("Why the head attends here: its score split into query-side x key-side parts "
                        "of the residual stream. Hover a row to outline its heads in the grid.")
        jobs.sigChanged.connect(self.refresh)
        self.refresh()

    def set_shown(self, shown: bool) -> None:
        self.jobs.set_shown(shown)

    def view(self) -> fig.WhyView | None:
        a, r, st = self.jobs.attribution, self.jobs.attributed, self.state
        if a is None or r is None:  # (the text and tokens are those of the run the numbers are of)
            return None
        return fig.why_view(a, model=st.model_name, result=r,
                            checkpoint=checkpoint_record(self.jobs.attributed_by),
                            display={"colormap": st.colormap, "scale_mode": st.scale_mode,
                                     "hide_first": st.hide_first, "view_mode": st.view_mode})

    def refresh(self) -> None:
        j = self.jobs
        v = self.view() if j.note == "" else None
        if v is not None:
            self.canvas.set_view(v)
            self.note.setText("Updating\u2026" if j.busy else fig.legend(v))
        else:
            if j.note or not j.busy:
                self.canvas.set_view(None)
            self.note.setText("Computing\u2026" if j.busy and not j.note else j.note)
        self.export_button.setEnabled(v is not None)

    def export_dialog(self) -> None:
        from attnviz.ui.export import export_folder, remember_folder

        v = self.view()
        if v is None:
            return
        a = v.attribution
        stem = f"{(self.state.model_name or 'model').replace('/', '_')}_{head_key(a.layer, a.head)}_q{a.query}k{a.key}_why"
        path, _ = QFileDialog.getSaveFileName(
            self, "Export Why here?", str(export_folder() / f"{stem}.png"),
            "PNG image (*.png);;SVG vector image (*.svg);;JSON (*.json);;CSV table (*.csv)")
        if path and self.export_to(path):
            remember_folder(path)

    def export_to(self, path: str, width: int = 1200) -> list:
        """Write the shown lists to `path` (the extension picks the format); the status bar says
        what was written or why not."""
        from attnviz.figures.panel_export import export_figure
        from attnviz.ui.machinery.runner import describe_error, failure

        v = self.view()
        try:
            written = export_figure(fig, v, path, width, self.state.model_path)
        except (OSError, fig.ExportError) as exc:
            self.state.show_status(failure("Export failed", describe_error(exc, writing=path)))
            return []
        self.state.show_status(f"Exported {written[0]}")
        return written


def focus_menu(window, jobs, dock, cell) -> QMenu:
    """The focus view's right-click menu on a cell: Why here?, and the query row as a click picks it."""
    st = window.state
    layer, head, q, k = cell
    menu = QMenu(window)
    why = menu.addAction(f"Why here? (query {q} \u2192 key {k})")
    why.triggered.connect(lambda: (dock.show(), dock.raise_(), jobs.set_cell(*cell)))
    pick = menu.addAction("Clear the query row" if st.query_pos == q else f"Pick query row {q}")
    pick.triggered.connect(lambda: st.toggle_query(q))
    return menu


WHY_SHARE = 0.4  # of the focus tab's height, Why here? below the focus view on its first show


def _share_column(window, dock) -> None:
    """Why here? and the focus view above it split the Focus head tab's height: its note whole
    and its lists in sight, the focus view still the larger."""
    inner = window.focus_dock.widget()
    if not dock.isVisible() or dock.isFloating() or not isinstance(inner, QMainWindow):
        return
    inner.resizeDocks([dock], [int(inner.height() * WHY_SHARE)], Qt.Orientation.Vertical)


def make_why_dock(window):
    """The Why here? dock, empty, inside the Focus head tab: below the focus view it explains, so
    the side tabs keep the window's height (a dock below the tab group would leave them part of
    it, too little for every name). Where the saved layout has it, else below the focus view,
    hidden until a cell asks for it (the window makes it at start)."""
    from PySide6.QtWidgets import QDockWidget

    from attnviz.ui.machinery.settings import restore_focus_tab

    inner = QMainWindow(window.focus_dock)  # the Focus head tab's own dock area
    inner.setWindowFlags(Qt.WindowType.Widget)
    inner.setObjectName("focus_tab")
    inner.setCentralWidget(window.focus_view)
    window.focus_dock.setWidget(inner)
    dock = QDockWidget("Why here?", inner)
    dock.setObjectName("why_dock")
    dock.setAllowedAreas(Qt.DockWidgetArea.TopDockWidgetArea | Qt.DockWidgetArea.BottomDockWidgetArea)
    inner.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, dock)
    if not restore_focus_tab(inner, window.settings):
        dock.hide()  # until a cell asks for it
        sized = [False]  # its first show gives it its share (Qt gives a dock shown later its least)

        def share(shown: bool) -> None:
            if shown and not sized[0] and not dock.isFloating():
                sized[0] = True
                QTimer.singleShot(0, window, lambda: _share_column(window, dock))
        dock.visibilityChanged.connect(share)
    window.menus.view_menu.addAction(dock.toggleViewAction())
    # opened from the View menu behind another tab: the Focus head tab raised, so it is seen
    dock.toggleViewAction().triggered.connect(
        lambda on: on and not dock.isFloating() and window.focus_dock.raise_())
    return dock


def install(window) -> None:
    """Build the Why here? and Circuits panels into their docks beside the focus view and wire them
    to it and the grid (the window calls this when it builds its panels: ui/panel_docks.py)."""
    from attnviz.ui.machinery.why_jobs import CircuitsJobs, WhyJobs
    from attnviz.ui.panels.circuits_panel import CircuitsPanel

    st = window.state
    window.why_jobs = jobs = WhyJobs(st, window.worker, window)
    window.why_panel = WhyPanel(st, jobs)
    dock = window.panel_docks.take("why_dock") or make_why_dock(window)
    window.why_dock = dock
    dock.setWidget(window.why_panel)
    dock.visibilityChanged.connect(window.why_panel.set_shown)
    window.why_panel.set_shown(dock.isVisible())

    def mark(*_):  # the explained cell, while the panel is open
        st.set_marked_cell(jobs.cell if dock.isVisible() else None)
    for sig in (jobs.sigChanged, dock.visibilityChanged):
        sig.connect(mark)
    window.why_panel.canvas.sigHover.connect(st.set_outlined)

    window.circuits_jobs = CircuitsJobs(st, window.worker, window)
    window.circuits_panel = CircuitsPanel(st, window.circuits_jobs)
    window.circuits_dock = window.add_panel_dock("Circuits", "circuits_dock", window.circuits_panel)
    window.circuits_dock.visibilityChanged.connect(window.circuits_panel.set_shown)

    offered = [False]  # whether a click has opened the panel yet in this window

    def clicked(cell, button, screen_pos):
        if button == Qt.MouseButton.RightButton:
            focus_menu(window, jobs, dock, cell).popup(screen_pos)
        elif button == Qt.MouseButton.LeftButton:
            if not offered[0] and not dock.isVisible():  # the first click opens it; closed, it stays so
                dock.show()
            offered[0] = True
            jobs.set_cell(*cell)  # (the focus view picks the query row itself)
    window.focus_view.sigCellClicked.connect(clicked)

