"""The Circuits view (engine/analysing/circuits.py's weight-space scores) as a figure: the OV copying
map (layers x heads, in the grid's head order: figures/headmap.py), the focused head's top Q-, K-
and V-composition partners among earlier heads with their role badges, and what the focused head
writes for a picked token (OV top tokens). QPainter only: the window's Circuits tab paints the map,
and an export writes the whole view (PNG or SVG with a JSON sidecar) or its numbers (JSON with
`attnviz circuits`'s keys, CSV of the copying map).

    circuits_view(circuits, model=..., kv_group=..., focus=..., badge=..., ov=...) -> CircuitsView
    partners(composition, layer, head, n) -> {mode: [(layer, head, score)]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter

from attnviz.engine.reading.token_text import plural
from attnviz.engine.analysing.circuits import (
    HEAD_ZERO_OV, MODES, WRITES_NOTHING, ZERO_COMPOSITION, composition_numbers, copying_numbers, strongest,
    undefined,
)
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.figures import headmap
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.export_view import model_title
from attnviz.figures.data import ExportError
from attnviz.figures.numbers import score_text, signed
from attnviz.figures.render import MUTED, TEXT, figure_exports, figure_font
from attnviz.figures.text_wrap import wrap
from attnviz.engine.reading.json_text import dumps as strict_json

PARTNERS = 3  # partners listed per mode
MODE_NAMES = {"q": "Q-composition (reads them in its queries)",
              "k": "K-composition (reads them in its keys)",
              "v": "V-composition (reads them in its values)"}
ROPE_NOTE = ("These weight-space scores ignore RoPE (as TransformerLens' do); Why here? includes it.")
MAP_WIDTH = 520
WRAPPED = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)  # the sentences without a map


def partners(composition: dict, layer: int, head: int, n: int = PARTNERS) -> dict:
    """mode -> the n earlier heads with the largest composition into (layer, head), largest first,
    as (layer, head, score); none for a head of the first layer."""
    return {mode: [(l1, h1, v) for l1, h1, _, _, v in strongest(composition[mode], n, (layer, head))]
            for mode in MODES}


@dataclass(frozen=True)
class CircuitsView:
    model: str
    copying: np.ndarray | None  # [n_layer, n_head]
    no_copying: str  # why there is no copying map
    composition: dict
    kv_group: np.ndarray | None
    focus: tuple | None  # (layer, head)
    badges: dict  # (layer, head) -> role badge ('' none), for the listed partners
    # (layer, head, token id, token text, [(id, text, logit)], at): at = (query, its text, key,
    # weight) where the token is the head's top key at a picked query, else None
    ov: tuple | None = None
    rope: bool = True  # the model rotates queries and keys (the scores leave that out: ROPE_NOTE)
    checkpoint: dict | None = None  # {index, step, of}: the training step scored, if any

    def note(self) -> str:
        """The line under the title: that the scores leave RoPE out, for a model that has it."""
        return ROPE_NOTE if self.rope else ""

    def no_map(self) -> str:
        """In place of the copying map: that it is absent, and why, in sentences."""
        why = self.no_copying
        return "No copying map." + (f" {why[:1].upper()}{why[1:]}." if why else "")

    def title(self) -> str:
        return f"Circuits of {model_title(self.model, self.checkpoint)}: OV copying, composition, OV top tokens"

    def partners(self) -> dict:
        return {} if self.focus is None else partners(self.composition, *self.focus)

    def lines(self, screen: bool = False) -> list[str]:
        """The partner and OV lines, as the figure shows them, or as the tab does (`screen`): with no
        head focused, the tab says how to focus one; an exported picture says only that none was."""
        out = []
        if self.focus is None:
            return ["Focus a head (click it in the grid) for its composition partners." if screen
                    else "No head was focused, so no composition partners are listed."]
        name = head_title(*self.focus)
        if self.copying is not None:
            c = np.asarray(self.copying)
            v = float(c[self.focus])
            scored = int(np.isfinite(c).sum())  # (a head whose OV circuit is zero has no score)
            rank = int((c > v).sum()) + 1
            out.append(f"{name}: no OV copying score: {HEAD_ZERO_OV}." if np.isnan(v) else
                       f"{name}: OV copying {signed(v, 3)}, rank {rank} of {plural(scored, 'head')}"
                       f"{' with a score' if scored < c.size else ''} (1: the highest).")
        parts = self.partners()
        if self.focus[0] == 0:
            out.append(f"{name} is in the first layer: no earlier heads compose into it.")
        else:
            out.append(f"{name}'s top partners among earlier heads (composition score, 0 to 1):")
            missing = False
            for mode in MODES:
                items = [f"{head_title(l, h)} {score_text(s)}" + (f" [{self.badges.get((l, h))}]"
                                                                    if self.badges.get((l, h)) else "")
                         for l, h, s in parts[mode]]
                bad, total = undefined(self.composition[mode], self.focus)
                missing |= bad > 0
                out.append(f"  {MODE_NAMES[mode]}: " + (", ".join(items) or "none")
                           + (f" ({bad} of {plural(total, 'earlier head')} n/a)" if bad else ""))
            if missing:  # (a score of 0 / 0 is no partner: not ranked, not shown as <0.001)
                out.append(f"  n/a: {ZERO_COMPOSITION}.")
        if self.ov is not None:
            out.append(self.ov_line())
        return out

    def ov_line(self) -> str:
        """What the head writes (OV top tokens) from the token it attends to: where that is its top
        key at a picked query, the line names both, so it is not read as the query's own token."""
        layer, head, _tid, text, top, at = self.ov
        writes = ("writes, in logits: " + ", ".join(f"{quoted(t)} {signed(v, 2)}" for _i, t, v in top)
                  if top else f"writes no top tokens: {WRITES_NOTHING}.")
        if at is None:
            return f"{head_title(layer, head)} attending to {quoted(text)} {writes}"
        q, q_text, k, weight = at
        return (f"{head_title(layer, head)} at the query {quoted(q_text)} (#{q}) attends most to "
                f"{quoted(text)} (#{k}, weight {weight:.2f}); attending to it, it {writes}")


