"""Where every part of an attention figure goes, without drawing: the header lines, the heads'
panels and their titles, the token-label gutters and the colour bar with its labels. Everything
is sized from the requested width (BASE_WIDTH is the design width); figures/heatmaps.py paints
what `layout()` places."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QGuiApplication

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.engine.computing.patterns import group_size, head_title
from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures.data import MAX_WIDTH, MIN_WIDTH, ExportError
from attnviz.figures import numbers
from attnviz.figures.export_view import ExportView
from attnviz.figures.render import MUTED, TEXT, figure_font
from attnviz.figures.style import axis_label, no_value_word
from attnviz.figures.text_wrap import wrap
from attnviz.figures.titles import abbreviations, tile_marks, title_forms
from attnviz.figures.view import EXPORT_ASPECT, layer_columns

BASE_WIDTH = 1200.0  # design width; every size scales with width / BASE_WIDTH


@dataclass
class PanelBox:
    layer: int
    head: int
    row: int
    col: int
    x: float  # heatmap's top-left corner
    y: float
    cell: float  # side of one cell in pixels
    n_q: int
    n_k: int
    title: str = ""  # as painted above it (layout: panel_titles)

    @property
    def rect(self) -> QRectF:
        return QRectF(self.x, self.y, self.cell * self.n_k, self.cell * self.n_q)

    def as_dict(self) -> dict:
        return {"layer": self.layer, "head": self.head, "x": self.x, "y": self.y,
                "cell": self.cell, "n_query": self.n_q, "n_key": self.n_k}


@dataclass
class FigureLayout:
    width: int
    height: int
    scale: float
    margin: float
    title_font: QFont
    sub_font: QFont
    label_font: QFont
    panel_font: QFont
    tick_font: QFont
    header_lines: list[tuple[str, QFont, QColor]]
    panels: list[PanelBox]
    n_rows: int
    n_cols: int
    q_stride: int  # label every q_stride-th query
    k_stride: int
    q_gutter: float  # width of the query labels
    k_gutter: float  # height of the (rotated) key labels
    label_px: float
    title_h: float
    strip_h: float  # KV-group colour strip under each title (0 without GQA)
    group_pad: float  # space between a heatmap and its KV-group box (0 without GQA)
    bar: QRectF = field(default_factory=QRectF)  # the colour bar's gradient


def elide(text: str, font: QFont, width: float) -> str:
    """`text` cut with an ellipsis to fit `width` pixels in `font`."""
    return QFontMetricsF(font).elidedText(text, Qt.TextElideMode.ElideRight, max(1.0, width))


def panel_title(view: ExportView, layer: int, head: int, with_max: bool) -> str:
    """A panel's title without its role badge: the grid's (figures/titles.tile_marks: `L3 H1 ·
    global  · off  · 12% out`), then what the picture says in place of the grid's KV-group labels
    and hover: ` · kv0`, `  max 0.87` (per-head scale)."""
    title = head_title(layer, head) + tile_marks(view.kind(layer), view.switched_off(layer, head),
                                                 view.share(layer, head))
    if view.grouped:
        title += f" \u00b7 kv{view.kv_group[head]}"
    if with_max:
        i, j = view.layers.index(layer), view.heads.index(head)
        title += f"  max {view.levels[i, j, 1]:.2f}"
    return title


def panel_forms(view: ExportView, layer: int, head: int, with_max: bool) -> tuple[str, ...]:
    """A panel's title and its shorter forms, as the grid's tiles write theirs (figures/titles.
    title_forms): its KV group and max before the role badge; without the layer only where the
    figure's title names it (a figure of every layer keeps each title's: `L3 H1 ind`)."""
    marks = panel_title(view, layer, head, with_max)[len(head_title(layer, head)):]
    forms = title_forms(layer, head, view.badge(layer, head), marks)
    return forms if view.scope != "all" else (forms[0], f"L{layer} {forms[2]}")


def panel_titles(view: ExportView, panels: list[PanelBox], font: QFont, s: float) -> str:
    """Each panel's title (its `title`), cut with "…" where wider than the panel: with its max
    (per-head scale) where that fits; with role badges, every title in the first of these that
    fits each panel, so they read alike: with the maxes then without, each whole then shorter
    (panel_forms) -> what the titles abbreviate ("" where they abbreviate nothing)."""
    fm, width = QFontMetricsF(font), panels[0].cell * panels[0].n_k
    per_head = view.scale_mode == "per-head"
    if not any(view.badge(b.layer, b.head) for b in panels):
        for b in panels:
            title = panel_title(view, b.layer, b.head, per_head)
            if fm.horizontalAdvance(title) > width:
                title = panel_title(view, b.layer, b.head, False)
            b.title = elide(title, font, width + 4 * s)
        return ""
    tries = [(m, i) for m in dict.fromkeys((per_head, False)) for i in range(3)]
    forms = {m: [panel_forms(view, b.layer, b.head, m) for b in panels] for m, _ in tries}
    fits = [all(fm.horizontalAdvance(f[min(i, len(f) - 1)]) <= width for f in forms[m]) for m, i in tries]
    m, i = tries[fits.index(True) if True in fits else -1]
    for b, f in zip(panels, forms[m]):
        b.title = elide(f[min(i, len(f) - 1)], font, width + 4 * s)
    shortest = i >= len(forms[m][0]) - 1  # (its badges abbreviated)
    return abbreviations(view.badge(b.layer, b.head) for b in panels) if shortest else ""


def header_lines(view: ExportView, s: float, inner_w: float, short: str = "") -> list[tuple[str, QFont, QColor]]:
    title_font, sub_font = figure_font(24 * s, bold=True), figure_font(14 * s)
    lines = [(elide(view.title(), title_font, inner_w), title_font, TEXT)]
    text = f"\u201c{view.text}\u201d" if view.text else "(token ids, no text)"
    lines.append((elide(text, sub_font, inner_w), sub_font, MUTED))
    hi = float(view.levels.max())
    scale = (f"shared scale 0\u2013{numbers.plain_number(hi)}" if view.scale_mode == "shared"
             else "per-head scale (0\u2013each head's max)")
    notes = [tokens(len(view.tokens)), f"colormap {view.colormap}", scale]
    if view.hide_first:
        notes.append(f"first token {quoted(isolated(view.labels[0]))} hidden, rows renormalised"
                     + (f"; a row with no other key has no value, {no_value_word(view.colormap)} (in a "
                        "panel drawn smaller than its cells, pooled with the rows beside it)"
                        if view.blank().any() else ""))
    if view.scope == "head" and view.grouped:
        g = view.kv_group[view.head]
        shared = [h for h, k in enumerate(view.kv_group) if k == g]
        notes.append(f"KV head {g} shared by H{shared[0]}\u2013H{shared[-1]}")
    if short:  # (what the panels' titles abbreviate: panel_titles)
        notes.append(f"titles: {short}")
    lines += [(line, sub_font, MUTED) for line in wrap(notes, sub_font, inner_w)[0]]
    return lines


def bar_ticks(view: ExportView) -> list[tuple[float, str]]:
    """(fraction of the bar from the bottom, label) for the colour bar, bottom up, written as the
    window's colour bar writes them (figures.numbers.bar_ticks): 0 to the shared top, or 0 to 1
    of each head's maximum (the bar's title says which)."""
    return sorted(sum(_bar_levels(view), []))


def _bar_levels(view: ExportView) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """bar_ticks' (the ends, the round steps between)."""
    hi = 1.0 if view.scale_mode == "per-head" else float(view.levels[0, 0, 1])
    ends, steps = numbers.bar_ticks(0.0, hi)
    return [(v / hi if hi > 0 else 0.0, t) for v, t in ends], [(v / hi, t) for v, t in steps]


