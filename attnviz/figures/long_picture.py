"""The long view as a picture: what File ▸ Export gives for a long text (ui/views/long_view.py's
Export picture…), whose patterns are never held whole. It draws the overviews on screen, no other
numbers: every head of the layer as a tile, titled as the view's tiles (figures/titles.py: the
role badges, abbreviated as on screen where a tile is narrow, the legend then naming them), and
the focused head large, each cell coloured through the same table at the same levels as the
window paints it (overview.shown_index: the tiles at the view's scale mode, the large head at its
own top), and says which scales those are under the picture, with their tops, and in its title the display options applied (first key hidden,
value-weighted), as the view's line says them. Each cell is a square of whole pixels, so a cell's
colour is the screen's (a hidden first key's and an undefined row's in the no-value colour,
style.no_value_colour, as on screen, which the legend names under Hide first token)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFontMetrics, QFontMetricsF, QImage, QPainter

from attnviz.engine.reading.token_text import tokens
from attnviz.engine.computing.patterns import head_title
from attnviz.figures.data import write_atomic
from attnviz.figures.numbers import plain_number
from attnviz.figures.overview import LOG_DECADES, shown_index, tops
from attnviz.figures.render import TEXT, encode_png, figure_font, render_with
from attnviz.figures.style import FOCUS, heat_table, no_value_colour, no_value_legend
from attnviz.figures.titles import abbreviations, cut_title, title_form, title_forms

TILE_PX, PANE_PX = 160, 480  # about this many pixels a side (whole pixels per cell, at least one)
MARGIN, TITLE_PX, LINE_PX, HEAD_PX, GAP = 16, 18, 16, 14, 10
REDUCE_WORDS = {"max": "block max", "mean": "block mean"}
OPTION_NAMES = ("first key hidden", "value-weighted")  # figures/view.Shown.applied, as the view says them


def colour_table(name: str) -> list[int]:
    """The colormap's table (style.heat_table, the gap its no-value colour: a hidden first key's
    cells and undefined rows) as a QImage colour table: the long view paints its panes through it,
    and its picture too."""
    return [int((255 << 24) | (int(r) << 16) | (int(g) << 8) | int(b))
            for r, g, b, _a in heat_table(name, gap=(*no_value_colour(name), 255))]


def options_text(options) -> str:
    """The display options applied to what is shown (Overview.options), as the view says them:
    ", first key hidden, value-weighted", or "" with neither."""
    return "".join(f", {name}" for on, name in zip(options, OPTION_NAMES) if on)


def cells_text(pane, tiles) -> str:
    """What a cell of the large pane (and of the tiles where they pool blocks) is, as the view's
    line says it: "exact weights", or "block max of blocks of up to 4×4 tokens"."""
    def blocks(ov) -> str:
        return f"{REDUCE_WORDS[ov.reduce]} of blocks of up to {ov.block_text()}"
    text = "exact weights" if pane.exact else blocks(pane)
    return text if tiles is None or tiles.exact else f"{text} (the tiles: {blocks(tiles)})"


def scale_span(top: float, log: bool) -> str:
    """A colour scale up to `top` in words, as the view's bar and the picture's legend write it:
    "0 .. 0.873", or "log, 0.0000873 and below .. 0.873" (every number as numbers.plain_number)."""
    if log:
        return f"log, {plain_number(top * 10.0 ** -LOG_DECADES)} and below .. {plain_number(top)}"
    return f"0 .. {plain_number(top)}"


@dataclass(frozen=True)
class LongPicture:
    """What the long view shows: the layer's tiles and the focused head's pane (figures/view.Overview
    each, of one region), and how they are coloured."""
    model: str
    T: int  # tokens of the long text
    layer: int
    head: int  # the focused head (the large pane)
    tiles: object  # Overview of the layer's heads
    pane: object  # Overview of the focused head
    colormap: str
    scale_mode: str  # the tiles' scale: "shared" (one top over the tiles) or "per-head"
    log: bool
    badges: tuple = ()  # each head's role badge as the view's tiles show it ("": none)
    marks: str = ""  # what the tiles' titles say of the layer (" · local")

    def tile_title_forms(self) -> list[tuple[str, ...]]:  # in tiles.heads order
        """Each tile's title and its shorter forms, as the view's tiles write them
        (figures/titles.title_forms)."""
        return [title_forms(self.layer, h, self.badges[h] if h < len(self.badges) else "", self.marks)
                for h in self.tiles.heads]

    def title(self) -> str:
        r0, r1, c0, c1 = self.pane.region
        return (f"{self.model} · long text, {tokens(self.T)} · layer {self.layer} · queries "
                f"{r0:,}..{r1 - 1:,} × keys {c0:,}..{c1 - 1:,} · {cells_text(self.pane, self.tiles)}"
                f"{options_text(self.pane.options)}")

    def scales(self) -> list[str]:
        """The legend: each colour scale in words, with its top, and under Hide first token what
        the no-value colour means."""
        def span(top: float) -> str:
            return scale_span(top, self.log)
        t = tops(self.tiles.values, self.scale_mode)
        if self.scale_mode == "shared":
            tiles = f"tiles: shared scale, {span(float(t[0]))} (the largest cell of the layer's tiles shown)"
        else:
            low = f"{LOG_DECADES} decades below" if self.log else "0"
            tiles = (f"tiles: per-head scale{', log' if self.log else ''}, each from {low} to its own "
                     f"largest cell ({plain_number(t.min())} .. {plain_number(t.max())})")
        big = f"{head_title(self.layer, self.head)} (large): its own scale, {span(float(tops(self.pane.values, 'per-head')[0]))}"
        return [tiles, big] + ([no_value_legend(self.colormap)] if self.pane.options[0] else [])


@dataclass(frozen=True)
class Layout:
    width: int
    height: int
    tile_rects: list  # [n_heads] QRect of each tile's cells, in tiles.heads order
    pane_rect: QRect
    titles: list  # [n_heads] each tile's title as painted (tile_titles)
    lines: list  # the legend: LongPicture.scales, then what the titles abbreviate, where they do


def _scale(values, target: int) -> int:  # whole pixels per cell
    return max(1, target // max(values.shape[1], values.shape[2]))


def layout(pic: LongPicture, _width: int = 0) -> Layout:
    n = len(pic.tiles.heads)
    cols = max(1, math.ceil(math.sqrt(n)))
    k = _scale(pic.tiles.values, TILE_PX)
    th, tw = k * pic.tiles.values.shape[1], k * pic.tiles.values.shape[2]
    top = MARGIN + TITLE_PX + GAP
    rects = []
    for i in range(n):
        row, col = divmod(i, cols)
        rects.append(QRect(MARGIN + col * (tw + GAP), top + row * (th + HEAD_PX + GAP) + HEAD_PX, tw, th))
    rows = -(-n // cols)
    kp = _scale(pic.pane.values, PANE_PX)
    ph, pw = kp * pic.pane.values.shape[1], kp * pic.pane.values.shape[2]
    left = MARGIN + cols * (tw + GAP) + GAP
    pane = QRect(left, top + HEAD_PX, pw, ph)
    bottom = max(top + rows * (th + HEAD_PX + GAP), pane.bottom() + 1 + GAP)
    titles, short = tile_titles(pic, tw)
    lines = pic.scales() + ([f"titles: {short}"] if short else [])
    words = [QFontMetrics(figure_font(13, bold=True)).horizontalAdvance(pic.title())]
    words += [QFontMetrics(figure_font(11)).horizontalAdvance(line) for line in lines]
    width = max(left + pw, MARGIN + max(words) + 4) + MARGIN  # (the title and the legend whole)
    return Layout(width, bottom + len(lines) * LINE_PX + MARGIN, rects, pane, titles, lines)


def _image(idx, table) -> QImage:  # [H, W] uint8 -> an indexed QImage that owns its pixels
    h, w = idx.shape
    img = QImage(idx.tobytes(), w, h, w, QImage.Format.Format_Indexed8)
    img.setColorTable(table)
    return img.copy()


def tile_titles(pic: LongPicture, width: int) -> tuple[list[str], str]:
    """Each tile's title as the view's tiles pick it for tiles `width` pixels wide: the row in the
    first form whose titles all fit up to the next tile (a gap short of its title), cut with "…"
    where none does; and what those titles abbreviate ("" where nothing)."""
    fm = QFontMetricsF(figure_font(11))
    room = width + GAP - 2
    forms = pic.tile_title_forms()
    i = title_form(forms, lambda _j, text: fm.horizontalAdvance(text) <= room)
    short = abbreviations(pic.badges) if i >= 2 else ""  # (the badges abbreviated: form 2)
    return [cut_title(fm, f[min(i, len(f) - 1)], room) for f in forms], short


def paint(p: QPainter, pic: LongPicture, lay: Layout) -> None:
    p.fillRect(0, 0, lay.width, lay.height, QColor("white"))
    table = colour_table(pic.colormap)
    p.setPen(TEXT)
    p.setFont(figure_font(13, bold=True))
    p.drawText(QRect(MARGIN, MARGIN, lay.width - 2 * MARGIN, TITLE_PX), Qt.AlignmentFlag.AlignLeft, pic.title())
    p.setFont(figure_font(11))
    tiles = shown_index(pic.tiles, pic.scale_mode, pic.log)
    for h, rect, idx, title in zip(pic.tiles.heads, lay.tile_rects, tiles, lay.titles):
        p.drawImage(rect, _image(idx, table))  # (whole pixels per cell: no smoothing)
        if h == pic.head:  # the focused head's tile framed, as on screen (outside its cells)
            p.setPen(QColor(FOCUS))
            p.drawRect(rect.adjusted(-1, -1, 0, 0))
            p.setPen(TEXT)
        p.drawText(QRect(rect.left(), rect.top() - HEAD_PX, rect.width() + GAP - 2, HEAD_PX),
                   Qt.AlignmentFlag.AlignLeft, title)
    r = lay.pane_rect
    p.drawImage(r, _image(shown_index(pic.pane, "per-head", pic.log)[0], table))
    p.drawText(QRect(r.left(), r.top() - HEAD_PX, r.width(), HEAD_PX), Qt.AlignmentFlag.AlignLeft,
               f"{head_title(pic.layer, pic.head)} (large)")
    lines = lay.lines
    for i, line in enumerate(lines):
        p.drawText(QRect(MARGIN, lay.height - MARGIN - (len(lines) - i) * LINE_PX, lay.width - 2 * MARGIN, LINE_PX),
                   Qt.AlignmentFlag.AlignLeft, line)


def write_long_picture(pic: LongPicture, path: str | os.PathLike) -> Layout:
    """`pic` as a PNG at `path` (all or nothing: figures/data.write_atomic) -> its layout."""
    image, lay = render_with(layout, paint, pic, 0)
    write_atomic([(path, encode_png(image))])
    return lay