def circuits_view(circuits, *, model: str, kv_group=None, focus=None, badge=None, ov=None,
                  rope: bool = True, checkpoint: dict | None = None) -> CircuitsView:
    if circuits is None:
        raise ExportError("no circuit scores yet: show the Circuits tab and wait for them")
    view = CircuitsView(model, circuits.copying, circuits.no_copying or "", circuits.composition,
                        None if kv_group is None else np.asarray(kv_group),
                        None if focus is None else tuple(focus), {}, ov, bool(rope),
                        dict(checkpoint) if checkpoint else None)
    if badge is not None and view.focus is not None:
        view.badges.update({(l, h): badge(l, h) for ps in view.partners().values() for l, h, _ in ps})
    return view


def copying_map(view: CircuitsView) -> headmap.HeadMap | None:
    if view.copying is None:
        return None
    return headmap.HeadMap("OV copying score: Re(Σλ) / Σ|λ| of W_E W_V W_O W_U (1:\u00a0copies)",
                           np.asarray(view.copying), "copying", view.kv_group, focus=view.focus,
                           absent=f"no score: {HEAD_ZERO_OV}")


@dataclass
class CircuitsLayout:
    width: int
    height: int
    scale: float
    map_h: int = 0
    map_layout: headmap.HeadMapLayout | None = None
    line_h: float = 18.0
    extra: dict = field(default_factory=dict)


def layout(view: CircuitsView, width: int) -> CircuitsLayout:
    s = width / 800.0
    lay = CircuitsLayout(width, 0, s, line_h=20 * s)
    hm = copying_map(view)
    if hm is not None:
        n_layer, n_head = hm.values.shape
        cell = (MAP_WIDTH - 60) / (n_head + 2)
        lay.map_h = int(cell * (n_layer + 4))
        lay.map_layout = headmap.layout(hm, MAP_WIDTH, lay.map_h)
        map_px = lay.map_h * width / MAP_WIDTH
    else:  # the sentences saying why, wrapped, and a line's gap
        map_px = no_map_height(view, lay) + lay.line_h
    lay.height = int(50 * s + map_px + (len(painted_lines(view, lay)) + 2) * lay.line_h)
    return lay


def painted_lines(view: CircuitsView, lay: CircuitsLayout) -> list[str]:
    """view.lines() wrapped to the figure's width, each wrapped line keeping its indent: a long
    partner, n/a or OV line is painted whole, not cut short."""
    font = figure_font(12 * lay.scale)
    width = lay.width - 20 * lay.scale
    fm = QFontMetricsF(font)
    out = []
    for line in view.lines():
        indent = line[:len(line) - len(line.lstrip())]
        parts, _whole = wrap(line.strip(), font, width - fm.horizontalAdvance(indent))
        out += [indent + part for part in parts] or [""]
    return out


def no_map_height(view: CircuitsView, lay: CircuitsLayout) -> float:
    """The height of the sentences painted in place of the copying map, wrapped to the width."""
    s = lay.scale
    return QFontMetricsF(figure_font(12 * s)).boundingRect(
        QRectF(0, 0, lay.width - 20 * s, 1e6), WRAPPED, view.no_map()).height()


