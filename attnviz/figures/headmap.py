"""A layer x head map of one signed number per head (DLA: each head's direct contribution to
logit(target) - logit(alt); the ablation scan: the increase in loss when a head is switched off),
with the rest of the model as cells of their own: a column (the MLP of each layer) and a bottom row
(embeddings, biases). QPainter only, no widgets: the window's DLA and scan views paint it, and an
export writes the same picture.

Heads sit where the grid puts them: layer l is row l (top to bottom), head h column h (left to
right), a gap between KV groups. Colours: the anatomy's diverging blue-white-red, symmetric around
0, its limit the largest |value| of the heads (the other cells are clipped to it: an MLP often
writes ten times more than any head; the read-out gives every number)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen

from attnviz.engine.computing.patterns import head_title
from attnviz.figures.anatomy_parts import DIVERGING
from attnviz.figures.render import TEXT, figure_font
from attnviz.figures.style import ERROR, FOCUS, NO_VALUE_CHOICES, NO_VALUE_DISTANCE, colour_distance
from attnviz.figures.text_wrap import wrap
from attnviz.figures.numbers import plain_number, signed
from attnviz.figures.painted import painted_cell, painted_in

TITLE_LINES = 2  # the title, and the caption under it, each wrap to at most this many lines
TEXT_DARK = TEXT  # the paper ink (render.py): the maps are drawn on white, in the window too
GRID_LINE = QColor(0, 0, 0, 40)
MARK = QColor(ERROR)  # a switched-off head: crossed out
# (word, rgb) of a head with no value (NaN): far from every colour of the diverging map
ABSENT = next((c for c in NO_VALUE_CHOICES if colour_distance(c[1], DIVERGING) >= NO_VALUE_DISTANCE),
              NO_VALUE_CHOICES[0])


@dataclass(frozen=True)
class HeadMap:
    """What is drawn: values [n_layer, n_head], a per-layer column and bottom-row cells."""
    title: str
    values: np.ndarray  # [n_layer, n_head]
    unit: str  # what a number is ("logit", "nats")
    kv_group: np.ndarray | None = None  # [n_head]: a gap between groups
    column: tuple | None = None  # (name, [n_layer]) e.g. ("MLP", mlp)
    extras: tuple = ()  # ((name, value), ...) the bottom row
    marked: tuple = ()  # (layer, head) crossed out (switched off)
    focus: tuple | None = None  # (layer, head) outlined
    nonnegative: bool = False  # values never below 0 (a divergence): only white (0) .. red is used
    notes: tuple = ()  # what each bottom-row cell is, for its hover (one per extra, or none)
    note: str = ""  # what the values leave out, first in the caption (a line more for it)
    absent: str = ""  # what a head's NaN value means, for its hover (its cell painted ABSENT)

    def scale_text(self) -> str:
        """What the colours mean, for the caption, with the cells beyond the heads' limit (an MLP,
        the embeddings) named: they are drawn at the end of the scale, not at their values."""
        lim = self.limit
        if self.nonnegative:
            return f"white 0 to red {plain_number(lim)} {self.unit}" if lim > 0 else f"white: every head 0 {self.unit}"
        parts = ([(self.column[0], np.abs(np.asarray(self.column[1], float)).max(initial=0.0))]
                 if self.column is not None else [])
        parts += [(name, abs(float(v))) for name, v in self.extras]
        over = [(name, v) for name, v in parts if v > lim]
        text = (f"blue < 0 < red, \u00b1{plain_number(lim)} {self.unit}" if lim > 0
                else f"white: every head 0 {self.unit}; blue < 0 < red")
        if over:
            top = max(v for _, v in over)
            text += f" ({', '.join(n for n, _ in over)} up to \u00b1{plain_number(top)}: clipped)"
        if np.isnan(np.asarray(self.values, dtype=np.float64)).any():
            text += f"; {ABSENT[0]}: no value"
        return text

    @property
    def limit(self) -> float:
        """The largest |value| of the heads: the colours' half-range (0: every head is 0, white,
        and the other cells are drawn at full colour by their sign)."""
        v = np.asarray(self.values, dtype=np.float64)
        return float(np.abs(v[np.isfinite(v)]).max(initial=0.0))


@dataclass
class HeadMapLayout:
    width: int
    height: int
    cell: float
    x_heads: np.ndarray  # [n_head] left edge of each head's column
    y_layers: np.ndarray  # [n_layer] top of each layer's row
    x_column: float  # left edge of the per-layer column (when there is one)
    extra_rects: list = field(default_factory=list)  # [QRectF] the bottom row's cells
    title_h: float = 0.0
    left: float = 0.0
    across: bool = False  # layers left to right, heads top to bottom (layout_fit's wide boxes)
    x_layers: np.ndarray | None = None  # across: [n_layer] left edge of each layer's column
    y_heads: np.ndarray | None = None  # across: [n_head] top of each head's row
    title_lines: tuple = ()  # the title as painted, a line each (heading: at most TITLE_LINES)
    caption_lines: tuple = ()  # the caption under it, likewise
    heading_whole: tuple = (True, True)  # whether the title, the caption is painted whole
    extra_texts: tuple = ()  # the bottom row's cells' texts as painted (_extra_texts, fitted)

    def origin(self, layer: int, head: int) -> tuple[float, float]:
        """The top-left corner of head (layer, head)'s cell."""
        if self.across:
            return float(self.x_layers[layer]), float(self.y_heads[head])
        return float(self.x_heads[head]), float(self.y_layers[layer])