def bar_label_spots(view: ExportView, bar: QRectF, line_h: float) -> list[tuple[float, float, str]]:
    """(y of the tick, y of its label's middle, label) of each colour-bar label painted: the ends
    beside their ends, pushed apart about the bar's middle on a bar shorter than two lines, and a
    round step only where its label (`line_h` tall) overlaps no other, as the window's bar leaves
    out its steps where they would crowd."""
    ends, steps = _bar_levels(view)
    spots = [(bar.bottom() - f * bar.height(), text) for f, text in ends]
    mid, two = bar.center().y(), len(spots) == 2  # (two ends: 0 then the top)
    shown = [(y, y if not two else max(y, mid + line_h / 2) if i == 0 else min(y, mid - line_h / 2), t)
             for i, (y, t) in enumerate(spots)]
    for f, text in steps:
        y = bar.bottom() - f * bar.height()
        if all(abs(y - c) >= line_h for _, c, _ in shown):
            shown.append((y, y, text))
    return sorted(shown, reverse=True)


@dataclass(frozen=True)
class _Frame:
    """What the panels' cell size depends on, for one figure width."""
    width: int
    scale: float
    inner_w: float  # the width inside the margins
    n_cols: int
    n_k: int
    gap_x: float
    axis_title: float  # room for the "query" / "key" axis names
    bar_block: float  # the colour bar with its ticks
    group_pad: float
    min_label: float  # the smallest label font, pixels


