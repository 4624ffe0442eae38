"""The grid while comparing (Models > Compare with…): a selector A | B | A − B above the mosaic, and
what the mosaic then shows in place of A's weights: B's, or the difference A − B on a diverging
scale symmetric about 0 with its own colour bar. The values come from the Compare session's newest
comparison (ui/machinery/compare_jobs.py), which is always of the result the grid has drawn or
about to: B's run on the same ids."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QButtonGroup, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from attnviz.engine.computing.patterns import drop_first_key, head_title, no_weight_rows, pooled_undefined, signed_pool
from attnviz.engine.reading.token_text import isolated
from attnviz.figures.style import N_COLORS, diverging_colors
from attnviz.figures.view import Shown
from attnviz.ui.machinery.compare_jobs import MODE_TITLES, MODES
from attnviz.figures.numbers import signed
from attnviz.ui.views.fields import plain_label
from attnviz.ui.views.mosaic import raw_pieces



def signed_colormap() -> pg.ColorMap:
    """The colour bar's map for A − B: style's diverging colours, blue (negative) .. red."""
    return pg.ColorMap(np.linspace(0.0, 1.0, N_COLORS), diverging_colors(N_COLORS))


class ModeSelector(QWidget):
    """A | B | A − B for the grid, shown while a model B is open; under it, while B or A − B is
    shown with Value-weighted on, a line saying they are not value-weighted."""

    def __init__(self, jobs, parent=None):
        super().__init__(parent)
        self.jobs = jobs
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 2, 4, 2)
        lay = QHBoxLayout()
        lay.setContentsMargins(0, 0, 0, 0)
        col.addLayout(lay)
        self.label = plain_label(QLabel("Grid shows"))
        lay.addWidget(self.label)
        self.group = QButtonGroup(self)
        self.buttons: dict[str, QToolButton] = {}
        for mode in MODES:
            b = QToolButton()
            b.setText(MODE_TITLES[mode])
            b.setCheckable(True)
            b.setToolTip({"A": "Model A's weights (the loaded model)", "B": "Model B's weights on the same tokens",
                          "A-B": "A's weight minus B's, blue below 0, red above"}[mode])
            b.clicked.connect(lambda _=False, m=mode: jobs.set_mode(m))
            self.group.addButton(b)
            self.buttons[mode] = b
            lay.addWidget(b)
        self.clean = plain_label(QLabel(f"({CLEAN_RUNS})"))  # (shown while something is switched off)
        lay.addWidget(self.clean)
        self.waiting = plain_label(QLabel(WAITING))
        lay.addWidget(self.waiting)
        lay.addStretch(1)
        self.unweighted = plain_label(QLabel(NOT_WEIGHTED))  # (a line of its own: it wraps)
        self.unweighted.setWordWrap(True)
        col.addWidget(self.unweighted)
        jobs.sigChanged.connect(self.refresh)
        jobs.state.effects.sigAblationChanged.connect(lambda _a: self.refresh())
        jobs.state.sigDisplayChanged.connect(self.refresh)  # (Value-weighted)
        self.refresh()

    def refresh(self) -> None:
        self.clean.setVisible(self.jobs.state.effects.ablation.active and grid_mode(self.jobs) != "A")
        j = self.jobs
        self.waiting.setText(FAILED if j.failed is not None else WAITING)
        # (a long text hides the grid, this selector with it: the Compare panel's note says so)
        self.waiting.setVisible(waiting(self.jobs) and not j.long_text)
        self.unweighted.setVisible(j.state.value_weighted and grid_mode(j) != "A" and not j.long_text)
        self.setVisible(self.jobs.active)
        for mode, b in self.buttons.items():
            b.setChecked(mode == self.jobs.mode)


def attach(grid, jobs) -> None:
    """The grid follows the Compare session: a selector A | B | A − B above its mosaic while B is
    open, and a redraw when B closes, a comparison of new patterns comes in or the mode changes."""
    grid.compare = jobs
    grid.mode_selector = ModeSelector(jobs, grid)
    grid.layout().insertWidget(0, grid.mode_selector)

    seen = [None]

    def changed():  # (the next-token numbers coming in change nothing the grid shows)
        c = jobs.comparison
        key = (compared_mode(jobs), None if c is None else c.b_attentions)
        if key[0] == "A" and grid.shown_mode == "A" or seen[0] is not None and \
                seen[0][0] == key[0] and seen[0][1] is key[1]:
            return
        seen[0] = key
        grid.refresh()
    jobs.sigChanged.connect(changed)


def compared_mode(jobs) -> str:
    """What the grid shows: "A", or "B" / "A-B" while a model B is open."""
    return jobs.mode if jobs is not None and jobs.active else "A"


def grid_mode(jobs) -> str:
    """What the grid's mosaic shows of A | B | A − B: compared_mode, but "A" while waiting() (A's
    last run, its switched-off heads marked). The selector's and the ablation bar's words follow it."""
    return "A" if waiting(jobs) else compared_mode(jobs)


def pending(jobs, result, shown: Shown) -> bool:
    """Whether the grid shows B or A − B but the comparison of `result` (A's) is not in yet: the
    grid then keeps its picture (a keystroke's A is drawn before B has run on its ids)."""
    if grid_mode(jobs) == "A" or shown.long:  # (a long text's run is A's alone: shown as A)
        return False
    c = jobs.comparison
    return c is None or c.doc is None or c.result is not result


def waiting(jobs) -> bool:
    """Whether B or A − B is asked for but no comparison is in: B has just opened, or A is another
    training step (CompareJobs.a_changed lets the old one go), or none comes (a long text, a run of
    A or a comparison that failed). The last picture's B or A − B is then of another A: the grid
    shows A's last run (the step A left, until the new A's run is in), and the selector says it is
    comparing, or why no comparison comes. A long text's comparison before it is of another text."""
    return compared_mode(jobs) != "A" and (jobs.comparison is None or jobs.long_text)


@dataclass(frozen=True)
class Compared:
    """What the grid shows in place of A's region: B's weights (lim None) or A − B and its limit."""
    values: np.ndarray  # [n_layers, n_head, rows, cols] as Shown.region gives A's
    lim: float | None  # the diverging scale's limit (the largest |A − B|, 0 where A = B); None: B's weights
    b: Shown  # B's weights as shown (their colour tops)
    blank: np.ndarray | None = None  # [n_layers, n_head, rows] the undefined rows (Region.blank)


def compare_values(jobs, result, shown: Shown, layers, pool: int) -> Compared | None:
    """In place of A's shown region (Shown.region(layers, pool=pool)): B's weights (mode "B") or
    A − B (mode "A-B"); None in mode "A" and for a long text. Not pending (pending()). Both sides are A's clean run and
    B's (no head switched off, weights as they are, the first key hidden where the grid hides it);
    a pooled cell of A − B is its block's difference of largest size, its sign kept. A row undefined
    on either side (no weight left once the first key is hidden) has no difference: blank, and no
    part of the limit or of a pooled cell."""
    mode = grid_mode(jobs)
    if mode == "A" or shown.long:
        return None
    hide = shown.hide_first
    a, b = sides(jobs.comparison, hide)
    if mode == "B":
        region = b.region(layers, pool=pool)
        return Compared(region.values, None, b, region.blank)
    layers = list(range(a.n_layer)) if layers is None else list(layers)
    parts = [difference(a, b, l) for l in layers]
    d = np.stack([p[0] for p in parts])  # [n, H, T, T]
    blank = np.stack([p[1] for p in parts]) if hide else None
    lim = float(np.abs(d).max(initial=0.0))
    if pool > 1:
        d = signed_pool(d, pool)
        blank = None if blank is None else pooled_undefined(blank, pool)
    elif hide:
        d = d[..., int(a.key_pos[0]):]
    return Compared(d, lim, b, blank)


_SIDES: list = [None]  # [(weakref to a comparison, hide, its sides)]: the comparison on screen's


def sides(c, hide: bool) -> tuple[Shown, Shown]:
    """A's and B's weights in comparison `c` as the grid and the Compare panel show them: each
    side's clean run, not value-weighted, the first key hidden and the rows renormalised where
    `hide` (Hide first token). Kept for the last comparison asked about while it lives: each
    side renormalises every layer once, not at each repaint and hover of the grid and the panel."""
    held = _SIDES[0]
    if held is not None and held[0]() is c and held[1] == hide:
        return held[2]
    pair = (Shown(SimpleNamespace(attentions=c.a_attentions), hide, False),
            Shown(SimpleNamespace(attentions=c.b_attentions), hide, False))

    def gone(ref):  # (a comparison closed: its weights are not kept for it)
        if _SIDES[0] is not None and _SIDES[0][0] is ref:
            _SIDES[0] = None
    _SIDES[0] = (weakref.ref(c, gone), hide, pair)
    return pair


def pooled_cell(jobs, result, layer: int, head: int, q0: int, k0: int, p: int,
                hide: bool) -> tuple[int, int] | None:
    """(q, k) of the cell a pixel pooling rows q0.. and keys k0.. (p of each) shows in mode B (B's
    largest weight) or A − B (the difference of largest size in a defined row: signed_pool's pick),
    in the grid and the Compare panel's tiles alike; None in mode A (the view's own block max)."""
    mode = compared_mode(jobs)
    c = jobs.comparison if mode != "A" else None
    if c is None or c.result is not result:
        return None
    a, b = sides(c, hide)
    if mode == "B":
        return b.strongest_in_block(layer, head, q0, k0, p)
    rows = (layer, q0, min(a.n_tok, q0 + p), [head])  # (the block's rows of the one head)
    size = np.abs(a.rows(*rows)[0] - b.rows(*rows)[0])[:, k0:k0 + p].astype(np.float64)
    size[a.undefined_rows(*rows)[0] | b.undefined_rows(*rows)[0]] = -1  # (never an undefined row
    if hide and k0 == 0:  # or the hidden key)
        size[:, 0] = -1
    dq, dk = np.unravel_index(int(size.argmax()), size.shape)
    return q0 + int(dq), k0 + int(dk)


def difference(a: Shown, b: Shown, layer: int) -> tuple[np.ndarray, np.ndarray | None]:
    """A − B of `layer` as shown ([n_head, T, T], token coordinates: a hidden key 0) and its
    undefined rows ([n_head, T] bool, None without Hide first token): a row with no weight left on
    either side has no difference, 0 here, and a view leaves it blank."""
    d = a.rows(layer, 0, a.n_tok) - b.rows(layer, 0, b.n_tok)
    if not a.hide_first:
        return d, None
    blank = a.undefined_rows(layer, 0, a.n_tok) | b.undefined_rows(layer, 0, b.n_tok)
    d[blank] = 0
    return d, blank


# (short: beside the buttons; "last run": after a training step change it is the old step's until
# the new A's run is in, so the words claim no step)
WAITING = "(comparing\u2026: A's last run shown meanwhile)"
FAILED = "(could not compare: A's last run shown)"  # (the Compare panel's note says why)
# what Compare compares while heads (or edges) are switched off in A: both models' clean runs
CLEAN_RUNS = "clean runs: what is switched off in A is on in both"
# under the selector while B or A − B is shown with Value-weighted on (the sides are never weighted)
NOT_WEIGHTED = "B and A \u2212 B are not value-weighted: they show both models' attention weights as they are."
# under the Compare panel's tiles with Value-weighted on (its A too: A − B is of the sides as they are)
TILES_NOT_WEIGHTED = ("A, B and A \u2212 B here are not value-weighted, A included: they show both "
                      "models' attention weights as they are, so this A differs from the grid's "
                      "value-weighted A.")


def compare_readout(jobs, result, layer: int, head: int, q: int, k: int, hide_first: bool = False,
                    switched_off: bool = False) -> str | None:
    """The grid's hover over one cell while it shows B or A − B (None in mode A, or before the
    comparison of `result` is in): the value the pixel shows first, named by its side ("B L1 H0",
    "A − B L1 H0", as the tiles' titles), then the other two, as shown: with the first key hidden,
    renormalised (that key: hidden), and a row with no weight left on either side undefined. Both
    sides are the clean runs (compare_values); `switched_off` (heads are off in A): it says so."""
    mode = compared_mode(jobs)
    c = jobs.comparison if mode != "A" else None
    if c is None or c.result is not result:
        return None
    lab = result.labels
    text = f"{MODE_TITLES[mode]} {head_title(layer, head)}  {isolated(lab[q])} \u2192 {isolated(lab[k])}  "
    got = cell_values(c, layer, head, q, k, hide_first)
    if isinstance(got, str):
        text += got
    else:
        a, b = got
        text += (f"{b:.4f}  (A {a:.4f}, A \u2212 B {signed(a - b)})" if mode == "B"
                 else f"{signed(a - b)}  (A {a:.4f}, B {b:.4f})")
    return text + raw_pieces(result, q, k) + (f"  [{CLEAN_RUNS}]" if switched_off else "")


def cell_values(c, layer: int, head: int, q: int, k: int, hide_first: bool) -> tuple[float, float] | str:
    """(A's, B's) weight at one cell of comparison `c` as shown, or why there is none: the first
    key hidden ("first key hidden"), a row with no weight left on either side (undefined)."""
    if hide_first and k == 0:
        return "first key hidden"
    rows = [c.a_attentions[layer, head, q], c.b_attentions[layer, head, q]]
    if hide_first:
        rows = [drop_first_key(r) for r in rows]
        k -= 1
        empty = [side for side, r in zip("AB", rows) if no_weight_rows(r)]
        if empty:
            return f"A \u2212 B undefined: no weight left once the first key is hidden in {' and '.join(empty)}"
    return float(rows[0][k]), float(rows[1][k])


def cell_numbers(c, layer: int, head: int, q: int, k: int, hide_first: bool) -> str:
    """A's and B's weight at one cell of comparison `c` and A − B, as shown (cell_values)."""
    got = cell_values(c, layer, head, q, k, hide_first)
    if isinstance(got, str):
        return got
    a, b = got
    return f"A {a:.4f}, B {b:.4f}, A \u2212 B {signed(a - b)}"
