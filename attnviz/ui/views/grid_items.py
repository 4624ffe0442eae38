"""The graphics items of the heatmap mosaic (ui/views/grid.py) and the focus view: titles pinned to
the mosaic and drawn unscaled (Label), placed with the KV-group bands as the mosaic's layout says
(place_titles, place_bands), the mosaic's image item converted once per mosaic to
premultiplied ARGB (MosaicImage, argb_table), the colour bar sized to its font (colour_bar), the
outline of the state's outlined heads (HeadOutline) and what a view says with no model (NoModel).
A head's tile title and its shorter forms are figures/titles.py's."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, Qt
from PySide6.QtGui import (
    QBrush, QColor, QFont, QFontMetricsF, QImage, QPainter, QPainterPath, QPen, QTransform,
)
from PySide6.QtWidgets import (
    QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsSimpleTextItem, QLabel, QWidget,
)

from attnviz.engine.computing.patterns import head_title
from attnviz.figures.numbers import bar_ticks
from attnviz.figures.titles import cut_title
from attnviz.figures.style import BACKGROUND, TEXT, group_color, no_value_colour
from attnviz.ui.views.fields import plain_label
from attnviz.ui.views.mosaic import tile_index
from attnviz.ui.views.no_value_note import NoValueNote

HIGHLIGHT = QColor("#ffd400")  # outlined heads, the explained cell (not the focus colour)
NO_MODEL = "No model is loaded: pick one in the Models menu, or File \u25b8 Open model\u2026"


def no_model_text(state) -> str:
    """What a view says while it has no model: the one on its way, or that none is loaded."""
    return f"Loading {state.loading}\u2026" if state.loading else NO_MODEL


class NoModel(QObject):
    """While no model is loaded and no result shown (a failed first load, or before the first model
    arrives) a view's colour bar is not drawn (it would scale nothing) and, given a `frame`, a line
    over it says why it is empty; `then` is called when that changes (the focus view's title). Made
    before the view's other slots, the bar is shown again before a result redraws it."""

    def __init__(self, state, bar, frame: QWidget | None = None, then=None):
        super().__init__(frame)  # (the view holds it)
        self.state, self.bar, self.then = state, bar, None  # (`then` from the first change on)
        self.label, self.shown = None, None
        if frame is not None:
            self.label = plain_label(QLabel(frame))  # (it may name a model's path)
            self.label.setObjectName("no_model_note")
            self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            self.label.setWordWrap(True)
            self.label.setStyleSheet(f"color: {TEXT}; background: {BACKGROUND}; padding: 12px;")
            frame.installEventFilter(self)
        state.sigModelChanged.connect(self.follow)
        state.sigLoadingChanged.connect(self.follow)
        state.sigResultChanged.connect(self.follow)
        self.follow()
        self.then = then

    def eventFilter(self, obj, ev) -> bool:
        if ev.type() == QEvent.Type.Resize and self.label is not None:
            self.label.setGeometry(obj.rect())
        return False

    def follow(self, *_) -> None:
        none = self.state.model is None and self.state.result is None
        shown = (none, no_model_text(self.state))
        if shown == self.shown:
            return  # (a result on a result: nothing to change)
        self.shown = shown
        self.bar.setOpacity(0.0 if none else 1.0)  # (not hidden: its room in the layout stays)
        if self.label is not None:
            self.label.setText(shown[1])
            self.label.setVisible(none)
            self.label.raise_()
        if self.then is not None:
            self.then()


class HeadOutline:
    """The grid's outline of state.outlined (the heads a hovered Why here? row names), redrawn
    with the grid; an outlined head the grid does not show is named in the status line."""

    def __init__(self, grid, state):
        self.grid, self.state = grid, state
        self.item = QGraphicsPathItem()
        pen = QPen(HIGHLIGHT, 3)
        pen.setCosmetic(True)
        self.item.setPen(pen)
        self.item.setZValue(6)
        self.item.hide()
        grid.plot.addItem(self.item)
        for sig in (state.sigResultChanged, state.sigPreviewChanged, state.sigLayerChanged,
                    state.sigDisplayChanged):  # (connected after the grid's own: drawn after it)
            sig.connect(lambda *_: self.draw())
        state.sigOutlinedChanged.connect(self._on_outlined)

    def shown_heads(self) -> list[tuple[int, int]]:
        """The outlined heads the grid shows now."""
        lo = self.grid.layout_
        return [lh for lh in self.state.outlined if lo is not None and tile_index(lo, *lh) is not None]

    def _on_outlined(self, heads) -> None:
        self.draw()
        hidden = [lh for lh in heads if lh not in self.shown_heads()]
        names = ", ".join(head_title(l, h) for l, h in (hidden or heads))
        if hidden:
            self.state.show_status(f"{names}: not in the grid's layer {self.state.layer}; tick "
                                   "All layers to see it outlined")
        elif heads:
            self.state.show_status(f"{names}: outlined in the grid")

    def draw(self) -> None:
        lo, path = self.grid.layout_, QPainterPath()
        for lh in self.shown_heads():
            i = tile_index(lo, *lh)
            m = max(1.0, 0.06 * lo.T)
            path.addRect(QRectF(lo.x0[i] - m, lo.y0[i] - m, lo.T + 2 * m, lo.T + 2 * m))
        self.item.setPath(path)
        self.item.setVisible(not path.isEmpty())


class Label(QGraphicsSimpleTextItem):
    """A title pinned to a point of the mosaic and drawn unscaled in screen pixels by Qt itself
    (ItemIgnoresTransformations): a re-layout or a paint recomputes no per-label transform in Python,
    as pg.TextItem does for every label and change."""

    PAD = 2  # screen pixels between the label and its anchor point

    def __init__(self, font: QFont, anchor: tuple[float, float] = (0, 0)):
        super().__init__()
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations)
        self.setFont(font)
        self.setBrush(QBrush(QColor(TEXT)))
        self.setZValue(2)
        self._anchor = anchor
        self.full = ""  # the text asked for; shown cut with "…" where wider than fit_width
        self.forms: tuple[str, ...] = ("",)  # it, then shorter forms of it, shown where asked (use_form)
        self._keep = ""  # an end that a cut leaves whole (setText)
        self._form = 0
        self._width: float | None = None
        self._shown_for: tuple | None = None  # (forms, width, form) last shown
        self._place()

    def setAnchor(self, anchor: tuple[float, float]) -> None:  # (0, 0) top left .. (1, 1) bottom right
        if anchor != self._anchor:
            self._anchor = anchor
            self._place()

    def setText(self, text: str, *shorter: str, keep: str = "") -> None:
        """Show `text`, or the `shorter` form of it use_form picks, cut with "…" where wider than
        fit_width (before its end `keep`, where it ends so: a note that must stay), and the whole
        text in the tooltip where it is not shown whole."""
        self.full, self.forms, self._keep = text, (text, *(f for f in shorter if f)), keep
        self._show()

    def fits(self, text: str | None = None) -> bool:
        """Whether the whole text (or `text`, a form of it) fits fit_width."""
        text = self.full if text is None else text
        return self._width is None or QFontMetricsF(self.font()).horizontalAdvance(text) <= self._width

    def use_form(self, form: int) -> None:
        """Show shorter form `form` (0: the text; the shortest where it has fewer)."""
        self._form = int(form)
        self._show()

    def fit_width(self, pixels: float | None) -> None:
        """Show the text cut with "…" where wider than `pixels` (None: whole): a title as wide
        as its tile, not running into the next tile's."""
        self._width = pixels
        self._show()

    def _show(self) -> None:
        key = (self.forms, self._keep, self._width, self._form)
        if key == self._shown_for:
            return  # (a redraw's same title: nothing measured again)
        self._shown_for = key
        text = self.forms[min(self._form, len(self.forms) - 1)]
        if self._width is not None:
            text = cut_title(QFontMetricsF(self.font()), text, self._width, self._keep)
        self.setToolTip("" if text == self.full else self.full)
        if text != self.text():
            super().setText(text)
            self._place()

    def toPlainText(self) -> str:
        return self.text()

    def _place(self) -> None:
        r = super().boundingRect()
        ax, ay = self._anchor
        self.setTransform(QTransform.fromTranslate(-ax * r.width() + self.PAD * (1 - 2 * ax),
                                                   -ay * r.height() + self.PAD * (1 - 2 * ay)))


