"""The anatomy figure's sections, top to bottom as the data flows through the layer: each places
its blocks, captions and arrows through a `Cursor` (anatomy.layout runs them in order)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.engine.analysing.anatomy import cost_totals
from attnviz.engine.calc import format_count
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.figures.anatomy_parts import AnatomyView, Band, Block, Text, shape_text
from attnviz.figures.render import MUTED, TEXT, figure_font
from attnviz.figures.style import GOOD, WARNING
from attnviz.figures.text_wrap import wrap

MIN_FIT = 0.65  # a caption wider than its place is set smaller, down to this share of its size


@dataclass
class Cursor:
    """Where the next part of the anatomy figure goes (`y`, growing down the page) and what has been
    placed so far; each section of `layout` places its parts through it."""

    view: AnatomyView
    s: float  # scale: width / BASE_WIDTH
    fs: float  # the fonts' scale against the design's
    m: float  # margin
    inner: float  # width inside the margins
    cap_font: QFont
    small: QFont
    title_font: QFont
    bold: QFont
    y: float = 0.0
    act_h: float = 0.0  # height of every [T, .] block: one token row each
    label_w: float = 0.0  # token labels beside x (0 when they do not fit)
    texts: list[Text] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    lines: list[tuple[QPointF, QPointF]] = field(default_factory=list)
    share_bars: list[tuple[int, QRectF]] = field(default_factory=list)
    table: list[tuple[QRectF, str, QFont, QColor, Qt.AlignmentFlag]] = field(default_factory=list)
    caption_fonts: dict = field(default_factory=dict)  # block key -> a smaller caption font
    screen: bool = False  # laid out for the panel, where a click focuses a head (an export: no clicks)

    def fitted(self, t: str, font: QFont, width: float) -> QFont:
        """`font`, or the same set smaller (down to MIN_FIT of its size) so `t` fits in `width`:
        a caption over a narrow block must not run into its neighbour's, or be cut."""
        need = QFontMetricsF(font).horizontalAdvance(t)
        if need <= width:
            return font
        px = max(font.pixelSize() * MIN_FIT, font.pixelSize() * width / need)
        return figure_font(max(1, math.floor(px)), font.bold())  # whole pixels: rounding up overflows

    @property
    def cap_h(self) -> float:  # a caption and the head strips
        return QFontMetricsF(self.cap_font).height() * 1.15 + 4 * self.s

    @property
    def h_sel(self) -> int:  # the head the figure follows (head 0 when none is focused)
        return self.view.head if self.view.head is not None else 0

    def text(self, t: str, font: QFont, color: QColor = TEXT, h: float | None = None,
             x: float | None = None, w: float | None = None,
             align=Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter) -> None:
        """One line of text at the cursor; the cursor moves below it."""
        h = h or QFontMetricsF(font).height() * 1.2
        self.texts.append(Text(t, QRectF(self.m if x is None else x, self.y,
                                         self.inner if w is None else w, h), font, color, align))
        self.y += h

    def wrapped(self, t: str, font: QFont, color: QColor = MUTED) -> None:
        """Text wrapped to the width, one line after another."""
        for line in wrap(t, font, self.inner)[0]:
            self.text(line, font, color)

    def step(self, label: str) -> None:
        """An arrow down with what happens (wrapped to the width)."""
        s, m, small = self.s, self.m, self.small
        parts = wrap(label, small, self.inner - 16 * s)[0]
        lh = QFontMetricsF(small).height() * 1.15
        h = max(QFontMetricsF(small).height() * 1.5, lh * len(parts) + 4 * s)
        self.lines.append((QPointF(m + 6 * s, self.y + 2 * s), QPointF(m + 6 * s, self.y + h - 2 * s)))
        top = self.y + (h - lh * len(parts)) / 2
        for i, part in enumerate(parts):
            self.texts.append(Text(part, QRectF(m + 16 * s, top + i * lh, self.inner - 16 * s, lh),
                                   small, MUTED))
        self.y += h

    def act_block(self, key, caption, shape, data, x, w, h=None, **kw) -> Block:
        """A [T, .] activation block under its caption at the cursor (the cursor stays)."""
        b = Block(key, caption, tuple(shape), data, QRectF(x, self.y + self.cap_h, w, h or self.act_h),
                  row_names=self.view.labels, **kw)
        self.blocks.append(b)
        return b


