"""The Anatomy panel's head shares: each bar's hover gives the head's output norm as a share of the
sum of the layer's heads' norms, which is what the shares add up to; it is not a share of the
layer's attention output's norm (the heads' outputs add up to that output, their norms do not)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


def test_the_share_hover_names_what_the_shares_add_up_to(qapp):
    model = load_model(FIXTURES / "llama_gqa")
    cfg = model.config
    result = model.run(ids=IDS, request=RunRequest(inputs=True))
    layer = 1
    view = anatomy.make_anatomy_view(model, result, layer, 0)
    o = view.anatomy.head_out.astype(np.float64)  # [n_head, T, d_head]
    f = np.einsum("htd,hdm->htm", o, view.anatomy.w_o.reshape(cfg.n_head, cfg.d_head, -1))
    norms = np.sqrt((f * f).sum(axis=(1, 2)))  # [n_head] each head's ||A_h V_h W_O(h)||_F
    np.testing.assert_allclose(view.share, norms / norms.sum(), rtol=1e-5)
    assert float(view.share.sum()) == pytest.approx(1.0, abs=1e-6)
    whole = np.linalg.norm(f.sum(axis=0))  # the attention output's norm (less its bias)
    assert whole < 0.99 * norms.sum()  # the norms do not add up to it
    lay = anatomy.layout(view, 900)
    for h, rect in lay.share_bars:
        text = anatomy.readout(view, lay, rect.center().x(), rect.center().y())
        assert text == (f"{head_title(layer, h)}: {100 * view.share[h]:.1f}% of the layer's summed "
                        "head-output norms (click to focus)")


def test_a_block_hover_writes_a_negative_value_with_the_window_minus(qapp):
    model = load_model(FIXTURES / "llama_gqa")
    result = model.run(ids=IDS, request=RunRequest(inputs=True))
    view = anatomy.make_anatomy_view(model, result, 1, 0)
    lay = anatomy.layout(view, 900)
    b = next(b for b in lay.blocks if b.data is not None and b.data.size and (b.data < 0).any())
    i, j = (int(k) for k in np.argwhere(b.data < 0)[0])
    r = b.rect  # the cell's centre: blocks draw their rows and columns evenly
    x = r.left() + (j + 0.5) * r.width() / b.data.shape[1]
    y = r.top() + (i + 0.5) * r.height() / b.data.shape[0]
    assert b.index_at(x, y) == (i, j)
    text = anatomy.readout(view, lay, x, y)
    assert text.endswith(f"{float(b.data[i, j]):.4g}".replace("-", "\u2212")) and "-" not in text.split(": ")[-1]
