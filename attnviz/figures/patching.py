"""The Patching view (engine/analysing/patching.py's effects) as a figure: one map of the effect in a
diverging colour map symmetric about the effect of a patch that changes nothing (white: 0 when
denoising, 1 when noising; red above, blue below: patching can also push the answer away), with
its colour bar, and the metric above it. QPainter only: the window's
Patching tab paints it and an export writes the same picture (PNG or SVG with a JSON sidecar) or
its numbers (JSON with `attnviz patch --json`'s keys, or the map as CSV).

The map, by `what`:
    resid, mlp_out    rows layers, columns positions (the clean tokens)
    head_out,
    head_pattern      rows layers, columns heads in the grid's order (a gap between KV groups)
    head_out_by_pos   one layer: rows positions (the clean tokens), columns heads
Cells not run (NaN) are in the no-value colour (style.no_value_colour: the grid's, far from every
colour of the diverging map and of the window's colormap), which the metric line then names. A map
drawn smaller than its cells pools them into blocks (figures/patch_blocks.py): each block shows its
cell farthest from the unchanged effect.

    patch_view(...) -> PatchView;  layout(view, width, height=None) -> PatchLayout
    paint(p, view, lay);  hit(view, lay, x, y) -> (row, col) | None;  readout(view, row, col)
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen

from attnviz.engine.analysing.patching import unpatched
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures import patch_blocks as B
from attnviz.figures.compare import bar_label_width, paint_colour_bar
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.export_view import model_title
from attnviz.figures.data import DEFAULT_COLORMAP, ExportError
from attnviz.figures.headmap import colour
from attnviz.figures.render import TEXT, figure_exports, figure_font
from attnviz.figures.style import FOCUS, axis_label, no_value_colour, no_value_word
from attnviz.figures.numbers import signed
from attnviz.figures.painted import painted_cell
from attnviz.engine.reading.json_text import dumps as strict_json, finite

HEAD_WHATS = ("head_out", "head_pattern", "head_out_by_pos")  # maps whose columns are heads
BAR_GAP, BAR_W = 12.0, 14.0  # the colour bar's gap to the cells, its width
BAR_ROOM = 90.0  # the colour bar and its labels at the least (its labels' room: bar_label_width)
EFFECT_READS = {"denoise": "effect 1 = clean answer back, 0 = unchanged",  # by direction
                "noise": "effect 1 = unchanged, 0 = corrupted answer in"}
WRAPPED = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)  # the title and metric lines


@dataclass(frozen=True)
class PatchView:
    """What the tab shows of one patching result."""
    model: str
    what: str
    direction: str
    effect: np.ndarray  # float64, the engine's shape (patching.effect_shape)
    tokens_clean: tuple
    tokens_corrupt: tuple
    position: int
    target: int
    alt: int
    target_text: str
    alt_text: str
    diff_clean: float
    diff_corrupt: float
    layer: int | None = None  # head_out_by_pos: the layer shown
    kv_group: np.ndarray | None = None  # [n_head]
    focus: tuple | None = None  # (layer, head) outlined
    text: str = ""  # the clean text and the corrupted one (the sidecar restores them)
    corrupt: str = ""
    display: tuple = ()  # (key, value) of the window's view the sidecar records (layer, colormap...)
    labels_clean: tuple = ()  # readable labels of the tokens (the grid's); () : the tokens
    labels_corrupt: tuple = ()
    note: str = ""  # what the map cannot show (patching.Patching.note)
    checkpoint: dict | None = None  # {index, step, of}: the training step patched, if any

    def label(self, t: int, corrupt: bool = False) -> str:
        labels = (self.labels_corrupt or self.tokens_corrupt) if corrupt else (self.labels_clean or self.tokens_clean)
        return labels[t]

    @property
    def values(self) -> np.ndarray:
        """The map shown [rows, cols]."""
        return self.effect[self.layer] if self.what == "head_out_by_pos" else self.effect

    @property
    def unchanged(self) -> float:
        """The effect of a patch that changes nothing (patching.unpatched): the map's white."""
        return unpatched(self.direction)

    @property
    def colormap(self) -> str:
        """The window's colormap (its display), whose no-value colour marks a cell not run."""
        return dict(self.display).get("colormap") or DEFAULT_COLORMAP

    def not_run(self) -> QColor:
        """The colour of a cell not run: the no-value colour, as the grid paints a cell with no value."""
        return QColor(*no_value_colour(self.colormap))

    @property
    def limit(self) -> float:
        """The largest distance of an effect from `unchanged`: the colour bar's half-range; 0
        where every effect is `unchanged` (every cell white, the bar writes only its middle)."""
        v = np.abs(self.values[np.isfinite(self.values)] - self.unchanged)
        return float(v.max(initial=0.0))

    def row_labels(self) -> list[str]:
        n = self.values.shape[0]
        if self.what == "head_out_by_pos":
            return [f"{t} {axis_label(self.label(t))}" for t in range(n)]
        return [f"L{l}" for l in range(n)]

    def col_labels(self) -> list[str]:
        n = self.values.shape[1]
        if self.what in HEAD_WHATS:
            return [f"H{h}" for h in range(n)]
        return [axis_label(self.label(t)) for t in range(n)]

    def head_of(self, row: int, col: int) -> tuple[int, int] | None:
        """The (layer, head) of a cell, where the columns are heads."""
        if self.what == "head_out_by_pos":
            return (int(self.layer), col)
        return (row, col) if self.what in HEAD_WHATS else None

    def title(self) -> str:
        scope = f" of L{self.layer}" if self.what == "head_out_by_pos" else ""
        return f"Patching {self.what}{scope} ({self.direction}), {model_title(self.model, self.checkpoint)}"

    def metric_line(self) -> str:
        return (f"at {self.position} {quoted(self.label(self.position))}: diff = logit({quoted(self.target_text)}) "
                f"\u2212 logit({quoted(self.alt_text)}); clean {signed(self.diff_clean)}, corrupted "
                f"{signed(self.diff_corrupt)}; {EFFECT_READS.get(self.direction, '')}"
                + (f"; {no_value_word(self.colormap)}: not run" if not np.isfinite(self.values).all() else "")
                + (f". Note: {self.note}" if self.note else ""))


