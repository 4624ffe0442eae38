"""The anatomy figure: one attention layer of the loaded model drawn as the lesson's pipeline, with
its real weights and activations. One QPainter path serves the Anatomy panel, PNG and SVG (the
heatmap figure's writers in figure.py), so the panel and an export look the same.

    x [T, d_model] -> W_Q | W_K | W_V -> q, k, v per head -> the focused head's pattern and output
    -> concat [T, n_head d_head] -> W_O -> attention output [T, d_model], then the head shares and
    the cost table.

`layout()` places every block (no drawing) and keeps, per block, the array drawn, its shape and
bytes, so hover and click are answered from the layout; `paint()` draws a layout. Weights and
activations are signed: a diverging blue-white-red scale, symmetric, clipped at the 99th percentile
of |value| of each block (the hover read-out gives the exact value). The pattern uses the window's
colormap, 0..its max, as in the grid."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen

from attnviz.engine.analysing.anatomy import (
    BYTES, CostRow, LayerAnatomy, cost_totals, head_costs, head_dim_note, input_name, layer_anatomy,
)
from attnviz.engine.calc import format_bytes, format_count
from attnviz.engine.computing.layers import head_output_share_of_heads
from attnviz.engine.computing.patterns import check_index, group_size, head_title, max_pool
from attnviz.figures.data import DEFAULT_COLORMAP, MAX_WIDTH, MIN_WIDTH, ExportError
from attnviz.figures.render import (
    FRAME, MUTED, TEXT, encode_png, figure_font, figure_image, render_svg, render_with,
)
from attnviz.figures.style import FOCUS, GOOD, WARNING, group_color, heat_index, heat_table

BASE_WIDTH = 640.0  # design width: sizes scale with width / BASE_WIDTH
MIN_FONT_SCALE = 0.9  # text never smaller than at 0.9 x the design width's
DESIGN_TEXT_PX = 12.0  # the prose size the design's fonts sit beside (captions 11 px, notes 10 px)
MIN_FIT = 0.65  # a caption wider than its place is set smaller, down to this share of its size
FOCUS_QCOLOR = QColor(FOCUS)  # the focused head
SEPARATOR = QColor(60, 60, 60, 150)  # between two heads' slices


def diverging_lut() -> np.ndarray:  # -> [256, 3] uint8: blue (negative) - white (0) - red
    stops = np.array([[33, 102, 172], [146, 197, 222], [247, 247, 247], [244, 165, 130],
                      [178, 24, 43]], np.float64)
    t = np.linspace(0, len(stops) - 1, 256)
    i = np.minimum(t.astype(int), len(stops) - 2)
    f = (t - i)[:, None]
    return np.ascontiguousarray(np.round(stops[i] * (1 - f) + stops[i + 1] * f).astype(np.uint8))


DIVERGING = diverging_lut()


def signed_limit(a: np.ndarray) -> float:
    """The 99th percentile of |a| (from at most ~16k evenly spaced elements: a colour scale needs
    no more), > 0."""
    flat = np.asarray(a, np.float32).reshape(-1)
    step = max(1, flat.size // 16384)
    sample = np.abs(flat[::step])
    lim = float(np.percentile(sample, 99)) if sample.size else 0.0
    return lim if lim > 0 else float(np.abs(flat).max(initial=0.0)) or 1.0


def signed_rgb(a: np.ndarray, lim: float) -> np.ndarray:  # [r, c] -> [r, c, 3] uint8
    idx = np.clip((np.asarray(a, np.float32) / lim + 1) * 127.5, 0, 255).astype(np.uint8)
    return DIVERGING[idx]


def weight_color(i: int) -> QColor:  # head / KV group i's colour (style.GROUP_COLORS: no orange, FOCUS's)
    return QColor(group_color(i))


@dataclass
class Band:
    """One head's (or KV head's) slice of a block: columns c0..c1 (or rows, axis 0) of the data."""
    head: int  # the query head, or the KV head for K/V blocks
    kv: bool  # head is a KV head
    axis: int  # 1: a column band, 0: a row band
    i0: int
    i1: int


@dataclass
class Block:
    key: str  # stable name: "x", "w_q", "q3", "pattern", ...
    caption: str  # drawn above the block
    shape: tuple[int, ...]  # the logical shape (q: [T, d_head] of one head)
    data: np.ndarray  # 2-D array drawn, rows top to bottom
    rect: QRectF
    kind: str = "signed"  # "signed" or "pattern"
    bands: list[Band] = field(default_factory=list)
    head: int | None = None  # the block belongs to one head (q/k/v per head, pattern, output)
    kv: bool = False
    row_names: list[str] | None = None  # token labels of the rows, for the read-out
    weight: bool = False  # a weight matrix: its colours depend on the layer alone

    @property
    def nbytes(self) -> int:
        return BYTES * int(np.prod(self.shape))

    def index_at(self, x: float, y: float) -> tuple[int, int] | None:
        r = self.rect
        if not r.contains(QPointF(x, y)):
            return None
        n_r, n_c = self.data.shape
        i = min(n_r - 1, int((y - r.top()) / r.height() * n_r))
        j = min(n_c - 1, int((x - r.left()) / r.width() * n_c))
        return i, j

    def band_at(self, i: int, j: int) -> Band | None:
        return next((b for b in self.bands if b.i0 <= (j if b.axis == 1 else i) < b.i1), None)


@dataclass(frozen=True, eq=False)
class AnatomyView:
    """Everything the figure shows, as a snapshot (the panel's and an export's)."""
    model: str
    text: str
    tokens: list[str]
    labels: list[str]
    ids: list[int]
    layer: int
    n_layer: int
    head: int | None  # the focused head of this layer, None: none lit
    anatomy: LayerAnatomy
    costs: list[CostRow]
    share: np.ndarray  # [n_head] each head's share of the layer's attention output norm
    colormap: str
    family: str
    d_model: int
    n_head: int
    n_kv_head: int
    d_head: int
    notes: list[str]
    result: object = None  # the RunResult drawn (a view of another head reuses its numbers)
    weights: object = None  # the model's Weights (a training checkpoint swaps them, same name)
    limits: dict = field(default_factory=dict)  # colour limit shared by all heads' q, k or v

    @property
    def T(self) -> int:
        return len(self.tokens)

    @property
    def n_group(self) -> int:  # query heads per KV head
        return group_size(self.anatomy.kv_group)

    def title(self) -> str:
        focus = f", head {self.head}" if self.head is not None else ""
        return f"{self.model} \u00b7 anatomy of layer {self.layer}{focus}"


def make_anatomy_view(model, result, layer: int, head: int | None = None,
                      colormap: str = DEFAULT_COLORMAP, previous: AnatomyView | None = None) -> AnatomyView:
    """The view of `result` (a RunResult with layer_inputs: Model.run(inputs=True)) at `layer`.
    `previous`: a view of the same result and layer (another head) whose numbers are reused."""
    if (previous is not None and previous.result is result and previous.layer == layer
            and previous.model == model.name and previous.weights is model.weights):
        return replace(previous, head=None if head is None else int(head), colormap=colormap)
    if result is None:
        raise ExportError("nothing to draw: no attention has been computed yet")
    cfg = model.config
    check_index("layer", layer, cfg.n_layer)
    if head is not None:
        check_index("head", head, cfg.n_head)
    if result.layer_inputs is None:
        raise ExportError("this result kept no layer inputs: run it with inputs=True")
    an = layer_anatomy(cfg, model.weights, result.layer_inputs[layer], layer,
                       result.attentions[layer])
    limits = {name: signed_limit(getattr(an, name)) for name in ("q", "k", "v")}
    notes = [input_name(cfg)]
    if cfg.rope_theta:
        notes.append("q, k after RoPE")
    hd = head_dim_note(cfg)
    if hd:
        notes.append(hd)
    if layer == cfg.n_layer - 1:
        notes.append("last layer: its output projection, skipped by the heatmaps' forward pass "
                     "(nothing after it changes a pattern), is computed here from the loaded W_O")
    return AnatomyView(
        model=model.name, text=result.text, tokens=list(result.tokens),
        labels=list(result.labels or result.tokens), ids=[int(i) for i in result.input_ids],
        layer=int(layer), n_layer=cfg.n_layer, head=None if head is None else int(head),
        anatomy=an, costs=head_costs(cfg, len(result.tokens)), share=head_output_share_of_heads(an.head_out, an.w_o),
        colormap=colormap, family=cfg.family, d_model=cfg.d_model, n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head, d_head=cfg.d_head, notes=notes, result=result, limits=limits,
        weights=model.weights)


@dataclass
class Text:
    text: str
    rect: QRectF
    font: QFont
    color: QColor
    align: Qt.AlignmentFlag = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter


@dataclass
class AnatomyLayout:
    width: int
    height: int
    scale: float
    blocks: list[Block]
    texts: list[Text]
    share_bars: list[tuple[int, QRectF]]  # (head, bar rect)
    table: list[tuple[QRectF, str, QFont, QColor, Qt.AlignmentFlag]]
    lines: list[tuple[QPointF, QPointF]]  # connectors (arrows)
    text_scale: float = 1.0  # the fonts' size against the design's (caption font: 11 px x this)
    caption_fonts: dict = field(default_factory=dict)  # block key -> its caption's font, set smaller to fit

    def caption_font(self, b: "Block") -> QFont:
        return self.caption_fonts.get(b.key) or figure_font(11 * self.text_scale)

    def block(self, key: str) -> Block | None:
        return next((b for b in self.blocks if b.key == key), None)

    def panels(self) -> list[dict]:  # for the sidecar: where each block went
        return [{"block": b.key, "shape": list(b.shape), "x": b.rect.x(), "y": b.rect.y(),
                 "w": b.rect.width(), "h": b.rect.height()} for b in self.blocks]

    def hit(self, x: float, y: float):
        """(block, (row, col), band) under a point, or None."""
        for b in self.blocks:
            ij = b.index_at(x, y)
            if ij is not None:
                return b, ij, b.band_at(*ij)
        for h, r in self.share_bars:
            if r.adjusted(-1, -200, 1, 0).contains(QPointF(x, y)):
                return None, None, Band(h, False, 1, 0, 0)
        return None


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


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
        for line in wrap(t, font, self.inner):
            self.text(line, font, color)

    def step(self, label: str) -> None:
        """An arrow down with what happens (wrapped to the width)."""
        s, m, small = self.s, self.m, self.small
        parts = wrap(label, small, self.inner - 16 * s)
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


def wrap(t: str, font: QFont, width: float) -> list[str]:
    """`t` cut into lines no wider than `width` at `font`, at spaces."""
    fm = QFontMetricsF(font)
    out, line = [], ""
    for word in t.split():
        trial = f"{line} {word}".strip()
        if fm.horizontalAdvance(trial) > width and line:
            out.append(line)
            line = word
        else:
            line = trial
    return out + [line] if line else out


def layout(view: AnatomyView, width: int, text_px: float | None = None) -> AnatomyLayout:
    """Place every block for a figure `width` pixels wide; the height follows. One section after
    another, top to bottom, as the data flows through the layer.

    `text_px`: the prose beside the figure (the panel's font, in pixels): the figure's text is
    sized to it (captions 11/12 of it, notes 10/12), whatever the width, and lines wrap instead.
    Without it (an export), text scales with the width, never below MIN_FONT_SCALE."""
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ExportError(f"width {width} px is outside {MIN_WIDTH}..{MAX_WIDTH}")
    s = width / BASE_WIDTH
    # text stays readable in a narrow dock; lines wrap instead
    fs = text_px / DESIGN_TEXT_PX if text_px else max(s, MIN_FONT_SCALE)
    c = Cursor(view, s, fs, 12 * s, width - 24 * s, figure_font(11 * fs), figure_font(10 * fs),
               figure_font(15 * fs, True), figure_font(11 * fs, True))
    c.y = c.m
    for section in (_header, _input, _projections, _heads, _focused_head, _output, _shares, _costs):
        section(c)
    return AnatomyLayout(int(width), int(math.ceil(c.y + c.m)), s, c.blocks, c.texts, c.share_bars,
                         c.table, c.lines, fs, c.caption_fonts)


def _header(c: Cursor) -> None:
    """The title, the text, the layer's shape and the notes."""
    view, small = c.view, c.small
    c.wrapped(view.title(), c.title_font, TEXT)
    quoted = f"\u201c{view.text}\u201d" if view.text else "(token ids)"
    c.text(QFontMetricsF(small).elidedText(f"{quoted}  \u00b7  {view.T} tokens",
                                           Qt.TextElideMode.ElideRight, c.inner), small, MUTED)
    d, nh, nkv, dh, g = view.d_model, view.n_head, view.n_kv_head, view.d_head, view.n_group
    arch = (f"d_model {d} \u00b7 {nh} heads \u00d7 d_head {dh} \u00b7 "
            + (f"{nkv} KV heads (each shared by {g} query heads)" if g > 1 else "K, V per head"))
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
    c.act_block("x", f"x  {_shape_text((T, d))}", (T, d), view.anatomy.x, m + c.label_w,
                c.inner - c.label_w)
    if c.label_w:
        for i, lab in enumerate(view.labels):
            r = QRectF(m, c.y + c.cap_h + i * c.act_h / T, c.label_w - 4 * s, c.act_h / T)
            c.texts.append(Text(lab[:12], r, small, MUTED,
                                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter))
    c.y += c.cap_h + c.act_h
    c.step(f"x @ W_Q, x @ W_K, x @ W_V: one fused projection [{d}, {D + 2 * Dkv}], its columns cut "
           f"into heads of d_head {dh}")


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
            ("w_q", f"W_Q {_shape_text((d, D))}", (d, D), an.w_q, m, wq_w, q_bands),
            ("w_k", f"W_K {_shape_text((d, Dkv))}", (d, Dkv), an.w_k, m + wq_w + gap, wkv_w, kv_bands),
            ("w_v", f"W_V {_shape_text((d, Dkv))}", (d, Dkv), an.w_v, m + wq_w + wkv_w + 2 * gap,
             wkv_w, kv_bands)):
        c.blocks.append(Block(key, cap, shape, data, QRectF(x, c.y + c.cap_h, w, w_h),
                              bands=list(bands), weight=True))
        font = c.fitted(cap, c.cap_font, w + gap - 2 * s if key != "w_v" else m + c.inner - x)
        if font is not c.cap_font:
            c.caption_fonts[key] = font
    c.y += c.cap_h + w_h + 2 * s
    c.wrapped(f"coloured by {'KV group: query heads that share a KV head share its colour' if g > 1 else 'head'}"
              f"; click a slice to focus its head", c.small, MUTED)
    c.step(f"split: q into {nh} heads [T, {dh}], k and v into {nkv} {kv_word}s"
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
        cap = f"{name} {n}\u00d7{_shape_text((T, dh))}"
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
    pat_cap = f"pattern H{h_sel} {_shape_text((T, T))}"
    ho_x = m + max(side, QFontMetricsF(c.cap_font).horizontalAdvance(pat_cap) + 8 * s) + 24 * s
    c.act_block("pattern", pat_cap, (T, T), an.pattern[h_sel], m, side, side, kind="pattern",
                head=h_sel)
    ho_cap = f"head output {_shape_text((T, dh))}"
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
    c.act_block("concat", f"concat {_shape_text((T, D))}", (T, D), an.concat, m, c.inner,
                bands=q_bands)
    c.y += c.cap_h + c.act_h
    c.step(f"@ W_O: mixes all heads back to d_model {d} (head {h_sel} writes through rows "
           f"{h_sel * dh}..{(h_sel + 1) * dh - 1})")
    wo_h = max(60 * s, min(170 * s, c.inner * D / d * 0.35))
    row_bands = [Band(h, False, 0, h * dh, (h + 1) * dh) for h in range(nh)]
    c.blocks.append(Block("w_o", f"W_O {_shape_text((D, d))}", (D, d), an.w_o,
                          QRectF(m, c.y + c.cap_h, c.inner, wo_h), bands=row_bands, weight=True))
    c.y += c.cap_h + wo_h
    c.step("= the layer's attention output (added to the residual stream)")
    c.act_block("out", f"attention output {_shape_text((T, d))}", (T, d), an.out, m, c.inner)
    c.y += c.cap_h + c.act_h + 8 * s


def _shares(c: Cursor) -> None:
    """Each head's share of the layer's attention output, as bars with their percentages."""
    view, s, m, small = c.view, c.s, c.m, c.small
    nh = view.n_head
    c.wrapped("Each head's share of the layer's attention output: \u2016A_h V_h W_O(h)\u2016 / \u03a3 over "
              "heads", c.bold, TEXT)
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
    names = wrap(cells[0], font, widths[0] - pad) or [""]
    notes = wrap(cells[4], font, c.inner - 4 * pad if notes_below else widths[4] - pad) if cells[4] else []
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
    c.wrapped(f"The lesson's arithmetic for this layer on these {T} tokens", c.bold, TEXT)

    def fmt(n: int, unit: str) -> str:
        return format_bytes(n) if unit == "bytes" else format_count(n)

    rows = [(("", "one head", f"all {nh} heads", f"1 head of {d}", ""), figure_font(10 * c.fs, True),
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
    c.wrapped(f"Total: {format_count(p_all)} parameters and {format_count(f_all)} FLOPs for all "
              f"{nh} heads vs {format_count(p_full)} and {format_count(f_full)} for one head "
              f"{d} wide. A multiply-add is 2 FLOPs; memory is float32; a KV head shared by {g} "
              f"query heads counts 1/{g} per head." if g > 1 else
              f"Total: {format_count(p_all)} parameters and {format_count(f_all)} FLOPs for all "
              f"{nh} heads vs {format_count(p_full)} and {format_count(f_full)} for one head {d} "
              f"wide. A multiply-add is 2 FLOPs; memory is float32.", small)


def cache_key(view: AnatomyView, b: Block) -> tuple:
    """What a block's colours depend on: a weight on (model, layer, block); an activation on the
    layer's numbers (shared by the views of its heads), the head and, for the pattern, the
    colormap. (A cache keyed so is emptied when the model or its weights change: AnatomyCanvas.)"""
    if b.weight:
        return ("w", view.model, view.layer, b.key)
    return ("a", id(view.anatomy), b.key, b.head, view.colormap if b.kind == "pattern" else "")


def block_rgb(view: AnatomyView, b: Block, cache: dict | None = None) -> np.ndarray:
    """The colours of a block, kept in `cache` (a dict) when one is given."""
    key = cache_key(view, b)
    if cache is not None and key in cache:
        return cache[key]
    if b.kind == "pattern":
        rgb = heat_table(view.colormap)[heat_index(b.data, float(b.data.max()) or 1.0), :3]
    else:
        lim = view.limits.get(b.key[0]) if b.head is not None and b.key[1:].isdigit() else None
        rgb = signed_rgb(b.data, lim or signed_limit(b.data))
    if cache is not None:
        cache[key] = rgb
    return rgb


def paint(painter: QPainter, view: AnatomyView, lay: AnatomyLayout, cache: dict | None = None,
          images: dict | None = None, clip: QRectF | None = None) -> None:
    """Draw the figure. `cache`/`images`: dicts the panel keeps between paints (colours by block
    data, scaled images by block data and size); `clip`: only what meets this rectangle (the part
    of the panel on screen) is drawn."""
    s = lay.scale
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
    painter.fillRect(QRectF(0, 0, lay.width, lay.height) if clip is None else clip, QColor("white"))
    margin = 8 * s  # captions and head strips stand just outside their block
    seen = (lambda r: True) if clip is None else (
        lambda r: r.adjusted(-margin, -2 * margin, margin, margin).intersects(clip))
    for t in lay.texts:
        if not seen(t.rect):
            continue
        painter.setFont(t.font)
        painter.setPen(t.color)
        painter.drawText(t.rect, t.align, t.text)
    painter.setPen(QPen(MUTED, max(1.0, 1.2 * s)))
    for a, b in lay.lines:
        painter.drawLine(a, b)
        if abs(a.x() - b.x()) < 1e-6:  # a down arrow head
            painter.drawLine(b, QPointF(b.x() - 3 * s, b.y() - 4 * s))
            painter.drawLine(b, QPointF(b.x() + 3 * s, b.y() - 4 * s))
        else:
            painter.drawLine(b, QPointF(b.x() - 4 * s, b.y() - 3 * s))
            painter.drawLine(b, QPointF(b.x() - 4 * s, b.y() + 3 * s))
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)  # axis-aligned from here: crisp, fast
    h_sel = view.head
    g_sel = int(view.anatomy.kv_group[h_sel]) if h_sel is not None else None
    for b in lay.blocks:
        if not seen(b.rect):
            continue
        _paint_block(painter, view, b, lay, cache, images)
        if b.caption:
            cap_font = lay.caption_font(b)
            painter.setFont(cap_font)
            painter.setPen(TEXT)
            fm = QFontMetricsF(cap_font)
            lift = 3 * s if any(band.axis == 1 for band in b.bands) else 0  # above the head strips
            painter.drawText(QRectF(b.rect.x(), b.rect.y() - lift - fm.height() * 1.15,
                                    max(b.rect.width(), lay.width - b.rect.x()), fm.height() * 1.15),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, b.caption)
        # head blocks: outline in the head's (KV group's) colour, the focused one lit
        if b.head is not None and b.key[0] in "qkv" and b.key[1:].isdigit():
            group = b.head if b.kv else int(view.anatomy.kv_group[b.head])
            lit = (b.kv and group == g_sel) or (not b.kv and b.head == h_sel)
            _outline(painter, b.rect, FOCUS_QCOLOR if lit else weight_color(group), (2.5 if lit else 1.2) * s)
        else:
            _outline(painter, b.rect, FRAME, max(0.8, 0.8 * s))
        lit_rects = []
        for band in b.bands:
            group = band.head if band.kv else int(view.anatomy.kv_group[band.head])
            lit = (band.kv and group == g_sel) or (not band.kv and band.head == h_sel)
            r = _band_rect(b, band)
            w = max(1.0, 0.8 * s)
            if band.axis == 1:  # the head's colour strip, and a line where the next head starts
                strip = QRectF(r.x(), r.y() - 3 * s, r.width(), 3 * s)
                cut = QRectF(r.left() - w / 2, r.top(), w, r.height())
            else:
                strip = QRectF(r.x() - 3 * s, r.y(), 3 * s, r.height())
                cut = QRectF(r.left(), r.top() - w / 2, r.width(), w)
            painter.fillRect(strip, FOCUS_QCOLOR if lit else weight_color(group))
            if band.i0:
                painter.fillRect(cut, SEPARATOR)
            if lit:
                lit_rects.append(r)
        for r in lit_rects:  # on top of their neighbours' outlines
            _outline(painter, r, FOCUS_QCOLOR, 2.5 * s)
    for h, r in lay.share_bars:
        group = int(view.anatomy.kv_group[h])
        painter.fillRect(r, FOCUS_QCOLOR if h == h_sel else weight_color(group))
    for r, t, f, c, align in lay.table:
        painter.setFont(f)
        painter.setPen(c)
        painter.drawText(r, align, t)


def _band_rect(b: Block, band: Band) -> QRectF:
    """Where a band (a head's columns, or rows) of a block is drawn."""
    n = b.data.shape[band.axis]
    r = b.rect
    if band.axis == 1:
        return QRectF(r.x() + r.width() * band.i0 / n, r.y(), r.width() * (band.i1 - band.i0) / n,
                      r.height())
    return QRectF(r.x(), r.y() + r.height() * band.i0 / n, r.width(),
                  r.height() * (band.i1 - band.i0) / n)


def _outline(painter: QPainter, r: QRectF, color: QColor, width: float) -> None:
    """A rectangle's outline centred on its edges, as four filled strips: a stroked QPen of a
    fractional width is far slower in the raster engine than a fill."""
    h = max(width, 1.0) / 2
    painter.fillRect(QRectF(r.left() - h, r.top() - h, r.width() + 2 * h, 2 * h), color)
    painter.fillRect(QRectF(r.left() - h, r.bottom() - h, r.width() + 2 * h, 2 * h), color)
    painter.fillRect(QRectF(r.left() - h, r.top() + h, 2 * h, r.height() - 2 * h), color)
    painter.fillRect(QRectF(r.right() - h, r.top() + h, 2 * h, r.height() - 2 * h), color)


def mean_pool(a: np.ndarray, kr: int, kc: int) -> np.ndarray:  # [r, c] -> [ceil(r/kr), ceil(c/kc)]
    """Mean of each kr x kc block (the last ones take what is left): what a pixel showing many
    weights stands for."""
    a = np.asarray(a, np.float32)
    if kr == kc == 1:
        return a
    n_r, n_c = a.shape
    pr, pc = -n_r % kr, -n_c % kc
    if pr or pc:  # pad with the edge means' neutral value, counted out below
        a = np.pad(a, ((0, pr), (0, pc)))
    s = a.reshape(-1, kr, a.shape[1] // kc, kc).sum(axis=(1, 3))
    count = np.full(s.shape, kr * kc, np.float32)
    if pr:
        count[-1, :] = (kr - pr) * kc
    if pc:
        count[:, -1] = count[:, -1] / kc * (kc - pc)
    return s / count


def sized_rgb(view: AnatomyView, b: Block, w: int, h: int, cache: dict | None = None) -> np.ndarray:
    """A block's colours at about w x h pixels: a block with many values per pixel is pooled
    first (a pattern by its max, so every peak shows, as in the heatmaps; a weight or activation
    by its mean, coloured on the pooled values' own scale), except one head's q, k or v, drawn
    narrower than d_head: every kc-th column, on the scale all heads share (cheap: there are
    n_head + 2 n_kv_head of them per redraw)."""
    n_r, n_c = b.data.shape
    kr, kc = max(1, n_r // max(h, 1)), max(1, n_c // max(w, 1))
    if kr == kc == 1:
        return block_rgb(view, b, cache)
    if b.kind == "pattern":
        pooled = max_pool(b.data, max(kr, kc))
        return heat_table(view.colormap)[heat_index(pooled, float(b.data.max()) or 1.0), :3]
    if b.head is not None and b.key[1:].isdigit():  # one head's q, k or v: every kr-th, kc-th value
        return signed_rgb(b.data[::kr, ::kc], view.limits.get(b.key[0]) or signed_limit(b.data))
    pooled = mean_pool(b.data, kr, kc)
    return signed_rgb(pooled, signed_limit(pooled))


def _paint_block(painter: QPainter, view: AnatomyView, b: Block, lay: AnatomyLayout, cache, images) -> None:
    w, h = max(1, round(b.rect.width())), max(1, round(b.rect.height()))
    key = (*cache_key(view, b), w, h)
    img = images.get(key) if images is not None else None
    if img is None:
        img = figure_image(sized_rgb(view, b, w, h, cache))
        if images is not None:
            images[key] = img
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
    painter.drawImage(b.rect, img)


def readout(view: AnatomyView, lay: AnatomyLayout, x: float, y: float) -> str | None:
    """What is under a point: block, shape, bytes, the head, and the value with its row/column."""
    hit = lay.hit(x, y)
    if hit is None:
        return None
    b, ij, band = hit
    if b is None:
        h = band.head
        return (f"{head_title(view.layer, h)}: {100 * view.share[h]:.1f}% of the layer's attention output "
                f"norm (click to focus)")
    i, j = ij
    name = b.caption.split("  ")[0].split(" [")[0] if b.caption else b.key[0]
    who = ""
    if b.head is not None and b.key != "pattern" and b.key != "head_out":
        who = f" {'KV head' if b.kv else 'head'} {b.head}"
        if b.kv and view.n_group > 1:
            members = [h for h in range(view.n_head) if view.anatomy.kv_group[h] == b.head]
            who += f" (read by H{members[0]}\u2013H{members[-1]})"
    elif band is not None:
        if band.kv:
            members = [h for h in range(view.n_head) if view.anatomy.kv_group[h] == band.head]
            who = (f", KV head {band.head}" + (f" (read by H{members[0]}\u2013H{members[-1]})"
                                               if view.n_group > 1 else ""))
        else:
            who = f", head {band.head}" + (f" (KV group {int(view.anatomy.kv_group[band.head])})"
                                           if view.n_group > 1 else "")
    where = f"row {i}, col {j}"
    if b.row_names is not None:
        where = f"token {i} {view.labels[i]!r}, col {j}"
        if b.kind == "pattern":
            where = f"{view.labels[i]!r} \u2192 {view.labels[j]!r}"
    value = float(b.data[i, j])
    return (f"{name}{who}  {_shape_text(b.shape)} float32, {format_bytes(b.nbytes)}  \u00b7  "
            f"{where}: {value:.4g}")


def render_image(view: AnatomyView, width: int) -> tuple[QImage, AnatomyLayout]:
    return render_with(layout, paint, view, width)


def png_bytes(view: AnatomyView, width: int) -> tuple[bytes, AnatomyLayout]:
    image, lay = render_image(view, width)
    return encode_png(image), lay


def svg_bytes(view: AnatomyView, width: int) -> tuple[bytes, AnatomyLayout]:
    """The same figure as SVG (vector text and outlines; each block an embedded image)."""
    lay = layout(view, width)
    svg = render_svg(lay.width, lay.height, view.title(),
                     f"attnviz anatomy of layer {view.layer}: {view.text}",
                     lambda painter: paint(painter, view, lay))
    return svg, lay


def sidecar(view: AnatomyView, image_path, lay: AnatomyLayout) -> dict:
    """The image's JSON sidecar: File -> Open view restores the model, text, layer and head."""
    import attnviz
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION

    return {
        "kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
        "view": "anatomy", "image": Path(image_path).name, "model": view.model, "text": view.text,
        "tokens": view.tokens, "labels": view.labels, "ids": view.ids, "scope": "head",
        "layer": view.layer, "head": view.head if view.head is not None else 0,
        "colormap": view.colormap, "scale_mode": "shared", "hide_first": False,
        "view_mode": "layer", "width": lay.width, "height": lay.height,
        "head_share": [float(x) for x in view.share], "blocks": lay.panels(),
    }
