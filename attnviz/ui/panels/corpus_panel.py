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
The scan as read, and an example as rich text, are corpus_scan.py's.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton,
    QSplitter, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.corpus_stats import DIAGONAL_LIMIT, HEAD_STATS, PROFILE_RULE, STAT_UNITS
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.data import DEFAULT_COLORMAP
from attnviz.figures.style import BACKGROUND, FOCUS, TEXT, WARNING, colormap_colors
from attnviz.ui.panels.corpus_scan import ScanView, example_html, head_readout, scatter_note, stat_value
from attnviz.ui.views.grid_items import level_ticks

SCATTER_TITLE = "heads by behaviour<br>(JS distance, MDS; colour: layer)"  # two lines: one is wider than a dock


MISSING = "#9a9a9a"  # a head's cell where no text gave the statistic a value (as the scan figure's grey)


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
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        self.open_button = QPushButton("Open scan…")
        self.open_button.setToolTip("a folder written by attnviz scan")
        top.addWidget(self.open_button)
        self.stat_box = QComboBox()
        for name in HEAD_STATS:
            self.stat_box.addItem(name + (f" ({STAT_UNITS[name]})" if name in STAT_UNITS else ""), name)
        self.stat_box.setToolTip("the statistic the heatmap shows: its mean over the scanned texts")
        top.addWidget(self.stat_box)
        top.addStretch(1)
        lay.addLayout(top)
        self.status = QLabel("No scan open: File → Open scan…, or attnviz scan --help")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        other = QHBoxLayout()
        self.model_note = QLabel("")
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
        self.heat_w = pg.GraphicsLayoutWidget()
        self.heat_w.setBackground(BACKGROUND)
        self.heat_plot = self.heat_w.addPlot()
        self.heat_plot.setMenuEnabled(False)
        self.heat_plot.hideButtons()
        self.heat_plot.setMouseEnabled(False, False)
        self.heat_plot.setLabel("left", "layer")
        self.heat_plot.setLabel("bottom", "head")
        self.heat_vb = self.heat_plot.getViewBox()
        self.heat_vb.invertY(True)
        self.heat_missing = pg.QtWidgets.QGraphicsRectItem()  # under the image: a head with no value
        self.heat_missing.setBrush(pg.mkBrush(MISSING))
        self.heat_missing.setPen(pg.mkPen(None))
        self.heat_plot.addItem(self.heat_missing)
        self.heat_img = pg.ImageItem(axisOrder="row-major")  # (a NaN cell is transparent)
        self.heat_plot.addItem(self.heat_img)
        self.heat_mark = pg.QtWidgets.QGraphicsRectItem()
        pen = pg.mkPen(FOCUS, width=2)
        pen.setCosmetic(True)
        self.heat_mark.setPen(pen)
        self.heat_mark.hide()
        self.heat_plot.addItem(self.heat_mark)
        self.cbar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get(DEFAULT_COLORMAP),
                                    interactive=False, width=14, colorMapMenu=False)
        self.cbar.setImageItem(self.heat_img)
        self.heat_w.addItem(self.cbar)
        for ax in ("left", "bottom"):
            self.heat_plot.getAxis(ax).setTextPen(pg.mkPen(TEXT))
        self.heat_w.setMinimumHeight(220)
        split.addWidget(self.heat_w)

        split.addWidget(self._build_scatter())

        self.examples_title = QLabel("Click a head for its top examples.")
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
        for i, stretch in enumerate((5, 3, 2)):
            split.setStretchFactor(i, stretch)
        self.heat_note = _note_label()  # what has no value (in the title it widened the plot past the dock)
        lay.addWidget(self.heat_note)
        lay.addWidget(split, 1)

    def _build_scatter(self) -> QWidget:
        """The heads by behaviour, with the line that names what it leaves out under it."""
        self.scatter_w = pg.GraphicsLayoutWidget()
        self.scatter_w.setBackground(BACKGROUND)
        self.scatter_plot = self.scatter_w.addPlot(title=SCATTER_TITLE)
        self.scatter_plot.setMenuEnabled(False)
        self.scatter_plot.hideButtons()
        self.scatter_plot.setMouseEnabled(False, False)
        self.scatter_plot.hideAxis("left")
        self.scatter_plot.hideAxis("bottom")
        self.scatter_w.setToolTip(PROFILE_RULE)
        self.scatter = pg.ScatterPlotItem(size=11, pen=pg.mkPen(BACKGROUND), hoverable=True,
                                          tip=self._point_tip)
        self.scatter_plot.addItem(self.scatter)
        self.scatter_w.setMinimumHeight(160)
        self.scatter_note = _note_label()  # what the scatter leaves out (a third title line overflowed)
        return _with_note(self.scatter_w, self.scatter_note)

    def _connect(self):
        self.open_button.clicked.connect(self.ask_open)
        self.stat_box.currentIndexChanged.connect(
            lambda i: self.set_stat(self.stat_box.itemData(i)))
        self.load_button.clicked.connect(self.load_scan_model)
        self.heat_w.scene().sigMouseClicked.connect(self._on_heat_clicked)
        self.heat_vb.sigResized.connect(self._head_ticks)
        self.scatter.sigClicked.connect(self._on_point_clicked)
        self.examples.itemActivated.connect(self._on_example)
        self.examples.itemClicked.connect(self._on_example)
        self.state.sigModelChanged.connect(self._check_model)
        self.state.sigResultChanged.connect(self._on_result)
        self.state.sigFocusChanged.connect(self._on_focus)

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
            from attnviz.ui.machinery.runner import describe_error

            shown = f"; still showing {self.scan.path}" if self.scan is not None else ""
            self.status.setText(f"Cannot open scan {path}: {describe_error(error)}{shown}")
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
        self.load_button.setText(f"Load {s.model_name}")
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
            from attnviz.ui.machinery.runner import describe_error

            if model is self.state.model and self.scan is not None:
                self.model_note.setText(f"Cannot read the files of {model.name} to compare them "
                                        f"with the scan's model: {describe_error(error)}")
                self.load_button.setText(f"Load {self.scan.model_name}")
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
        if self.head is not None:
            self._list_examples()  # the picked head's line names the statistic's mean

    def values(self) -> np.ndarray | None:  # [n_layer, n_head] of the statistic shown
        return None if self.scan is None else self.scan.means[self.stat]

    def _draw_heat(self):
        v = self.values()
        if v is None:
            return
        finite = v[np.isfinite(v)]
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        self.heat_img.setImage(np.asarray(v, dtype=np.float64), levels=(0.0, top), autoLevels=False)
        self.heat_img.setRect(QRectF(0, 0, v.shape[1], v.shape[0]))
        self.heat_missing.setRect(QRectF(0, 0, v.shape[1], v.shape[0]))
        self.cbar.setLevels((0.0, top))
        self.cbar.getAxis("right").setTicks(level_ticks(0.0, top))  # (as every colour bar writes them)
        self.heat_vb.setRange(QRectF(0, 0, v.shape[1], v.shape[0]), padding=0.02)
        self.heat_plot.getAxis("left").setTicks([[(l + 0.5, f"L{l}") for l in range(v.shape[0])]])
        self._head_ticks()
        missing = ("" if finite.size == v.size else "Map: no text gave a value." if not finite.size
                   else "Map: grey where no text gave a value.")
        self.heat_plot.setTitle(f"mean {self.stat} per head", color=TEXT)
        self.heat_note.setText(missing)
        self.heat_note.setVisible(bool(missing))
        self._mark_head()

    def _head_ticks(self, *_):
        """Every step-th head labelled, the step the least that keeps the labels the map's painted
        width allows apart (a narrow dock ran them together: "H9H10H11")."""
        if self.scan is None:
            return
        n_head, ax = self.scan.n_head, self.heat_plot.getAxis("bottom")
        fm = QFontMetricsF(ax.style["tickFont"] or self.heat_w.font())
        span = self.heat_vb.viewRange()[0]
        per_head = self.heat_vb.width() / max(span[1] - span[0], 1e-9)  # pixels
        room = fm.horizontalAdvance(f"H{n_head - 1}") + fm.horizontalAdvance("  ")
        step = max(1, int(np.ceil(room / per_head))) if per_head > 0 else n_head
        ax.setTicks([[(h + 0.5, f"H{h}") for h in range(0, n_head, step)]])

    def cell_center(self, layer: int, head: int) -> QPointF:
        """A head's cell centre in the heatmap's view coordinates (x: head, y: layer)."""
        return QPointF(head + 0.5, layer + 0.5)

    def _on_heat_clicked(self, ev):
        if self.scan is None:
            return
        p = self.heat_vb.mapSceneToView(ev.scenePos())
        head, layer = int(np.floor(p.x())), int(np.floor(p.y()))
        if 0 <= layer < self.scan.n_layer and 0 <= head < self.scan.n_head:
            ev.accept()
            self.pick_head(layer, head)

    def pick_head(self, layer: int, head: int) -> None:
        """List a head's top examples, and focus it in the window when the model is the scan's."""
        self.head = (int(layer), int(head))
        self._list_examples()
        self._mark_head()
        if self.model_matches():
            self.state.show_head(layer, head)

    def _mark_head(self):
        if self.head is None:
            self.heat_mark.hide()
            return
        l, h = self.head
        self.heat_mark.setRect(QRectF(h, l, 1, 1))
        self.heat_mark.show()

    def _on_focus(self, focus):
        if focus is not None and self.scan is not None and self.model_matches() \
                and tuple(focus) != self.head:
            self.head = tuple(focus)
            self._list_examples()
            self._mark_head()

    # --- the scatter of heads by behaviour ----------------------------------------------------
    def _draw_scatter(self):
        s = self.scan
        if not np.isfinite(s.means["texts"]).any():  # every text failed: no head has a place
            self.scatter.setData([])
            self.scatter_plot.setTitle("heads by behaviour: no text gave a value")
            self.scatter_note.hide()
            return
        n = s.n_layer * s.n_head
        colors = colormap_colors(DEFAULT_COLORMAP, max(s.n_layer, 2))
        spots = []
        for i in range(n):
            if not np.isfinite(s.coords[i]).all():  # a statistic with no value: not placed at 0
                continue
            l, h = divmod(i, s.n_head)
            c = colors[l]
            spots.append({"pos": (float(s.coords[i, 0]), float(s.coords[i, 1])), "data": (l, h),
                          "brush": pg.mkBrush(int(c[0]), int(c[1]), int(c[2]))})
        self.scatter.setData(spots)
        self.scatter_plot.autoRange()
        key = " … ".join(f"<span style='color: #{int(colors[l][0]):02x}{int(colors[l][1]):02x}"
                         f"{int(colors[l][2]):02x}'>\u25cf</span> L{l}" for l in sorted({0, s.n_layer - 1}))
        self.scatter_plot.setTitle(SCATTER_TITLE.replace("colour: layer", f"colour: layer, {key}"))
        note = scatter_note(s)
        self.scatter_note.setText(f"Scatter: {note}.")
        self.scatter_note.setVisible(bool(note))

    def _point_tip(self, x, y, data) -> str:
        return head_readout(self.scan, *data) if self.scan is not None else head_title(*data)

    def point_position(self, layer: int, head: int) -> QPointF:
        i = layer * self.scan.n_head + head
        return QPointF(float(self.scan.coords[i, 0]), float(self.scan.coords[i, 1]))

    def _on_point_clicked(self, _item, points, *_):
        if len(points):
            l, h = points[0].data()
            self.pick_head(l, h)

    # --- examples -----------------------------------------------------------------------------
    def _list_examples(self):
        self.examples.clear()
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
        for e in found:
            item = QListWidgetItem()
            item.setData(Qt.ItemDataRole.UserRole, e)
            label = QLabel(example_html(e, self._offsets(e.text)))
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setWordWrap(True)
            label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
            item.setSizeHint(label.sizeHint())
            self.examples.addItem(item)
            self.examples.setItemWidget(item, label)

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
    label = QLabel("")
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