def _groups(hm: HeadMap) -> np.ndarray:
    n_head = hm.values.shape[1]
    return (np.asarray(hm.kv_group) if hm.kv_group is not None and len(hm.kv_group) == n_head
            else np.zeros(n_head, np.int64))


def _gapped(start: float, groups: np.ndarray, cell: float) -> np.ndarray:
    """Each head's offset along its axis, a gap of 0.4 cell between KV groups."""
    x, xs = start, []
    for h in range(len(groups)):
        if h and groups[h] != groups[h - 1]:
            x += 0.4 * cell
        xs.append(x)
        x += cell
    return np.asarray(xs, dtype=np.float64)


def layout_across(hm: HeadMap, width: int, height: int) -> HeadMapLayout:
    """The map turned a quarter: layers left to right, heads top to bottom (cells square, as large
    as fit). For maps of heads alone (no per-layer column, no bottom row)."""
    n_layer, n_head = hm.values.shape
    groups = _groups(hm)
    n_gaps = len({int(g) for g in groups.reshape(-1)}) - 1
    fm = QFontMetricsF(figure_font(11))
    left = fm.horizontalAdvance("H00 ") + 4
    lines, captions, whole = heading(hm, width, across=True)
    title_h = fm.height() * (len(lines) + len(captions) + 1) + 6  # the heading, a line of layer names
    cell = max(2.0, min((width - left - 6) / max(n_layer, 1),
                        (height - title_h - 6) / max(n_head + 0.4 * n_gaps, 1)))
    ys = _gapped(title_h, groups, cell)
    return HeadMapLayout(int(width), int(height), cell, np.zeros(0), np.zeros(0), 0.0, [], title_h,
                         left, True, left + np.arange(n_layer) * cell, ys, lines, captions, whole)


def layout_fit(hm: HeadMap, width: int, height: int) -> HeadMapLayout:
    """The orientation with the larger cells in width x height: layers down (layout) or, for a map
    of heads alone in a wide box, layers across (layout_across)."""
    down = layout(hm, width, height)
    if hm.column is not None or hm.extras:
        return down
    across = layout_across(hm, width, height)
    return across if across.cell > down.cell else down


def layout(hm: HeadMap, width: int, height: int) -> HeadMapLayout:
    """Place every cell in a width x height picture (cells square, as large as fit)."""
    n_layer, n_head = hm.values.shape
    groups = _groups(hm)
    n_gaps = len({int(g) for g in np.asarray(groups).reshape(-1)}) - 1  # (np.unique imports numpy.ma)
    fm = QFontMetricsF(figure_font(11))
    left = fm.horizontalAdvance("L00 ") + 4
    lines, captions, whole = heading(hm, width, across=False)
    title_h = fm.height() * (len(lines) + len(captions) + 1) + 6  # the heading, a line of head names
    n_cols = n_head + (1.4 if hm.column is not None else 0) + 0.4 * n_gaps
    n_rows = n_layer + (1.6 if hm.extras else 0)
    cell = max(2.0, min((width - left - 6) / max(n_cols, 1), (height - title_h - 6) / max(n_rows, 1)))
    xs = _gapped(left, groups, cell)
    x_column = (xs[-1] if n_head else left - cell) + 1.4 * cell
    ys = title_h + np.arange(n_layer) * cell
    extras, (texts, w_extra) = [], _extra_texts(hm, fm, cell, width - left - 6)
    y = title_h + (n_layer + 0.6) * cell
    ex = left
    for _ in hm.extras:
        extras.append(QRectF(ex, y, w_extra, cell))
        ex += w_extra + 0.4 * cell
    label_fm = QFontMetricsF(label_font(cell))
    texts = tuple(fitted(t, label_fm, r) for t, r in zip(texts, extras))
    return HeadMapLayout(int(width), int(height), cell, xs, ys, x_column, extras, title_h, left,
                         title_lines=lines, caption_lines=captions, heading_whole=whole, extra_texts=texts)