def _check_width(width: int) -> None:
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ExportError(f"width {width} px is outside {MIN_WIDTH}..{MAX_WIDTH}")
    if QGuiApplication.instance() is None:
        raise ExportError("rendering a figure needs a QGuiApplication (create one first)")


def _grid(view: ExportView) -> tuple[int, int]:  # (n_rows, n_cols)
    if view.scope == "head":
        return 1, 1
    if view.scope == "layer":
        # the window's column rule, fitted to a 4:3 area (the figure's height follows its width)
        n_cols = layer_columns(len(view.heads), group_size(view.kv_group), EXPORT_ASPECT, 1.0)[0]
        return math.ceil(len(view.heads) / n_cols), n_cols
    return len(view.layers), len(view.heads)


def _gutters(view: ExportView, f: _Frame, px: float, stride: int = 1) -> tuple[float, float]:
    """Width of the query labels and height of the (rotated) key labels at `px` pixels."""
    fm = QFontMetricsF(figure_font(px))
    pad = 6 * f.scale + f.group_pad
    labels_q = [axis_label(t) for t in view.labels]
    labels_k = [axis_label(view.labels[k]) for k in view.key_pos]
    qw = max(fm.horizontalAdvance(t) for t in labels_q[::stride]) + pad
    kw = max(fm.horizontalAdvance(t) for t in labels_k[::stride]) + pad
    return min(qw, 0.22 * f.width), min(kw, 0.22 * f.width)


def _cell_for(f: _Frame, q_gutter: float) -> float:
    free = f.inner_w - f.axis_title - q_gutter - f.bar_block - (f.n_cols - 1) * f.gap_x
    cell = free / (f.n_cols * f.n_k)
    # whole-pixel cells are crisp; keep them unless rounding down wastes over a tenth
    whole = math.floor(cell)
    return float(whole) if whole >= 4 and cell - whole <= 0.1 * cell else cell


def _cells_and_labels(view: ExportView, f: _Frame) -> tuple[float, float, int, float, float]:
    """(cell, label_px, stride, q_gutter, k_gutter): labels as large as the cells allow, every
    stride-th one shown where even the smallest font is too large for a cell."""
    label_base = (15 if view.scope == "head" else 12) * f.scale
    q_gutter, _ = _gutters(view, f, label_base)
    cell = _cell_for(f, q_gutter)
    label_px = min(label_base, cell * 0.8)
    stride = 1
    if label_px < f.min_label:
        stride = math.ceil(f.min_label / max(cell * 0.8, 1e-6))
        label_px = f.min_label
    q_gutter, k_gutter = _gutters(view, f, label_px, stride)
    cell = _cell_for(f, q_gutter)
    if cell <= 0:
        raise ExportError(f"width {f.width} px is too narrow for {plural(f.n_cols, 'head')} of {plural(f.n_k, 'key')}")
    return cell, label_px, stride, q_gutter, k_gutter


def _panel_font(view: ExportView, f: _Frame, cell: float) -> tuple[QFont, float]:
    """The panels' title font, shrunk until the longest title fits a panel, and the title height."""
    with_max = view.scale_mode == "per-head"
    pf_px = min(14 * f.scale, max(f.min_label, cell * f.n_k / 7))
    panel_font = figure_font(pf_px, bold=True)
    longest = max((panel_title(view, l, h, with_max) for l in view.layers for h in view.heads),
                  key=len)
    fm = QFontMetricsF(panel_font)
    while fm.horizontalAdvance(longest) > cell * f.n_k and panel_font.pixelSize() > f.min_label:
        panel_font.setPixelSize(panel_font.pixelSize() - 1)
        fm = QFontMetricsF(panel_font)
    return panel_font, fm.height() * 1.3