def patch_view(result, model_name: str, tokens_clean, tokens_corrupt, target_text: str,
               alt_text: str, layer: int | None = None, kv_group=None, focus=None, text: str = "",
               corrupt: str = "", display: dict | None = None, labels=((), ()),
               checkpoint: dict | None = None) -> PatchView:
    m = result.metric
    return PatchView(model_name, result.what, result.direction, np.asarray(result.effect, np.float64),
                     tuple(tokens_clean), tuple(tokens_corrupt), m.position, m.target, m.alt,
                     target_text, alt_text, m.diff_clean, m.diff_corrupt,
                     layer if result.what == "head_out_by_pos" else None,
                     None if kv_group is None else np.asarray(kv_group), focus, text, corrupt,
                     tuple((display or {}).items()), tuple(labels[0]), tuple(labels[1]),
                     getattr(result, "note", ""), dict(checkpoint) if checkpoint else None)


@dataclass
class PatchLayout:
    width: int
    height: int
    cell_w: float
    cell_h: float
    xs: np.ndarray  # [columns drawn] left edge of each (a block of pool[1] columns)
    ys: np.ndarray  # [rows drawn] top of each (a block of pool[0] rows)
    top: float  # the title and column labels end here
    left: float
    bar: QRectF = field(default_factory=QRectF)
    pool: tuple = (1, 1)  # (rows, columns) of the map each drawn cell pools
    picks: np.ndarray | None = None  # [rows drawn, columns drawn, 2] the (row, col) each shows
    row_labels: list = field(default_factory=list)  # the drawn rows' and columns' labels
    col_labels: list = field(default_factory=list)


def _fm(size=10) -> QFontMetricsF:
    return QFontMetricsF(figure_font(size))


def _wrapped_height(fm: QFontMetricsF, text: str, width: int) -> float:
    return fm.boundingRect(QRectF(0, 0, max(width - 8, 1), 1e6), WRAPPED, text).height()


def title_height(view: PatchView, width: int) -> float:
    """The height of the title, wrapped to a picture `width` wide (whole, however narrow the panel)."""
    return _wrapped_height(QFontMetricsF(figure_font(11, bold=True)), view.title(), width)


def metric_height(view: PatchView, width: int) -> float:
    """The height of the metric line under the title, wrapped as the title is."""
    return _wrapped_height(_fm(9), view.metric_line(), width)