class MosaicImage(pg.ImageItem):
    """The mosaic's image item: pyqtgraph makes an 8-bit image with a colour table of the uint8
    mosaic and its table, which Qt's raster engine scales onto the screen far slower than the same
    pixels as premultiplied ARGB, at every repaint. So it is converted once per new mosaic, and
    each paint is a plain scaled copy.

    The window's own mosaics (uint8, row-major, levels 0..255, a [256, 4] uint8 table) take a
    shorter road to the same pixels: one NumPy lookup in the table as Qt converts it (argb_table),
    where pyqtgraph's render rebuilds its colour table in Python each time. A test holds the two
    equal byte for byte."""

    _tables: dict[bytes, np.ndarray] = {}  # RGBA table bytes -> [256] uint32 premultiplied ARGB

    def render(self):
        img, lut, levels = self.image, self.lut, self.levels
        if (isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 2 and img.size
                and self.axisOrder == "row-major" and not self.autoDownsample
                and isinstance(lut, np.ndarray) and lut.dtype == np.uint8 and lut.shape == (256, 4)
                and levels is not None and np.array_equal(np.asarray(levels, float).ravel(), (0, 255))):
            argb = argb_table(lut)[img]  # [h, w] uint32
            h, w = argb.shape
            self._argb = argb  # the QImage reads this buffer: kept as long as the image is
            self.qimage = QImage(argb.data, w, h, 4 * w, QImage.Format.Format_ARGB32_Premultiplied)
            self._renderRequired = self._unrenderable = False
            return
        self.render_by_pyqtgraph()

    def render_by_pyqtgraph(self):
        super().render()
        q = self.qimage
        if q is not None and q.format() == QImage.Format.Format_Indexed8:
            self.qimage = q.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)


