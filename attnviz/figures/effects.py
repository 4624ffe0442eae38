"""The What heads do views as files: the prediction (top-k of the clean run, the changed run's
beside it), the logit lens (per layer) and DLA (the layer x head map of figures/headmap.py), each as
PNG or SVG with a JSON sidecar that File -> Open view restores (the text, the query position, the
typed tokens and the ablation), or as numbers (JSON, CSV, NPY). QPainter only, no widgets.

    effects_view(kind, analysis, model=..., result=..., kv_group=...) -> EffectsView
    numbers(view) -> dict                    # what the JSON holds (the CLI's `predict` key names)
    png_bytes / svg_bytes(view, width)       # the figure
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter

from attnviz.engine.reading.token_text import isolated, quoted
from attnviz.figures import headmap
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.export_view import model_title
from attnviz.figures.data import DEFAULT_COLORMAP, ExportError
from attnviz.figures.numbers import signed
from attnviz.figures.render import MUTED, TEXT, figure_exports, figure_font
from attnviz.figures.style import WARNING
from attnviz.engine.reading.json_text import dumps as strict_json

VIEWS = ("prediction", "lens", "dla")
CLEAN_BAR = QColor("#4c78a8")
CHANGED_BAR = QColor(WARNING)  # the changed run, as the window marks it
LENS_LABEL = "logit lens (raw: the final norm applied to each layer)"
# what DLA's cells under the map hold (their hover says it beside the number)
DLA_NOTES = ("the embeddings' direct path: the first residual stream, through no layer",
             "attention output biases and the final norm's bias, summed; 0 where the model has none")
MAP_WIDTH = 520  # the DLA map's design width (its cells and text scale together from it)


@dataclass(frozen=True)
class EffectsView:
    kind: str  # one of VIEWS
    model: str
    text: str
    tokens: list
    labels: list
    ids: list
    analysis: object  # engine.analysing.effects.Analysis
    kv_group: np.ndarray
    typed: tuple = ("", "")  # the target and alternative as typed ("": the top two)
    display: dict | None = None  # the heatmap options the sidecar records (layer, colormap, ...)
    checkpoint: dict | None = None  # {index, step, of}: the training step run, if any

    def title(self) -> str:
        a = self.analysis
        where = f"after {quoted(isolated(self.labels[a.position]))} (token {a.position})"
        name = {"prediction": "Next token", "lens": "Logit lens", "dla": "Direct logit attribution"}[self.kind]
        return f"{name} {where}, {model_title(self.model, self.checkpoint)}"

    def changed_line(self) -> str:
        ab = self.analysis.ablation
        line = f"Changed run: {ab.describe()}" if self.analysis.changed is not None else "Clean run"
        return f"{LENS_LABEL}; {line}" if self.kind == "lens" else line


DISPLAY = {"layer": 0, "head": None, "scope": "layer", "view_mode": "layer", "colormap": DEFAULT_COLORMAP,
           "scale_mode": "shared", "hide_first": False, "value_weighted": False}


def effects_view(kind: str, analysis, *, model: str, result, kv_group, typed=("", ""),
                 display: dict | None = None, checkpoint: dict | None = None) -> EffectsView:
    """`display`: the window's layer, focus and heatmap options, kept in the sidecar (DISPLAY's keys)."""
    if kind not in VIEWS:
        raise ExportError(f"unknown view {kind!r}; one of {', '.join(VIEWS)}")
    if analysis is None:
        raise ExportError("no prediction to export yet: show the What heads do panel on a causal model")
    if analysis.position >= len(result.tokens):
        raise ExportError(f"the prediction is after token {analysis.position}, past the {len(result.tokens)} "
                          "tokens of the text shown: it is of another text")
    return EffectsView(kind, model, result.text, list(result.tokens), list(result.labels),
                       [int(i) for i in result.input_ids], analysis, np.asarray(kv_group),
                       (str(typed[0]), str(typed[1])), {**DISPLAY, **(display or {})},
                       dict(checkpoint) if checkpoint else None)


def lens_ranks(lens) -> np.ndarray:  # [n_layer] the target's rank counted from 1 (1: the layer's top-1)
    """The lens's target ranks as the tab, the figure and every export give them: from 1."""
    return np.asarray(lens.target_ranks, dtype=np.int64) + 1


def _top(a, p) -> list:
    return [{"id": int(i), "token": a.label(i), "logprob": float(lp)} for i, lp in zip(p.top_ids, p.top_logprobs)]


