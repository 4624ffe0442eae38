"""The Corpus panel's two plots of a scan (corpus_panel.py): the layer x head map of one statistic's
per-head mean in the window's colormap, with its colour bar, the no-value colour (style.no_value_colour) where no text gave a value and the picked head
outlined; and the heads placed by behaviour (classical MDS of the Jensen-Shannon distances of their
mean statistics, Clark et al. 2019), coloured by layer. Each draws what it is given; the panel
keeps the scan, the statistic and the picked head, and writes the notes these return."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF

from attnviz.engine.analysing.corpus_stats import PROFILE_RULE
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.data import DEFAULT_COLORMAP
from attnviz.figures.style import BACKGROUND, FOCUS, TEXT, colormap_colors, no_value_colour, no_value_word
from attnviz.ui.panels.corpus_scan import ScanView, head_readout, scatter_note
from attnviz.ui.views.grid_items import level_ticks

SCATTER_TITLE = "heads by behaviour<br>(JS distance, MDS; colour: layer)"  # two lines: one is wider than a dock


class ScanMap(pg.GraphicsLayoutWidget):
    """The layer x head map of a statistic's per-head mean (x: head, y: layer), one colour bar,
    coloured through the window's colormap (set_colormap)."""

    def __init__(self, colormap: str = DEFAULT_COLORMAP):
        super().__init__()
        self.n_head = 0  # of the map drawn
        self.stat = ""  # the statistic drawn
        self.colormap = colormap
        self.setBackground(BACKGROUND)
        self.plot = self.addPlot()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.plot.setLabel("left", "layer")
        self.plot.setLabel("bottom", "head")
        self.vb = self.plot.getViewBox()
        self.vb.invertY(True)
        self.missing = pg.QtWidgets.QGraphicsRectItem()  # under the image: a head with no value
        # a head's cell where no text gave the statistic a value: the no-value colour of the map's colormap
        self.missing.setBrush(pg.mkBrush(*no_value_colour(colormap)))
        self.missing.setPen(pg.mkPen(None))
        self.plot.addItem(self.missing)
        self.img = pg.ImageItem(axisOrder="row-major")  # (a NaN cell is transparent)
        self.plot.addItem(self.img)
        self.mark = pg.QtWidgets.QGraphicsRectItem()
        pen = pg.mkPen(FOCUS, width=2)
        pen.setCosmetic(True)
        self.mark.setPen(pen)
        self.mark.hide()
        self.plot.addItem(self.mark)
        self.cbar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get(colormap),
                                    interactive=False, width=14, colorMapMenu=False)
        self.cbar.setImageItem(self.img)
        self.addItem(self.cbar)
        for ax in ("left", "bottom"):
            self.plot.getAxis(ax).setTextPen(pg.mkPen(TEXT))
        self.setMinimumHeight(220)
        self.vb.sigResized.connect(self.head_ticks)
        self.vb.sigResized.connect(self.fit_title)
        self._axes_shown(False)  # no scan yet: pyqtgraph's default range would read -400..400 "(x0.001)"
        self.cbar.setVisible(False)

    def set_colormap(self, name: str) -> bool:
        """Colour the map through colormap `name` (figures/data.COLORMAPS), a head with no value in
        its no-value colour -> whether it changed (the line draw returns names that colour)."""
        if name == self.colormap:
            return False
        self.colormap = name
        self.cbar.setColorMap(pg.colormap.get(name))  # (the image's table too)
        self.missing.setBrush(pg.mkBrush(*no_value_colour(name)))
        return True

    def _axes_shown(self, on: bool) -> None:
        for ax in ("left", "bottom"):
            self.plot.showAxis(ax, on)

    def draw(self, v: np.ndarray, stat: str) -> str:
        """Show `v` [n_layer, n_head], the mean of `stat` per head -> the line that says what has
        no value ("" where every head has one)."""
        finite = v[np.isfinite(v)]
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        self.img.setImage(np.asarray(v, dtype=np.float64), levels=(0.0, top), autoLevels=False)
        self.img.setRect(QRectF(0, 0, v.shape[1], v.shape[0]))
        self.missing.setRect(QRectF(0, 0, v.shape[1], v.shape[0]))
        self.cbar.setLevels((0.0, top))
        self.cbar.getAxis("right").setTicks(level_ticks(0.0, top))  # (as every colour bar writes them)
        self.vb.setRange(QRectF(0, 0, v.shape[1], v.shape[0]), padding=0.02)
        self._axes_shown(True)
        self.plot.getAxis("left").setTicks([[(l + 0.5, f"L{l}") for l in range(v.shape[0])]])
        self.n_head = v.shape[1]
        self.head_ticks()
        self.stat = stat
        self.fit_title()
        self.cbar.setVisible(bool(finite.size))  # (its numbers over no value would be a stand-in's)
        word = no_value_word(self.colormap)
        return ("" if finite.size == v.size else f"Map: no text gave a value ({word})." if not finite.size
                else f"Map: {word} where no text gave a value.")

    def head_ticks(self, *_):
        """Every step-th head labelled, the step the least that keeps the labels the map's painted
        width allows apart (a narrow dock ran them together: "H9H10H11")."""
        if not self.n_head:
            return
        n_head, ax = self.n_head, self.plot.getAxis("bottom")
        fm = QFontMetricsF(ax.style["tickFont"] or self.font())
        span = self.vb.viewRange()[0]
        per_head = self.vb.width() / max(span[1] - span[0], 1e-9)  # pixels
        room = fm.horizontalAdvance(f"H{n_head - 1}") + fm.horizontalAdvance("  ")
        step = max(1, int(np.ceil(room / per_head))) if per_head > 0 else n_head
        ax.setTicks([[(h + 0.5, f"H{h}") for h in range(0, n_head, step)]])

    def fit_title(self, *_):
        """"mean <stat> per head" where the map is as wide, else "mean <stat>", else that ending in
        an ellipsis; whole in the map's tooltip where shortened."""
        if self.stat:
            whole = f"mean {self.stat} per head"
            shown = fit_title(self.plot, [whole, f"mean {self.stat}"], cut=True, color=TEXT)
            self.setToolTip("" if shown == whole else whole)

    def head_at(self, scene_pos) -> tuple[int, int]:
        """The (layer, head) of the cell under a scene position (outside the map: off its range)."""
        p = self.vb.mapSceneToView(scene_pos)
        return int(np.floor(p.y())), int(np.floor(p.x()))

    def mark_head(self, head: tuple | None) -> None:
        """Outline the (layer, head) picked, or none."""
        if head is None:
            self.mark.hide()
            return
        l, h = head
        self.mark.setRect(QRectF(h, l, 1, 1))
        self.mark.show()


