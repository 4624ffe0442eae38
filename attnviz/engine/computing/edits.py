"""The edits a `Trace` applies at its named points (engine/computing/trace.py): an intervention is
one of these, not a flag of the forward pass.

    ReplaceHead   at z: a head's output replaced (zero- or mean-ablation)
    Knockout      at scores: an edge query -> key blocked in every head
    Patch         at resid, z, pattern or mlp_out: rows of a value put in (activation patching)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReplaceHead:
    """Replace head `head`'s output z [n, d_head] in `layer` by `value` (broadcast to [n, d_head]):
    0.0 zero-ablates it, a [d_head] mean mean-ablates it."""
    layer: int
    head: int
    value: np.ndarray | float = 0.0


@dataclass(frozen=True)
class Knockout:
    """Block the edge query position `q` -> key position `k` in `layer`, in every head: its score is
    -inf before the softmax. The caller keeps at least one key in the row (see ablation.check)."""
    layer: int
    q: int
    k: int


POINTS = ("resid", "z", "pattern", "mlp_out")  # where a Patch may put a value in


@dataclass(frozen=True, eq=False)
class Patch:
    """Put `value` in at named point `point` of `layer`, at the block's rows `rows` [r] (the
    positions of a plain run; a batched run's rows, packed.forward_batch): activation patching.
        resid    the residual entering block `layer`     value [r, d_model]
        z        head `head`'s output before W_O          value [r, d_head]
        pattern  head `head`'s attention weights          value [r, n_k]   (the values stay the run's)
        mlp_out  the MLP's output                         value [r, d_model]"""
    point: str
    layer: int
    rows: np.ndarray  # int [r]
    value: np.ndarray
    head: int | None = None

    def __post_init__(self):
        assert self.point in POINTS, self.point
        assert (self.head is None) == (self.point in ("resid", "mlp_out")), "a head for z and pattern only"


def patches_at(edits, point: str, layer: int) -> list[Patch]:  # those of `edits` at `point` of `layer`
    return [e for e in edits if isinstance(e, Patch) and e.point == point and e.layer == layer]


def edited_z(edits, layer: int, z: np.ndarray) -> np.ndarray:
    """Block `layer`'s head outputs z [n_head, n, d_head] with `edits`' ReplaceHead and z Patches
    of that layer put in (a copy where there are any; z itself where none)."""
    heads = [e for e in edits if isinstance(e, ReplaceHead) and e.layer == layer]
    patches = patches_at(edits, "z", layer)
    if heads or patches:
        z = z.copy()
        for e in heads:
            z[e.head] = e.value
        for e in patches:
            z[e.head, e.rows] = e.value
    return z
