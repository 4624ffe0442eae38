"""The long view: what the window shows instead of the heatmap grid while the text is a long run
(AppState.long). Every head of the layer as a tile, and the focused head large, both cells of the
same region of the T x T pattern at screen resolution from the one display model
(LongState.shown: figures/view.Shown.cells, under Hide first token and Value-weighted as the grid
shows them; figures/overview.py for the geometry and the colours): the max or the mean of each
block's defined rows, linear or log colours (under Hide first token a row of cells whose every
query row has no weight left is blank, at any zoom: Overview.blank). The wheel zooms about the
pointer and a dragged rectangle zooms to it, in the large pane or a tile; once the region has no
more tokens than the pane has pixels the cells are the exact weights (a hidden first key's column
in the no-value colour, style.no_value_colour) and the token labels appear; the token strip under the pane lists the region's keys.
Hover reads the exact shown weight of the token pair under the pointer at any zoom. A local
layer's window edge is drawn (dashed) where it passes through the region. Until a new overview arrives the last one stays, moved and scaled to
the new region at once (the runner's 'overview-*' jobs, ui/machinery/long_jobs.py)."""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSizePolicy, QSplitter,
    QStackedWidget, QVBoxLayout, QWidget,
)

from attnviz.engine.reading.token_text import cut_shown, isolated, tokens
from attnviz.engine.errors import AttnvizError
from attnviz.figures.data import ExportError
from attnviz.figures.style import no_value_legend
from attnviz.figures.long_picture import (
    REDUCE_WORDS, Layout, LongPicture, cells_text, options_text, scale_span,
    write_long_picture,
)
from attnviz.figures.overview import tops
from attnviz.figures.view import REDUCES
from attnviz.ui.views.fields import plain_label
from attnviz.ui.views.long_panes import HeadTiles, PatternPane

STRIP_MAX = 64  # keys the token strip lists
SCALE_TIP = "The colour scale of the large pane: from its lowest colour to its top, the largest cell shown"
EXPORT_TIP = ("Write the view as shown to a PNG: the tiles and the large head in the colours on "
              "screen, their colour scales said under them")


def region_text(region) -> str:
    r0, r1, c0, c1 = region
    return f"queries {r0:,}..{r1 - 1:,} × keys {c0:,}..{c1 - 1:,}"


class LinesLabel(QLabel):
    """A word-wrapped label `lines` lines high showing as much of its text (`full`) as those lines
    hold, cut after a whole word with " …": never a sliver of one more line."""

    def __init__(self, lines: int, parent=None):
        super().__init__(parent)
        plain_label(self)  # (the keys' strip quotes token labels; fits measures plain text)
        self.full, self.lines = "", 0
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.set_lines(lines)

    def set_lines(self, lines: int) -> None:
        if lines != self.lines:
            self.lines = lines
            self.setFixedHeight(self.fontMetrics().lineSpacing() * lines + 4)
            self._fit()

    def set_text(self, text: str) -> None:
        self.full = text
        self._fit()

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        self._fit()

    def fits(self, text: str) -> bool:
        """Whether `text` wrapped at this label's width takes no more than its lines."""
        fm, width = self.fontMetrics(), max(1, self.contentsRect().width() - 2)
        need = fm.boundingRect(QRect(0, 0, width, 1 << 20), int(Qt.TextFlag.TextWordWrap), text)
        return need.height() <= fm.lineSpacing() * self.lines

    def _fit(self) -> None:
        text = self.full
        if not self.fits(text):
            words = text.split(" ")
            lo, hi = 0, len(words)  # the most words that fit with " …" after them
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self.fits(" ".join(words[:mid]) + " …") else (lo, mid - 1)
            text = " ".join(words[:lo]) + " …"
        if text != self.text():
            self.setText(text)