def _header(c: Cursor) -> None:
    """The title, the text, the layer's shape and the notes."""
    view, small = c.view, c.small
    c.wrapped(view.title(), c.title_font, TEXT)
    quoted = f"\u201c{view.text}\u201d" if view.text else "(token ids)"
    c.text(QFontMetricsF(small).elidedText(f"{quoted}  \u00b7  {tokens(view.T)}",
                                           Qt.TextElideMode.ElideRight, c.inner), small, MUTED)
    d, nh, nkv, dh, g = view.d_model, view.n_head, view.n_kv_head, view.d_head, view.n_group
    arch = (f"d_model {d} \u00b7 {plural(nh, 'head')} \u00d7 d_head {dh} \u00b7 "
            + (f"{plural(nkv, 'KV head')} (each shared by {g} query heads)" if g > 1 else "K, V per head"))
    c.wrapped(arch, small)
    for note in view.notes:
        c.wrapped(note, small)
    c.y += 4 * c.s


def _input(c: Cursor) -> None:
    """x [T, d_model], with the tokens beside it where they fit, and the step to the projection."""
    view, s, m, small = c.view, c.s, c.m, c.small
    T, d, dh = view.T, view.d_model, view.d_head
    D, Dkv = view.n_head * dh, view.n_kv_head * dh
    c.act_h = max(26 * s, min(110 * s, T * 3 * s))
    fm_small = QFontMetricsF(small)
    if c.act_h / max(T, 1) >= fm_small.height() * 0.9:  # token labels fit beside x
        c.label_w = min(90 * s, max(fm_small.horizontalAdvance(t[:12]) for t in view.labels) + 6 * s)
    c.act_block("x", f"x  {shape_text((T, d))}", (T, d), view.anatomy.x, m + c.label_w,
                c.inner - c.label_w)
    if c.label_w:
        for i, lab in enumerate(view.labels):
            r = QRectF(m, c.y + c.cap_h + i * c.act_h / T, c.label_w - 4 * s, c.act_h / T)
            c.texts.append(Text(lab[:12], r, small, MUTED,
                                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter))
    c.y += c.cap_h + c.act_h
    c.step(f"x @ W_Q, x @ W_K, x @ W_V: one fused projection [{d}, {D + 2 * Dkv}], its columns cut "
           f"into heads of d_head {dh}")


# the convention of every weight caption here, beside the Calculator's table of the same matrices
WEIGHT_SHAPES = ("weight shapes [in, out], as x @ W multiplies them (the Calculator's [out, in] is "
                 "the same matrix as nn.Linear stores it)")