def layout(view: PatchView, width: int, height: int | None = None) -> PatchLayout:
    """Every cell placed in a picture `width` wide (and `height` high when given, else as high as
    the rows need); cells that do not fit at the least size pooled into blocks (patch_blocks)."""
    rows, cols = view.values.shape
    fm = _fm(9)
    heads = view.what in HEAD_WHATS
    groups = (np.asarray(view.kv_group) if heads and view.kv_group is not None and len(view.kv_group) == cols
              else np.zeros(cols, np.int64))
    bar_room = max(BAR_ROOM, BAR_GAP + BAR_W + bar_label_width(view.limit, view.unchanged) + 1)
    head_text = title_height(view, width) + metric_height(view, width) + 8

    def room(pool):  # the drawn rows' and columns' labels, the left and top margins, the KV gaps
        rl = B.block_labels(view.row_labels(), pool[0], "" if view.what == "head_out_by_pos" else "L")
        cl = B.block_labels(view.col_labels(), pool[1], "H" if heads else "")
        col_h = fm.height() + 4 if heads else max(fm.horizontalAdvance(s) for s in cl) + 8
        gaps = int(np.count_nonzero(groups[1:] != groups[:-1])) if cols > 1 and pool[1] == 1 else 0
        return rl, cl, max(fm.horizontalAdvance(s) for s in rl) + 8, head_text + col_h, gaps

    pool = (1, 1)
    for _ in range(4):  # (a pooled axis' labels take other room: pooled again until it fits)
        row_labels, col_labels, left, top, n_gaps = room(pool)
        fits = (1 if height is None else B.pool_for(rows, height - top - 10, B.LEAST_H),
                B.pool_for(cols, width - left - bar_room, B.LEAST_W, 0.4 * n_gaps))
        if all(f <= p for f, p in zip(fits, pool)):
            break
        pool = (max(pool[0], fits[0]), max(pool[1], fits[1]))
    else:
        row_labels, col_labels, left, top, n_gaps = room(pool)
    n_rows, n_cols = B.blocks(rows, pool[0]), B.blocks(cols, pool[1])
    cell_w = max(B.LEAST_W, (width - left - bar_room) / max(n_cols + 0.4 * n_gaps, 1))
    if height is None:
        cell_h = min(max(cell_w, 10.0), 28.0)
        height = int(top + n_rows * cell_h + 30)
    else:
        cell_h = max(B.LEAST_H, (height - top - 10) / max(n_rows, 1))
    if heads and height is not None and pool == (1, 1):  # square head cells (a block is no head's)
        cell_w = cell_h = min(cell_w, cell_h)
    x, xs = left, []
    for c in range(n_cols):
        if c and n_gaps and groups[c] != groups[c - 1]:
            x += 0.4 * cell_w
        xs.append(x)
        x += cell_w
    ys = top + np.arange(n_rows) * cell_h
    bar = QRectF(x + BAR_GAP, top, BAR_W, max(40.0, min(n_rows * cell_h, height - top - 30)))
    return PatchLayout(int(width), int(height), cell_w, cell_h, np.asarray(xs), ys, top, left, bar, pool,
                       B.picks(view.values, view.unchanged, pool), row_labels, col_labels)


def paint(p: QPainter, view: PatchView, lay: PatchLayout, text: QColor = TEXT) -> None:
    lim, not_run = view.limit, view.not_run()
    vals = view.values[lay.picks[..., 0], lay.picks[..., 1]]  # [rows drawn, columns drawn]
    rows, cols = vals.shape
    p.setPen(text)
    p.setFont(figure_font(11, bold=True))
    lh = title_height(view, lay.width)
    p.drawText(QRectF(4, 2, lay.width - 8, lh), WRAPPED, view.title())
    p.setFont(figure_font(9))
    p.drawText(QRectF(4, 4 + lh, lay.width - 8, metric_height(view, lay.width)), WRAPPED, view.metric_line())
    p.setPen(Qt.PenStyle.NoPen)
    for r in range(rows):
        for c in range(cols):
            v = float(vals[r, c])
            p.fillRect(QRectF(lay.xs[c], lay.ys[r], lay.cell_w, lay.cell_h),
                       colour(v - view.unchanged, lim) if np.isfinite(v) else not_run)
    p.setPen(text)
    fm = _fm(9)
    step = max(1, int(np.ceil(fm.height() / max(lay.cell_h, 1))))
    for r, lab in enumerate(lay.row_labels):
        if r % step == 0:
            p.drawText(QRectF(0, lay.ys[r], lay.left - 4, lay.cell_h),  # (rows lower than a line: not cut)
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextDontClip, lab)
    labels = lay.col_labels
    if view.what in HEAD_WHATS:
        wide = max(fm.horizontalAdvance(s) for s in ["H00", *labels])  # (a block's: "H4–7")
        hstep = max(1, int(np.ceil(wide / max(lay.cell_w, 1))))
        for c in range(0, cols, hstep):
            p.drawText(QRectF(lay.xs[c] - lay.cell_w, lay.top - fm.height() - 2, 3 * lay.cell_w, fm.height()),
                       Qt.AlignmentFlag.AlignHCenter | Qt.TextFlag.TextDontClip, labels[c])
    else:  # tokens upright along the columns
        cstep = max(1, int(np.ceil(fm.height() / max(lay.cell_w, 1))))
        for c in range(0, cols, cstep):
            p.save()
            p.translate(lay.xs[c] + lay.cell_w / 2 + fm.ascent() / 2 - 1, lay.top - 4)
            p.rotate(-90)
            p.drawText(0, 0, labels[c])
            p.restore()
    if view.focus is not None:
        cell = _focus_cell(view)
        if cell is not None:
            r, c = cell[0] // lay.pool[0], cell[1] // lay.pool[1]
            p.setPen(QPen(QColor(FOCUS), 2))
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(lay.xs[c] - 1, lay.ys[r] - 1, lay.cell_w + 2, lay.cell_h + 2))
    paint_colour_bar(p, lay.bar, lim, "effect", text, view.unchanged)