def _panels(view: ExportView, top_left: tuple[float, float], cell: float, title_h: float,
            strip_h: float, gaps: tuple[float, float], n_cols: int) -> list[PanelBox]:
    """Every (layer, head) heatmap placed row by row, n_cols to a row, below its title and
    KV-group strip."""
    (x0, y0), (gap_x, gap_y) = top_left, gaps
    n_q, n_k = view.patterns.shape[2:]
    row_h = title_h + strip_h + cell * n_q
    panels: list[PanelBox] = []
    order = [(l, h) for l in view.layers for h in view.heads]
    for idx, (l, h) in enumerate(order):
        row, col = divmod(idx, n_cols)
        x = x0 + col * (n_k * cell + gap_x)
        y = y0 + row * (row_h + gap_y) + title_h + strip_h
        panels.append(PanelBox(l, h, row, col, round(x), round(y), cell, n_q, n_k))
    return panels


def layout(view: ExportView, width: int) -> FigureLayout:
    """Place every part of the figure for an image `width` pixels wide; the height follows."""
    _check_width(width)
    s = width / BASE_WIDTH
    m = round(24 * s)
    n_q, n_k = view.patterns.shape[2:]
    n_panels = len(view.layers) * len(view.heads)
    grouped = view.grouped and n_panels > 1
    n_rows, n_cols = _grid(view)
    inner_w = width - 2 * m

    tick_font = figure_font(13 * s)
    tick_w = max((QFontMetricsF(tick_font).horizontalAdvance(t) for _, t in bar_ticks(view)), default=0.0)
    bar_w = 18 * s
    group_pad = round(6 * s) if grouped else 0  # room for the KV-group boxes around heads
    gap_y = 10 * s + 2 * group_pad if n_panels > 1 else 0
    frame = _Frame(
        width=width, scale=s, inner_w=inner_w, n_cols=n_cols, n_k=n_k,
        gap_x=14 * s + group_pad if n_panels > 1 else 0,
        axis_title=QFontMetricsF(tick_font).height() * 1.2,
        bar_block=20 * s + bar_w + 6 * s + tick_w + 8 * s + QFontMetricsF(tick_font).height(),
        group_pad=group_pad, min_label=max(6.0, 8 * s))
    cell, label_px, stride, q_gutter, k_gutter = _cells_and_labels(view, frame)
    panel_font, title_h = _panel_font(view, frame, cell)
    strip_h = round(4 * s) if grouped else 0
    lines = header_lines(view, s, inner_w, panel_titles(view, _panels(view, (0, 0), cell, 0, 0, (0, 0), n_cols),
                                                         panel_font, s))
    header_h = sum(QFontMetricsF(f).height() * 1.25 for _, f, _ in lines) + 10 * s

    # leftover width (integer cells) goes to both sides so the figure stays centred
    gap_x = frame.gap_x
    used = frame.axis_title + q_gutter + n_cols * n_k * cell + (n_cols - 1) * gap_x + frame.bar_block
    x0 = m + (inner_w - used) / 2 + frame.axis_title + q_gutter
    y0 = m + header_h
    row_h = title_h + strip_h + cell * n_q
    panels = _panels(view, (x0, y0), cell, title_h, strip_h, (gap_x, gap_y), n_cols)
    panel_titles(view, panels, panel_font, s)
    grid_bottom = y0 + n_rows * row_h + (n_rows - 1) * gap_y
    height = math.ceil(grid_bottom + k_gutter + frame.axis_title + m)
    top = panels[0].y
    bar_h = grid_bottom - top
    if view.scope != "head":
        bar_h = min(bar_h, max(cell * n_q, 360 * s))
    bar_x = x0 + n_cols * n_k * cell + (n_cols - 1) * gap_x + 20 * s
    return FigureLayout(
        width=width, height=height, scale=s, margin=m, title_font=lines[0][1],
        sub_font=lines[1][1], label_font=figure_font(label_px), panel_font=panel_font,
        tick_font=tick_font, header_lines=lines, panels=panels, n_rows=n_rows, n_cols=n_cols,
        q_stride=stride, k_stride=stride, q_gutter=q_gutter, k_gutter=k_gutter,
        label_px=label_px, title_h=title_h, strip_h=strip_h, group_pad=group_pad,
        bar=QRectF(round(bar_x), round(top), round(bar_w), round(bar_h)))
