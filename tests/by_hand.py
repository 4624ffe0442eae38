"""Value-weighted attention computed by hand, for the window's and the command line's tests."""

import numpy as np

from attnviz.engine.computing.families import forward
from attnviz.engine.computing.trace import Trace


def direct(model, ids):
    """By hand, per head: the key's value row times head h's rows of W_O, its norm, the weights
    scaled by it and renormalised."""
    c, w = model.config, model.weights
    trace = forward(c, w, np.asarray(ids), Trace(values=True))
    att, values = trace.attentions.astype(np.float64), trace.v
    norms = np.zeros(att.shape[:3])
    for i, layer in enumerate(w.layers):
        for h in range(c.n_head):
            f = values[i][h // c.n_group] @ layer.w_o[h * c.d_head:(h + 1) * c.d_head]
            norms[i, h] = np.linalg.norm(f, axis=-1)
    vw = att * norms[:, :, None, :]
    return norms, vw / vw.sum(-1, keepdims=True)