class LongView(QWidget):
    """The long view (module docstring): a bar of options, the tiles and the large pane."""

    def __init__(self, state, parent=None):
        super().__init__(parent)
        self.state, self.long = state, state.long
        self.info = LinesLabel(2)  # (a fixed height: the views below never move as it changes)
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.reduce_combo = QComboBox()
        for r in REDUCES:
            self.reduce_combo.addItem(REDUCE_WORDS[r], r)
        self.reduce_combo.setToolTip("What each pixel of the overview shows of its block of weights")
        self.log_check = QCheckBox("Log colours")
        self.log_check.setToolTip("Colours on a log scale over 4 decades below the top: long-range "
                                  "weights are small")
        self.whole_button = QPushButton("Whole pattern")
        self.whole_button.setToolTip("Zoom out to every token (double-click does too)")
        self.export_button = QPushButton("Export picture…")
        self.export_button.setToolTip(EXPORT_TIP)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.setFormat("layer %v of %m")
        self.progress.hide()
        self.scale_label = LinesLabel(2)  # (a narrow bar wraps it, and cuts it at a word: its tooltip holds it)
        bar = QHBoxLayout()
        bar.addWidget(self.scale_label, 1)
        bar.addWidget(self.progress)
        bar.addWidget(self.reduce_combo)
        bar.addWidget(self.log_check)
        bar.addWidget(self.whole_button)
        bar.addWidget(self.export_button)

        self.tiles = HeadTiles(state)
        self.pane = PatternPane(state)
        self.key_strip = LinesLabel(2)
        self.key_strip.setToolTip("The keys of the region shown, as the model reads them")
        self.readout = plain_label(QLabel(" "))  # (the hover read-out quotes token labels)
        # text that changes with each view must not move the views (their sizes are the overviews')
        for label in (self.info, self.key_strip, self.readout, self.scale_label):
            label.setSizePolicy(QSizePolicy.Policy.Ignored, label.sizePolicy().verticalPolicy())
        self.readout.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        right = QWidget()
        rcol = QVBoxLayout(right)
        rcol.setContentsMargins(0, 0, 0, 0)
        rcol.addWidget(self.pane, 1)
        rcol.addWidget(self.key_strip)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tiles)
        split.addWidget(right)
        split.setSizes([500, 500])
        self.splitter = split

        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.info)
        col.addLayout(bar)
        col.addWidget(split, 1)
        col.addWidget(self.readout)

        lg = self.long
        self.reduce_combo.currentIndexChanged.connect(
            lambda i: lg.set_reduce(self.reduce_combo.itemData(i)))
        self.log_check.toggled.connect(lg.set_log)
        self.whole_button.clicked.connect(lg.reset_zoom)
        self.export_button.clicked.connect(self.export_dialog)
        for area in (self.tiles, self.pane):
            area.sigHover.connect(self.readout.setText)
        lg.sigRunChanged.connect(lambda _r: self.refresh())
        lg.sigViewChanged.connect(self.refresh)
        lg.sigImagesChanged.connect(self.refresh)
        lg.sigProgress.connect(self._on_progress)
        for sig in (state.sigLayerChanged, state.sigFocusChanged, state.sigHeadLabelsChanged):
            sig.connect(lambda *_: self.refresh())
        state.sigDisplayChanged.connect(self.refresh)

    def scale_text(self) -> str:
        """The pane's colour scale: 0 (or, log, LOG_DECADES below the top) to its top, and under
        Hide first token what the hidden key's colour means."""
        ov = self.long.pane
        if ov is None:
            return ""
        top = float(tops(ov.values, "per-head")[0])
        hidden = f" · {no_value_legend(self.state.colormap)}" if ov.options[0] else ""
        return f"colours: {scale_span(top, self.long.log)}{hidden}"

    def picture(self) -> LongPicture | None:
        """What the view shows, as its export draws it; None while the tiles or the large head are
        still being drawn: until both are the overviews of the run, layer, region, heads (the pane's:
        the focused one), reduction and display options shown now (a new run of an edited text
        keeps the last images on screen, not in the export)."""
        lg = self.long
        if lg.run is None or lg.tiles is None or lg.pane is None:
            return None
        shown = lg.shown()
        layer = min(self.state.layer, shown.n_layer - 1)
        now = (layer, lg.region, lg.reduce, shown.applied)
        for ov, heads in ((lg.tiles, tuple(range(shown.n_head))), (lg.pane, (lg.head(),))):
            if ((ov.layer, ov.region, ov.reduce, ov.options) != now or tuple(ov.heads) != heads
                    or ov.source is not lg.run):
                return None
        return LongPicture(self.state.model_name, lg.patterns.T, layer, lg.head(), lg.tiles, lg.pane,
                           self.state.colormap, self.state.scale_mode, lg.log, *self.tiles.title_parts(layer))

    def export_picture(self, path) -> Layout:
        """Write the view as shown to the PNG `path` (figures/long_picture.py) -> its layout;
        ExportError while it is still computed."""
        pic = self.picture()
        if pic is None:
            raise ExportError("the view is still being drawn: export it once it is shown")
        return write_long_picture(pic, path)

    def export_dialog(self) -> None:
        """Ask for a PNG file and write the view as shown to it; a failure is said in the read-out."""
        from PySide6.QtWidgets import QFileDialog

        from attnviz.ui.export import export_folder, remember_folder
        from attnviz.ui.machinery.runner import describe_error, failure

        pic = self.picture()
        if pic is None:  # (the button is off meanwhile)
            self.readout.setText("The view is still being drawn: export it once it is shown")
            return
        name = f"{(self.state.model_name or 'model').replace('/', '_')}_L{pic.layer}_long.png"  # (the layer shown)
        path, _ = QFileDialog.getSaveFileName(self, "Export the long view", str(export_folder() / name),
                                              "PNG image (*.png)")
        if not path:
            return
        try:
            self.export_picture(path)
        except (AttnvizError, OSError) as exc:
            self.readout.setText(failure("Export failed", describe_error(exc, writing=path)))
            return
        remember_folder(path)
        self.state.show_status(f"Exported {path}")

    def _on_progress(self, i: int, n: int) -> None:
        self.progress.setVisible(n > 0)
        if n > 0:
            self.progress.setRange(0, n)
            self.progress.setValue(i)

    def resizeEvent(self, ev) -> None:
        super().resizeEvent(ev)
        self._send_screen()

    def showEvent(self, ev) -> None:
        super().showEvent(ev)
        self._send_screen()

    def _send_screen(self) -> None:
        self.long.set_screen(self.tiles.tile_px(), self.pane.pixels())

    def refresh(self) -> None:
        lg = self.long
        self.reduce_combo.setCurrentIndex(REDUCES.index(lg.reduce))
        self.log_check.setChecked(lg.log)
        if lg.run is None:
            self.info.set_text("")
            self.key_strip.set_text("")
        else:
            lp, r = lg.patterns, lg.region
            layer = min(self.state.layer, lp.n_layer - 1)
            ov, applied = lg.pane, lg.shown().applied
            now = ov is not None and ov.region == r and ov.options == applied
            tl = lg.tiles
            tl = tl if tl is not None and tl.region == r and tl.options == applied else None
            res = (cells_text(ov, tl) if now else "computing…") + options_text(applied)
            res_ = lg.run.result
            count = (f"{cut_shown(res_.labels, res_.offsets, short=True)} of {tokens(res_.n_tokens_full)} "
                     "(the model's positions)"
                     if res_.truncated else tokens(lp.T))
            self.info.set_text(f"Long text: {count} · "
                               f"layer {layer} · {region_text(r)} · {res}")
            self.info.setToolTip(self.info.full)  # (a narrow window's lines may not hold it)
            self.scale_label.set_text(self.scale_text())
            self.scale_label.setToolTip(f"{SCALE_TIP}:\n{self.scale_label.full}")
            labels = lg.run.result.labels
            keys = labels[r[2]:min(r[3], r[2] + STRIP_MAX)]
            more = " …" if r[3] - r[2] > STRIP_MAX else ""
            self.key_strip.set_text(f"keys {r[2]:,}..{r[3] - 1:,}:  " + " ".join(map(isolated, keys)) + more)
        pic = self.picture()
        self.export_button.setEnabled(pic is not None)
        self.export_button.setToolTip(EXPORT_TIP if pic is not None else
                                      "The view is still being drawn: its picture can be written once it is shown")
        self._send_screen()
        self.tiles.update()
        self.pane.update()


class GridOrLong(QStackedWidget):
    """The heatmap grid, or the long view while the text is a long run."""

    def __init__(self, state, grid, parent=None):
        super().__init__(parent)
        self.grid = grid
        self.long_view = LongView(state)
        self.long_view.setObjectName("long_view")
        self.addWidget(grid)
        self.addWidget(self.long_view)
        state.long.sigRunChanged.connect(
            lambda run: self.setCurrentWidget(self.grid if run is None else self.long_view))
        self.currentChanged.connect(lambda _i: self.updateGeometry())

    def minimumSizeHint(self):
        """The page shown's least size, not the largest of both pages' (a stack's): the long view's
        bars kept the grid 200 px taller than it needs, so a 700 px window could not hold the toy
        model's window with its training curves."""
        page = self.currentWidget()
        return page.minimumSizeHint() if page is not None else super().minimumSizeHint()
