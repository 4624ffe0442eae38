"""MLPs stored as zeros (an attention-only model such as the bundled toy and the textbook model):
an MLP whose output weights and bias are all 0 writes exactly 0 whatever its input, so patching
its output changes nothing and its part of an attribution is 0 but for float rounding. One rule,
read from the weights (not from a config's words), for every view that names MLP parts."""

from __future__ import annotations

import numpy as np



def zero_mlps(model) -> tuple[int, ...]:
    """The layers whose MLP writes exactly 0 for any input: its output weight W_out [d_ff,
    d_model] and its bias all 0 (a quantised or packed W_out is not read: taken as writing)."""
    out = []
    for i, lw in enumerate(model.weights.layers):
        w, b = lw.w_out, lw.b_out
        if isinstance(w, np.ndarray) and not w.any() and (b is None or not np.asarray(b).any()):
            out.append(i)
    return tuple(out)


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
