"""patterns.non_finite_layer: the first layer holding NaN or +inf, whether its patterns come as one
array (first taken in one max), a strided view of one (a cached run's new rows) or a list."""

import numpy as np
import pytest

from attnviz.engine.computing.patterns import non_finite_layer


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("layer", [0, 2, 4])
def test_the_first_bad_layer_is_named_in_arrays_views_and_lists(bad, layer):
    att = np.full((5, 3, 6, 6), 0.5, np.float32)
    assert non_finite_layer(att) is None
    assert non_finite_layer(att[:, :, 4:]) is None
    att[layer, 1, 5, 2] = bad
    att[4, 0, 5, 0] = np.nan  # a later layer's too: the first is named
    view = att[:, :, 5:]  # [n_layer, n_head, 1, T], not contiguous
    assert not view.flags.c_contiguous
    assert non_finite_layer(att) == layer
    assert non_finite_layer(view) == layer
    assert non_finite_layer(list(att)) == layer
    assert non_finite_layer(att[:, :, :5]) is None  # the bad rows are not in this view


def test_no_layers_are_finite():
    assert non_finite_layer(np.zeros((0, 2, 3, 3), np.float32)) is None
    assert non_finite_layer([]) is None