def _projections(c: Cursor) -> None:
    """W_Q | W_K | W_V, widths in proportion to their columns, sliced by head."""
    view, s, m, an = c.view, c.s, c.m, c.view.anatomy
    d, nh, nkv, dh, g = view.d_model, view.n_head, view.n_kv_head, view.d_head, view.n_group
    D, Dkv = nh * dh, nkv * dh
    gap = 10 * s
    wq_w = (c.inner - 2 * gap) * D / (D + 2 * Dkv)
    wkv_w = (c.inner - 2 * gap) * Dkv / (D + 2 * Dkv)
    w_h = max(60 * s, min(170 * s, wq_w * d / D))
    q_bands = [Band(h, False, 1, h * dh, (h + 1) * dh) for h in range(nh)]
    kv_bands = [Band(k, True, 1, k * dh, (k + 1) * dh) for k in range(nkv)]
    kv_word = "KV head" if g > 1 else "head"
    for key, cap, shape, data, x, w, bands in (
            ("w_q", f"W_Q {shape_text((d, D))}", (d, D), an.w_q, m, wq_w, q_bands),
            ("w_k", f"W_K {shape_text((d, Dkv))}", (d, Dkv), an.w_k, m + wq_w + gap, wkv_w, kv_bands),
            ("w_v", f"W_V {shape_text((d, Dkv))}", (d, Dkv), an.w_v, m + wq_w + wkv_w + 2 * gap,
             wkv_w, kv_bands)):
        c.blocks.append(Block(key, cap, shape, data, QRectF(x, c.y + c.cap_h, w, w_h),
                              bands=list(bands), weight=True))
        font = c.fitted(cap, c.cap_font, w + gap - 2 * s if key != "w_v" else m + c.inner - x)
        if font is not c.cap_font:
            c.caption_fonts[key] = font
    c.y += c.cap_h + w_h + 2 * s
    c.wrapped(f"coloured by {'KV group: query heads that share a KV head share its colour' if g > 1 else 'head'}"
              + ("; click a slice to focus its head" if c.screen else ""), c.small, MUTED)
    c.wrapped(WEIGHT_SHAPES, c.small, MUTED)
    c.step(f"split: q into {plural(nh, 'head')} [T, {dh}], k and v into {plural(nkv, kv_word)}"
           + (" (after RoPE)" if "RoPE" in " ".join(view.notes) else ""))


def _heads(c: Cursor) -> None:
    """q, k, v per head, one caption per kind, and the step to the focused head's pattern."""
    view, s, m, an = c.view, c.s, c.m, c.view.anatomy
    T, nh, nkv, dh = view.T, view.n_head, view.n_kv_head, view.d_head
    n_blocks = nh + 2 * nkv
    hgap = 2 * s
    sgap = 8 * s
    cell_w = (c.inner - 2 * sgap - (n_blocks - 3) * hgap) / n_blocks
    x = m
    for name, arr, n, kv in (("q", an.q, nh, False), ("k", an.k, nkv, True), ("v", an.v, nkv, True)):
        for i in range(n):
            c.act_block(f"{name}{i}", "", (T, dh), arr[i], x, cell_w, head=i, kv=kv)
            x += cell_w + hgap
        x += sgap - hgap
    x = m
    for name, n in (("q", nh), ("k", nkv), ("v", nkv)):
        w = n * cell_w + (n - 1) * hgap
        cap = f"{name} {n}\u00d7{shape_text((T, dh))}"
        c.texts.append(Text(cap, QRectF(x, c.y, w + sgap, c.cap_h), c.fitted(cap, c.cap_font, w + sgap),
                            TEXT))
        x += w + sgap
    c.y += c.cap_h + c.act_h
    h_sel = c.h_sel
    kv_sel = int(an.kv_group[h_sel])
    c.step(f"head {h_sel}: softmax(q_{h_sel} k_{kv_sel}\u1d40 / \u221a{dh}"
           + (", causal mask" if np.allclose(np.triu(an.pattern[h_sel], 1), 0) and T > 1 else "")
           + f") \u2192 pattern, @ v_{kv_sel} \u2192 head output"
           + ("" if view.head is not None else "  (no head focused: head 0)"))


def _focused_head(c: Cursor) -> None:
    """The focused head's pattern and output, and the step to the concatenation."""
    view, s, m, an, h_sel = c.view, c.s, c.m, c.view.anatomy, c.h_sel
    T, nh, dh = view.T, view.n_head, view.d_head
    side = max(50 * s, min(170 * s, T * 6 * s))
    ho_w = max(24 * s, min(90 * s, side * dh / max(T, 1)))
    pat_cap = f"pattern H{h_sel} {shape_text((T, T))}"
    ho_x = m + max(side, QFontMetricsF(c.cap_font).horizontalAdvance(pat_cap) + 8 * s) + 24 * s
    c.act_block("pattern", pat_cap, (T, T), an.pattern[h_sel], m, side, side, kind="pattern",
                head=h_sel)
    ho_cap = f"head output {shape_text((T, dh))}"
    c.act_block("head_out", ho_cap, (T, dh), an.head_out[h_sel], ho_x, ho_w, side, head=h_sel)
    font = c.fitted(ho_cap, c.cap_font, m + c.inner - ho_x)
    if font is not c.cap_font:
        c.caption_fonts["head_out"] = font
    c.lines.append((QPointF(ho_x - 20 * s, c.y + c.cap_h + side / 2),
                    QPointF(ho_x - 4 * s, c.y + c.cap_h + side / 2)))
    c.y += c.cap_h + side
    c.step(f"concat the {nh} head outputs back to {nh * dh} columns (head {h_sel}'s columns "
           f"{h_sel * dh}..{(h_sel + 1) * dh - 1})")


