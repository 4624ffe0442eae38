"""The comparison's figures: the layers x heads JSD map (figures/headmap.py's map, one cell per
head, white = unchanged, redder = moved more) and its numbers as CSV. QPainter only: the command
line writes it offscreen, the window's Compare panel paints the same map."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QImage, QPainter, QPen

from attnviz.engine.computing.patterns import max_pool, pooled_undefined, signed_pool
from attnviz.figures import headmap
from attnviz.figures.anatomy_parts import DIVERGING
from attnviz.figures.data import ExportError
from attnviz.figures.numbers import bar_about
from attnviz.figures.painted import device_pixel, drawn_index
from attnviz.figures.render import encode_png, figure_font, figure_image
from attnviz.figures.style import ERROR, FOCUS, colormap_colors, no_value_colour, no_value_word

MAP_WIDTH = 640


EVERY_KEY = "JSD over every key (Hide first token not applied)"  # the map's note beside hidden tiles

# the summary's hover: what its numbers are (engine/analysing/compare.py defines them)
SUMMARY_TIP = (
    "Mean head JSD: each head's Jensen-Shannon divergence between A's and B's attention rows, in bits "
    "(0: the same, at most 1), averaged over its query rows, then over the heads.\n"
    "Residual stream cosine: after each block, the cosine of A's and B's residual streams at each "
    "token, averaged over the tokens (1: they point the same way); the lowest of the blocks, the "
    "block it comes after, and the last block's.\n"
    "KL(A\u2016B): at each token, how far B's next-token distribution is from A's, in nats (0: the "
    "same). Same top-1: the share of tokens where A and B predict the same most likely next token.")


def nats(value: float) -> str:
    """A KL in nats as the summary and the strip's hover write it: 4 significant digits (5e-06 is
    not "0.00000"), exactly 0 as "0"."""
    return f"{float(value):.4g}"


_STEP = re.compile(r"(?P<name>.+) at checkpoint (?P<index>\d+) of (?P<range>\S+) (?P<step>\(step [\d,]+\))")


def pair_words(a_name: str, b_name: str) -> str:
    """"A against B"; two steps of one model's checkpoints by their steps first ("checkpoint 16
    (step 1020) against checkpoint 0 (step 0), attnviz-toy-stdlib's checkpoints 0..32"), so that a
    title cut short at a narrow width keeps what tells the two apart."""
    a, b = _STEP.fullmatch(a_name), _STEP.fullmatch(b_name)
    if a is None or b is None or (a["name"], a["range"]) != (b["name"], b["range"]):
        return f"{a_name} against {b_name}"
    return (f"checkpoint {a['index']} {a['step']} against checkpoint {b['index']} {b['step']}, "
            f"{a['name']}'s checkpoints {a['range']}")


def jsd_map(jsd, a_name: str, b_name: str, kv_group=None, focus=None, note: str = "") -> headmap.HeadMap:
    """The JSD map [n_layer, n_head] (bits) as a HeadMap titled with both models, `note` first in
    its caption (EVERY_KEY where the tiles beside it hide the first token)."""
    return headmap.HeadMap(title=f"Attention JSD, {pair_words(a_name, b_name)}",
                           values=np.asarray(jsd, dtype=np.float64), unit="bits",
                           kv_group=kv_group, focus=focus, nonnegative=True, note=note)


def map_height(hm: headmap.HeadMap, width: int) -> int:
    """A height that gives the map square cells at `width`."""
    n_layer, n_head = hm.values.shape
    cell = max(4.0, (width - 60) / max(n_head, 1))
    return int(min(4000, 60 + cell * n_layer + 12))


def png_bytes(hm: headmap.HeadMap, width: int = MAP_WIDTH) -> bytes:
    """The map rendered on white, `width` pixels wide, as PNG bytes."""
    height = map_height(hm, width)
    lay = headmap.layout(hm, width, height)
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    if image.isNull():
        raise ExportError(f"cannot allocate a {lay.width} x {lay.height} image")
    p = QPainter(image)
    try:
        headmap.paint(p, hm, lay, background=QColor("white"))
    finally:
        p.end()
    return encode_png(image)


# ---------------------------------------------------------------- the panel's pictures
# A | B | A - B tiles of one layer's heads, the diverging colour bar, and the token strip with its
# flip marks and KL bars: QPainter on any device (the Compare panel's widgets, an export's image).

FLIP = QColor(ERROR)  # a position whose top-1 next token flips
KL_BAR = QColor("#5b8def")


def signed_limit(d) -> float:
    """The colour limit of a difference: its largest |value| (0 where all are 0: signed_rgb paints
    them white, paint_colour_bar writes only "0"), so the map is symmetric about 0."""
    return float(np.abs(np.asarray(d)).max(initial=0.0))


def weight_rgb(m, colormap: str) -> np.ndarray:  # [T, T] in 0..1 -> [T, T, 3] uint8
    colors = colormap_colors(colormap, 256)
    return colors[np.clip(np.rint(np.asarray(m) * 255), 0, 255).astype(np.int64)]


def signed_rgb(d, lim: float) -> np.ndarray:  # [T, T] -> [T, T, 3] uint8, white at 0
    """The diverging map: blue below 0, white at 0, red above, symmetric about 0 at +-lim (the
    index headmap.colour uses); a limit of 0 (every value 0) paints white."""
    i = np.clip(((np.asarray(d, dtype=np.float64) / (lim or 1.0) + 1) * 127.5).astype(np.int64), 0, 255)
    return np.asarray(DIVERGING)[i].astype(np.uint8)


def blank_note(colormap: str) -> str:
    """The line under the tiles under Hide first token: what the no-value colour is."""
    return (f"{no_value_word(colormap).capitalize()}: no value (the first key, hidden, or a row with "
            "no weight left once it is hidden)")


def blanked(rgb: np.ndarray, rows, first_key: bool, colormap: str) -> np.ndarray:  # [n, n, 3] -> same
    """`rgb` with the undefined rows (`rows`, [n] bool) and a hidden first key's column in the
    no-value colour (style.no_value_colour: no colour of the map, whose white is A = B, nor of
    `colormap`), as the grid paints them under Hide first token."""
    nv = no_value_colour(colormap)
    if first_key:
        rgb[:, :1] = nv
    if rows is not None:
        rgb[np.asarray(rows, dtype=bool)] = nv
    return rgb


# A tile has fewer pixels than tokens in a small panel or on a long text. Drawing its T x T picture
# scaled down picks one row of each pixel's span at fractional positions: a row (the blank first
# one among them) then shows on some heads' tiles and not others, and a peak can vanish. So a tile
# is pooled to its pixels as the grid pools its heads: a pixel shows the rows and keys it covers.
def tile_pool(n_tok: int, side: float) -> int:
    """Tokens per pixel of a tile `side` pixels wide: the fewest that give each pixel whole rows."""
    return max(1, math.ceil(n_tok / max(1, int(side))))


def pixel_blocks(n: int, side: int) -> np.ndarray:  # -> [side] int64
    """The block of n (pooled rows or keys) that each of a tile's `side` pixels shows, side >= n:
    every block gets at least one pixel."""
    return np.minimum(((np.arange(side) + 0.5) * n / side).astype(np.int64), n - 1)


def block_centre(block: int, n: int, side: float) -> float:
    """The centre, in pixels from the tile's edge, of the pixels that show `block` of n."""
    return (block + 0.5) * side / n


