"""The side panels' docks. Each is made at start, empty: its title, its place among the tabs and its
name in the saved layout are those of the panel it will hold. A panel is built into its dock the
first time the dock is shown (its tab raised, a menu's toggle) or anything asks for it (a window
attribute such as `predict_panel`, an export, a test); the others one per event-loop turn once the
first result is painted, so the first view never waits for the panels it does not show. Compare and
Corpus get docks too (ON_SHOW), hidden unless the saved layout shows them, their panels built only
when shown. The tabs raised when the window last closed are raised again as it shows, their panels
built then."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QDockWidget

LATER_MS = 30  # after the first result's report: its heatmaps are painted first

# each panel's docks (title, object name), in the order the tabs show them
DOCKS = {
    "calc": (("Calculator", "calc_dock"),),
    "roles": (("Head roles", "roles_dock"),),
    "anatomy": (("Anatomy", "anatomy_dock"),),
    "predict": (("What heads do", "predict_dock"),),
    "generate": (("Generate", "generate_dock"),),
    "why": (("Why here?", "why_dock"), ("Circuits", "circuits_dock")),  # why_panel.install
    "patching": (("Patching", "patching_dock"),),  # patching_panel.install
}
# docks every window makes, hidden on a first start, their panels built only when shown or opened
# (Models > Compare with…, File > Open scan…): the saved layout keeps their place between sessions
ON_SHOW = {
    "compare": (("Compare", "compare_dock"),),
    "corpus": (("Corpus", "corpus_dock"),),
}
# the window attributes a panel's build sets, each built on demand (MainWindow's OnDemand)
ATTRIBUTES = {
    "calc_panel": "calc", "roles_panel": "roles", "anatomy_panel": "anatomy",
    "predict_panel": "predict", "generate_panel": "generate",
    "why_panel": "why", "why_jobs": "why", "circuits_panel": "why", "circuits_jobs": "why",
    "patching_panel": "patching", "patch_jobs": "patching",
}


class OnDemand:
    """A window attribute set by a panel's build: reading it before then builds the panel (None
    for a panel the window leaves out). Once set, the instance's own value is read directly."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, window, owner=None):
        if window is None:
            return self
        window.panel_docks.build(ATTRIBUTES[self.name])
        return vars(window).get(self.name)


class PanelDocks(QObject):
    """The window's side panels: their empty docks at start, their builds now or later."""

    def __init__(self, window, panels: tuple[str, ...]):
        super().__init__(window)
        self.window = window
        self.wanted = [p for p in DOCKS if p in panels]
        self.waiting: dict[str, object] = {}  # object name -> a dock made empty, until its panel comes
        self.built: set[str] = set()
        self.later = False  # whether the builds after the first result are under way
        self.raised: list = []  # the docks raised when the window last closed, raised as it shows

    def make(self, raised: list[str] = ()) -> None:
        """Every wanted panel's dock, empty, where the saved layout has it (else tabbed beside the
        focus view), in the tabs' order; `raised`: the docks whose tabs were raised (or that were
        floating) when the window last closed, raised again as it shows where it still has them open (else the
        focus view's tab is the raised one: a first start, a panel left out, a dock closed)."""
        w = self.window
        for panel in self.wanted + list(ON_SHOW):
            for title, name in {**DOCKS, **ON_SHOW}[panel]:
                if name == "why_dock":
                    from attnviz.ui.panels.why_panel import make_why_dock

                    dock = make_why_dock(w)
                    w.remember_when_moved(dock)
                else:  # (Compare and Corpus hidden where no saved layout places them)
                    dock = w.new_panel_dock(title, name, shown=panel not in ON_SHOW)
                self.waiting[name] = dock
                setattr(w, name, dock)
                dock.visibilityChanged.connect(
                    lambda shown, p=panel, d=dock: shown and self.build(p, d))
        w.focus_dock.raise_()
        self.raised = [d for d in (w.findChild(QDockWidget, n) for n in raised)
                       if d is not None and not d.isHidden()]  # (a floating one: brought to the front)
        if self.raised:  # raised once the window shows: its tab bars are made as it lays them out
            w.installEventFilter(self)
        if "why" in self.wanted:  # a click in the focus view opens Why here?: built for the first
            w.focus_view.sigCellClicked.connect(self._cell_clicked)
        for panel in self.wanted + list(ON_SHOW):  # a floating dock the saved layout showed: in sight
            for dock in [getattr(w, name) for _title, name in {**DOCKS, **ON_SHOW}[panel]]:
                if dock.isFloating() and dock.isVisible():
                    self.build(panel, dock)

    def eventFilter(self, obj, ev) -> bool:
        if obj is self.window and ev.type() == QEvent.Type.Show:
            obj.removeEventFilter(self)
            for dock in self.raised:  # (shown: its panel is built now, as a click on its tab does)
                dock.raise_()
            self.raised = []  # (from here the raised tabs are the user's: the window remembers them)
        return False

    def _cell_clicked(self, *click) -> None:
        if "why" not in self.built:
            self.build("why")
            self.window.focus_view.sigCellClicked.emit(*click)  # (heard now by Why here?'s own slot)

    def take(self, name: str):
        """The empty dock made for `name`, handed to the panel's build (None if none was made)."""
        return self.waiting.pop(name, None)

    def build(self, panel: str, shown_dock=None) -> None:
        """Build `panel` into its dock now (nothing if built already or not wanted); `shown_dock`:
        the dock whose showing asked, told again so the panel's own hooks hear it."""
        if panel in self.built or (panel not in self.wanted and panel not in ON_SHOW):
            return
        self.built.add(panel)
        BUILDERS[panel](self.window)
        if shown_dock is not None and shown_dock.isVisible():
            shown_dock.visibilityChanged.emit(True)
        if panel in self.wanted and self.built.issuperset(self.wanted):
            self.window.panels_done()

    def build_rest_later(self) -> None:
        """Build the panels not built yet, one per event-loop turn, after the first result is painted."""
        if not self.later and len(self.built) < len(self.wanted):
            self.later = True
            QTimer.singleShot(LATER_MS, self, self._next)

    def _next(self) -> None:
        from attnviz.ui.machinery.effects_jobs import ANALYSIS_KIND

        w = self.window
        predict = vars(w).get("predict_panel")
        if predict is not None and predict.shown and w.worker.running(ANALYSIS_KIND) is not None:
            w.worker.when_none_running(  # its first prediction painted first
                ANALYSIS_KIND, lambda: QTimer.singleShot(LATER_MS, self, self._next))
            return
        rest = [p for p in self.wanted if p not in self.built]
        if rest:
            self.build(rest[0])
        if len(rest) > 1:
            QTimer.singleShot(0, self, self._next)