class ScanScatter(pg.GraphicsLayoutWidget):
    """The heads as points placed by behaviour, coloured by layer through the window's colormap
    (set_colormap), first layer to last as the map's 0 to its top; a point's tooltip reads its
    head's statistics."""

    def __init__(self, colormap: str = DEFAULT_COLORMAP):
        super().__init__()
        self.scan: ScanView | None = None  # of the points drawn
        self.colormap = colormap
        self.setBackground(BACKGROUND)
        self.plot = self.addPlot(title=SCATTER_TITLE)
        self.titles = [SCATTER_TITLE]  # the title, longest first, as the scatter's width allows (fit_title)
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.plot.hideAxis("left")
        self.plot.hideAxis("bottom")
        self.setToolTip(PROFILE_RULE)
        self.points = pg.ScatterPlotItem(size=11, pen=pg.mkPen(BACKGROUND), hoverable=True,
                                         tip=self._point_tip)
        self.plot.addItem(self.points)
        self.setMinimumHeight(160)
        self.plot.getViewBox().sigResized.connect(self.fit_title)

    def set_colormap(self, name: str) -> bool:
        """Colour the layers through colormap `name` from the next draw on. -> whether it changed."""
        changed, self.colormap = name != self.colormap, name
        return changed

    def draw(self, s: ScanView) -> str:
        """Place the scan's heads -> what the scatter leaves out ("" where nothing)."""
        self.scan = s
        if not np.isfinite(s.means["texts"]).any():  # every text failed: no head has a place
            self.points.setData([])
            self.titles = ["heads by behaviour: no text gave a value"]
            self.fit_title()
            return ""
        if not np.isfinite(s.coords).all(axis=1).any():  # no statistic places a head
            self.points.setData([])
            self.titles = ["heads by behaviour: no head placed"]
            self.fit_title()
            return scatter_note(s)
        n = s.n_layer * s.n_head
        colors = colormap_colors(self.colormap, max(s.n_layer, 2))
        spots = []
        for i in range(n):
            if not np.isfinite(s.coords[i]).all():  # a statistic with no value: not placed at 0
                continue
            l, h = divmod(i, s.n_head)
            c = colors[l]
            spots.append({"pos": (float(s.coords[i, 0]), float(s.coords[i, 1])), "data": (l, h),
                          "brush": pg.mkBrush(int(c[0]), int(c[1]), int(c[2]))})
        self.points.setData(spots)
        self.plot.autoRange()
        key = " … ".join(f"<span style='color: #{int(colors[l][0]):02x}{int(colors[l][1]):02x}"
                         f"{int(colors[l][2]):02x}'>\u25cf</span> L{l}" for l in sorted({0, s.n_layer - 1}))
        whole = SCATTER_TITLE.replace("colour: layer", f"colour: layer, {key}")
        self.titles = [whole, whole.replace("JS distance, MDS; ", "")]  # (the tooltip says how they are placed)
        self.fit_title()
        return scatter_note(s)

    def fit_title(self, *_) -> None:
        fit_title(self.plot, self.titles)

    def _point_tip(self, x, y, data) -> str:
        return head_readout(self.scan, *data) if self.scan is not None else head_title(*data)

    def point_position(self, layer: int, head: int) -> QPointF:
        """A head's point in the plot's view coordinates."""
        i = layer * self.scan.n_head + head
        return QPointF(float(self.scan.coords[i, 0]), float(self.scan.coords[i, 1]))