def numbers(view: EffectsView) -> dict:
    """Every number the view shows, with what it was computed on (the keys of `attnviz predict`)."""
    a = view.analysis
    out = {"model": view.model, "text": view.text, "tokens": view.tokens, "input_ids": view.ids,
           "position": a.position, "target": a.target, "alt": a.alt,
           "target_token": a.label(a.target), "alt_token": a.label(a.alt),
           "ablation": a.ablation.to_json() if a.ablation.active else None,
           "changed": a.changed is not None, **checkpoint_entry(view.checkpoint)}
    if view.kind == "prediction":
        out["top"] = _top(a, a.clean)
        if a.changed is not None:
            out["changed_top"] = _top(a, a.changed)
            out["delta_target_logprob"] = a.delta_target()
    elif view.kind == "lens":
        L, ranks = a.lens, lens_ranks(a.lens)
        out["lens"] = [{"top_id": int(L.top_ids[l]), "top_token": a.label(L.top_ids[l]),
                        "top_logprob": float(L.top_logprobs[l]),
                        "target_logprob": float(L.target_logprobs[l]), "target_rank": int(ranks[l])}
                       for l in range(len(L.top_ids))]
    else:
        d = a.dla
        out.update({"logit_diff": d.logit_diff, "dla": np.asarray(d.heads).tolist(),
                    "dla_rest": {"mlp": np.asarray(d.mlp).tolist(), "embed": d.embed, "bias": d.bias}})
    return out


def about(view: EffectsView) -> str:
    """What the numbers of a CSV export are, for its first header cell (as the heatmaps' CSV names
    its options in a header): the query, the tokens compared, the unit and what was switched off."""
    a = view.analysis

    def token(i) -> str:
        return f"{quoted(a.label(i))} (id {int(i)})"

    parts = [f"after {quoted(view.labels[a.position])} (token {a.position})"]
    if view.kind == "prediction":
        parts.append("log-probs in nats")
    elif view.kind == "lens":
        parts += [f"target {token(a.target)}", "raw logit lens, log-probs in nats"]
    else:
        parts.append(f"each cell a part of logit({token(a.target)}) − logit({token(a.alt)}) = "
                     f"{a.dla.logit_diff:.6f}, in logits")
    if a.ablation.active:
        parts.append(f"changed run: {a.ablation.describe()}")
    return "; ".join(parts)


def csv_text(view: EffectsView) -> str:
    """The view's numbers, one row a rank, a layer or (DLA) a layer's heads and MLP, then the
    embeddings' and the biases' parts; the first header cell says what they are (`about`)."""
    a = view.analysis
    if view.kind == "prediction":
        rows = [["rank", "id", "token", "logprob"] + (["changed_id", "changed_token", "changed_logprob"]
                                                      if a.changed is not None else [])]
        for r in range(len(a.clean.top_ids)):
            row = [r + 1, int(a.clean.top_ids[r]), a.label(a.clean.top_ids[r]), f"{a.clean.top_logprobs[r]:.6f}"]
            if a.changed is not None:
                row += [int(a.changed.top_ids[r]), a.label(a.changed.top_ids[r]),
                        f"{a.changed.top_logprobs[r]:.6f}"]
            rows.append(row)
    elif view.kind == "lens":
        L, ranks = a.lens, lens_ranks(a.lens)
        rows = [["layer", "top_id", "top_token", "top_logprob", "target_logprob", "target_rank"]]
        rows += [[l, int(L.top_ids[l]), a.label(L.top_ids[l]), f"{L.top_logprobs[l]:.6f}",
                  f"{L.target_logprobs[l]:.6f}", int(ranks[l])] for l in range(len(L.top_ids))]
    else:
        d = a.dla
        n_head = d.heads.shape[1]
        rows = [["layer"] + [f"H{h}" for h in range(n_head)] + ["mlp"]]
        rows += [[l] + [f"{x:.6f}" for x in d.heads[l]] + [f"{d.mlp[l]:.6f}"] for l in range(len(d.mlp))]
        rows += [["embed", f"{d.embed:.6f}"], ["bias", f"{d.bias:.6f}"]]
    rows[0][0] = f"{rows[0][0]} ({about(view)})"
    buf = io.StringIO()
    import csv

    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def npy_array(view: EffectsView) -> np.ndarray:
    """The view's numbers as one NumPy record (a 0-d structured array, read without pickle: `a =
    np.load(path); a["dla"]`), its fields the JSON's keys (`numbers`): position, target, alt and
    their tokens, ablation (Ablation.describe, "" for the clean run) and the view's arrays: the
    top-k's top_id, top_token, top_logprob (and changed_top_*, delta_target_logprob); the lens's
    top_id, top_token, top_logprob, target_logprob, target_rank (from 1) per layer; or DLA's
    logit_diff, dla [n_layer, n_head], mlp [n_layer], embed and bias, in logits."""
    a = view.analysis
    fields = {"position": a.position, "target": a.target, "target_token": a.label(a.target),
              "alt": a.alt, "alt_token": a.label(a.alt),
              "ablation": a.ablation.describe() if a.ablation.active else ""}
    tops = [("", a.clean)] + ([("changed_", a.changed)] if view.kind == "prediction" and a.changed is not None else [])
    if view.kind == "lens":
        tops = [("", a.lens)]
    if view.kind != "dla":
        for pre, p in tops:
            fields.update({f"{pre}top_id": p.top_ids, f"{pre}top_token": [a.label(i) for i in p.top_ids],
                           f"{pre}top_logprob": p.top_logprobs})
    if view.kind == "prediction" and a.changed is not None:
        fields["delta_target_logprob"] = a.delta_target()
    elif view.kind == "lens":
        fields.update({"target_logprob": a.lens.target_logprobs, "target_rank": lens_ranks(a.lens)})
    elif view.kind == "dla":
        d = a.dla
        fields.update({"logit_diff": d.logit_diff, "dla": d.heads, "mlp": d.mlp, "embed": d.embed, "bias": d.bias})
    arrays = {k: np.asarray(v) for k, v in fields.items()}
    record = np.zeros((), dtype=[(k, v.dtype, v.shape) for k, v in arrays.items()])
    for k, v in arrays.items():
        record[k] = v
    return record


