"""The Corpus panel: a scan folder (`attnviz scan`) seen from the window.

A view of AppState. A scan is read off the main thread (ui/machinery/corpus_jobs.py: DuckDB over
the Parquet files, then the heads' distances), and kept here as a `ScanView`: each
statistic's per-head mean, each head's top examples, and the heads placed by behaviour.
- a layer x head heatmap of the statistic picked; a click on a head lists its top examples, with
  the query and key tokens highlighted;
- a click on an example puts its text in the sentence box, focuses the head and, once the text is
  computed, picks the example's query token: the live view takes over;
- the heads as points in 2-D (classical MDS of the Jensen-Shannon distances of their mean
  statistics, Clark et al. 2019), coloured by layer; a click on a point focuses its head;
- a scan made with another model than the one loaded says so and offers to load it. "Another
  model" is told by the sha256 of the model's files that scan.json records (store.model_sha256),
  not by its name: a copy of the scan's model under another name is the same model, and a model
  that has the scan's name but other weights is not (its patterns are not the scan's). The loaded
  model's files are hashed off the main thread, once per model loaded.
The scan as read, and an example as rich text, are corpus_scan.py's; the heatmap and the scatter
corpus_views.py's.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton,
    QSplitter, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.corpus_stats import DIAGONAL_LIMIT, HEAD_STATS, STAT_UNITS
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.style import WARNING
from attnviz.ui.panels.corpus_scan import ScanView, example_html, stat_value
from attnviz.ui.panels.corpus_views import ScanMap, ScanScatter
from attnviz.ui.views.least_height import LeastHeightScroll
from attnviz.ui.views.fields import menu_text, plain_label, rich_label

STAT_TIP = "the statistic the heatmap shows: "  # then what its means are over (ScanView.stat_tip)


class CorpusPanel(QWidget):
    """The Corpus tab (module docstring). `jobs`: its reads, hashes and loads
    (ui/machinery/corpus_jobs.CorpusJobs)."""

    sigScanRead = Signal(object)  # ScanView, or None when a read failed
    sigModelChecked = Signal(str)  # model_state() once the loaded model is compared with the scan's

    def __init__(self, state, jobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.state = state
        self.jobs = jobs
        self.scan: ScanView | None = None
        self.stat = HEAD_STATS[0]
        self.head: tuple | None = None  # the head whose examples are listed
        self._pending_query = None  # (text, query_pos): picked once that text's result lands
        self._model_hash = (None, None)  # (the Model object, the sha256 of its files) once known
        self._build()
        self._connect()

    # --- building -----------------------------------------------------------------------------
    def _build(self):
        lay = QVBoxLayout()  # in a scroll area: a wrapped note never squeezes a plot below its least height
        top = QHBoxLayout()
        self.open_button = QPushButton("Open scan…")
        self.open_button.setToolTip("a folder written by attnviz scan")
        top.addWidget(self.open_button)
        self.stat_box = QComboBox()
        for name in HEAD_STATS:
            self.stat_box.addItem(name + (f" ({STAT_UNITS[name]})" if name in STAT_UNITS else ""), name)
        self.stat_box.setToolTip(STAT_TIP + "its mean over the scanned texts")
        top.addWidget(self.stat_box)
        top.addStretch(1)
        lay.addLayout(top)
        self.status = plain_label(QLabel("No scan open: File → Open scan…, or attnviz scan --help"))  # (a path)
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        other = QHBoxLayout()
        self.model_note = plain_label(QLabel(""))  # (model names)
        self.model_note.setWordWrap(True)
        self.model_note.setStyleSheet(f"color: {WARNING}")
        self.load_button = QPushButton("Load it")
        other.addWidget(self.model_note, 1)
        other.addWidget(self.load_button)
        lay.addLayout(other)
        self.model_note.hide()
        self.load_button.hide()

        # heatmap, scatter and examples one above the other, each the dock's full width: side by
        # side, a 440 px dock cut the heatmap's last heads, both titles and the scatter's edge
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)
        self.heat_w = ScanMap(self.state.colormap)
        split.addWidget(self.heat_w)

        split.addWidget(self._build_scatter())

        self.examples_title = plain_label(QLabel("Click a head for its top examples."))
        self.examples_title.setWordWrap(True)  # (unwrapped, a head's line widened the window past 1024 px)
        self.examples = QListWidget()
        self.examples.setWordWrap(True)
        box = QWidget()
        bl = QVBoxLayout(box)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.addWidget(self.examples_title)
        bl.addWidget(self.examples)
        box.setMinimumHeight(90)
        split.addWidget(box)
        for i, stretch in enumerate((4, 2, 4)):  # (the examples list shows two or three at 860 px high)
            split.setStretchFactor(i, stretch)
        self.heat_note = _note_label()  # what has no value (in the title it widened the plot past the dock)
        lay.addWidget(self.heat_note)
        lay.addWidget(split, 1)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(LeastHeightScroll(lay))

    def _build_scatter(self) -> QWidget:
        """The heads by behaviour, with the line that names what it leaves out under it."""
        self.scatter_w = ScanScatter(self.state.colormap)
        self.scatter_note = _note_label()  # what the scatter leaves out (a third title line overflowed)
        return _with_note(self.scatter_w, self.scatter_note)

    def _connect(self):
        self.open_button.clicked.connect(self.ask_open)
        self.stat_box.currentIndexChanged.connect(
            lambda i: self.set_stat(self.stat_box.itemData(i)))
        self.load_button.clicked.connect(self.load_scan_model)
        self.heat_w.scene().sigMouseClicked.connect(self._on_heat_clicked)
        self.scatter_w.points.sigClicked.connect(self._on_point_clicked)
        self.examples.itemActivated.connect(self._on_example)
        self.examples.itemClicked.connect(self._on_example)
        self.state.sigWeightsChanged.connect(self._check_model)  # (a training step has files of its own)
        self.state.sigResultChanged.connect(self._on_result)
        self.state.sigFocusChanged.connect(self._on_focus)
        self.state.sigDisplayChanged.connect(self._on_display)

    # --- opening a scan -----------------------------------------------------------------------
    def ask_open(self):
        path = QFileDialog.getExistingDirectory(self, "Open a scan folder (attnviz scan --out)")
        if path:
            self.open_scan(path)

    def open_scan(self, path) -> None:
        """Read a scan folder in the background, and hash the loaded model's files there unless
        known; the last scan shown stays until it is read."""
        self.status.setText(f"Reading {path}…")
        model = self.state.model
        self.jobs.read(path, model, self._known_hash(model), self._on_read)

    def _on_read(self, path, got, error) -> None:
        if error is not None:
            from attnviz.ui.machinery.runner import describe_error, failure

            shown = f" Still showing {self.scan.path}." if self.scan is not None else ""
            self.status.setText(failure(f"Cannot open scan {path}", describe_error(error)) + shown)
            self.sigScanRead.emit(None)
            return
        scan, (model, sha) = got
        if model is not None and sha:
            self._model_hash = (model, sha)
        self.set_scan(scan)
        self.sigScanRead.emit(scan)

    def set_scan(self, scan: ScanView) -> None:
        self.scan = scan
        self.head = None
        self.status.setText(f"{scan.path}: {scan.summary()}")
        self._draw_heat()
        self._draw_scatter()
        self._list_examples()
        self._check_model()

    # --- the scan's model against the loaded one ----------------------------------------------
    def _known_hash(self, model) -> str | None:
        held, sha = self._model_hash
        return sha if model is not None and held is model else None

    def model_state(self) -> str:
        """"none" (no scan, or no model loaded), "checking" (the loaded model's files are being
        hashed), "same" (the loaded model's files hash as the scan's model's did) or "other"."""
        m, s = self.state.model, self.scan
        if s is None or m is None:
            return "none"
        sha = self._known_hash(m)
        if sha is None:
            return "checking"
        return "same" if sha == s.model_sha256 else "other"

    def model_matches(self) -> bool:
        return self.model_state() == "same"

    def _check_model(self, *_):
        s, m = self.scan, self.state.model
        if s is not None and m is not None and self._known_hash(m) is None:
            self._hash_loaded_model()
        state = self.model_state()
        if s is None or state == "same":
            self.model_note.hide()
            self.load_button.hide()
            if s is not None and self.head is not None:
                self._list_examples()  # marked with the scan's own tokenizer
            if s is not None:
                self.sigModelChecked.emit(state)
            return
        if state == "checking":
            self.model_note.setText(f"Comparing the files of {m.name} with the scan's model…")
            self.model_note.show()
            self.load_button.hide()
            return
        if m is None:
            self.model_note.setText(f"This scan was made with {s.model_name}; no model is loaded. "
                                    "Its examples open in the live view once it is.")
        elif m.name == s.model_name:
            self.model_note.setText(
                f"This scan was made with other files under the name {s.model_name} (sha256 "
                f"{s.model_sha256[:12]}, the loaded model's {self._known_hash(m)[:12]}): its "
                "patterns are not the loaded model's. Its examples open in the live view once "
                f"the scan's model ({s.model}) is loaded.")
        else:
            self.model_note.setText(f"This scan was made with {s.model_name}; the window shows "
                                    f"{m.name}. Its examples open in the live view once "
                                    f"{s.model_name} is loaded.")
        self.load_button.setText(menu_text(f"Load {s.model_name}"))
        self.model_note.show()
        self.load_button.show()
        if self.head is not None:
            self._list_examples()  # unmarked: the loaded tokenizer is not the scan's
        self.sigModelChecked.emit(state)

    def _hash_loaded_model(self) -> None:
        """Hash the loaded model's files on a thread of their own (the newest model's wins)."""
        self.jobs.hash_model(self.state.model, self._on_hashed)

    def _on_hashed(self, model, sha, error) -> None:
        if error is not None or not sha:
            from attnviz.ui.machinery.runner import describe_error, failure

            if model is self.state.model and self.scan is not None:
                self.model_note.setText(failure(f"Cannot read the files of {model.name} to compare them "
                                                "with the scan's model", describe_error(error)))
                self.load_button.setText(menu_text(f"Load {self.scan.model_name}"))
                self.load_button.show()
            return
        self._model_hash = (model, sha)
        if model is self.state.model:
            self._check_model()

    def load_scan_model(self):
        if self.scan is not None:
            self.jobs.load(self.scan.model)

    # --- the heatmap --------------------------------------------------------------------------
    def set_stat(self, name: str) -> None:
        if name not in HEAD_STATS:
            return
        self.stat = name
        i = self.stat_box.findData(name)
        if i != self.stat_box.currentIndex():
            self.stat_box.setCurrentIndex(i)
        self._draw_heat()
        self._title_examples()  # the picked head's line names the statistic's mean; its examples
        # are the same (by weight), so the list is kept as it is, scrolled where it was

    def values(self) -> np.ndarray | None:  # [n_layer, n_head] of the statistic shown
        return None if self.scan is None else self.scan.means[self.stat]

    def _draw_heat(self):
        v = self.values()
        if v is None:
            return
        self.stat_box.setToolTip(STAT_TIP + self.scan.stat_tip(self.stat))
        missing = self.heat_w.draw(v, self.stat)
        self.heat_note.setText(missing)
        self.heat_note.setVisible(bool(missing))
        self.heat_w.mark_head(self.head)

    def _on_display(self) -> None:  # the window's colormap, the map's and the scatter's too
        if self.heat_w.set_colormap(self.state.colormap):
            self._draw_heat()  # (its line names the colormap's no-value colour)
        if self.scatter_w.set_colormap(self.state.colormap) and self.scan is not None:
            self._draw_scatter()

    def cell_center(self, layer: int, head: int) -> QPointF:
        """A head's cell centre in the heatmap's view coordinates (x: head, y: layer)."""
        return QPointF(head + 0.5, layer + 0.5)

    def _on_heat_clicked(self, ev):
        if self.scan is None:
            return
        layer, head = self.heat_w.head_at(ev.scenePos())
        if 0 <= layer < self.scan.n_layer and 0 <= head < self.scan.n_head:
            ev.accept()
            self.pick_head(layer, head)

    def pick_head(self, layer: int, head: int) -> None:
        """List a head's top examples, and focus it in the window when the model is the scan's."""
        self.head = (int(layer), int(head))
        self._list_examples()
        self.heat_w.mark_head(self.head)
        if self.model_matches():
            self.state.show_head(layer, head)

    def _on_focus(self, focus):
        if focus is not None and self.scan is not None and self.model_matches() \
                and tuple(focus) != self.head:
            self.head = tuple(focus)
            self._list_examples()
            self.heat_w.mark_head(self.head)

    # --- the scatter of heads by behaviour ----------------------------------------------------
    def _draw_scatter(self):
        note = self.scatter_w.draw(self.scan)
        self.scatter_note.setText(f"Scatter: {note}.")
        self.scatter_note.setVisible(bool(note))

    def point_position(self, layer: int, head: int) -> QPointF:
        return self.scatter_w.point_position(layer, head)

    def _on_point_clicked(self, _item, points, *_):
        if len(points):
            l, h = points[0].data()
            self.pick_head(l, h)

    # --- examples -----------------------------------------------------------------------------
    def _list_examples(self):
        self.examples.clear()
        self._title_examples()
        found = [] if self.scan is None or self.head is None else self.scan.examples.get(self.head, [])
        for e in found:
            item = QListWidgetItem()
            item.setData(Qt.ItemDataRole.UserRole, e)
            label = rich_label(QLabel(example_html(e, self._offsets(e.text))))
            label.setWordWrap(True)
            label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
            item.setSizeHint(label.sizeHint())
            self.examples.addItem(item)
            self.examples.setItemWidget(item, label)

    def _title_examples(self) -> None:  # the line over the examples: the picked head and its mean
        if self.scan is None or self.head is None:
            self.examples_title.setText("Click a head (heatmap or scatter) for its top examples.")
            return
        l, h = self.head
        found = self.scan.examples.get((l, h), [])
        if not found:
            self.examples_title.setText(f"{self._picked_line(l, h)}: no examples in this scan")
            return
        # (what is left out is the line's tooltip: in the line, it took the examples' room)
        self.examples_title.setText(
            f"{self._picked_line(l, h)}: top {len(found)} examples by weight; click one to open it")
        self.examples_title.setToolTip(
            "The first token (the sink) is left out, and so is the diagonal of a head mostly on "
            f"itself (mean diagonal mass over {DIAGONAL_LIMIT:g} on that text)")

    def _picked_line(self, l, h) -> str:
        return f"{head_title(l, h)} (mean {self.stat} {stat_value(self.scan, self.stat, l, h)})"

    def _offsets(self, text):
        """The text's token character spans from the loaded model's tokenizer, when it is the
        scan's model (the same tokens, so the same positions); else None."""
        m = self.state.model
        if not text or not self.model_matches() or m.tokenizer is None:
            return None
        try:
            return m.tokenizer.encode(text).offsets
        except Exception:  # noqa: BLE001 - the text is shown unmarked
            return None

    def _on_example(self, item):
        e = item.data(Qt.ItemDataRole.UserRole)
        self.open_example(e)

    def open_example(self, e) -> None:
        """The example's text into the sentence box, its head focused, and its query token picked
        when that text's result lands."""
        if not self.model_matches():
            self._check_model()
            self.state.show_status(f"This scan is of {self.scan.model_name}: load it to open its "
                                   "examples in the live view.")
            return
        if e.text is None:
            self.state.show_status(f"Text {e.text_id} is not in the scan's texts table.")
            return
        self._pending_query = (e.text, e.query_pos)
        self.state.set_text(e.text)
        self.state.show_head(e.layer, e.head)
        self._on_result(self.state.result)  # the same text again: its result is already here

    def _on_result(self, result):
        pending = self._pending_query
        if pending is None or result is None or result.text != pending[0]:
            return
        self._pending_query = None
        if 0 <= pending[1] < len(result.tokens):
            self.state.set_query(pending[1])


def _note_label() -> QLabel:  # a line by a plot in the warning colour, hidden until it has a say
    label = plain_label(QLabel(""))
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {WARNING}")
    label.hide()
    return label


def _with_note(plot: QWidget, note: QLabel) -> QWidget:
    lay = QVBoxLayout(box := QWidget())
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(plot, 1)
    lay.addWidget(note)
    return box
