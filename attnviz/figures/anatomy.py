"""The anatomy figure: one attention layer of the loaded model drawn as the lesson's pipeline, with
its real weights and activations. One QPainter path serves the Anatomy panel, PNG and SVG (the
heatmap figure's writers in figure.py), so the panel and an export look the same.

    x [T, d_model] -> W_Q | W_K | W_V -> q, k, v per head -> the focused head's pattern and output
    -> concat [T, n_head d_head] -> W_O -> attention output [T, d_model], then the head shares and
    the cost table.

`layout()` places every block (no drawing: the sections in anatomy_sections.py, the parts in
anatomy_parts.py) and keeps, per block, the array drawn, its shape and bytes, so hover and click
are answered from the layout; `paint()` draws a layout. Weights and activations are signed: a
diverging blue-white-red scale, symmetric, clipped at the 99th percentile of |value| of each block
(the hover read-out gives the exact value). The pattern uses the window's colormap, 0..its max, as
in the grid."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen

from attnviz.engine.analysing.anatomy import head_costs, head_dim_note, input_name, layer_anatomy
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.engine.computing.edits import ReplaceHead, patches_at
from attnviz.engine.computing.layers import head_output_share_of_heads
from attnviz.engine.computing.patterns import check_index, head_title, max_pool
from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures.anatomy_parts import (
    AnatomyLayout, AnatomyView, Band, Block, shape_text, signed_limit, signed_rgb, weight_color,
)
from attnviz.figures.anatomy_sections import SECTIONS, Cursor
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.data import DEFAULT_COLORMAP, MAX_WIDTH, MIN_WIDTH, ExportError
from attnviz.figures.numbers import minus_signs
from attnviz.figures.render import FRAME, MUTED, TEXT, figure_exports, figure_font, figure_image
from attnviz.figures.style import FOCUS, heat_index, heat_table

BASE_WIDTH = 640.0  # design width: sizes scale with width / BASE_WIDTH
MIN_FONT_SCALE = 0.9  # text never smaller than at 0.9 x the design width's
DESIGN_TEXT_PX = 12.0  # the prose size the design's fonts sit beside (captions 11 px, notes 10 px)
FOCUS_QCOLOR = QColor(FOCUS)  # the focused head
SEPARATOR = QColor(60, 60, 60, 150)  # between two heads' slices



def make_anatomy_view(model, result, layer: int, head: int | None = None,
                      colormap: str = DEFAULT_COLORMAP, previous: AnatomyView | None = None) -> AnatomyView:
    """The view of `result` (a RunResult with layer_inputs: RunRequest(inputs=True)) at `layer`.
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
    edits = getattr(result.trace, "edits", None) or ()  # a changed run: its heads switched off
    an = layer_anatomy(cfg, model.weights, result.layer_inputs[layer], layer,
                       result.attentions[layer], edits)
    limits = {name: signed_limit(getattr(an, name)) for name in ("q", "k", "v")}
    notes = [input_name(cfg, layer, model.weights)]
    if cfg.rope_theta:
        notes.append("q, k after RoPE")
    hd = head_dim_note(cfg)
    if hd:
        notes.append(hd)
    off = sorted({e.head for e in edits if isinstance(e, ReplaceHead) and e.layer == layer})
    patched = sorted({e.head for e in patches_at(edits, "z", layer)})
    for heads, what in ((off, "switched off"), (patched, "patched")):
        if heads:
            notes.append(f"changed run: {', '.join(f'H{h}' for h in heads)} {what} here, its head "
                         "output as the run replaced it")
    if layer == cfg.n_layer - 1:
        notes.append("last layer: its output projection, skipped by the heatmaps' forward pass "
                     "(nothing after it changes a pattern), is computed here from the loaded W_O")
    return AnatomyView(
        model=model.name, text=result.text, tokens=list(result.tokens),
        labels=list(result.labels or result.tokens), ids=[int(i) for i in result.input_ids],
        layer=int(layer), n_layer=cfg.n_layer, head=None if head is None else int(head),
        anatomy=an, costs=head_costs(cfg, len(result.tokens), layer), share=head_output_share_of_heads(an.head_out, model.output_grams(layer)),
        colormap=colormap, family=cfg.family, d_model=cfg.d_model, n_head=cfg.n_head,
        n_kv_head=cfg.n_kv_head, d_head=cfg.d_head, notes=notes, result=result, limits=limits,
        weights=model.weights, checkpoint=checkpoint_record(model))


def layout(view: AnatomyView, width: int, text_px: float | None = None) -> AnatomyLayout:
    """Place every block for a figure `width` pixels wide; the height follows. One section after
    another, top to bottom, as the data flows through the layer.

    `text_px`: the prose beside the figure (the panel's font, in pixels): the figure's text is
    sized to it (captions 11/12 of it, notes 10/12), whatever the width, and lines wrap instead.
    Without it (an export), text scales with the width, never below MIN_FONT_SCALE, and the figure
    says nothing of clicks."""
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise ExportError(f"width {width} px is outside {MIN_WIDTH}..{MAX_WIDTH}")
    s = width / BASE_WIDTH
    # text stays readable in a narrow dock; lines wrap instead
    fs = text_px / DESIGN_TEXT_PX if text_px else max(s, MIN_FONT_SCALE)
    c = Cursor(view, s, fs, 12 * s, width - 24 * s, figure_font(11 * fs), figure_font(10 * fs),
               figure_font(15 * fs, True), figure_font(11 * fs, True), screen=text_px is not None)
    c.y = c.m
    for section in SECTIONS:
        section(c)
    return AnatomyLayout(int(width), int(math.ceil(c.y + c.m)), s, c.blocks, c.texts, c.share_bars,
                         c.table, c.lines, fs, c.caption_fonts)


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
        return (f"{head_title(view.layer, h)}: {100 * view.share[h]:.1f}% of the layer's summed head-output "
                f"norms (click to focus)")
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
        where = f"token {i} {quoted(isolated(view.labels[i]))}, col {j}"
        if b.kind == "pattern":
            where = f"{quoted(isolated(view.labels[i]))} \u2192 {quoted(isolated(view.labels[j]))}"
    value = float(b.data[i, j])
    return (f"{name}{who}  {shape_text(b.shape)} float32, {format_bytes(b.nbytes)}  \u00b7  "
            f"{where}: {minus_signs(f'{value:.4g}')}")


# (each block an embedded image in the SVG; text and outlines vector)
png_bytes, svg_bytes = figure_exports(
    layout, paint, lambda view: f"attnviz anatomy of layer {view.layer}: {view.text}")


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
        **checkpoint_entry(view.checkpoint),
    }
