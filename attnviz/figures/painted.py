"""Which cell or image pixel Qt paints on a screen pixel, for the hovers: Qt's raster engine fills
an unsmoothed rect (fillRect, a scaled drawImage) between its edges rounded to whole device pixels,
so the plain test of the pointer against a cell's unrounded edges reads a neighbour near an edge.
The device pixels are the window's: at a fractional ratio a widget's own edge may lie between two.
The grid's and the focus view's pictures (ui/views/painted.py), the head maps (headmap.hit), the
Patching map (patching.hit), the Compare tiles (compare.tile_pixel) and the long view's panes
(ui/views/long_panes.py) map the pointer by it."""

from __future__ import annotations

import math


def painted_index(v: int, lo: float, hi: float, n: int) -> int:
    """Which of an image's n pixels along an axis Qt paints at screen pixel v, the image spanning
    lo..hi screen pixels (unrounded): its rect rounded to whole pixels, then each pixel sampled at its
    centre in 16.16 fixed point. Outside the painted span: below 0 or n and above."""
    start = math.floor(lo + 0.5)
    width = max(1, math.floor(hi + 0.5) - start)
    step = int(65536 * n / width)
    first = math.ceil(0.5 * n / width * 65536) - 1
    return (first + (v - start) * step) >> 16


def drawn_index(v: int, lo: float, size: float, n: int) -> int:
    """Which of an image's n pixels along an axis QPainter.drawImage (unsmoothed, into a rect
    spanning lo..lo + size screen pixels, unrounded) paints at screen pixel v: Qt's raster engine
    rounds the rect's edges to whole pixels and gives each pixel the image pixel at its
    centre's place in the unrounded rect, in 16.16 fixed point (rounded down from a hair under: on
    a boundary, the first of the two); it leaves off a last pixel that would read past the image.
    -1 before the painted span, n after it. (A pyqtgraph ImageItem's: painted_index.)"""
    start = math.floor(lo + 0.5)
    width = math.floor(lo + size + 0.5) - start
    scale = n / size
    step = int(65536 * scale)
    first = math.ceil((start + 0.5 - lo) * scale * 65536) - 1
    if width > 0 and (first + step * (width - 1)) >> 16 >= n:
        width -= 1
    if v < start:
        return -1
    return (first + (v - start) * step) >> 16 if v < start + width else n


def device_pixel(v: float, dpr: float = 1.0, origin: float = 0.0) -> int:
    """The device pixel of its window under widget coordinate v, the widget `origin` widget pixels
    from its window's edge (`dpr` device pixels a widget pixel). Qt paints a widget on its window's
    device pixels: at a fractional ratio a widget's edge may fall between two of them."""
    # (Qt delivers the pointer's device pixel divided by the ratio: multiplied back it may fall a
    # hair short of it)
    return math.floor((v + origin) * dpr + 1e-6)


def painted_cell(v: float, starts, size: float, dpr: float = 1.0, origin: float = 0.0) -> int | None:
    """Which of the cells filled at `starts` (widget pixels, each `size` wide, none overlapping) Qt
    paints on the device pixel under widget coordinate v (`dpr` device pixels a widget pixel, the
    widget `origin` widget pixels from its window's edge: device_pixel): a cell filled as a
    one-pixel image is (painted_index). None in a gap or beyond the cells."""
    at = device_pixel(v, dpr, origin)
    for i, lo in enumerate(starts):
        if painted_index(at, (float(lo) + origin) * dpr, (float(lo) + size + origin) * dpr, 1) == 0:
            return i
    return None


def painted_in(x: float, y: float, r, dpr: float = 1.0, origin: tuple[float, float] = (0.0, 0.0),
               framed: bool = False) -> bool:
    """Whether Qt paints the rect r (a QRectF, filled, or with `framed` drawn by an aliased pen just
    inside its edges) on the device pixel under widget coordinates (x, y), the widget at `origin`
    in its window: painted_cell along each axis; a frame's edges by framed_edges."""
    if not framed:
        return (painted_cell(x, [r.left()], r.width(), dpr, origin[0]) == 0
                and painted_cell(y, [r.top()], r.height(), dpr, origin[1]) == 0)
    return all(first <= device_pixel(v, dpr, o) < end for v, o, (first, end) in (
        (x, origin[0], framed_edges((r.left() + origin[0]) * dpr, (r.right() + origin[0]) * dpr)),
        (y, origin[1], framed_edges((r.top() + origin[1]) * dpr, (r.bottom() + origin[1]) * dpr))))


def framed_edges(lo: float, hi: float) -> tuple[int, int]:
    """The device pixels [first, end) Qt paints with a frame whose outer edges lie at lo..hi device
    pixels (unrounded): an aliased pen's outline rounds up from 1/64 short of half a pixel, where a
    fill's edge rounds at half (its edge at 5.49 paints pixel 5, a fill's does not)."""
    return math.ceil(lo - 0.484375), math.ceil(hi - 0.484375)