def tile_pixel(r: QRectF, x: float, y: float, dpr: float = 1.0,
               origin: tuple[float, float] = (0.0, 0.0)) -> tuple[int, int] | None:
    """(row, column) of the picture in tile rect r (whole pixels, painted a pixel a pixel:
    tile_rects) that Qt paints on the device pixel under (x, y) (`dpr` device pixels a widget
    pixel, the widget at `origin` in its window: painted.drawn_index); None off it. (At a ratio of
    1.25 a picture pixel spans one or two device pixels, not always the one under the pointer's
    corner.)"""
    n_y, n_x = int(r.height()), int(r.width())
    i = drawn_index(device_pixel(y, dpr, origin[1]), (r.top() + origin[1]) * dpr, r.height() * dpr, n_y)
    j = drawn_index(device_pixel(x, dpr, origin[0]), (r.left() + origin[0]) * dpr, r.width() * dpr, n_x)
    return (i, j) if 0 <= i < n_y and 0 <= j < n_x else None


def strongest_at(m, side: int, i: int, j: int) -> tuple[int, int]:
    """(q, k) of the cell that pixel (row i, column j) of a weight_tile of weights m [T, T] (no row
    undefined, no key hidden) `side` pixels wide shows: the largest weight of its block (the first
    in row order on a tie)."""
    m = np.asarray(m)
    T = len(m)
    p = tile_pool(T, side)
    at = pixel_blocks(-(-T // p), side)
    q0, k0 = int(at[min(side - 1, max(0, i))]) * p, int(at[min(side - 1, max(0, j))]) * p
    block = m[q0:q0 + p, k0:k0 + p]
    dq, dk = np.unravel_index(int(block.argmax()), block.shape)
    return q0 + int(dq), k0 + int(dk)


def _fit(rgb: np.ndarray, side: int) -> np.ndarray:  # [n, n, 3] -> [side, side, 3]
    idx = pixel_blocks(rgb.shape[0], side)
    return np.ascontiguousarray(rgb[np.ix_(idx, idx)])


def weight_tile(m, undefined, first_key: bool, colormap: str, side: int) -> np.ndarray:
    """One head's weights [T, T] (a hidden first key 0) as a `side` x `side` picture: each pixel the
    largest weight of the rows and keys it covers (patterns.max_pool), no value where every row it
    covers is undefined (`undefined` [T] bool or None; patterns.pooled_undefined) and, a pixel a
    token, in the hidden first key's column."""
    p = tile_pool(len(m), side)
    rgb = weight_rgb(max_pool(np.asarray(m), p), colormap)
    return _fit(blanked(rgb, None if undefined is None else pooled_undefined(undefined, p),
                        first_key and p == 1, colormap), side)


def signed_tile(d, undefined, first_key: bool, lim: float, side: int, colormap: str) -> np.ndarray:
    """One head's A − B [T, T] (0 in a hidden key and an undefined row) as a `side` x `side` picture:
    each pixel the difference of largest size of the cells it covers (patterns.signed_pool), no value
    where weight_tile has none (in `colormap`'s no-value colour, as the grid's A − B)."""
    d = np.asarray(d)
    p = tile_pool(len(d), side)
    rgb = signed_rgb(signed_pool(d, p) if p > 1 else d, lim)
    return _fit(blanked(rgb, None if undefined is None else pooled_undefined(undefined, p),
                        first_key and p == 1, colormap), side)


def tile_rects(rect: QRectF, n: int, gap: float = 6.0, label_h: float = 14.0,
               min_side: float = 0.0) -> list[QRectF]:
    """n square tiles in rows filling `rect`, each with room for a title above it: the largest
    tiles at least `min_side` wide (a title's width), else the largest that fit. A tile is whole
    pixels wide (its picture is made its size, each pixel whole rows: tile_pool)."""
    best, least = None, math.ceil(min_side)
    for cols in range(1, n + 1):
        rows = -(-n // cols)
        side = math.floor(min((rect.width() - gap * (cols - 1)) / cols,
                              (rect.height() - rows * label_h - gap * (rows - 1)) / rows))
        key = (side >= least, side)
        if best is None or key > best[0]:
            best = (key, cols)
    side, cols = max(1.0, float(best[0][1])), best[1]
    return [QRectF(rect.left() + (i % cols) * (side + gap),
                   rect.top() + (i // cols) * (side + label_h + gap) + label_h, side, side)
            for i in range(n)]


def tiles_height(width: float, n: int, min_side: float, gap: float = 6.0,
                 label_h: float = 14.0) -> float:
    """The least height of tile_rects' rect `width` wide whose n tiles are each `min_side` wide or
    more (titles whole): as many columns as keep that width, so as few rows as can be."""
    cols, least = 1, math.ceil(min_side)
    while cols < n and (width - gap * cols) / (cols + 1) >= least:
        cols += 1
    side = max(least, math.floor((width - gap * (cols - 1)) / cols))
    rows = -(-n // cols)
    return rows * (side + label_h) + gap * (rows - 1)


def title_width(title: str) -> float:
    """The width paint_tiles' font gives `title`."""
    return QFontMetricsF(figure_font(10)).horizontalAdvance(title)


def paint_tiles(p: QPainter, rgbs, rects, titles, text: QColor, focus: int | None = None) -> list[str]:
    """Each [n, n, 3] picture in its rect (nearest-neighbour cells), its title above it (a title
    wider than its tile ends in an ellipsis, not cut mid-letter). -> the titles as painted."""
    font = figure_font(10)
    p.setFont(font)
    fm = QFontMetricsF(font)
    painted = []
    for i, (rgb, r, title) in enumerate(zip(rgbs, rects, titles)):
        p.drawImage(r, figure_image(rgb))
        p.setPen(text)
        painted.append(fm.elidedText(title, Qt.TextElideMode.ElideRight, r.width()))
        p.drawText(QRectF(r.left(), r.top() - 14, r.width(), 14), Qt.AlignmentFlag.AlignLeft, painted[-1])
        if i == focus:
            p.setPen(QPen(QColor(FOCUS), 2))
            p.drawRect(r.adjusted(-1, -1, 1, 1))
    return painted


BAR_STEPS = 64  # the colour bar's bands, +lim at the top down to -lim


@functools.cache
def bar_image() -> QImage:
    """The colour bar's bands as a 1 x BAR_STEPS image, top down: band s holds the value
    lim * (1 - 2 (s + 0.5) / BAR_STEPS), whose colour (headmap.colour_indices) is the same for every
    lim. Made once."""
    v = 1 - 2 * (np.arange(BAR_STEPS) + 0.5) / BAR_STEPS  # [steps] each band's value over lim
    rgb = np.asarray(DIVERGING)[headmap.colour_indices(v, 1.0)].astype(np.uint8)
    return figure_image(rgb[:, None, :])


LABEL_GAP = 3.0  # between the colour bar and its labels


def bar_labels(lim: float, middle: float = 0.0) -> tuple[str, str, str]:
    """The colour bar's (top, middle, bottom) labels, written as every colour bar writes them
    (numbers.bar_ticks: about 0 `+0.447 0 −0.447`, about a noise run's 1 `1.0002 1.0000 0.9998`);
    a limit of 0 (A = B): the middle only, the ends empty (numbers.bar_about)."""
    return bar_about(middle, lim)


def bar_label_width(lim: float, middle: float = 0.0) -> float:
    """The width paint_colour_bar's labels take right of the bar, the gap to it included: the room
    a layout leaves them."""
    fm = QFontMetricsF(figure_font(9))
    return LABEL_GAP + max(_label_w(fm, t) for t in bar_labels(lim, middle))


def _label_w(fm: QFontMetricsF, text: str) -> float:  # a label's box, its text whole
    return math.ceil(fm.horizontalAdvance(text)) + 2


def paint_colour_bar(p: QPainter, rect: QRectF, lim: float, unit: str, text: QColor,
                     middle: float = 0.0) -> None:
    """A vertical diverging bar, middle + lim at the top, `middle` (white) half-way, middle - lim at
    the bottom (its bands one image, scaled to `rect`), its three labels (bar_labels) whole right of
    it, in the bar_label_width a layout leaves them; a limit of 0 (A = B) writes only the middle."""
    p.drawImage(rect, bar_image())
    p.setPen(text)
    font = figure_font(9)
    p.setFont(font)
    fm = QFontMetricsF(font)
    for frac, label in zip((0.0, 0.5, 1.0), bar_labels(lim, middle)):
        if label:
            y = rect.top() + frac * rect.height()
            p.drawText(QRectF(rect.right() + LABEL_GAP, y - 7, _label_w(fm, label), 14),
                       Qt.AlignmentFlag.AlignVCenter, label)
    p.drawText(QRectF(rect.right() + LABEL_GAP, rect.bottom() + 4, 80, 14), Qt.AlignmentFlag.AlignLeft, unit)


def strip_rects(labels, rect: QRectF, min_w: float = 18.0) -> list[QRectF]:
    """Each token's cell in the strip: widths by label length, wrapping to more rows."""
    fm = QFontMetricsF(figure_font(10))
    out, x, y, row_h = [], rect.left(), rect.top(), fm.height() + 14
    for lab in labels:
        w = max(min_w, fm.horizontalAdvance(lab) + 8)
        if x + w > rect.right() and x > rect.left():
            x, y = rect.left(), y + row_h + 4
        out.append(QRectF(x, y, w, row_h))
        x += w + 2
    return out


def strip_height(rects) -> float:
    return (rects[-1].bottom() - rects[0].top()) if rects else 0.0


def strip_fit_height(labels, width: float) -> float:
    """The height strip_rects' rows of `labels` take in a strip `width` wide."""
    return strip_height(strip_rects(labels, QRectF(0, 0, width, 1.0)))


def paint_strip(p: QPainter, labels, rects, kld, flipped, text: QColor) -> None:
    """Tokens with a KL bar under each (its height the position's KL over the largest) and a red
    frame where the top-1 next token flips."""
    fm_h = rects[0].height() - 14 if rects else 0
    kmax = float(np.max(kld)) if kld is not None and len(kld) else 0.0
    p.setFont(figure_font(10))
    for t, (lab, r) in enumerate(zip(labels, rects)):
        p.setPen(text)
        p.drawText(QRectF(r.left(), r.top(), r.width(), fm_h), Qt.AlignmentFlag.AlignCenter, lab)
        if kld is not None and kmax > 0:
            h = 10 * float(kld[t]) / kmax
            p.fillRect(QRectF(r.left() + 2, r.bottom() - 2 - h, r.width() - 4, h), KL_BAR)
        if t in flipped:
            p.setPen(QPen(FLIP, 2))
            p.drawRect(r.adjusted(1, 1, -1, -1))