def argb_table(lut: np.ndarray) -> np.ndarray:  # [256, 4] uint8 RGBA -> [256] uint32
    """The premultiplied ARGB32 pixel of each entry of an RGBA table, as Qt converts an 8-bit image
    with that colour table (the image pyqtgraph makes); cached per table."""
    key = lut.tobytes()
    table = MosaicImage._tables.get(key)
    if table is None:
        index = np.arange(256, dtype=np.uint8).reshape(1, 256)
        q = QImage(index.data, 256, 1, 256, QImage.Format.Format_Indexed8)
        q.setColorTable([int(a) << 24 | int(r) << 16 | int(g) << 8 | int(b) for r, g, b, a in lut])
        q = q.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
        table = np.frombuffer(q.constBits(), np.uint32, 256).copy()
        MosaicImage._tables[key] = table
    return table


_BANDS: dict[tuple[str, int, str], QBrush] = {}


def band_brush(color: str, alpha: int, background: str) -> QBrush:
    """An opaque brush of `color` at `alpha` laid over `background`, the pixel Qt's own blending
    gives (it paints it once): a KV-group band fills its rect plainly at each paint instead of
    blending it over the view's background, which it covers alone."""
    key = (color, alpha, background)
    brush = _BANDS.get(key)
    if brush is None:
        tint = QColor(color)
        tint.setAlpha(alpha)
        pixel = QImage(1, 1, QImage.Format.Format_ARGB32_Premultiplied)
        pixel.fill(QColor(background))
        painter = QPainter(pixel)
        painter.fillRect(0, 0, 1, 1, tint)
        painter.end()
        brush = _BANDS[key] = QBrush(pixel.pixelColor(0, 0))
    return brush