# --- each panel's build: the panel into its dock, wired to the window ---------------------------
def _into_dock(w, panel: str, widget) -> None:  # into the dock DOCKS names for the panel
    w.add_panel_dock(*DOCKS[panel][0], widget)


def _calc(w) -> None:
    from attnviz.ui.machinery.settings import keep_fields
    from attnviz.ui.panels.calc_panel import FIELD_TYPES, CalcPanel

    w.calc_panel = CalcPanel(w.state)
    keep_fields(w, "calc", w.calc_panel, FIELD_TYPES)  # what the user set, as the last session left it
    _into_dock(w, "calc", w.calc_panel)
    w.calc_dock.visibilityChanged.connect(w.calc_panel.set_shown)


def _roles(w) -> None:
    from attnviz.ui.panels.roles_panel import RolesPanel

    w.roles_panel = RolesPanel(w.state)
    _into_dock(w, "roles", w.roles_panel)
    # a dock behind another tab stays 'visible' (moved off screen): say when it is selected
    w.roles_dock.visibilityChanged.connect(lambda shown: shown and w.roles_panel.catch_up())


def _anatomy(w) -> None:
    from attnviz.ui.panels.anatomy_panel import AnatomyPanel

    w.anatomy_panel = AnatomyPanel(w.state)
    _into_dock(w, "anatomy", w.anatomy_panel)
    w.anatomy_dock.visibilityChanged.connect(w.on_anatomy_visible)


def _predict(w) -> None:
    from attnviz.ui.panels.predict_panel import PredictPanel

    w.predict_panel = PredictPanel(w.state)
    _into_dock(w, "predict", w.predict_panel)
    w.predict_dock.visibilityChanged.connect(w.predict_panel.set_shown)


def _generate(w) -> None:
    from attnviz.ui.machinery.settings import keep_fields
    from attnviz.ui.panels.generate_panel import FIELD_TYPES, GeneratePanel

    w.generate_panel = GeneratePanel(w.state)
    keep_fields(w, "generate", w.generate_panel, FIELD_TYPES)
    _into_dock(w, "generate", w.generate_panel)


def _why(w) -> None:  # Why here? below the focus view, and the Circuits tab
    from attnviz.ui.panels.why_panel import install

    install(w)


def _patching(w) -> None:  # the Patching tab (ui/panels/patching_panel.py)
    from attnviz.ui.panels.patching_panel import install

    install(w)


def _compare(w) -> None:  # an empty panel until Models > Compare with… opens B
    from attnviz.ui.panels.compare_menu import scrolled, stop_on_close
    from attnviz.ui.panels.compare_panel import ComparePanel

    w.compare_panel = ComparePanel(w.state, w.worker.compare_jobs)
    stop_on_close(w, w.add_panel_dock("Compare", "compare_dock", scrolled(w.compare_panel)))


def _corpus(w) -> None:  # an empty panel until a scan is opened
    from attnviz.ui.machinery.corpus_jobs import CorpusJobs
    from attnviz.ui.panels.corpus_panel import CorpusPanel

    w.corpus_panel = CorpusPanel(w.state, CorpusJobs(w.worker, w))
    w.add_panel_dock("Corpus", "corpus_dock", w.corpus_panel)


BUILDERS = {"calc": _calc, "roles": _roles, "anatomy": _anatomy, "predict": _predict,
            "generate": _generate, "why": _why, "patching": _patching, "compare": _compare,
            "corpus": _corpus}
