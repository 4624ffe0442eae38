"""Paint an attention figure with QPainter: heatmaps, token labels, head titles, KV-group marks
and a colour bar, where figures/heatmap_layout.py placed them. One painter path serves PNG (a
QImage) and SVG (QSvgGenerator), so both look the same. pyqtgraph's SVGExporter is not used: it
fails on Qt >= 6.11 (pyqtgraph issue #3485).

Heatmaps are row-major: query rows top to bottom, keys left to right, coloured through the same
table as the window (style.heat_table)."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPainter, QPen

from attnviz.engine.computing.patterns import max_pool, pooled_undefined
from attnviz.figures.export_view import ExportView
from attnviz.figures.heatmap_layout import (
    FigureLayout, PanelBox, bar_label_spots, elide, layout,
)
from attnviz.figures.render import (
    FRAME, MUTED, TEXT, encode_png, figure_image, render_svg, render_with,
)
from attnviz.figures.style import (
    axis_label, bar_label, group_color, heat_index, heat_table, no_value_colour,
)

SVG_MAX_RECTS = 20000  # above this many cells an SVG embeds each heatmap as an image


def panel_rgb(view: ExportView, i: int, j: int, lut: np.ndarray) -> np.ndarray:
    """[n_q, n_k] pattern -> [n_q, n_k, 3] uint8 colours through the table (style.heat_table, the
    window's; the levels start at 0: figures/view.Shown.levels); a row left with no weight by the
    hidden first key in the no-value colour (ExportView.blank), as its numbers are undefined."""
    rgb = lut[heat_index(view.patterns[i, j], float(view.levels[i, j, 1]))]
    rgb[view.blank()[i, j]] = no_value_colour(view.colormap)
    return rgb


def paint(painter: QPainter, view: ExportView, lay: FigureLayout, vector_cells: bool = False) -> None:
    """Draw the whole figure described by `lay` on an active painter."""
    s = lay.scale
    lut = heat_table(view.colormap)[:, :3]
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
    painter.fillRect(QRectF(0, 0, lay.width, lay.height), QColor("white"))

    # header
    y = lay.margin
    for text, font, color in lay.header_lines:
        painter.setFont(font)
        painter.setPen(color)
        h = QFontMetricsF(font).height()
        painter.drawText(QRectF(lay.margin, y, lay.width - 2 * lay.margin, h),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
        y += h * 1.25

    idx_of = {(l, h): (i, j) for i, l in enumerate(view.layers) for j, h in enumerate(view.heads)}
    grouped = lay.strip_h > 0
    if grouped:
        _paint_groups(painter, view, lay)
    for box in lay.panels:
        i, j = idx_of[(box.layer, box.head)]
        rect = box.rect
        if vector_cells:
            rgb = panel_rgb(view, i, j, lut)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.setPen(Qt.PenStyle.NoPen)
            for q in range(box.n_q):
                for k in range(box.n_k):
                    r, g, b = (int(c) for c in rgb[q, k])
                    painter.fillRect(QRectF(box.x + k * box.cell, box.y + q * box.cell,
                                            box.cell, box.cell), QColor(r, g, b))
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        elif box.cell < 1:  # more cells than pixels: keep every peak visible (max, not mean)
            f = math.ceil(1 / box.cell)
            pooled = max_pool(view.patterns[i, j], f)
            rgb = lut[heat_index(pooled, float(view.levels[i, j, 1]))]
            rgb[pooled_undefined(view.blank()[i, j], f)] = no_value_colour(view.colormap)  # (where each row is)
            painter.save()
            painter.setClipRect(rect)
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            painter.drawImage(QRectF(box.x, box.y, pooled.shape[1] * f * box.cell,
                                     pooled.shape[0] * f * box.cell), figure_image(rgb))
            painter.restore()
        else:
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
            painter.drawImage(rect, figure_image(panel_rgb(view, i, j, lut)))
        painter.setPen(QPen(FRAME, max(1.0, s)))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRect(rect.adjusted(-0.5 * s, -0.5 * s, 0.5 * s, 0.5 * s))
        # head title (with its KV-group strip under GQA)
        painter.setFont(lay.panel_font)
        painter.setPen(TEXT)
        tw = rect.width()
        top = box.y - lay.strip_h - lay.title_h
        painter.drawText(QRectF(box.x - 2 * s, top, tw + 4 * s, lay.title_h),
                         Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter, box.title)
        if grouped:
            color = QColor(group_color(view.kv_group[box.head]))
            painter.fillRect(QRectF(box.x, box.y - lay.strip_h - s, tw, lay.strip_h), color)
        # token labels on the outer axes: queries left of the first column, keys under the last row
        last_row = max(b.row for b in lay.panels if b.col == box.col)
        if box.col == 0:
            _paint_query_labels(painter, view, lay, box)
        if box.row == last_row:
            _paint_key_labels(painter, view, lay, box)
    _paint_axis_names(painter, lay)
    _paint_colorbar(painter, view, lay, lut)


def _paint_groups(painter: QPainter, view: ExportView, lay: FigureLayout) -> None:
    """A light tinted box behind each run of neighbouring heads that share a KV head."""
    s = lay.scale
    runs: list[list[PanelBox]] = []
    for box in lay.panels:
        prev = runs[-1][-1] if runs else None
        if (prev is not None and prev.row == box.row and prev.col + 1 == box.col
                and view.kv_group[prev.head] == view.kv_group[box.head]):
            runs[-1].append(box)
        else:
            runs.append([box])
    pad = lay.group_pad
    for run in runs:
        a, b = run[0], run[-1]
        color = QColor(group_color(view.kv_group[a.head]))
        fill = QColor(color)
        fill.setAlpha(28)
        r = QRectF(a.x - pad, a.y - lay.strip_h - lay.title_h - pad / 2,
                   b.x + b.cell * b.n_k - a.x + 2 * pad,
                   lay.title_h + lay.strip_h + a.cell * a.n_q + 1.5 * pad)
        r = r.adjusted(s, s, -s, -s)  # keep the outline inside the padding
        painter.setPen(QPen(color, max(1.0, 1.5 * s)))
        painter.setBrush(fill)
        painter.drawRoundedRect(r, 4 * s, 4 * s)
    painter.setBrush(Qt.BrushStyle.NoBrush)


def _paint_query_labels(painter: QPainter, view: ExportView, lay: FigureLayout, box: PanelBox) -> None:
    painter.setFont(lay.label_font)
    painter.setPen(TEXT)
    pad = 6 * lay.scale + lay.group_pad
    for q in range(0, box.n_q, lay.q_stride):
        text = elide(axis_label(view.labels[q]), lay.label_font, lay.q_gutter - pad)
        r = QRectF(box.x - lay.q_gutter, box.y + q * box.cell + box.cell / 2 - lay.label_px,
                   lay.q_gutter - pad, 2 * lay.label_px)
        painter.drawText(r, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, text)


def _paint_key_labels(painter: QPainter, view: ExportView, lay: FigureLayout, box: PanelBox) -> None:
    """Key labels run upwards, each ending just under its column."""
    painter.setFont(lay.label_font)
    painter.setPen(TEXT)
    pad = 6 * lay.scale + lay.group_pad
    bottom = box.y + box.cell * box.n_q
    for k in range(0, box.n_k, lay.k_stride):
        text = elide(axis_label(view.labels[view.key_pos[k]]), lay.label_font, lay.k_gutter - pad)
        painter.save()
        painter.translate(box.x + k * box.cell + box.cell / 2, bottom + pad)
        painter.rotate(-90)
        painter.drawText(QRectF(-(lay.k_gutter - pad), -lay.label_px, lay.k_gutter - pad,
                                2 * lay.label_px),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, text)
        painter.restore()


def _paint_axis_names(painter: QPainter, lay: FigureLayout) -> None:
    painter.setFont(lay.tick_font)
    painter.setPen(MUTED)
    fm = QFontMetricsF(lay.tick_font)
    first = lay.panels[0]
    left_col = [b for b in lay.panels if b.col == 0]
    top, bottom = left_col[0].y, left_col[-1].y + left_col[-1].cell * left_col[-1].n_q
    x = first.x - lay.q_gutter - fm.height() * 1.1
    painter.save()
    painter.translate(x, (top + bottom) / 2)
    painter.rotate(-90)
    painter.drawText(QRectF(-200 * lay.scale, 0, 400 * lay.scale, fm.height()),
                     Qt.AlignmentFlag.AlignCenter, "query")
    painter.restore()
    last_row = [b for b in lay.panels if b.row == lay.panels[-1].row]
    left, right = lay.panels[0].x, max(b.x + b.cell * b.n_k for b in lay.panels)
    y = last_row[0].y + last_row[0].cell * last_row[0].n_q + lay.k_gutter + 2 * lay.scale
    painter.drawText(QRectF(left, y, right - left, fm.height()), Qt.AlignmentFlag.AlignCenter,
                     "key \u2192")


def _paint_colorbar(painter: QPainter, view: ExportView, lay: FigureLayout, lut: np.ndarray) -> None:
    s, bar = lay.scale, lay.bar
    gradient = np.ascontiguousarray(lut[:0:-1][:, None, :])  # [255, 1, 3]: the colours, highest on top
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
    painter.drawImage(bar, figure_image(gradient))
    painter.setPen(QPen(FRAME, max(1.0, s)))
    painter.drawRect(bar)
    painter.setFont(lay.tick_font)
    fm = QFontMetricsF(lay.tick_font)
    tick_w = 0.0
    for y, middle, text in bar_label_spots(view, bar, fm.height()):
        painter.setPen(QPen(TEXT, max(1.0, s)))
        painter.drawLine(QPointF(bar.right(), y), QPointF(bar.right() + 5 * s, y))
        r = QRectF(bar.right() + 7 * s, middle - fm.height() / 2, fm.horizontalAdvance(text) + 2, fm.height())
        painter.drawText(r, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
        tick_w = max(tick_w, r.width())
    name = bar_label(view.value_weighted, per_head_max=view.scale_mode == "per-head")  # as the window's
    painter.setPen(MUTED)
    painter.save()
    painter.translate(bar.right() + 9 * s + tick_w + fm.height(), bar.center().y())
    painter.rotate(90)
    painter.drawText(QRectF(-bar.height(), -fm.height(), 2 * bar.height(), fm.height()),
                     Qt.AlignmentFlag.AlignCenter, name)
    painter.restore()


def render_image(view: ExportView, width: int) -> tuple[QImage, FigureLayout]:
    """The figure as a QImage `width` pixels wide."""
    return render_with(layout, paint, view, width)


def png_bytes(view: ExportView, width: int) -> tuple[bytes, FigureLayout]:
    image, lay = render_image(view, width)
    return encode_png(image), lay


def svg_bytes(view: ExportView, width: int) -> tuple[bytes, FigureLayout]:
    """The same figure as SVG: vector text, heatmap cells as rectangles (or one embedded image per
    heatmap when there are more than SVG_MAX_RECTS cells)."""
    lay = layout(view, width)
    vector = view.patterns[..., :, :].size <= SVG_MAX_RECTS
    svg = render_svg(lay.width, lay.height, view.title(), f"attnviz attention figure: {view.text}",
                     lambda painter: paint(painter, view, lay, vector_cells=vector))
    return svg, lay
