"""MainWindow: the sentence box, the token strip, the heatmap grid, the focus view, side panels,
menus, shortcuts and remembered settings. Everything it shows is a view of one AppState."""

from __future__ import annotations

import logging

import shiboken6
from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import (
    QDockWidget, QFileDialog, QHBoxLayout, QMainWindow, QMenu, QMessageBox,
    QTabBar, QTabWidget, QToolButton, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.samples import SAMPLES
from attnviz.engine.reading.registry import WINDOW_MODEL
from attnviz.ui.machinery import settings as remembered
from attnviz.ui.views.compute_figures import ComputeFigures
from attnviz.ui.views.controls import LoadBox, SentenceBox, ViewControls
from attnviz.ui.views.focus import FocusView
from attnviz.ui.machinery.guard import install_exception_guard
from attnviz.ui.machinery.tuning import StartUpCollection, thaw_objects
from attnviz.ui.views.grid import HeatmapGrid
from attnviz.ui.views.guide import GuideBar
from attnviz.ui.views.load_outcome import report_load
from attnviz.ui.menus import Menus, about_html, show_keys
from attnviz.ui.views.notices import Notices, sentence, show_status
from attnviz.ui.views.side_tabs import make_readable
from attnviz.ui.views.tokens import TokenStrip
from attnviz.ui.panels.training_panel import TrainingPanel
from attnviz.ui.panel_docks import ATTRIBUTES, DOCKS, ON_SHOW, OnDemand, PanelDocks

log = logging.getLogger(__name__)
DOCK_NAMES = [name for docks in (*DOCKS.values(), *ON_SHOW.values()) for _title, name in docks]


class MainWindow(QMainWindow):
    budget_note = ""  # a remembered memory budget put back to auto: said once a model is shown
    def __init__(self, state, worker, settings: QSettings | None = None, model: str | None = None,
                 text: str | None = None, parent: QWidget | None = None,
                 panels: tuple[str, ...] = ("calc", "roles", "anatomy", "predict", "generate", "why",
                            "patching")):
        """A view of `state` (AppState), with `worker` the runner that follows it (app.assemble
        wires the two; app.create_window also starts the model's load). `model`: the model asked
        for; None opens the remembered one."""
        super().__init__(parent)
        self.settings = settings if settings is not None else remembered.app_settings()
        self.state, self.worker = state, worker
        for obj in (self.state, self.worker):  # from create_window(): owned by the window from here,
            if obj.parent() is None:  # so a job that outlives it never frees them off the main thread
                obj.setParent(self)
        self.pending_view: tuple[dict, str] | None = None  # (view, path) waiting for its model
        self.last_request = None  # the newest compute request whose outcome came
        # model None: the remembered one opens, and should its first load fail (a file since
        # deleted), the window's default instead (views/load_outcome.py)
        self.start_fallback = None if model else WINDOW_MODEL
        self.start_note: tuple[str, str] | None = None  # (that default, the banner once it is loaded)
        # start-up's collection, armed once its last job is done (_freeze_after_start_up)
        self._start_up_collection = StartUpCollection(self, self.state.sigTextChanged, self._busy)
        # start loading first: the weights load on the worker while the widgets are built
        # a first start opens WINDOW_MODEL (the registry says why), not the CLI's DEFAULT_MODEL
        if not self.state.loading:  # (create_window() started this load already)
            self.load_model(model or remembered.saved_model(self.settings))
        self._build_widgets()
        self._build_docks(panels)
        self.menus = Menus(self, self.samples_menu)
        self._connect()
        self._restore(model, text)
        # an exception escaping a slot shows in the banner (make_app installs the guard for the app;
        # here for windows made without it: tests, scripts)
        install_exception_guard().sigError.connect(self._on_unexpected_error)

    # --- construction ---------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        st = self.state
        self.text_box = SentenceBox(st)  # writes the state's text and paints its marks
        self.samples_menu = QMenu("&Samples", self)
        for sample in SAMPLES:
            act = self.samples_menu.addAction(sample.title)
            act.setToolTip(sample.look_for)
            act.triggered.connect(lambda _=False, s=sample.text: self.set_text(s))
        self.samples_menu.setToolTipsVisible(True)
        self.samples_button = QToolButton()
        self.samples_button.setText("Samples")
        self.samples_button.setToolTip("Sentences that show well-known head behaviours")
        self.samples_button.setMenu(self.samples_menu)
        self.samples_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)

        self.token_strip = TokenStrip(st)
        self.token_strip.setToolTip("The tokens as the model sees them. Click one to show its "
                                    "attention row in every head; click again to clear.")
        self.notices = Notices(st, self)
        self.controls = ViewControls(st)
        top = QHBoxLayout()
        top.addWidget(self.text_box, 1)
        top.addWidget(self.samples_button, 0, Qt.AlignmentFlag.AlignTop)

        self.grid = HeatmapGrid(st)
        self.grid.attach_compare(self.worker.compare_jobs)  # A | B | A - B while comparing
        central = QWidget()
        col = QVBoxLayout(central)
        col.setContentsMargins(6, 6, 6, 0)
        col.addWidget(self.notices.banner)
        col.addLayout(top)
        col.addWidget(self.token_strip)
        self.guide_bar = GuideBar(st)
        col.addWidget(self.guide_bar)
        col.addWidget(self.notices.text)
        col.addWidget(self.notices.model)
        col.addWidget(self.controls)
        # a model with training checkpoints: the step slider and its curves, built in this place
        # when the first such model comes (training_panel)
        self.training_place = QVBoxLayout()
        self.training_place.setContentsMargins(0, 0, 0, 0)
        col.addLayout(self.training_place)
        st.sigCheckpointsChanged.connect(lambda ckpts: ckpts is not None and self.training_panel)
        if st.checkpoints is not None:  # (a state that has them already: no signal will come)
            self.training_panel
        from attnviz.ui.panels.ablation_panel import AblationBar

        self.ablation_bar = AblationBar(st, self.worker.compare_jobs)  # while heads are switched off: what, and restore
        col.addWidget(self.ablation_bar)
        from attnviz.ui.views.long_view import GridOrLong

        self.grid_stack = GridOrLong(st, self.grid)  # the grid, or the long view of a long text
        col.addWidget(self.grid_stack, 1)
        self.setCentralWidget(central)

        sb = self.statusBar()
        self.load_box = LoadBox(st, self.cancel_load)
        figures = self.compute_figures = ComputeFigures(st)  # the query, the token count, the compute time
        sb.addPermanentWidget(self.load_box)
        sb.addPermanentWidget(figures.query_label)
        sb.addPermanentWidget(figures.tokens_label)
        sb.addPermanentWidget(figures.time_label)

    @property
    def training_panel(self) -> TrainingPanel:
        """The training panel, built when first asked for (it shows itself for a model with
        checkpoints, hides for another; most models have none)."""
        if self.training_place.count() == 0:
            self.training_place.addWidget(TrainingPanel(self.state))
        return self.training_place.itemAt(0).widget()

    def _build_docks(self, panels: tuple[str, ...]) -> None:
        # The side panels' tabs run down the window's edge, each name whole (ui/views/side_tabs.py)
        for area in (Qt.DockWidgetArea.RightDockWidgetArea, Qt.DockWidgetArea.LeftDockWidgetArea):
            self.setTabPosition(area, QTabWidget.TabPosition.East if area == Qt.DockWidgetArea.RightDockWidgetArea
                                else QTabWidget.TabPosition.West)
        self.focus_view = FocusView(self.state)
        self.focus_dock = QDockWidget("Focus head", self)
        self.focus_dock.setObjectName("focus_dock")
        self.focus_dock.setWidget(self.focus_view)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.focus_dock)
        self.raised_timer = QTimer(self)
        self.raised_timer.setSingleShot(True)
        self.raised_timer.setInterval(0)
        self.raised_timer.timeout.connect(self._remember_raised)
        self.remember_when_moved(self.focus_dock)
        for name in DOCK_NAMES:  # (None for a panel left out; the others' docks are made at start)
            setattr(self, name, None)
        self.corpus_panel = self.compare_panel = None  # built when first shown or opened
        self.panel_docks = PanelDocks(self, panels)
        self.panels_ready = not self.panel_docks.wanted

    def _build_panel_docks(self) -> None:
        """Every side panel not built yet, now (benchmarks and scripts that skip the first result)."""
        for panel in self.panel_docks.wanted:
            self.panel_docks.build(panel)

    def panels_done(self) -> None:
        """Every side panel is built (ui/panel_docks.py)."""
        self.panels_ready = True
        self._freeze_after_start_up()

    def _busy(self) -> bool:  # a keystroke's run or What heads do's analysis going (a stale one too)
        from attnviz.ui.machinery.effects_jobs import ANALYSIS_KIND

        return any(self.worker.at_work(kind) for kind in ("compute", ANALYSIS_KIND))

    def _freeze_after_start_up(self) -> None:
        """Start-up's objects out of the collector's way (tuning.freeze_start_up_objects) once its
        last job is done: What heads do's first analysis, whose threads the collection's hold on
        the GIL would stall before its prediction is painted; and then once no keystroke's run
        nor vocabulary build is going (tuning.StartUpCollection)."""
        from attnviz.ui.machinery.effects_jobs import ANALYSIS_KIND

        # (its prediction painted first)
        self.worker.when_none_running(ANALYSIS_KIND, self._start_up_collection.arm)

    def add_panel_dock(self, title: str, name: str, widget: QWidget) -> QDockWidget:
        """A side panel's dock holding `widget`: the one made empty for it at start, else a new one."""
        dock = self.panel_docks.take(name) or self.new_panel_dock(title, name)
        dock.setWidget(widget)
        return dock

    def new_panel_dock(self, title: str, name: str, shown: bool = True) -> QDockWidget:
        """A side panel's dock, where the saved window state had it, else tabbed beside the focus
        view (hidden unless `shown`)."""
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        if not self.restoreDockWidget(dock):
            self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
            self.tabifyDockWidget(self.focus_dock, dock)
            dock.setVisible(shown)
        self.menus.view_menu.addAction(dock.toggleViewAction())
        dock.dockLocationChanged.connect(self._tabs_readable_later)
        self.remember_when_moved(dock)
        self.tabs_readable()
        self._tabs_readable_later()  # (a bar Qt makes at its next layout)
        return dock

    def _remember_raised_later(self, *_shown) -> None:
        """Once the tab bars have settled (a raise hides the tab left): one timer of the window's,
        restarted, so a closing window's docks leave no timer holding it."""
        if shiboken6.isValid(self) and self.isVisible():
            self.raised_timer.start()

    def remember_when_moved(self, dock) -> None:
        """The docks are remembered as `dock` is raised, hidden, floated, docked or moved."""
        dock.visibilityChanged.connect(self._remember_raised_later)
        dock.topLevelChanged.connect(self._remember_raised_later)
        dock.dockLocationChanged.connect(self._remember_raised_later)

    def _remember_raised(self) -> None:
        """The raised tabs and the docks' layout are written as they change, not only on close (a
        crash keeps them); not before the saved ones are raised again as the window shows."""
        if self.isVisible() and not self.panel_docks.raised:
            remembered.remember_docks(self, self.settings)

    def _tabs_readable_later(self, *_area) -> None:
        if shiboken6.isValid(self):  # (docks report a move as the window goes: no timer then)
            QTimer.singleShot(0, self, self.tabs_readable)  # (cancelled if the window goes first)

    def tabs_readable(self) -> None:
        """Every tab bar of the docks shows whole names, each in sight where they fit it
        (ui/views/side_tabs.py; Qt makes a bar for each group of tabbed docks, and again when
        docks move)."""
        if not shiboken6.isValid(self):
            return
        for bar in self.findChildren(QTabBar):
            if bar.parent() is self:
                make_readable(bar)

    def _connect(self) -> None:
        st = self.state
        st.sigModelChanged.connect(self._on_model_changed)
        st.sigFocusChanged.connect(self._on_focus)
        st.sigStatus.connect(
            lambda msg: show_status(self.statusBar(), msg, 8000))
        st.sigLoadingChanged.connect(lambda source: source and self._on_loading(source))
        st.sigLoadReported.connect(lambda *outcome: report_load(self, *outcome))
        st.sigComputeReported.connect(self._on_compute_reported)

    def _restore(self, model: str | None, text: str | None) -> None:
        s = self.settings
        st = self.state
        self.resize(1400, 860)  # a first start's size (a saved geometry replaces it)
        if not remembered.restore_window(self, s):
            self.resizeDocks([self.focus_dock], [440], Qt.Orientation.Horizontal)
        remembered.restore(st, s)  # the display options, each value checked
        self.settings_writer = remembered.bind(st, s)  # from here changes are written once they pause
        self.panel_docks.make(remembered.saved_raised_tabs(s))  # empty, where the saved layout has them
        self.set_text(text if text is not None else remembered.saved_text(s))
        self._update_title()
        if self.state.loading:  # the load started before the signals were connected
            self._on_loading(self.state.loading)

    # --- actions ------------------------------------------------------------------------------
    def set_text(self, text: str) -> None:
        if self.text_box.toPlainText() != text:
            self.text_box.setPlainText(text)  # -> textChanged -> state.set_text
        self.state.set_text(text)

    def load_model(self, source: str) -> None:
        """Load a model in the background; the current one stays usable until it arrives."""
        self.worker.load(source)

    def cancel_load(self) -> None:
        """Stop waiting for the model being loaded: the current model stays, and the load's result
        is ignored when it comes (its thread cannot be stopped and finishes in the background)."""
        self.worker.cancel_load()

    def open_model_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a model file", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.load_model(path)

    def open_scan_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a scan folder (attnviz scan --out)")
        if path:
            self.open_scan(path)

    def open_scan(self, path: str) -> None:
        """Show a corpus scan in the Corpus panel, built into its dock (where the saved layout has it) the first time."""
        self.panel_docks.build("corpus")  # into its dock, where the saved layout has it
        self.corpus_dock.show()
        self.corpus_dock.raise_()
        self.corpus_panel.open_scan(path)

    def open_view_dialog(self) -> None:
        from attnviz.ui.export import export_folder

        # where the last export (image + sidecar) went, not the folder the app was started from
        path, _ = QFileDialog.getOpenFileName(self, "Open a view (JSON sidecar)",
                                              str(export_folder(self.settings)), "attnviz view (*.json)")
        if path:
            self.open_view(path)

    def open_view(self, path: str) -> None:
        from attnviz.ui.views.load_outcome import open_view

        open_view(self, path)

    def apply_view(self, view: dict, path: str = "") -> bool:
        """Show a view, all of it (True) or (with a message) nothing of it."""
        from attnviz.ui.export import apply_view

        problem = apply_view(self.state, view)
        if problem is not None:
            from attnviz.ui.machinery.runner import failure

            lead = f"Could not open view {path}" if path else "Could not open view"
            self.show_error(f"{failure(lead, problem)} The view was left as it was.")
            return False
        else:
            self.clear_error()
            kind = view.get("view")
            if kind == "compare":  # model B too (ui/panels/compare_menu.py)
                from attnviz.ui.panels.compare_menu import restore_compare

                restore_compare(self, view)
            if kind == "patching" and getattr(self, "patching_panel", None) is not None:
                self.patching_panel.restore(view)
            if self.predict_panel is not None and kind in ("prediction", "lens", "dla"):
                self.predict_dock.show()
                self.predict_dock.raise_()
                self.predict_panel.tabs.setCurrentIndex(1 if kind == "dla" else 0)
            return True

    def export_dialog(self) -> None:
        from attnviz.ui.export import ExportDialog

        ExportDialog(self.state, self, self.settings, self.worker.compare_jobs).exec()

    def show_keys(self) -> None:
        show_keys(self)

    def show_about(self) -> None:
        QMessageBox.about(self, "About attnviz", about_html(self.state.model))

    def show_error(self, message: str, kind: str = "") -> None:
        """The error banner; kind "compute" is cleared again by the next result."""
        shown = self.notices.show_error(message, kind)
        show_status(self.statusBar(), shown, 10000)

    def clear_error(self) -> None:
        """A later success clears the banner of an earlier failure."""
        self.notices.clear_error()

    def _on_unexpected_error(self, message: str) -> None:
        self.show_error(message)

    # --- state -> widgets ---------------------------------------------------------------------
    def _on_model_changed(self, _model) -> None:
        self._update_title()

    def _schedule_panels(self) -> None:
        """The side panels are built once the first compute is done, whatever it gave (a decoder
        without BOS has no result for the empty sentence): after its heatmaps are painted, and
        never on a later keystroke."""
        self.panel_docks.build_rest_later()

    def _on_compute_reported(self, req, message: str) -> None:
        """The outcome of a run (AppState.report_compute): its result is in the state, or `message`
        says why there is none."""
        self._schedule_panels()
        if not message:
            self.last_request = req
            if self.notices.kind == "compute":
                self.clear_error()
            return
        if not req.text.strip():  # the empty state (the runner cleared the result)
            return
        # the result on screen stays (never a half or NaN one); the banner says why it is old
        kept = (" The heatmaps show the last sentence that could be computed."
                if self.state.result is not None else "")
        self.show_error(sentence(f"Could not compute: {message}") + kept, kind="compute")

    def on_anatomy_visible(self, shown: bool) -> None:
        """The Anatomy tab is selected (or floating): runs keep the layer inputs it draws while it
        is; hidden, typing computes nothing for it."""
        self.state.set_inputs_wanted(shown)  # (the runner computes the inputs if the result lacks them)
        self.anatomy_panel.set_shown(shown)

    def _on_focus(self, focus) -> None:
        if self.state.long.run is not None:
            return  # a long text: the long view's own pane shows the focused head
        built = vars(self)  # (a panel not built yet is not shown)
        if focus is not None and not any(built.get(p) is not None and built[p].shown for p in (
                "anatomy_panel", "predict_panel", "circuits_panel", "patching_panel")):
            # (the Anatomy tab stays up: it lights the focused head's slices; so do What heads do,
            # Circuits, Patching)
            self.focus_dock.show()
            self.focus_dock.raise_()

    def _update_title(self) -> None:
        name = self.state.model_name
        self.setWindowTitle(f"attnviz — {name}" if name else "attnviz")

    # --- loading ------------------------------------------------------------------------------
    def _on_loading(self, source: str) -> None:
        self.statusBar().showMessage(f"Loading {source}…")

    def escape(self) -> None:
        """Esc stops waiting for a model that is loading; otherwise it clears the query token."""
        if self.state.loading:
            self.cancel_load()
        else:
            self.state.set_query(None)

    # --- shutdown -----------------------------------------------------------------------------
    def save_settings(self) -> None:
        self.settings_writer.flush()
        remembered.save_window(self, self.settings)

    def closeEvent(self, ev) -> None:
        self._start_up_collection.cancel()  # (a first analysis ending later starts none)
        thaw_objects()  # this window's objects, frozen at start-up, can be collected once it is gone
        self.save_settings()
        self.worker.cancel_load()  # a load blocked on a file must not hold the window open
        self.worker.shut_down(10000)  # (a result still on its way would start more work)
        super().closeEvent(ev)


for _attr in ATTRIBUTES:  # each side panel's attribute builds it when first read (ui/panel_docks.py)
    setattr(MainWindow, _attr, OnDemand(_attr))