def _extra_texts(hm: HeadMap, fm: QFontMetricsF, cell: float, room: float) -> tuple[tuple, float]:
    """The bottom row's texts and its cells' width: each name with its number where the row fits
    the room beside the layer names, else the names alone (the hover gives the number), the cells
    then narrowed to the room where even those do not fit."""
    gaps = 0.4 * cell * max(len(hm.extras) - 1, 0)
    for texts in ([extra_label(name, v) for name, v in hm.extras], [name for name, _ in hm.extras]):
        w = max([cell * 2.5] + [fm.horizontalAdvance(t) + 8 for t in texts])
        if len(texts) * w + gaps <= room:
            return tuple(texts), w
    return tuple(texts), max(cell, (room - gaps) / max(len(texts), 1))


def label_font(cell: float):
    """The font of the labels beside and in the cells, as large as a cell of `cell` px allows."""
    return figure_font(min(11, max(7, cell * 0.8)))


def fitted(text: str, fm: QFontMetricsF, cell: QRectF) -> str:
    """`text` as it fits inside `cell` with a pixel to spare on every side: whole, else ending in an
    ellipsis, else "" (an ellipsis alone, or the whole text's ink too tall for the cell; the hover
    gives the cell's name and number). A text drawn past its cell was cut mid-letter at its edge."""
    room = cell.width() - 2
    cut = text if fm.horizontalAdvance(text) <= room else fm.elidedText(text, Qt.TextElideMode.ElideRight, room)
    if not cut.rstrip("\u2026") or fm.tightBoundingRect(text).height() > cell.height() - 2:
        return ""
    return cut


def text_origin(text: str, fm: QFontMetricsF, cell: QRectF) -> QPointF:
    """Where to draw `text` (its baseline's left end) for its ink to sit at `cell`'s centre."""
    ink = fm.tightBoundingRect(text)
    return QPointF(cell.center().x() - ink.center().x(), cell.center().y() - ink.center().y())


def colour(value: float, lim: float) -> QColor:
    r, g, b = DIVERGING[int(colour_indices(value, lim))]
    return QColor(int(r), int(g), int(b))


def colour_indices(values, lim: float) -> np.ndarray:  # [...] -> [...] int64 in 0..255
    """colour()'s index into DIVERGING for every value at once (finite values); a limit of 0 paints
    0 white and any other value at the end of its sign (beyond the limit: clipped)."""
    v = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0)  # (paint leaves a NaN cell out)
    scaled = v / lim if lim > 0 else np.sign(v) * 2.0
    return np.clip((scaled + 1) * 127.5, 0, 255).astype(np.int64)


_TABLE: list[QColor] = []


def colour_table() -> list[QColor]:
    """DIVERGING as QColors, made once."""
    if not _TABLE:
        _TABLE.extend(QColor(int(r), int(g), int(b)) for r, g, b in DIVERGING)
    return _TABLE


