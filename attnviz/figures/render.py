"""What every attnviz figure (the heatmaps', the anatomy's) draws with: its fonts and ink, a QImage
from RGB pixels, one painter pass to a QImage or to SVG, and PNG encoding. No figure borrows these
from another."""

from __future__ import annotations

import re

import numpy as np
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRect, QSize
from PySide6.QtGui import QColor, QFont, QImage, QPainter

from attnviz.figures.data import ExportError
from attnviz.figures.style import PAPER_FRAME, PAPER_MUTED, PAPER_TEXT

TEXT, MUTED, FRAME = QColor(PAPER_TEXT), QColor(PAPER_MUTED), QColor(PAPER_FRAME)  # ink on white paper
FONT_FAMILIES = ["DejaVu Sans", "Helvetica", "Arial"]


def figure_font(px: float, bold: bool = False) -> QFont:
    """A figure's sans-serif font, `px` pixels high."""
    f = QFont()
    f.setFamilies(FONT_FAMILIES)
    f.setStyleHint(QFont.StyleHint.SansSerif)
    f.setPixelSize(max(1, int(round(px))))
    f.setBold(bold)
    return f


def figure_image(rgb: np.ndarray) -> QImage:  # [h, w, 3] uint8 -> QImage (owns its pixels)
    rgb = np.ascontiguousarray(rgb)
    h, w = rgb.shape[:2]
    return QImage(rgb.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


def render_with(layout_fn, paint_fn, view, width: int):
    """Any figure (the heatmaps', the anatomy's) as a QImage `width` pixels wide: its layout_fn
    (view, width) -> layout with .width/.height, then paint_fn(painter, view, layout)."""
    lay = layout_fn(view, width)
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    if image.isNull():
        raise ExportError(f"cannot allocate a {lay.width} x {lay.height} image")
    painter = QPainter(image)
    try:
        paint_fn(painter, view, lay)
    finally:
        painter.end()
    return image, lay


PNG_LEVEL = 1  # zlib's level for a figure's pixels


def png_of(layout_fn, paint_fn, view, width: int):
    """A figure rendered by render_with and encoded as PNG -> (bytes, layout)."""
    image, lay = render_with(layout_fn, paint_fn, view, width)
    return encode_png(image), lay


def svg_of(layout_fn, paint_fn, view, width: int, description: str):
    """The same figure as SVG, titled by view.title() -> (bytes, layout)."""
    lay = layout_fn(view, width)
    return render_svg(lay.width, lay.height, view.title(), description,
                      lambda painter: paint_fn(painter, view, lay)), lay


def figure_exports(layout_fn, paint_fn, describe):
    """A figure's pair png_bytes, svg_bytes: (view, width) -> (bytes, layout), through png_of and
    svg_of, from its layout_fn, paint_fn and describe(view) -> the SVG's description."""

    def png_bytes(view, width: int):
        return png_of(layout_fn, paint_fn, view, width)

    def svg_bytes(view, width: int):
        return svg_of(layout_fn, paint_fn, view, width, describe(view))
    return png_bytes, svg_bytes


def encode_png(image: QImage) -> bytes:
    """A rendered figure (the heatmaps', the anatomy's) as PNG bytes: 8-bit RGB (RGBA where the
    image has an alpha channel), every row unfiltered, zlib at level 1, and the image's resolution
    (pHYs). Qt's PNG writer (libpng) tries every row filter on every row, slower and larger for
    figures, which are flat paper, text and heatmap cells: the row filters buy little."""
    import struct
    import zlib

    alpha = image.hasAlphaChannel()
    fmt, channels, colour_type = ((QImage.Format.Format_RGBA8888, 4, 6) if alpha
                                  else (QImage.Format.Format_RGB888, 3, 2))
    px = image.convertToFormat(fmt)
    w, h = px.width(), px.height()
    if px.isNull() or w == 0 or h == 0:
        raise ExportError(f"Qt could not encode a {image.width()} x {image.height()} PNG")
    rows = np.frombuffer(px.constBits(), np.uint8, count=px.sizeInBytes()).reshape(
        h, px.bytesPerLine())[:, :channels * w]  # [h, w * channels], each row's padding dropped
    raw = np.empty((h, 1 + channels * w), np.uint8)  # each row: its filter byte (0: none), pixels
    raw[:, 0] = 0
    raw[:, 1:] = rows

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    dpm = (max(0, image.dotsPerMeterX()), max(0, image.dotsPerMeterY()))
    return b"".join((
        b"\x89PNG\r\n\x1a\n",
        chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour_type, 0, 0, 0)),
        chunk(b"pHYs", struct.pack(">IIB", *dpm, 1)) if all(dpm) else b"",  # 1: per metre
        chunk(b"IDAT", zlib.compress(raw, PNG_LEVEL)),
        chunk(b"IEND", b"")))


def render_svg(width: int, height: int, title: str, description: str, draw) -> bytes:
    """draw(painter) onto an SVG `width` x `height` CSS pixels (any attnviz figure)."""
    from PySide6.QtSvg import QSvgGenerator

    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    gen = QSvgGenerator()
    gen.setOutputDevice(buf)
    gen.setSize(QSize(width, height))
    gen.setResolution(96)  # CSS pixels: the SVG's physical size equals the PNG's at 96 dpi
    gen.setViewBox(QRect(0, 0, width, height))
    gen.setTitle(title)
    gen.setDescription(description)
    painter = QPainter(gen)
    try:
        draw(painter)
    finally:
        painter.end()
        buf.close()
    svg = bytes(data.data())
    # a generic fallback, so viewers without these fonts still draw sans-serif text (Qt writes
    # "Sans Serif", which is no CSS family), and crisp cell edges (no hairline seams)
    svg = re.sub(rb'font-family="([^"]*)"', _css_family, svg)
    svg = svg.replace(b"<rect ", b'<rect shape-rendering="crispEdges" ')
    return svg


def _css_family(match: re.Match) -> bytes:
    names = [n.strip() for n in match.group(1).split(b",") if n.strip() and n.strip() != b"Sans Serif"]
    return b'font-family="' + b", ".join(names + [b"sans-serif"]) + b'"'
