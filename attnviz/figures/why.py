"""Why here?: one cell's QK attribution (engine/analysing/qk.py) as bar lists: the largest query ×
key component pairs with their share of the score, then the query-side and the key-side totals.
Each list ends with a row for everything it leaves out (none where it leaves nothing out), so its
values add up to the whole score and its shares to 100 %. A score near 0 beside its parts gets no
shares (share_words says why): a part would be thousands of per cent of it, and rounding's.
QPainter only, no widgets: the window's Why here? panel paints it, and an export writes the same
picture (PNG or SVG with a JSON sidecar) or its numbers (JSON with the `qk-attribution` keys, CSV).

    why_view(attribution, model=..., result=...) -> WhyView
    sections(view) -> [Section]               # what the lists hold
    layout(view, width) -> WhyLayout          # every row's rectangle, text and heads
    paint(p, view, lay); png_bytes / svg_bytes(view, width); number_bytes(view, fmt); sidecar(...)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPen

from attnviz.engine.analysing.qk import QKAttribution
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import plural, quoted
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.export_view import model_title
from attnviz.figures.data import ExportError
from attnviz.figures.render import FRAME, MUTED, TEXT, figure_exports, figure_font
from attnviz.figures.numbers import plain_number, signed as _signed
from attnviz.engine.reading.json_text import dumps as strict_json

PAIRS, SIDE = 8, 6  # rows of the pair list and of each side's list, before the rest
POSITIVE, NEGATIVE = QColor("#c0504d"), QColor("#4c78a8")  # raises the score / lowers it
HIGHLIGHT = QColor(255, 200, 0, 90)  # the row under the mouse
HEAD_NAME = re.compile(r"^L(\d+)H(\d+)$")
MLP_NAME = re.compile(r"^L(\d+)\.mlp$")
NUMBER_FORMATS = ("json", "csv")
WRAPPED = int(Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap)  # the title and subtitle
SHARE_MAX = 10.0  # a list's largest part at most this many times the score, or no shares


@dataclass(frozen=True)
class Row:
    label: str
    value: float  # its part of the score
    share: float | None  # value / score (None where the score is near 0: shares_shown)
    components: tuple[str, ...]  # the component names it is made of (() for the rest)


@dataclass(frozen=True)
class Section:
    title: str
    rows: tuple[Row, ...]


@dataclass(frozen=True)
class WhyView:
    model: str
    text: str
    tokens: list  # the tokens' labels
    ids: list
    attribution: QKAttribution
    display: dict | None = None  # the window's heatmap options, for the sidecar (effects.DISPLAY's keys)
    checkpoint: dict | None = None  # {index, step, of}: the training step computed on, if any

    def title(self) -> str:
        a = self.attribution
        return (f"Why {head_title(a.layer, a.head)} attends from {quoted(self.tokens[a.query])} ({a.query}) "
                f"to {quoted(self.tokens[a.key])} ({a.key})")

    def subtitle(self) -> str:
        words = share_words(self)
        note = self.attribution.note
        return (f"score {signed(self.attribution.score)} (before the softmax); parts add to "
                f"{signed(self.attribution.total())}{'; ' + words if words else ''}{'; ' + note if note else ''}"
                f" · {model_title(self.model, self.checkpoint)}")


def why_view(attribution: QKAttribution, *, model: str, result, display: dict | None = None,
             checkpoint: dict | None = None) -> WhyView:
    if attribution is None or result is None:
        raise ExportError("no Why here? cell yet: click a cell of the focused head")
    return WhyView(model, result.text, list(result.labels), [int(i) for i in result.input_ids],
                   attribution, display, checkpoint)


def heads_of(components) -> tuple[tuple[int, int], ...]:
    """The heads among component names (e.g. L3H1) as (layer, head)."""
    out = []
    for name in components:
        m = HEAD_NAME.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return tuple(dict.fromkeys(out))


def shown(name: str) -> str:
    """A component as the window names it: a head as "L3 H1" (the grid's titles), a layer's MLP as
    "L3 MLP", others (embed, bias) as they are."""
    m = HEAD_NAME.match(name)
    if m:
        return head_title(int(m.group(1)), int(m.group(2)))
    m = MLP_NAME.match(name)
    return f"L{m.group(1)} MLP" if m else name


def signed(value: float, decimals: int = 4) -> str:
    """A part as the lists write it: figures.numbers.signed with thousands grouped (`+1,234.5678`)."""
    return _signed(value, decimals, grouped=True)


def _share(value: float, total: float) -> float | None:
    return value / total if total != 0 else None


def _largest(a: QKAttribution) -> float:
    """The largest part any list can show: a pair, a side's total, or a list's rest row (at most
    the sum of the sizes it leaves out)."""
    return max(float(abs(a.table).max(initial=0.0)), float(abs(a.query_side).max(initial=0.0)),
               float(abs(a.key_side).max(initial=0.0)), *_rests(a))


def shares_shown(a: QKAttribution) -> bool:
    """Shares of the score only where it is clear of 0 beside its parts: no part shown is over
    SHARE_MAX times it. Nearer 0 a part is thousands of per cent of the score and the score is
    as much float rounding as the parts' sum (the table adds up to it within 1e-5 Σ|table|)."""
    total = a.total()
    return total != 0 and _largest(a) <= SHARE_MAX * abs(total)


def _rests(a: QKAttribution, pairs: int = PAIRS, side: int = SIDE) -> list[float]:
    """The sizes of the lists' rest rows (each list's score less its shown rows)."""
    total = a.total()
    out = [abs(total - sum(v for _, _, v in a.top(pairs)))]
    for values in (a.query_side, a.key_side):
        out.append(abs(total - float(sum(sorted((float(v) for v in values), key=abs)[-side:]))))
    return out


def share_words(view: WhyView) -> str:
    """What a share is, where it is not plainly part / score with the score above 0 ("" there)."""
    a = view.attribution
    if not shares_shown(a):
        return (f"no shares: the score is near 0 beside its parts (up to ±{plain_number(_largest(a))}), "
                f"over {SHARE_MAX:.0f} times its size")
    if a.total() < 0:
        return "the score is below 0, so a share is + for a part that lowers it (blue)"
    return ""


def legend(view: WhyView) -> str:
    """The panel's line above the lists: what the bars' colours and the shares mean for this cell."""
    a = view.attribution
    colours = "Red raises the score, blue lowers it."
    if not shares_shown(a):
        return (f"No shares: the score ({signed(a.total())}) is near 0 beside its parts (up to "
                f"±{plain_number(_largest(a))}, over {SHARE_MAX:.0f} times its size), so shares of it "
                f"would mean little. Each list ends with what it leaves out, so its values add up "
                f"to the score. {colours}")
    if a.total() < 0:
        return ("Shares are of the score, which is below 0: a part that lowers it (blue) has a + "
                "share, one that raises it (red) a − share. Each list ends with what it leaves out, "
                f"so it adds up to 100%. {colours}")
    return (f"Shares are of the score; each list ends with what it leaves out, so it adds up to "
            f"100%. {colours}")


def _rest(rows: list[Row], total: float, n_all: int, what: str, with_shares: bool = True) -> list[Row]:
    """Everything a list leaves out, so that the list adds up to the score: one row, or none
    where the list leaves nothing out (its rows are then every part)."""
    if len(rows) == n_all:
        return []
    rest = total - sum(r.value for r in rows)
    share = _share(rest, total) if with_shares else None
    return [Row(f"the other {plural(n_all - len(rows), what)}", rest, share, ())]


def sections(view: WhyView, pairs: int = PAIRS, side: int = SIDE) -> list[Section]:
    """The three lists; every one's values (and shares, where shown) add up to the score."""
    a = view.attribution
    total = a.total()
    on = shares_shown(a)

    def share(v: float) -> float | None:
        return _share(v, total) if on else None
    names = a.components
    top = [Row(f"{shown(q)} · {shown(k)}", v, share(v), (q, k)) for q, k, v in a.top(pairs)]
    out = [Section("Largest pairs: query-side component · key-side component",
                   tuple(top + _rest(top, total, a.table.size, "pair", on)))]
    for title, values in (("Query side: each part at the query, times the whole key", a.query_side),
                          ("Key side: each part at the key, times the whole query", a.key_side)):
        order = sorted(range(len(names)), key=lambda i: -abs(float(values[i])))[:side]
        rows = [Row(shown(names[i]), float(values[i]), share(float(values[i])), (names[i],))
                for i in order]
        out.append(Section(title, tuple(rows + _rest(rows, total, len(names), "component", on))))
    return out


def figures(row: Row, decimals: int = 3) -> str:
    """A row's value and share as the lists write them: `+0.174  +12.3%`, `+0.174` without a share."""
    share = "" if row.share is None else f"  {signed(100 * row.share, 1)}%"
    return f"{signed(row.value, decimals)}{share}"


def row_text(row: Row) -> str:
    return f"{row.label}  {figures(row, 4)}"


@dataclass
class RowBox:
    rect: QRectF
    text: str  # what the row reads: label, value, share
    row: Row
    figures: str = ""  # its value and share as painted, right of the bars


@dataclass
class WhyLayout:
    width: int
    height: int
    scale: float
    rows: list = field(default_factory=list)  # [RowBox]
    headers: list = field(default_factory=list)  # [(QRectF, title)]
    label_w: float = 0.0
    figures_w: float = 0.0  # the value and share column: its widest text, whole
    limit: float = 1.0  # |value| a full bar stands for
    title: QRectF = field(default_factory=QRectF)  # the title, wrapped to the width
    subtitle: QRectF = field(default_factory=QRectF)


def heading_rects(view: WhyView, width: int, s: float) -> tuple[QRectF, QRectF]:
    """The title's and the subtitle's rectangles, each wrapped to the picture's width (whole however
    narrow the panel: the subtitle ends with the model's name)."""
    def wrapped(font, text: str, top: float) -> QRectF:
        h = QFontMetricsF(font).boundingRect(QRectF(0, 0, max(width - 16 * s, 1), 1e6), WRAPPED, text).height()
        return QRectF(8 * s, top, width - 16 * s, h)
    title = wrapped(figure_font(13 * s, bold=True), view.title(), 4 * s)
    return title, wrapped(figure_font(11 * s), view.subtitle(), title.bottom() + 3 * s)


def layout(view: WhyView, width: int) -> WhyLayout:
    s = max(0.5, width / 520.0)
    row_h, head_h = 19 * s, 24 * s
    secs = sections(view)
    fm = QFontMetricsF(figure_font(12 * s))
    label_w = min(width * 0.45, max(fm.horizontalAdvance(r.label) for sec in secs for r in sec.rows) + 12 * s)
    figures_w = max(fm.horizontalAdvance(figures(r)) for sec in secs for r in sec.rows) + 4 * s
    lay = WhyLayout(width, 0, s, label_w=label_w, figures_w=figures_w)
    lay.limit = max((abs(r.value) for sec in secs for r in sec.rows), default=0.0) or 1.0
    lay.title, lay.subtitle = heading_rects(view, width, s)
    y = max(50 * s, lay.subtitle.bottom() + 4 * s)
    for sec in secs:
        lay.headers.append((QRectF(8 * s, y, width - 16 * s, head_h), sec.title))
        y += head_h
        for r in sec.rows:
            lay.rows.append(RowBox(QRectF(0, y, width, row_h), row_text(r), r, figures(r)))
            y += row_h
        y += 6 * s
    lay.height = int(y + 8 * s)
    return lay


def row_at(lay: WhyLayout, y: float) -> RowBox | None:
    for box in lay.rows:
        if box.rect.top() <= y < box.rect.bottom():
            return box
    return None


def paint(p: QPainter, view: WhyView, lay: WhyLayout, hover: RowBox | None = None) -> None:
    s = lay.scale
    p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    p.fillRect(QRectF(0, 0, lay.width, lay.height), QColor("white"))
    p.setPen(TEXT)
    p.setFont(figure_font(13 * s, bold=True))
    left = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    p.drawText(lay.title, WRAPPED, view.title())
    p.setFont(figure_font(11 * s))
    p.setPen(MUTED)
    p.drawText(lay.subtitle, WRAPPED, view.subtitle())
    p.setFont(figure_font(11.5 * s, bold=True))
    for rect, title in lay.headers:
        p.setPen(TEXT)
        p.drawText(rect, left, title)
    text_w = lay.figures_w  # value and share, right of the bars
    x0 = lay.label_w + 8 * s
    bar_w = max(20 * s, lay.width - x0 - text_w - 14 * s)
    mid = x0 + bar_w / 2
    p.setFont(figure_font(12 * s))
    for box in lay.rows:
        r, rect = box.row, box.rect
        if hover is not None and box.rect == hover.rect:
            p.fillRect(rect, HIGHLIGHT)
        p.setPen(TEXT if r.components else MUTED)
        p.drawText(QRectF(8 * s, rect.top(), lay.label_w - 8 * s, rect.height()), left, r.label)
        w = bar_w / 2 * min(1.0, abs(r.value) / lay.limit)
        bar = QRectF(mid if r.value >= 0 else mid - w, rect.top() + 3 * s, w, rect.height() - 6 * s)
        p.fillRect(bar, (POSITIVE if r.value >= 0 else NEGATIVE) if r.components else MUTED)
        pen = QPen(FRAME)
        pen.setCosmetic(True)
        p.setPen(pen)
        p.drawLine(int(mid), int(rect.top()), int(mid), int(rect.bottom()))
        p.setPen(TEXT)
        p.drawText(QRectF(x0 + bar_w + 6 * s, rect.top(), text_w, rect.height()), left, box.figures)


png_bytes, svg_bytes = figure_exports(layout, paint, lambda view: f"attnviz why here: {view.text}")


def numbers(view: WhyView) -> dict:
    """What `attnviz qk-attribution --json` prints for this cell."""
    a = view.attribution
    return {"model": view.model, "tokens": view.tokens, "input_ids": view.ids, "layer": a.layer,
            "head": a.head, "query": a.query, "key": a.key, "score": a.score,
            "components": list(a.components), "table": a.table.tolist(),
            "query_side": a.query_side.tolist(), "key_side": a.key_side.tolist(), "bias": a.bias,
            "top": [{"query": q, "key": k, "value": v} for q, k, v in a.top()],
            **({"note": a.note} if a.note else {}), **checkpoint_entry(view.checkpoint)}


def number_bytes(view: WhyView, fmt: str) -> bytes:
    if fmt == "json":
        return (strict_json(numbers(view), ensure_ascii=False, indent=1) + "\n").encode("utf-8")
    if fmt == "csv":  # the table: one row per query-side component, one column per key-side one
        a = view.attribution
        lines = [",".join(["query \\ key", *a.components])]
        lines += [",".join([name, *(repr(float(v)) for v in row)])
                  for name, row in zip(a.components, a.table)]
        return ("\n".join(lines) + "\n").encode("utf-8")
    raise ExportError(f"the Why here? view exports as .png, .svg, .json or .csv, not .{fmt}")


def sidecar(view: WhyView, image_path, lay: WhyLayout) -> dict:
    """File -> Open view restores the text and focuses the head; the numbers are in it too."""
    import attnviz
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION
    from attnviz.figures.effects import DISPLAY

    return {"kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
            "view": "why", "image": Path(image_path).name, "width": lay.width, "height": lay.height,
            "text": view.text, "labels": view.tokens, **DISPLAY, **(view.display or {}),
            "scope": "head", **numbers(view)}