def _output(c: Cursor) -> None:
    """concat [T, n_head d_head] @ W_O = the layer's attention output."""
    view, s, m, an, h_sel = c.view, c.s, c.m, c.view.anatomy, c.h_sel
    T, d, nh, dh = view.T, view.d_model, view.n_head, view.d_head
    D = nh * dh
    q_bands = [Band(h, False, 1, h * dh, (h + 1) * dh) for h in range(nh)]
    c.act_block("concat", f"concat {shape_text((T, D))}", (T, D), an.concat, m, c.inner,
                bands=q_bands)
    c.y += c.cap_h + c.act_h
    c.step(f"@ W_O: mixes all heads back to d_model {d} (head {h_sel} writes through rows "
           f"{h_sel * dh}..{(h_sel + 1) * dh - 1})")
    wo_h = max(60 * s, min(170 * s, c.inner * D / d * 0.35))
    row_bands = [Band(h, False, 0, h * dh, (h + 1) * dh) for h in range(nh)]
    c.blocks.append(Block("w_o", f"W_O {shape_text((D, d))}", (D, d), an.w_o,
                          QRectF(m, c.y + c.cap_h, c.inner, wo_h), bands=row_bands, weight=True))
    c.y += c.cap_h + wo_h
    c.step("= the layer's attention output (added to the residual stream)")
    c.act_block("out", f"attention output {shape_text((T, d))}", (T, d), an.out, m, c.inner)
    c.y += c.cap_h + c.act_h + 8 * s


def _shares(c: Cursor) -> None:
    """Each head's output norm as a share of the sum over the layer's heads, as bars with their
    percentages (the heads' outputs add up to the layer's attention output; their norms do not)."""
    view, s, m, small = c.view, c.s, c.m, c.small
    nh = view.n_head
    c.wrapped("Each head's share of the layer's summed head-output norms: \u2016A_h V_h W_O(h)\u2016 / "
              "\u03a3 over heads", c.bold, TEXT)
    bars_h = 44 * s
    bw = c.inner / nh
    top = max(float(view.share.max()), 1e-6)
    for h in range(nh):
        bh = bars_h * float(view.share[h]) / top
        c.share_bars.append((h, QRectF(m + h * bw + bw * 0.15, c.y + bars_h - bh, bw * 0.7, max(bh, 1.0))))
    c.y += bars_h
    fm_small = QFontMetricsF(small)
    lab_h = fm_small.height() * 1.2
    for h in range(nh):
        if bw >= fm_small.horizontalAdvance("88%") + 2 or h == c.h_sel:
            c.texts.append(Text(f"{100 * view.share[h]:.0f}%", QRectF(m + h * bw, c.y, bw, lab_h), small,
                                MUTED, Qt.AlignmentFlag.AlignCenter))
    c.y += lab_h + 6 * s


def _cost_columns(c: Cursor, rows) -> tuple[list[float], bool]:
    """The cost table's column widths, from what they hold: each number column as wide as its
    widest cell, the names and the notes the rest. Where names and notes do not both fit on one
    line, the notes go under their row (second result True) and the names get the rest; a name
    still too long wraps. Nothing is cut."""
    pad = 4 * c.s + QFontMetricsF(c.small).height() * 0.5  # between two columns
    need = [max(QFontMetricsF(f).horizontalAdvance(cells[i]) for cells, f, _ in rows) + pad
            for i in range(5)]
    rest = max(c.inner - sum(need[1:4]), c.inner * 0.25)
    below = need[0] + need[4] > rest
    name_w = min(need[0], rest) if below else need[0]
    note_w = 0.0 if below else rest - name_w
    return [name_w, *need[1:4], note_w], below