def fit_title(plot, candidates: list[str], cut: bool = False, **style) -> str:
    """Set `plot`'s title to the first of `candidates` (longest first) no wider than its view box,
    else to the last, cut to an ellipsis as wide (elidedText in the title's font) where `cut` (plain
    text); the title never sets the plot's least width: one wider than a narrow dock widened the
    plot past the dock's edge (the map's colour bar numbers cut, "0.7" of 0.75; the scatter's
    points past its edge).
    -> the title set."""
    label, room = plot.titleLabel, plot.getViewBox().width()
    for shown in candidates:
        plot.setTitle(shown, **style)
        if label.itemRect().width() <= room:
            break
    if cut and label.itemRect().width() > room:
        margin = 2 * label.item.document().documentMargin()  # (the label's text box, either side)
        shown = QFontMetricsF(_title_font(label)).elidedText(shown, Qt.TextElideMode.ElideRight, room - margin)
        plot.setTitle(shown, **style)
    label.setMinimumWidth(0)  # (the plot's width sets the title's, not the other way round)
    return shown


def _title_font(label) -> QFont:
    """The font a plot's title (a pyqtgraph LabelItem) is painted in: its text item's, at the size
    the label's style gives (`11pt`)."""
    font, size = QFont(label.item.font()), str(label.opts.get("size", ""))
    if size.endswith("pt"):
        font.setPointSizeF(float(size[:-2]))
    elif size.endswith("px"):
        font.setPixelSize(round(float(size[:-2])))
    return font
