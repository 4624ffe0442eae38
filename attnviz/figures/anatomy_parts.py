"""The anatomy figure's parts: its colour scales (signed values on a diverging scale, each head
its group colour), the view it draws (`AnatomyView`), and what a layout places (`Block`, `Band`,
`Text`, `AnatomyLayout`). Placing them is anatomy_sections.py's; drawing them, anatomy.py's."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont

from attnviz.engine.analysing.anatomy import BYTES, CostRow, LayerAnatomy
from attnviz.engine.computing.patterns import group_size
from attnviz.figures.export_view import model_title
from attnviz.figures.render import figure_font
from attnviz.figures.style import diverging_lut, group_color


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
    share: np.ndarray  # [n_head] each head's output norm over the sum of the layer's heads'
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
    checkpoint: dict | None = None  # {index, step, of}: the model's training step, if it has them

    @property
    def T(self) -> int:
        return len(self.tokens)

    @property
    def n_group(self) -> int:  # query heads per KV head
        return group_size(self.anatomy.kv_group)

    def title(self) -> str:
        focus = f", head {self.head}" if self.head is not None else ""
        return f"{model_title(self.model, self.checkpoint)} \u00b7 anatomy of layer {self.layer}{focus}"


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


def shape_text(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"
