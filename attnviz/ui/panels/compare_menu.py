"""Models > Compare with…: where model B comes from (the Compare panel itself, and its imports,
load only when Compare is first shown or opened: the window's start does not wait for them)."""

from __future__ import annotations

import shiboken6
from PySide6.QtWidgets import QFileDialog, QMenu

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.views.fields import menu_text

QUANT_TYPES = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "F16", "BF16")


class CompareMenu(QMenu):
    """Models > Compare with…: a file, a folder, a store model, a training checkpoint of this
    model, or this model quantized to a type; and Stop comparing."""

    def __init__(self, w, models_menu):
        super().__init__("&Compare with\u2026", w)
        self.w, self.models_menu = w, models_menu
        self.aboutToShow.connect(self.fill)

    def fill(self) -> None:
        self.clear()
        w, st = self.w, self.w.state
        a = st.model
        if a is None:
            self.addAction("(no model loaded)").setEnabled(False)
            return
        self.addAction("A model file (GGUF)\u2026").triggered.connect(self._pick_file)
        self.addAction("A model folder\u2026").triggered.connect(self._pick_folder)
        quant = self.addMenu(menu_text(f"{a.name} quantized to"))
        for t in QUANT_TYPES:
            quant.addAction(t).triggered.connect(lambda _=False, t=t: open_compare(w, BSource("quantized", t)))
        ckpts = st.checkpoints
        if ckpts is not None:
            sub = self.addMenu("A training checkpoint")
            for i in range(len(ckpts)):
                sub.addAction(f"{i}: {ckpts.infos[i].label()}").triggered.connect(
                    lambda _=False, i=i: open_compare(w, BSource("checkpoint", i)))
        infos = self.models_menu.infos or []
        if infos:
            self.addSeparator()
            for info in infos:  # by name, as the Models menu opens it: B is named as A's title names A
                self.addAction(menu_text(info.name)).triggered.connect(
                    lambda _=False, s=info.name or str(info.path): open_compare(w, BSource("model", s)))
        self.addSeparator()
        stop = self.addAction("Stop comparing")
        stop.setEnabled(w.worker.compare_jobs.active)
        stop.triggered.connect(w.worker.compare_jobs.close)

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Compare with a model file", "",
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            open_compare(self.w, BSource("model", path))

    def _pick_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.w, "Compare with a model folder")
        if folder:
            open_compare(self.w, BSource("model", folder))


def open_compare(w, source: BSource) -> None:
    """Show the Compare panel (built into its dock the first time, like the Corpus panel) and open B."""
    w.panel_docks.build("compare")  # into its dock, where the saved layout has it (ui/panel_docks.py)
    w.compare_dock.show()
    w.compare_dock.raise_()
    w.worker.compare_jobs.open(source)


def stop_on_close(w, dock) -> None:
    """Closing the panel leaves Compare (a tab behind another stays open)."""
    dock.toggleViewAction().toggled.connect(lambda on: on or _panel_closed(w))


def scrolled(panel):
    """The panel in a scroll area as wide as the dock: its tiles, strip and map keep their titles
    and rows whole, and a dock shorter than all of them shows its scroll bar."""
    from PySide6.QtWidgets import QFrame, QScrollArea

    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(panel)
    return scroll


def _panel_closed(w) -> None:
    """Leave Compare, unless the dock hid because its window is being destroyed (a script's Python
    exiting with the window open): the session goes with the window, and its change would reach
    views whose plot items are already deleted."""
    if shiboken6.isValid(w):
        w.worker.compare_jobs.close()


def restore_compare(w, view: dict) -> None:
    """File > Open view of an exported comparison: Compare with the B it records, in its mode (the
    text, layer and head are applied as for any view); the banner says so when it records none."""
    rec = view.get("compare")
    src = rec.get("b_source") if isinstance(rec, dict) else None
    if not isinstance(src, dict) or src.get("kind") not in ("model", "checkpoint", "quantized"):
        w.show_error("This comparison view records no model B: A alone is shown")
        return
    open_compare(w, BSource(src["kind"], src.get("value")))
    w.worker.compare_jobs.set_mode(str(rec.get("mode", "A-B")))