def update_bar(bar: pg.ColorBarItem, shown: tuple | None, levels: tuple[float, float], title: str,
               colormap: str | None = None) -> tuple:
    """Set colour bar `bar` to these limits, title and colormap (None: left as it is), each only
    where it differs from `shown`, what the bar shows (None: unknown): a title set again re-lays
    out the bar's view, a colormap draws the bar again, though neither changed. -> what it shows."""
    if colormap is not None and (shown is None or shown[0] != colormap):
        bar.setColorMap(pg.colormap.get(colormap))
    if shown is None or shown[1] != levels:
        lo, hi = levels  # (a bar of no span, A = B: its one label "0" in the middle of -1..1)
        bar.setLevels((lo - 1, hi + 1) if hi <= lo else levels)
        axis, ticks = bar.getAxis("right"), level_ticks(*levels)
        axis.setTicks(ticks)
        width = _axis_width(QFontMetricsF(axis.style["tickFont"]), [t for level in ticks for _, t in level])
        if width != axis.width():
            axis.setWidth(width)
    if shown is None or shown[2] != title:
        axis = bar.getAxis("right")
        axis.setLabel(title, color=TEXT)
        # pyqtgraph centres an axis title on the axis only when the axis is resized: a title set
        # after the bar's first layout would stay where the empty one was centred
        axis.resizeEvent(None)
    return colormap, levels, title


def colour_bar(colormap: str, font: QFont) -> pg.ColorBarItem:
    """The colour bar of the grid and the focus view, its axis as wide as its tick labels and its
    rotated title need at the widget's font, so they never overlap at a large UI font: here for
    labels up to "0.000", then for the widest label of each update's ticks (update_bar: a
    difference's ends read up to -0.00000123)."""
    bar = pg.ColorBarItem(values=(0, 1), colorMap=pg.colormap.get(colormap), interactive=False,
                          width=14, colorMapMenu=False)
    axis = bar.getAxis("right")
    axis.setTextPen(pg.mkPen(TEXT))
    axis.enableAutoSIPrefix(False)
    fm = QFontMetricsF(font)
    axis.setStyle(tickFont=font, tickTextOffset=5)
    axis.label.setFont(font)
    axis.setWidth(_axis_width(fm, []))
    axis.setTicks(level_ticks(0.0, 1.0))
    return bar


def _axis_width(fm: QFontMetricsF, labels: list[str]) -> int:
    """A colour bar axis' width for tick labels `labels` (none narrower than "0.000"): the widest,
    its offset from the bar and the rotated title beside it, at font metrics `fm`."""
    widest = max(fm.horizontalAdvance(t) for t in [*labels, "0.000"])
    return int(math.ceil(widest + 2 * fm.height() + 12))


def level_ticks(lo: float, hi: float) -> list[list[tuple[float, str]]]:
    """A colour bar's ticks from lo to hi as pyqtgraph's setTicks takes them: the two ends, then
    the round steps between (pyqtgraph leaves out this second level where it would crowd), each
    written as the exported figures write it (figures.numbers.bar_ticks)."""
    ends, steps = bar_ticks(lo, hi)
    return [ends, steps]


def place_titles(plot, titles: list, font: QFont, spots, texts) -> None:
    """The mosaic's pooled title Labels (`titles`, added to `plot` as more are needed) at `spots`
    ((x, y, anchor) each: mosaic.title_spots), with `texts` where given (None: each keeps its
    text), the rest hidden."""
    while len(titles) < len(spots):
        t = Label(font)
        plot.addItem(t)
        titles.append(t)
    for i, t in enumerate(titles):
        if i < len(spots):
            x, y, anchor = spots[i]
            t.setAnchor(anchor)
            t.setPos(x, y)
            if texts is not None:
                t.setText(texts[i])
            t.show()
        else:
            t.hide()