def _focus_cell(view: PatchView):
    l, h = view.focus
    rows, cols = view.values.shape
    if view.what in ("head_out", "head_pattern") and 0 <= l < rows and 0 <= h < cols:
        return l, h
    return None


def hit(view: PatchView, lay: PatchLayout, x: float, y: float, dpr: float = 1.0,
        origin: tuple[float, float] = (0.0, 0.0)):
    """The (row, col) of the cell painted on the pixel under (x, y) (a block: the cell it shows), or
    None: the cell Qt fills on that device pixel (`dpr` a widget pixel, the widget at `origin` in
    its window), figures/painted.painted_cell."""
    r = painted_cell(y, lay.ys, lay.cell_h, dpr, origin[1])
    c = painted_cell(x, lay.xs, lay.cell_w, dpr, origin[0])
    if r is None or c is None:
        return None
    row, col = lay.picks[r, c]
    return int(row), int(col)


def cell_center(lay: PatchLayout, row: int, col: int) -> tuple[float, float]:
    """The centre of the cell (the block) where cell (row, col) is painted."""
    r, c = row // lay.pool[0], col // lay.pool[1]
    return float(lay.xs[c] + lay.cell_w / 2), float(lay.ys[r] + lay.cell_h / 2)


def where(view: PatchView, row: int, col: int) -> str:
    """A cell's place, as `attnviz patch` names it: "L3 H1", "L3 at 5 ' John'/' Mary'"."""
    def at(t):
        a, b = view.label(t), view.label(t, corrupt=True)
        return f"at {t} {quoted(a)}" + (f"/{quoted(b)}" if a != b else "")
    if view.what in ("head_out", "head_pattern"):
        return head_title(row, col)
    if view.what == "head_out_by_pos":
        return f"{head_title(view.layer, col)} {at(row)}"
    return f"{'MLP ' if view.what == 'mlp_out' else ''}L{row} {at(col)}"


def readout(view: PatchView, row: int, col: int) -> str:
    v = float(view.values[row, col])
    return f"{where(view, row, col)}: effect {signed(v)}" if np.isfinite(v) else f"{where(view, row, col)}: not run"


# ---------------------------------------------------------------- the file
def numbers(view: PatchView) -> dict:
    """`attnviz patch --json`'s keys (JSON null for a cell not run)."""
    return {"model": view.model, "tokens_clean": list(view.tokens_clean),
            "tokens_corrupt": list(view.tokens_corrupt), "position": view.position,
            "target": view.target, "alt": view.alt, "diff_clean": view.diff_clean,
            "diff_corrupt": view.diff_corrupt, "direction": view.direction, "what": view.what,
            "patch_layer": view.layer,
            "effect": finite(np.asarray(view.effect).tolist()),
            **({"note": view.note} if view.note else {}), **checkpoint_entry(view.checkpoint)}


def number_bytes(view: PatchView, fmt: str) -> bytes:
    if fmt == "json":
        return (strict_json(numbers(view), ensure_ascii=False) + "\n").encode("utf-8")
    if fmt == "csv":
        vals = view.values
        buf = io.StringIO()  # csv quotes a label holding a quote or a comma
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(["row", *view.col_labels()])
        out.writerows([lab, *(repr(float(v)) for v in vals[r])] for r, lab in enumerate(view.row_labels()))
        return buf.getvalue().encode("utf-8")
    raise ExportError(f"the Patching view exports as .png, .svg, .json or .csv, not .{fmt}")


def _paper_paint(p: QPainter, view: PatchView, lay: PatchLayout) -> None:
    p.fillRect(QRectF(0, 0, lay.width, lay.height), QColor("white"))
    paint(p, view, lay)


png_bytes, svg_bytes = figure_exports(layout, _paper_paint, lambda _view: "attnviz patching")


def sidecar(view: PatchView, image_path, lay: PatchLayout) -> dict:
    """The image's sidecar: an attnviz view file (File > Open view restores the clean text, the
    corrupted one and what was patched) with the numbers."""
    import attnviz
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION

    return {"kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
            "view": "patching", "image": Path(image_path).name, "width": lay.width,
            "height": lay.height, "scope": "layer", **dict(view.display), "text": view.text,
            "tokens": list(view.tokens_clean), "corrupt": view.corrupt, **numbers(view)}
