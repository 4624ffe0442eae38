"""MLPs stored as zeros (an attention-only model such as the bundled toy and the textbook model):
an MLP whose output weights and bias are all 0 writes exactly 0 whatever its input, so patching
its output changes nothing and its part of an attribution is 0 but for float rounding. One rule,
read from the weights (not from a config's words), for every view that names MLP parts.

A W_out held in a GGUF file's quantised blocks (the kernels' packed view of a layer) is read in
those blocks, not expanded to float32: each weight is scale q + offset, so a matrix whose every
scale and offset is 0 is zeros without reading its integers (how an all-zero matrix quantises);
otherwise its blocks are dequantised a few groups of rows at a time, up to the first weight that
is not 0."""

from __future__ import annotations

import weakref
from dataclasses import replace

import numpy as np

from attnviz.engine.reading.qpack import LANES, dequantized

GROUPS = 256  # packed row groups (16 rows each) dequantised at a time


_FOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> zero_mlps (weights never change)


def zero_mlps(model) -> tuple[int, ...]:
    """The layers whose MLP writes exactly 0 for any input: its output weight W_out [d_ff,
    d_model] and its bias all 0, float32 or in quantised blocks (module docstring). Read once a
    model: a view asks at each pick, and a model under a memory budget expands layers to read."""
    try:
        return _FOUND[model]
    except (KeyError, TypeError):  # (TypeError: an object no weak reference can name)
        pass
    found = _read(model)
    try:
        _FOUND[model] = found
    except TypeError:
        pass
    return found


def _read(model) -> tuple[int, ...]:
    store = model.weights.layers
    view = getattr(store, "packed_view", None)  # (a GGUF model's layers: blocks, no float32 copy)
    out = []
    for i in range(len(store)):
        lw = view(i) if view is not None else None
        if lw is None:
            lw = store[i]
        if _writes_nothing(lw):
            out.append(i)
    return tuple(out)


def _writes_nothing(lw) -> bool:
    w, b = lw.w_out, lw.b_out
    if b is not None and np.asarray(b).any():
        return False
    if isinstance(w, np.ndarray):
        return not w.any()
    packed = getattr(lw.packed, "w_out", None) if w is None else None
    return packed is not None and all(_zero_blocks(p) for _, p in packed.parts)


def _zero_blocks(p) -> bool:  # qpack.Packed -> whether every weight it holds is exactly 0
    if not p.scale.any() and (p.offset is None or not p.offset.any()):
        return True  # scale q + offset with both 0: the integers need not be read
    for a in range(0, p.q.shape[0], GROUPS):
        b = a + GROUPS
        part = replace(p, q=p.q[a:b], scale=p.scale[a:b],
                       offset=None if p.offset is None else p.offset[a:b],
                       n_out=min(p.n_out - a * LANES, GROUPS * LANES))
        if dequantized(part).any():  # (NaN too: a weight that is not 0)
            return False
    return True


def stored_as_zeros(model, layers=None) -> str:
    """The clause saying which MLPs are stored as zeros ('' none), for a view that names them:
    `layers` (default: every layer) are those it shows."""
    every = zero_mlps(model)
    shown = [i for i in every if layers is None or i in layers]
    if not shown:
        return ""
    if len(every) == model.config.n_layer:
        return f"{model.name}'s MLPs are stored as zeros (an attention-only model): each writes exactly 0"
    many = len(shown) > 1
    return (f"{model.name}'s {', '.join(f'L{i}' for i in shown)} MLP{'s are' if many else ' is'} stored "
            f"as zeros: {'each writes' if many else 'it writes'} exactly 0")
