"""`ExportView`: the one description of an export, without Qt (figures/data.make_view makes it;
the figure, placed by figures/heatmap_layout.py and painted by figures/heatmaps.py, and the
number writers in figures/data.py read only it)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from attnviz.engine.reading.token_text import plural
from attnviz.engine.computing.patterns import head_title, no_weight_rows


def model_title(model: str, checkpoint: dict | None) -> str:
    """The model as a picture's title names it: with its training step for a model with
    checkpoints ("attnviz-toy-stdlib · step 2,000"; `checkpoint`: checkpoints.checkpoint_record's)."""
    return f"{model} \u00b7 step {checkpoint['step']:,}" if checkpoint else model


@dataclass(frozen=True, eq=False)
class ExportView:
    """One export: which heads, which numbers and how they are coloured."""
    model: str
    text: str
    tokens: list[str]
    labels: list[str]  # readable token strings for axes
    ids: list[int]
    scope: str  # "head" | "layer" | "all"
    layer: int  # the focus layer (head scope) or the current layer
    head: int | None  # the focus head (head scope), else None
    layers: list[int]  # layers of the exported panels, one row each
    heads: list[int]  # heads of the exported panels, the same in every row
    patterns: np.ndarray  # [n_layers, n_heads, T, n_k] float32; n_k = T - 1 when hide_first
    key_pos: list[int]  # [n_k] original position of each key column
    kv_group: list[int]  # [n_head] KV head each query head reads
    colormap: str
    scale_mode: str
    hide_first: bool
    levels: np.ndarray  # [n_layers, n_heads, 2] (low, high) per panel
    checkpoint: dict | None = None  # {index, step, of}: the training checkpoint shown, if any
    value_weighted: bool = False  # patterns are a_qk * ||v_k W_O(h)||, rows renormalised (Kobayashi et al.)
    ablation: dict | None = None  # what was switched off in the run exported (Ablation.to_json); None: clean
    changed: str = ""  # the same in words ("zero-ablated L3 H1"): the title and the CSV header say it
    badges: tuple = ()  # [n_layer][n_head] the role badges the grid's titles show ("": none)
    layer_kinds: tuple = ()  # [n_layer] each layer's kind as the grid's titles say it ("global"; "": none)
    head_shares: tuple = ()  # [n_layer][n_head] value-weighted: each head's share of its layer's output

    def badge(self, layer: int, head: int) -> str:
        """A head's role badge as the grid's title shows it ("" where none)."""
        row = self.badges[layer] if 0 <= layer < len(self.badges) else ()
        return row[head] if 0 <= head < len(row) else ""

    def kind(self, layer: int) -> str:
        """A layer's kind as the grid's titles say it ("local (window 512)"; "" where none)."""
        return self.layer_kinds[layer] if 0 <= layer < len(self.layer_kinds) else ""

    def switched_off(self, layer: int, head: int) -> bool:
        """Whether the run exported has the head switched off (the grid's titles: "· off")."""
        return [layer, head] in (self.ablation or {}).get("heads", [])

    def share(self, layer: int, head: int) -> float | None:
        """A value-weighted head's share of its layer's summed head-output norms (the grid's
        titles: "· 12% out"); None without value weighting."""
        return self.head_shares[layer][head] if 0 <= layer < len(self.head_shares) else None

    def blank(self) -> np.ndarray:
        """[n_layers, n_heads, T] bool: the rows left with no weight once the first key is hidden
        (a decoder's first query sees only that key: renormalised, 0/0). Their numbers are
        undefined: NaN in .npy, empty in CSV, null in JSON, and the figure leaves them blank.
        Found once per view (each panel of a figure asks)."""
        return self._blank

    @cached_property
    def _blank(self) -> np.ndarray:
        if not self.hide_first:
            return np.zeros(self.patterns.shape[:3], bool)
        return no_weight_rows(self.patterns)

    def values(self) -> np.ndarray:
        """The patterns as written out: the blank rows NaN."""
        blank = self.blank()
        if not blank.any():
            return self.patterns
        out = self.patterns.copy()
        out[blank] = np.nan
        return out

    @property
    def n_query(self) -> int:
        return self.patterns.shape[2]

    @property
    def grouped(self) -> bool:
        """True under grouped-query or multi-query attention (fewer KV heads than query heads)."""
        return len(set(self.kv_group)) < len(self.kv_group)

    def selected(self) -> np.ndarray:
        """The exported array: head [T, n_k], layer [n_head, T, n_k], all [n_layer, n_head, T, n_k];
        a row left with no weight by the hidden first key is NaN (values)."""
        values = self.values()
        if self.scope == "head":
            return values[0, 0]
        if self.scope == "layer":
            return values[0]
        return values

    def title(self) -> str:
        if self.scope == "head":
            where = head_title(self.layer, self.head)
        elif self.scope == "layer":
            where = f"layer {self.layer}, all {plural(len(self.heads), 'head')}"
        else:
            where = f"all {plural(len(self.layers), 'layer')} \u00d7 {plural(len(self.heads), 'head')}"
        weighted = " \u00b7 value-weighted" if self.value_weighted else ""
        changed = f" \u00b7 {self.changed}" if self.changed else ""
        return f"{model_title(self.model, self.checkpoint)} \u00b7 {where}{weighted}{changed}"
