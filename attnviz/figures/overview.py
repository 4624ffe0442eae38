"""A long text's view, without Qt: the geometry and the colours of the long view (ui/views/
long_view.py), which shows regions of a pattern too large to hold. What its cells are is the one
display model's (figures/view.Shown.cells, for a long run as for a dense one: the same options,
Hide first token and Value-weighted included); this module says where they are and how they look.

- A view is a region of the T x T pattern, rows r0..r1-1 (queries) x keys c0..c1-1, drawn at the
  resolution of the screen: each cell the max or the mean of its block of shown weights
  (view.REDUCES). Once the region has no more tokens than the area has pixels, each cell is one
  weight: exact.
- Zoom keeps the token under the pointer where it is (`zoom_region`), a dragged rectangle becomes
  the region (`rect_region`); no region is smaller than MIN_SPAN tokens a side or leaves 0..T.
  `token_at` and `to_tokens` map an area's points to tokens.
- Colours: levels from 0 to a top (`tops` of the cells shown: each head's own top, or one for the
  layer's heads: the state's scale mode), linear, or on a log scale over LOG_DECADES decades below
  the top (long-range weights are small), through the one colour table (figures/style).
- A causal local layer's window edge inside a region (`window_segment`).
"""

from __future__ import annotations

import math

import numpy as np

from attnviz.engine.computing.patterns import SCALE_MODES
from attnviz.figures.style import heat_positions
from attnviz.figures.view import EMPTY_TOP

MIN_SPAN = 4  # tokens: the smallest side a zoom goes to
LOG_DECADES = 4  # the log colour scale spans top * 1e-4 .. top
WHEEL_STEP = 0.8  # one wheel notch scales each side of the region by this


def full_region(T: int) -> tuple[int, int, int, int]:
    return 0, int(T), 0, int(T)


def _span(lo: float, span: int, T: int) -> tuple[int, int]:  # [lo, lo + span) moved inside 0..T
    span = max(1, min(int(span), T))
    a = int(round(min(max(lo, 0.0), T - span)))
    return a, a + span


def zoom_region(region, T: int, factor: float, at: tuple[float, float]) -> tuple[int, int, int, int]:
    """The region scaled by `factor` per side (< 1 zooms in) about token coordinates at = (q, k),
    which stay at the same place on screen; at least MIN_SPAN tokens a side (or T), inside 0..T."""
    r0, r1, c0, c1 = region
    out = []
    for lo, hi, p in ((r0, r1, at[0]), (c0, c1, at[1])):
        span = hi - lo
        new = min(T, max(min(MIN_SPAN, T), int(round(span * factor))))
        rel = (p - lo) / span if span else 0.5
        out += _span(p - rel * new, new, T)
    return tuple(out)


def rect_region(T: int, a: tuple[float, float], b: tuple[float, float]) -> tuple[int, int, int, int]:
    """The region a rectangle dragged from token coordinates a to b (q, k) covers: every token it
    touches, widened about its centre to MIN_SPAN tokens a side where it is smaller."""
    out = []
    for x, y in ((a[0], b[0]), (a[1], b[1])):
        lo, hi = math.floor(min(x, y)), math.floor(max(x, y)) + 1
        span = max(hi - lo, min(MIN_SPAN, T))
        out += _span((lo + hi) / 2 - span / 2, span, T)
    return tuple(out)


def token_at(region, size: tuple[float, float], y: float, x: float) -> tuple[int, int] | None:
    """(q, k) under point (y, x) of an area size = (height, width) that shows `region`, or None
    outside it."""
    r0, r1, c0, c1 = region
    h, w = size
    if not (0 <= y < h and 0 <= x < w):
        return None
    return (min(r1 - 1, r0 + int(y * (r1 - r0) / h)), min(c1 - 1, c0 + int(x * (c1 - c0) / w)))


def to_tokens(region, size, y: float, x: float) -> tuple[float, float]:
    """Point (y, x) of the area as fractional token coordinates (q, k), clamped to the region."""
    r0, r1, c0, c1 = region
    h, w = size
    return (r0 + min(max(y, 0.0), h) * (r1 - r0) / h, c0 + min(max(x, 0.0), w) * (c1 - c0) / w)


def tops(values: np.ndarray, scale_mode: str) -> np.ndarray:  # [n, H, W] -> [n] float32
    """Each head's colour-scale top: its own largest cell ('per-head'), or the largest of the heads
    shown ('shared'); EMPTY_TOP where that is 0."""
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale mode {scale_mode!r} is not one of {SCALE_MODES}")
    n = values.shape[0]
    top = values.reshape(n, -1).max(axis=1) if values.size else np.zeros(n, np.float32)
    if scale_mode == "shared":
        top = np.full(n, top.max() if n else 0.0, np.float32)
    return np.where(top > 0, top, np.float32(EMPTY_TOP)).astype(np.float32)


def log_levels(values: np.ndarray, top) -> np.ndarray:
    """Weights on the log scale, rescaled to 0..top for the linear table: top * 10^-LOG_DECADES and
    below -> 0, top -> top."""
    top = np.asarray(top, np.float32)
    floor = top * np.float32(10.0 ** -LOG_DECADES)
    v = np.log10(np.maximum(values, floor) / top, dtype=np.float32)
    return (v / np.float32(LOG_DECADES) + np.float32(1.0)) * top


def colour_index(values: np.ndarray, top, log: bool = False) -> np.ndarray:
    """[n, H, W] weights -> [n, H, W] uint8 colour-table indices 1..255 (style.heat_table), levels 0..top
    per head (top [n]), linear or log."""
    top = np.asarray(top, np.float32).reshape(-1, 1, 1)
    v = log_levels(values, top) if log else values
    return heat_positions(v, top).astype(np.uint8)


def shown_index(ov, scale_mode: str, log: bool = False) -> np.ndarray:  # -> [n, H, W] uint8
    """An overview's (figures/view.Overview) colour-table indices as the long view paints them and
    its export writes them: levels 0..tops(values, scale_mode), linear or log; a hidden first key's
    own column (a region from key 0 at one key per cell) and a row of cells whose every query row
    is undefined (Overview.blank) are the gap, 0, as in the grid."""
    idx = colour_index(ov.values, tops(ov.values, scale_mode), log)
    if ov.options[0] and ov.region[2] == 0 and ov.edges(1)[1] == 1:
        idx[:, :, 0] = 0
    if ov.blank is not None:
        idx[ov.blank] = 0
    return idx


def level_at(weight: float, top: float, log: bool) -> float:
    """Where `weight` sits on the colour scale, 0..1 (a colour bar's tick)."""
    if top <= 0:
        return 0.0
    if log:
        return float(log_levels(np.float32(weight), np.float32(top)) / top)
    return min(1.0, max(0.0, weight / top))


def window_segment(region, window: int | None, causal: bool) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """A causal local layer's window edge inside the region, as two (q, k) points in token
    coordinates (the key column q - window + 1 of each row q: keys left of it are out of the
    window), or None where the region has no masked key."""
    if window is None or not causal:
        return None
    r0, r1, c0, c1 = region
    q0 = max(r0, window, c0 + window - 1)
    q1 = min(r1, c1 + window - 1)
    if q0 >= q1:
        return None
    return (q0, q0 - window + 1), (q1, q1 - window + 1)