class NoValueUnder(MosaicImage):
    """The no-value colour (style.no_value_colour) under a picture whose cells with no value are
    transparent (the grid's gap entry, the focus view's NaN): an image of the picture's size and
    rect, so Qt rounds and samples it as it does the picture, opaque where a head is (`place`: 1)
    and transparent between heads, where the background shows. The line under the view's
    graphics `view` names the colour while a cell shows it (no_value_note.NoValueNote)."""

    def __init__(self, plot, view: QWidget):
        super().__init__(axisOrder="row-major")
        self.setZValue(-0.5)  # over the KV-group bands, under the picture
        self._mask = np.ones((1, 1), np.uint8)
        self._table = np.zeros((256, 4), np.uint8)
        self._name = ""
        plot.addItem(self)
        self.note = NoValueNote()
        frame = view.parentWidget().layout()  # (under the view, the colour bar at its right)
        frame.insertWidget(frame.indexOf(view) + 1, self.note)

    def show_for(self, name: str, first_key: bool, rows: bool, hide_first: bool) -> None:
        """Shown under colormap `name`, the line under the view naming the colour where it is
        painted: the hidden first key's column (`first_key`), rows with no weight left (`rows`)."""
        self.set_colormap(name)
        self.show()
        self.note.say(name, first_key, rows, hide_first)

    def hide(self) -> None:  # (the line naming the colour with it)
        super().hide()
        self.note.clear()

    def place(self, mask: np.ndarray, rect: QRectF | None = None) -> None:
        """[h, w] uint8, 1 where a head is, 0 between heads; `rect`: the picture's rect."""
        self._mask = mask
        self._paint()
        if rect is not None:
            self.setRect(rect)

    def set_colormap(self, name: str) -> None:
        if name != self._name:
            self._name = name
            self._table[1] = (*no_value_colour(name), 255)
            self._paint()

    def _paint(self) -> None:
        self.setImage(self._mask, levels=(0, 255), lut=self._table.copy(), autoLevels=False)


def head_mask(lo) -> np.ndarray:  # -> [height, width] uint8
    """1 on each head's square of a mosaic laid out as `lo` (mosaic.GridLayout), 0 between them."""
    mask = np.zeros((lo.height, lo.width), np.uint8)
    for y, x in zip(lo.y0, lo.x0):
        mask[y:y + lo.T, x:x + lo.T] = 1
    return mask


def place_bands(plot, bands: list, captions: list, font: QFont, segments, caption_h: float,
                alpha: int) -> None:
    """The KV-group bands behind each group's tiles, tinted with the group's colour at `alpha` on
    the background, and their "KV g" captions `caption_h` above the band's foot (`segments`:
    (x left, x right, y top, y bottom, group) each, mosaic.kv_segments); pooled as place_titles'
    Labels, the rest hidden."""
    while len(bands) < len(segments):
        b = QGraphicsRectItem()
        b.setPen(QPen(Qt.PenStyle.NoPen))
        b.setZValue(-1)
        plot.addItem(b)
        bands.append(b)
    while len(captions) < len(segments):
        c = Label(font, anchor=(0.5, 0))
        plot.addItem(c)
        captions.append(c)
    for i, b in enumerate(bands):
        if i < len(segments):
            xl, xr, yt, yb, g = segments[i]
            b.setRect(QRectF(float(xl), float(yt), float(xr - xl), float(yb - yt)))
            b.setBrush(band_brush(group_color(g), alpha, BACKGROUND))
            b.show()
        else:
            b.hide()
    for i, c in enumerate(captions):
        if i < len(segments):
            xl, xr, yt, yb, g = segments[i]
            c.setText(f"KV {g}")
            c.setPos(float(xl + xr) / 2, float(yb - caption_h))
            c.show()
        else:
            c.hide()