def paint(p: QPainter, hm: HeadMap, lay: HeadMapLayout, background: QColor | None = None,
          text: QColor = TEXT_DARK) -> None:
    n_layer, n_head = hm.values.shape
    if background is not None:
        p.fillRect(QRectF(0, 0, lay.width, lay.height), background)
    c, lim = lay.cell, hm.limit
    f = label_font(c)
    p.setFont(figure_font(11, bold=True))
    p.setPen(text)
    lh = QFontMetricsF(figure_font(11)).height()
    for i, line in enumerate(lay.title_lines + lay.caption_lines):
        if i == len(lay.title_lines):
            p.setFont(figure_font(10))
        p.drawText(QRectF(4, 2 + i * lh, lay.width - 8, lh), Qt.AlignmentFlag.AlignLeft, line)
    p.setPen(Qt.PenStyle.NoPen)
    table = colour_table()
    cells = colour_indices(hm.values, lim)  # [n_layer, n_head] (one NumPy pass: a map repaints per keystroke)
    absent = np.isnan(np.asarray(hm.values, dtype=np.float64))  # no value: ABSENT
    xs, ys = (lay.x_layers, lay.y_heads) if lay.across else (lay.x_heads, lay.y_layers)
    for l in range(n_layer):
        for h in range(n_head):
            x, y = (float(xs[l]), float(ys[h])) if lay.across else (float(xs[h]), float(ys[l]))
            p.fillRect(QRectF(x, y, c, c), QColor(*ABSENT[1]) if absent[l, h] else table[cells[l, h]])
        if hm.column is not None:
            p.fillRect(QRectF(lay.x_column, lay.y_layers[l], c, c), colour(float(hm.column[1][l]), lim))
    for r, (_name, v) in zip(lay.extra_rects, hm.extras):
        p.fillRect(r, colour(float(v), lim))
    # labels: a layer every few rows, heads on top
    p.setFont(f)
    p.setPen(text)
    if lay.across:
        _paint_across_labels(p, lay, f, n_layer, n_head)
    else:
        _paint_down_labels(p, hm, lay, f, n_layer, n_head)
    fm = QFontMetricsF(f)
    for r, (_name, v), label in zip(lay.extra_rects, hm.extras, lay.extra_texts):
        if not label:
            continue
        light = abs(v) < 0.6 * lim if lim > 0 else v == 0  # (the cell's colour: colour_indices)
        p.setPen(QColor(Qt.GlobalColor.black) if light else QColor(Qt.GlobalColor.white))
        p.drawText(text_origin(label, fm, r), label)
    # switched-off heads crossed out, the focused head outlined
    pen = QPen(MARK, max(1.5, c * 0.12))
    p.setPen(pen)
    for l, h in hm.marked:
        if 0 <= l < n_layer and 0 <= h < n_head:
            x, y = lay.origin(l, h)
            p.drawLine(x + 1, y + 1, x + c - 1, y + c - 1)
            p.drawLine(x + c - 1, y + 1, x + 1, y + c - 1)
    if hm.focus is not None:
        l, h = hm.focus
        if 0 <= l < n_layer and 0 <= h < n_head:
            x, y = lay.origin(l, h)
            p.setPen(QPen(QColor(FOCUS), 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(x - 1, y - 1, c + 2, c + 2))


def _paint_across_labels(p: QPainter, lay: HeadMapLayout, f, n_layer: int, n_head: int) -> None:
    """Heads down the left, a layer every few columns on top."""
    c, fm = lay.cell, QFontMetricsF(f)
    step = max(1, int(np.ceil(fm.height() / max(c, 1))))
    for h in range(0, n_head, step):
        p.drawText(QRectF(0, lay.y_heads[h], lay.left - 4, c),
                   Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"H{h}")
    lstep = max(1, int(np.ceil((fm.horizontalAdvance("L00") + 2) / max(c, 1))))
    for l in range(0, n_layer, lstep):
        p.drawText(QRectF(lay.x_layers[l] - c, lay.title_h - fm.height() - 1, 3 * c, fm.height()),
                   Qt.AlignmentFlag.AlignHCenter, f"L{l}")


def _paint_down_labels(p: QPainter, hm: HeadMap, lay: HeadMapLayout, f, n_layer: int,
                       n_head: int) -> None:
    """A layer every few rows on the left, heads on top."""
    c = lay.cell
    step = max(1, int(np.ceil(QFontMetricsF(f).height() / max(c, 1))))
    for l in range(0, n_layer, step):
        p.drawText(QRectF(0, lay.y_layers[l], lay.left - 4, c),
                   Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"L{l}")
    hstep = max(1, int(np.ceil(QFontMetricsF(f).horizontalAdvance("H00") / max(c, 1))))
    for h in range(0, n_head, hstep):
        p.drawText(QRectF(lay.x_heads[h] - c, lay.title_h - QFontMetricsF(f).height() - 1, 3 * c,
                          QFontMetricsF(f).height()), Qt.AlignmentFlag.AlignHCenter, f"H{h}")
    if hm.column is not None:
        p.drawText(QRectF(lay.x_column - c, lay.title_h - QFontMetricsF(f).height() - 1, 3 * c,
                          QFontMetricsF(f).height()), Qt.AlignmentFlag.AlignHCenter, hm.column[0])


def heading(hm: HeadMap, width: float, across: bool):
    """The title and the caption wrapped to a picture `width` wide: (title lines, caption lines,
    (title whole, caption whole))."""
    room = max(1.0, width - 8)
    title, title_whole = wrap(hm.title, figure_font(11, bold=True), room, TITLE_LINES)
    lines, lines_whole = wrap(_caption(hm, across), figure_font(10), room, TITLE_LINES + bool(hm.note))
    return tuple(title), tuple(lines), (title_whole, lines_whole)


def extra_label(name: str, value: float) -> str:
    """A bottom-row cell's text: its name and its number (a cell near 0 is near white: the colour
    alone says little)."""
    return f"{name} {signed(float(value), 3)}"


def title_shown(hm: HeadMap, lay: HeadMapLayout) -> str:
    """The title as the picture paints it, its lines joined: wrapped to two lines, a longer one ends
    in an ellipsis, not cut mid-letter (its views give it whole on hover: on_title)."""
    return hm.title if lay.heading_whole[0] else " ".join(lay.title_lines)


def _caption(hm: HeadMap, across: bool) -> str:
    return ((f"{hm.note}; " if hm.note else "") + hm.scale_text() + ("; columns layers, rows heads" if across else "; rows layers, columns heads")
            + (f"; right: {hm.column[0]}" if hm.column is not None else ""))


def caption(hm: HeadMap, lay: HeadMapLayout) -> str:
    """The lines under the title: what the colours mean (HeadMap.scale_text) and the axes."""
    return _caption(hm, lay.across)


def caption_shown(hm: HeadMap, lay: HeadMapLayout) -> str:
    """The caption as the picture paints it, its lines joined (wrapped as the title is; whole on
    hover: whole_title)."""
    return caption(hm, lay) if lay.heading_whole[1] else " ".join(lay.caption_lines)


def whole_title(hm: HeadMap, lay: HeadMapLayout) -> str:
    """The title and its caption whole: the hover over the two lines (on_title), where the picture
    ends either in an ellipsis."""
    return f"{hm.title}\n{caption(hm, lay)}"


def on_title(lay: HeadMapLayout, y: float) -> bool:
    """Whether height `y` is on the title's and the caption's lines (the hover there reads them
    whole)."""
    return 0 <= y < lay.title_h - QFontMetricsF(figure_font(11)).height()


def hit(hm: HeadMap, lay: HeadMapLayout, x: float, y: float, dpr: float = 1.0,
        origin: tuple[float, float] = (0.0, 0.0)):
    """What is painted on the device pixel under (x, y) (`dpr` device pixels a widget pixel, the
    widget at `origin` in its window): ("head", layer, head), ("column", layer), ("extra", i) or
    None. Qt fills a cell between its edges rounded to whole device pixels of the window
    (painted_cell): a pixel near an edge may be its neighbour's."""
    for i, r in enumerate(lay.extra_rects):
        if painted_in(x, y, r, dpr, origin):
            return ("extra", i)
    c, (ox, oy) = lay.cell, origin
    if lay.across:
        l, h = painted_cell(x, lay.x_layers, c, dpr, ox), painted_cell(y, lay.y_heads, c, dpr, oy)
        return None if l is None or h is None else ("head", l, h)
    l = painted_cell(y, lay.y_layers, c, dpr, oy)
    if l is None:
        return None
    if hm.column is not None and painted_cell(x, [lay.x_column], c, dpr, ox) == 0:
        return ("column", l)
    h = painted_cell(x, lay.x_heads, c, dpr, ox)
    return None if h is None else ("head", l, h)


def readout(hm: HeadMap, what) -> str:
    """The number under a hit, as the hover says it: `L18 H6: +1.234 logit`."""
    if what is None:
        return ""
    if what[0] == "head":
        _, l, h = what
        off = "  (switched off)" if (l, h) in hm.marked else ""
        if np.isnan(hm.values[l, h]):
            return f"{head_title(l, h)}: {hm.absent or 'no value'}{off}"
        return f"{head_title(l, h)}: {signed(float(hm.values[l, h]))} {hm.unit}{off}"
    if what[0] == "column":
        return f"L{what[1]} {hm.column[0]}: {signed(float(hm.column[1][what[1]]))} {hm.unit}"
    name, v = hm.extras[what[1]]
    note = hm.notes[what[1]] if what[1] < len(hm.notes) else ""
    return f"{name}: {signed(float(v))} {hm.unit}" + (f" ({note})" if note else "")


def cell_center(hm: HeadMap, lay: HeadMapLayout, layer: int, head: int) -> tuple[float, float]:
    """The centre of head (layer, head)'s cell (tests aim the mouse with it)."""
    x, y = lay.origin(layer, head)
    return x + lay.cell / 2, y + lay.cell / 2