def number_bytes(view: EffectsView, fmt: str) -> bytes:
    if fmt == "json":
        return (strict_json(numbers(view), ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    if fmt == "csv":
        return csv_text(view).encode("utf-8")
    buf = io.BytesIO()
    np.save(buf, npy_array(view), allow_pickle=False)
    return buf.getvalue()


# --- the figure ---------------------------------------------------------------------------------
@dataclass
class EffectsLayout:
    width: int
    height: int
    scale: float
    map_layout: object = None  # headmap.HeadMapLayout (dla)


def head_map(view: EffectsView) -> headmap.HeadMap:
    a = view.analysis
    d = a.dla
    return headmap.HeadMap(
        f"DLA: logit({a.label(d.target)}) − logit({a.label(d.alt)}) = {signed(d.logit_diff, 3)}; "
        f"parts add to {signed(d.total(), 3)}", np.asarray(d.heads), "logit", view.kv_group,
        ("MLP", np.asarray(d.mlp)), (("embed", d.embed), ("bias", d.bias)), tuple(a.ablation.heads),
        notes=DLA_NOTES)


def _rows(view: EffectsView) -> int:
    a = view.analysis
    return len(a.clean.top_ids) if view.kind == "prediction" else len(a.lens.top_ids)


def layout(view: EffectsView, width: int) -> EffectsLayout:
    s = width / 800.0
    header = 3 * 22 * s
    if view.kind == "dla":  # the map laid out at MAP_WIDTH and scaled, its text with it
        n_layer, n_head = view.analysis.dla.heads.shape
        cell = (MAP_WIDTH - 60) / (n_head + 3)
        map_h = int(cell * (n_layer + 6))
        lay = EffectsLayout(width, int(header + map_h * width / MAP_WIDTH), s)
        lay.map_layout = headmap.layout(head_map(view), MAP_WIDTH, map_h)
        return lay
    return EffectsLayout(width, int(header + (_rows(view) + 2) * 24 * s), s)


def paint(p: QPainter, view: EffectsView, lay: EffectsLayout) -> None:
    s, a = lay.scale, view.analysis
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    p.fillRect(QRectF(0, 0, lay.width, lay.height), QColor("white"))
    p.setPen(TEXT)
    p.setFont(figure_font(15 * s, bold=True))
    p.drawText(QRectF(10 * s, 4 * s, lay.width - 20 * s, 22 * s), Qt.AlignmentFlag.AlignLeft, view.title())
    p.setFont(figure_font(12 * s))
    p.setPen(CHANGED_BAR if a.changed is not None else MUTED)
    sub = view.changed_line()
    if a.changed is not None and view.kind == "prediction":
        sub += f";  Δ log p({a.label(a.target)}) = {signed(a.delta_target(), 3)} nats"
    p.drawText(QRectF(10 * s, 28 * s, lay.width - 20 * s, 20 * s), Qt.AlignmentFlag.AlignLeft, sub)
    top = 3 * 22 * s
    if view.kind == "dla":
        p.save()
        p.translate(0, top)
        p.scale(lay.width / MAP_WIDTH, lay.width / MAP_WIDTH)
        headmap.paint(p, head_map(view), lay.map_layout)
        p.restore()
        return
    row_h = 24 * s
    p.setFont(figure_font(12 * s))
    fm = QFontMetricsF(figure_font(12 * s))
    x_tok, x_bar = 10 * s, 10 * s + max(fm.horizontalAdvance("L00  ") + fm.horizontalAdvance("W" * 9), 140 * s)
    bar_w = (lay.width - x_bar - 20 * s) / (2 if view.kind == "prediction" and a.changed is not None else 1)
    p.setPen(MUTED)
    if view.kind == "prediction":
        heads = ["token", "p (clean)"] + (["p (changed) of the same rank"] if a.changed is not None else [])
    else:
        heads = ["layer  top-1", f"p of top-1 (blue) and of {a.label(a.target)} (orange), rank of it"]
    p.drawText(QRectF(x_tok, top, x_bar - x_tok, row_h), Qt.AlignmentFlag.AlignVCenter, heads[0])
    p.drawText(QRectF(x_bar, top, lay.width - x_bar, row_h), Qt.AlignmentFlag.AlignVCenter, "   ".join(heads[1:]))
    for r in range(_rows(view)):
        y = top + (r + 1) * row_h
        p.setPen(TEXT)
        if view.kind == "prediction":
            bars = [(a.label(a.clean.top_ids[r]), float(np.exp(a.clean.top_logprobs[r])), CLEAN_BAR)]
            if a.changed is not None:
                bars.append((a.label(a.changed.top_ids[r]), float(np.exp(a.changed.top_logprobs[r])),
                             CHANGED_BAR))
            p.drawText(QRectF(x_tok, y, x_bar - x_tok, row_h), Qt.AlignmentFlag.AlignVCenter, bars[0][0])
            for i, (label, prob, colour) in enumerate(bars):
                x = x_bar + i * bar_w
                p.fillRect(QRectF(x, y + 4 * s, (bar_w - 90 * s) * prob, row_h - 8 * s), colour)
                p.setPen(TEXT)
                p.drawText(QRectF(x + (bar_w - 90 * s) * prob + 4 * s, y, 200 * s, row_h),
                           Qt.AlignmentFlag.AlignVCenter, f"{prob:.3f}" + (f" {label}" if i else ""))
        else:
            L = a.lens
            p.drawText(QRectF(x_tok, y, x_bar - x_tok, row_h), Qt.AlignmentFlag.AlignVCenter,
                       f"L{r}  {a.label(L.top_ids[r])}")
            w = bar_w - 140 * s
            for i, (lp, colour) in enumerate(((L.top_logprobs[r], CLEAN_BAR), (L.target_logprobs[r], CHANGED_BAR))):
                p.fillRect(QRectF(x_bar, y + 3 * s + i * (row_h - 6 * s) / 2, w * float(np.exp(lp)),
                                  (row_h - 6 * s) / 2), colour)
            p.setPen(TEXT)
            p.drawText(QRectF(x_bar + w + 6 * s, y, 140 * s, row_h), Qt.AlignmentFlag.AlignVCenter,
                       f"{np.exp(L.top_logprobs[r]):.2f} / {np.exp(L.target_logprobs[r]):.2f}  #{int(lens_ranks(L)[r])}")


png_bytes, svg_bytes = figure_exports(layout, paint, lambda view: f"attnviz {view.kind}: {view.text}")


def sidecar(view: EffectsView, image_path, lay: EffectsLayout) -> dict:
    """The image's sidecar: File -> Open view restores the text, the query position, the typed
    tokens (as #id) and the ablation; the numbers are in it too."""
    import attnviz
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION

    return {"kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
            "view": view.kind, "image": Path(image_path).name, "width": lay.width, "height": lay.height,
            "labels": view.labels, "ids": view.ids, **view.display,
            "typed": {"target": view.typed[0], "alt": view.typed[1]}, **numbers(view)}
