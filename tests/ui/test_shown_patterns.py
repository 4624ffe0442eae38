"""The window's patterns are the exports' and the engine's: display_attention is drop_first_key with
a zero column for the hidden first key, and the grid pools cells with the engine's max_pool."""

import numpy as np
import pytest

from attnviz.engine.patterns import drop_first_key, max_pool
from attnviz.figures import heatmaps as figure
from attnviz.ui import grid
from attnviz.ui.state import display_attention
from export_files import SENTENCE


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE)


def test_hide_first_matches_the_window(run):
    shown = display_attention(run.attentions, True)  # the window keeps a zero column
    np.testing.assert_allclose(drop_first_key(run.attentions), shown[..., 1:], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape,p", [((5, 7), 3), ((2, 3, 10, 10), 4), ((4, 9), 1), ((2, 2), 5)])
def test_one_max_pool_for_the_grid_and_the_figures(shape, p):
    assert figure.max_pool is max_pool and grid.max_pool is max_pool
    x = np.random.default_rng(len(shape)).random(shape).astype(np.float32)
    n_q, n_k = -(-shape[-2] // p), -(-shape[-1] // p)
    padded = np.zeros((*shape[:-2], n_q * p, n_k * p), np.float32)  # zero padding: weights >= 0
    padded[..., :shape[-2], :shape[-1]] = x
    expect = padded.reshape(*shape[:-2], n_q, p, n_k, p).max(axis=(-3, -1))
    np.testing.assert_array_equal(max_pool(x, p), expect)


def test_display_attention_is_drop_first_key_with_a_zero_column(run):
    shown = display_attention(run.attentions, True)
    assert shown.shape == run.attentions.shape and shown.dtype == np.float32
    assert (shown[..., 0] == 0).all()
    np.testing.assert_array_equal(shown[..., 1:], drop_first_key(run.attentions))
    assert display_attention(run.attentions, False) is run.attentions
    bos_only = np.zeros((1, 1, 2, 2), np.float32)
    bos_only[..., 0] = 1.0  # all weight on the first key: the row is left empty, not NaN
    out = np.full((1, 1, 2, 1), 7.0, np.float32)
    drop_first_key(bos_only, out=out)
    assert (out == 0).all() and (display_attention(bos_only, True) == 0).all()