def paint(p: QPainter, view: CircuitsView, lay: CircuitsLayout) -> None:
    s = lay.scale
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    p.fillRect(QRectF(0, 0, lay.width, lay.height), QColor("white"))
    left = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    p.setPen(TEXT)
    p.setFont(figure_font(15 * s, bold=True))
    p.drawText(QRectF(10 * s, 4 * s, lay.width - 20 * s, 22 * s), left, view.title())
    p.setFont(figure_font(12 * s))
    p.setPen(MUTED)
    p.drawText(QRectF(10 * s, 26 * s, lay.width - 20 * s, 20 * s), left, view.note())
    y = 50 * s
    hm = copying_map(view)
    if hm is not None:
        p.save()
        p.translate(0, y)
        p.scale(lay.width / MAP_WIDTH, lay.width / MAP_WIDTH)
        headmap.paint(p, hm, lay.map_layout)
        p.restore()
        y += lay.map_h * lay.width / MAP_WIDTH
    else:
        p.setPen(TEXT)
        p.setFont(figure_font(12 * s))
        h = no_map_height(view, lay)
        p.drawText(QRectF(10 * s, y, lay.width - 20 * s, h), WRAPPED, view.no_map())
        y += h + lay.line_h
    p.setPen(TEXT)
    for line in painted_lines(view, lay):
        p.drawText(QRectF(10 * s, y, lay.width - 20 * s, lay.line_h), left, line)
        y += lay.line_h


png_bytes, svg_bytes = figure_exports(layout, paint, lambda _view: "attnviz circuits")


def numbers(view: CircuitsView) -> dict:
    """`attnviz circuits --json`'s keys, with the focused head's partners and the note."""
    out = {"model": view.model, **({"note": view.note()} if view.note() else {}),
           "copying": copying_numbers(view.copying),
           "composition": composition_numbers(view.composition), **checkpoint_entry(view.checkpoint)}
    if view.copying is None:
        out["no_copying"] = view.no_copying
    elif np.isnan(view.copying).any():  # (attnviz circuits --json's words)
        out["no_copying"] = f"null: {HEAD_ZERO_OV}"
    if any(undefined(view.composition[m])[0] for m in MODES):  # (attnviz circuits --json's words)
        out["no_composition"] = f"null: {ZERO_COMPOSITION}"
    if view.focus is not None:
        out["focus"] = {"layer": view.focus[0], "head": view.focus[1]}
        out["partners"] = {m: [{"layer": l, "head": h, "score": v, "role": view.badges.get((l, h), "")}
                               for l, h, v in ps] for m, ps in view.partners().items()}
    if view.ov is not None:
        layer, head, tid, text, top, at = view.ov
        out["ov_head"] = {"layer": layer, "head": head, "token_id": tid, "token": text}
        if at is not None:  # (the token is the head's top key at the picked query)
            out["ov_head"].update(query=at[0], query_token=at[1], key=at[2], weight=at[3])
        out["ov_top"] = [{"id": int(i), "token": t, "value": float(v)} for i, t, v in top]
        if not top:
            out["no_ov_top"] = WRITES_NOTHING
    return out


def number_bytes(view: CircuitsView, fmt: str) -> bytes:
    if fmt == "json":
        return (strict_json(numbers(view), ensure_ascii=False) + "\n").encode("utf-8")
    if fmt == "csv":
        if view.copying is None:
            raise ExportError(f"there is no copying map to write as CSV, because {view.no_copying}")
        c = np.asarray(view.copying)
        lines = [",".join(["layer", *(f"H{h}" for h in range(c.shape[1]))])]
        lines += [",".join([f"L{l}", *("" if np.isnan(v) else repr(float(v)) for v in c[l])])
                  for l in range(c.shape[0])]  # (an empty cell: no score, 0 / 0)
        return ("\n".join(lines) + "\n").encode("utf-8")
    raise ExportError(f"the Circuits view exports as .png, .svg, .json or .csv, not .{fmt}")


def sidecar(view: CircuitsView, image_path, lay: CircuitsLayout) -> dict:
    """The image's sidecar: what it shows and its numbers (the copying map and the partners)."""
    import attnviz
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION

    nums = numbers(view)
    nums.pop("composition")  # (the JSON export holds it: [L, H, L, H] three times)
    return {"kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
            "view": "circuits", "image": Path(image_path).name, "width": lay.width,
            "height": lay.height, **nums}