def _cost_row(c: Cursor, cells, font: QFont, colors, widths, notes_below: bool) -> None:
    """One row of the cost table at the cursor: the name (wrapped to its column), the numbers
    right-aligned, the note in its column or on lines of its own under the row."""
    s = c.s
    line_h = QFontMetricsF(font).height() * 1.25
    right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
    left = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    pad = 4 * s
    names = wrap(cells[0], font, widths[0] - pad)[0] or [""]
    notes = wrap(cells[4], font, c.inner - 4 * pad if notes_below else widths[4] - pad)[0] if cells[4] else []
    lines = max(len(names), 1 if notes_below else len(notes), 1)
    for k, name in enumerate(names):
        c.table.append((QRectF(c.m, c.y + k * line_h, widths[0] - pad, line_h), name, font,
                        colors[0], left))
    x = c.m + widths[0]
    for i in (1, 2, 3):
        c.table.append((QRectF(x, c.y, widths[i] - pad, line_h), cells[i], font, colors[i], right))
        x += widths[i]
    c.y += lines * line_h
    for k, note in enumerate(notes):
        if notes_below:
            c.table.append((QRectF(c.m + 4 * pad, c.y, c.inner - 4 * pad, line_h), note, font,
                            colors[4], left))
            c.y += line_h
        else:
            c.table.append((QRectF(x + pad, c.y - lines * line_h + k * line_h, widths[4] - pad, line_h),
                            note, font, colors[4], left))


def _costs(c: Cursor) -> None:
    """The lesson's arithmetic: parameters, FLOPs and memory of one head, all heads and one wide head."""
    view, s, small = c.view, c.s, c.small
    T, d, nh, g = view.T, view.d_model, view.n_head, view.n_group
    c.wrapped(f"The lesson's arithmetic for this layer on {'this' if T == 1 else 'these'} {tokens(T)}", c.bold, TEXT)

    def fmt(n: int | float, unit: str) -> str:
        # (one head's 1/g share of a KV head may be a fraction: to the nearest byte, else 3 digits)
        if unit == "bytes":
            return format_bytes(round(n))
        return format_count(n if n == int(n) else float(f"{n:.3g}"))

    rows = [(("", "one head", f"all {plural(nh, 'head')}", f"1 head of {d}", ""), figure_font(10 * c.fs, True),
             [TEXT] * 5)]
    for r in view.costs:
        color = QColor(GOOD if r.note == "equal" else WARNING)
        rows.append(((f"{r.what} ({r.unit})", fmt(r.per_head, r.unit), fmt(r.all_heads, r.unit),
                      fmt(r.full_head, r.unit), r.note), small, [TEXT, TEXT, TEXT, TEXT, color]))
    widths, below = _cost_columns(c, rows)
    for cells, font, colors in rows:
        _cost_row(c, cells, font, colors, widths, below)
    p_all, p_full = cost_totals(view.costs, "params")
    f_all, f_full = cost_totals(view.costs, "FLOPs")
    c.y += 2 * s
    shared = f"; a KV head shared by {g} query heads counts 1/{g} per head" if g > 1 else ""
    c.wrapped(f"Total: {format_count(p_all)} parameters and {format_count(f_all)} FLOPs for all "
              f"{plural(nh, 'head')} vs {format_count(p_full)} and {format_count(f_full)} for one head {d} "
              f"wide. FLOPs are the matrix products (Q, K, V projections, q\u00b7k\u1d40, weights\u00b7V, "
              f"W_O), 2 per multiply-add, as the Calculator counts them; biases, RoPE and the "
              f"softmax not included. Memory is float32{shared}.", small)


SECTIONS = (_header, _input, _projections, _heads, _focused_head, _output, _shares, _costs)
