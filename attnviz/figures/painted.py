"""Which cell or image pixel Qt paints on a screen pixel, for the hovers: Qt's raster engine fills
an unsmoothed rect (fillRect, a scaled drawImage) between its edges rounded to whole device pixels,
so the plain test of the pointer against a cell's unrounded edges reads a neighbour near an edge.
The grid's and the focus view's pictures (ui/views/painted.py) and the head maps (headmap.hit) and
the Patching map (patching.hit) map the pointer by this arithmetic."""

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


def painted_cell(v: float, starts, size: float, dpr: float = 1.0) -> int | None:
    """Which of the cells filled at `starts` (widget pixels, each `size` wide, none overlapping) Qt
    paints on the device pixel under widget coordinate v (`dpr` device pixels a widget pixel): a
    cell filled as a one-pixel image is (painted_index). None in a gap or beyond the cells."""
    at = math.floor(v * dpr)
    for i, lo in enumerate(starts):
        if painted_index(at, float(lo) * dpr, (float(lo) + size) * dpr, 1) == 0:
            return i
    return None


def painted_in(x: float, y: float, r, dpr: float = 1.0) -> bool:
    """Whether Qt paints the rect r (a QRectF, filled or framed at its edges) on the device pixel
    under widget coordinates (x, y): painted_cell along each axis."""
    return painted_cell(x, [r.left()], r.width(), dpr) == 0 and painted_cell(y, [r.top()], r.height(), dpr) == 0
