"""The corpus figure: each statistic's per-head mean over a scanned corpus as a layer x head grid
(rows layers, top to bottom; columns heads), one panel per statistic with its own 0..max scale,
coloured through the heatmaps' table (style.heat_table), a cell's value written in it when it fits
(to two significant digits of the panel's top, in black or white, whichever reads on it: ink), and a cell where no text gave a value in the
colormap's no-value colour (style.no_value_colour), which the panel's heading names."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPainter

from attnviz.engine.analysing.corpus_stats import STAT_UNITS as UNITS
from attnviz.figures.data import DEFAULT_COLORMAP, ExportError
from attnviz.figures.numbers import plain_number
from attnviz.figures.render import FRAME, MUTED, TEXT, encode_png, figure_font
from attnviz.figures.style import heat_index, heat_table, no_value_colour, no_value_word


def _layout(n_layer: int, n_head: int, n_panel: int, width: int):
    cols = min(3, n_panel)
    rows = (n_panel + cols - 1) // cols
    pad = width * 0.02
    panel_w = (width - pad * (cols + 1)) / cols
    label_w = panel_w * 0.12
    cell = min((panel_w - label_w) / n_head, 60.0 * width / 1200)
    grid_h = cell * n_layer
    title_h = width * 0.035
    head_h = width * 0.03
    panel_h = head_h + grid_h + width * 0.04
    height = int(title_h + rows * (panel_h + pad) + pad)
    return cols, pad, panel_w, label_w, cell, panel_h, title_h, head_h, height


def luminance(col: QColor) -> float:
    """WCAG 2's relative luminance of `col`, 0 (black) .. 1 (white)."""
    c = np.array([col.red(), col.green(), col.blue()], np.float64) / 255
    c = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(c @ (0.2126, 0.7152, 0.0722))


def ink(col: QColor) -> QColor:
    """The text colour on a cell of `col`: black or white, whichever has the larger contrast ratio
    (WCAG 2) with it, at least 4.5:1 on every colour of every colormap. (A threshold on luma, or on
    HSL lightness, wrote white at 2.9:1 on viridis' middle green, at 3.2:1 on CET-L3's orange.)"""
    y = luminance(col)
    return QColor(0, 0, 0) if (y + 0.05) / 0.05 >= 1.05 / (y + 0.05) else QColor(255, 255, 255)


def _decimals(top: float) -> int:
    """Decimals that give a panel's top two significant digits (at least 2, at most 8), so a panel
    of small values (an induction mean of 0.0096) reads its cells apart instead of "0.00" in each."""
    return min(8, max(2, 1 - int(np.floor(np.log10(top)))))


def _cell_font(texts, cell: float):
    """The cells' font: cell * 0.28 pixels high, smaller where the widest text would leave its cell."""
    font = figure_font(cell * 0.28)
    widest = max((QFontMetricsF(font).horizontalAdvance(t) for t in texts), default=0.0)
    if widest > cell * 0.9:
        font.setPixelSize(max(1, int(font.pixelSize() * cell * 0.9 / widest)))
    return font


def means_png(means: dict, names, title: str, width: int = 1500, colormap: str = DEFAULT_COLORMAP,
              notes: dict | None = None) -> bytes:
    """{name: [n_layer, n_head]} for each of `names` -> PNG bytes (needs a QGuiApplication).
    `notes`: {name: words} added to that panel's heading ("over 4 texts", where its means are over
    fewer texts than the title's)."""
    arrays = [np.asarray(means[n], dtype=np.float64) for n in names]
    if not arrays or arrays[0].ndim != 2 or 0 in arrays[0].shape:
        raise ExportError("nothing to draw: no head means")
    n_layer, n_head = arrays[0].shape
    cols, pad, panel_w, label_w, cell, panel_h, title_h, head_h, height = _layout(
        n_layer, n_head, len(arrays), width)
    image = QImage(width, height, QImage.Format.Format_RGB32)
    if image.isNull():
        raise ExportError(f"cannot allocate a {width} x {height} image")
    image.fill(QColor(255, 255, 255))
    lut = heat_table(colormap)
    gap = QColor(*no_value_colour(colormap))  # a head no text gave a value
    p = QPainter(image)
    try:
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(TEXT)
        p.setFont(figure_font(title_h * 0.5, bold=True))
        p.drawText(QRectF(pad, 0, width - 2 * pad, title_h), Qt.AlignmentFlag.AlignVCenter, title)
        for i, (name, a) in enumerate(zip(names, arrays)):
            x0 = pad + (i % cols) * (panel_w + pad)
            y0 = title_h + (i // cols) * (panel_h + pad)
            finite = a[np.isfinite(a)]
            top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
            unit = f" ({UNITS[name]})" if name in UNITS else ""
            p.setPen(TEXT)
            heading = f"{name}{unit} 0..{plain_number(top)}" + (
                f", {notes[name]}" if notes and notes.get(name) else "") + (
                f"; {no_value_word(colormap)}: no value" if finite.size < a.size else "")
            font = figure_font(head_h * 0.5, bold=True)
            wide = QFontMetricsF(font).horizontalAdvance(heading)
            if wide > panel_w:  # (a long note: smaller, not over the next panel)
                font = figure_font(head_h * 0.5 * panel_w / wide, bold=True)
            p.setFont(font)
            p.drawText(QRectF(x0, y0, panel_w, head_h), Qt.AlignmentFlag.AlignVCenter, heading)
            gx, gy = x0 + label_w, y0 + head_h
            idx = heat_index(np.nan_to_num(a, nan=0.0), top)
            dec = _decimals(top)
            texts = {(l, h): f"{a[l, h]:.{dec}f}" for l in range(n_layer) for h in range(n_head)
                     if np.isfinite(a[l, h])}
            small = _cell_font(texts.values(), cell)
            for l in range(n_layer):
                p.setPen(MUTED)
                p.setFont(figure_font(min(cell * 0.4, head_h * 0.5)))
                p.drawText(QRectF(x0, gy + l * cell, label_w - 4, cell),
                           Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"L{l}")
                for h in range(n_head):
                    r = QRectF(gx + h * cell, gy + l * cell, cell, cell)
                    if np.isfinite(a[l, h]):
                        c = lut[idx[l, h]]
                        col = QColor(int(c[0]), int(c[1]), int(c[2]))
                    else:
                        col = gap
                    p.fillRect(r, col)
                    if cell >= 22 and np.isfinite(a[l, h]):
                        p.setPen(ink(col))
                        p.setFont(small)
                        p.drawText(r, Qt.AlignmentFlag.AlignCenter, texts[l, h])
            p.setPen(FRAME)
            p.drawRect(QRectF(gx, gy, cell * n_head, cell * n_layer))
            p.setPen(MUTED)
            p.setFont(figure_font(min(cell * 0.4, head_h * 0.5)))
            step = max(1, int(np.ceil(18 / max(cell, 1))))
            for h in range(0, n_head, step):
                p.drawText(QRectF(gx + h * cell, gy + n_layer * cell, cell * step, width * 0.02),
                           Qt.AlignmentFlag.AlignLeft, f"H{h}")
    finally:
        p.end()
    return encode_png(image)
