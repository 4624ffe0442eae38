"""figures/view.py, what the heatmaps show: the rules the window and the exports both follow."""

from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine.computing.patterns import drop_first_key, max_pool, value_weighted
from attnviz.figures.data import make_view
from attnviz.figures.view import EMPTY_TOP, EXPORT_ASPECT, Shown, layer_columns, layer_extent


def result(attn, norms=None, groups=None):
    n_layer, n_head, T = attn.shape[:3]
    return SimpleNamespace(
        attentions=attn, value_norms=norms, text="t", tokens=[f"t{i}" for i in range(T)],
        labels=[f"t{i}" for i in range(T)], input_ids=np.arange(T),
        kv_group=np.arange(n_head) if groups is None else np.asarray(groups))


def random_attn(n_layer=2, n_head=3, T=6, seed=0):
    a = np.random.default_rng(seed).random((n_layer, n_head, T, T)).astype(np.float32)
    return a / a.sum(-1, keepdims=True)


def test_hide_first_drops_the_first_key_column_and_renormalises_for_window_and_export():
    attn = random_attn()
    shown = Shown(result(attn), hide_first=True)
    assert list(shown.key_pos) == [1, 2, 3, 4, 5]
    values = shown.region().values
    assert values.shape == (2, 3, 6, 5)  # dropped, not zeroed
    np.testing.assert_allclose(values.sum(-1), 1, atol=1e-6)
    np.testing.assert_allclose(values, drop_first_key(attn), atol=1e-6, rtol=0)
    assert shown.weight(0, 1, 2, 0) is None  # no view shows a value for the hidden key
    assert shown.weight(0, 1, 2, 3) == pytest.approx(float(values[0, 1, 2, 2]))
    view = make_view(result(attn), model="m", scope="layer", layer=1, hide_first=True)
    np.testing.assert_array_equal(view.patterns[0], values[1])  # the export's numbers are the window's
    assert view.key_pos == [1, 2, 3, 4, 5]


def test_a_hidden_key_takes_no_part_in_the_colour_levels():
    attn = random_attn(1, 2, 4)
    attn[..., 0] = 0.0
    attn[0, 0, 3] = [0.97, 0.01, 0.01, 0.01]  # the largest weight of the run, on the first key
    attn = attn / np.maximum(attn.sum(-1, keepdims=True), 1e-9)
    shown = Shown(result(attn), hide_first=True)
    assert shown.shared_top() == pytest.approx(float(drop_first_key(attn).max()))


def test_the_shared_scale_is_the_runs_top_in_the_window_and_in_every_export():
    attn = random_attn(3, 2, 5)
    attn[2, 1, 4] = [0, 0, 0, 0, 1.0]  # the run's largest weight is in the last layer
    shown = Shown(result(attn))
    assert shown.shared_top() == 1.0
    for scope, head in (("head", 0), ("layer", None), ("all", None)):
        view = make_view(result(attn), model="m", scope=scope, layer=0, head=head)
        assert (view.levels[..., 1] == 1.0).all() and (view.levels[..., 0] == 0).all()
    per_head = make_view(result(attn), model="m", scope="layer", layer=0, scale_mode="per-head")
    np.testing.assert_allclose(per_head.levels[0, :, 1], attn[0].max(axis=(1, 2)))
    np.testing.assert_allclose(shown.tops("per-head", [0]), per_head.levels[..., 1])


def test_an_empty_pattern_tops_at_one_and_a_faint_one_at_its_own_max():
    attn = np.zeros((1, 2, 3, 3), np.float32)
    attn[0, 1] = 1e-8  # faint but not empty: its own max, not a floor
    shown = Shown(result(attn))
    np.testing.assert_array_equal(shown.head_top(), [[EMPTY_TOP, np.float32(1e-8)]])
    view = make_view(result(attn), model="m", scope="layer", layer=0, scale_mode="per-head")
    np.testing.assert_array_equal(view.levels[0, :, 1], [EMPTY_TOP, np.float32(1e-8)])
    nothing = Shown(result(np.zeros((1, 1, 2, 2), np.float32)))
    assert nothing.shared_top() == EMPTY_TOP
    assert make_view(result(np.zeros((1, 1, 2, 2), np.float32)), model="m", scope="all",
                     layer=0).levels[0, 0, 1] == EMPTY_TOP


def test_value_weighting_waits_for_the_norms_and_then_weighs_each_key():
    attn = random_attn()
    norms = np.random.default_rng(1).random(attn.shape[:3]).astype(np.float32)
    assert not Shown(result(attn), value_weighted=True).weighted  # no norms yet: the plain weights
    shown = Shown(result(attn, norms), value_weighted=True)
    assert shown.weighted
    np.testing.assert_allclose(shown.region().values, value_weighted(attn, norms), rtol=1e-6)
    both = Shown(result(attn, norms), hide_first=True, value_weighted=True)  # weighted, then hidden
    np.testing.assert_allclose(both.region().values, drop_first_key(value_weighted(attn, norms)), rtol=1e-6)


def test_a_region_is_rows_of_some_heads_at_a_resolution():
    attn = random_attn(2, 4, 10)
    shown = Shown(result(attn))
    part = shown.region([1], [0, 3], rows=(2, 7))
    np.testing.assert_array_equal(part.values, attn[1][[0, 3]][None, :, 2:7])
    assert list(part.rows) == [2, 3, 4, 5, 6] and list(part.cols) == list(range(10))
    pooled = shown.region([0], pool=3)  # max-pooled blocks, so no peak is lost
    np.testing.assert_array_equal(pooled.values, max_pool(attn[:1], 3))
    assert list(pooled.rows) == [0, 3, 6, 9] and list(pooled.cols) == [0, 3, 6, 9]
    hidden = Shown(result(attn), hide_first=True).region([0], [2], pool=3)
    # pooled blocks stay in token coordinates: block 0 holds keys 1 and 2 only
    d = drop_first_key(attn[0, 2])
    assert hidden.values.shape == (1, 1, 4, 4)
    assert hidden.values[0, 0, 0, 0] == pytest.approx(d[:3, :2].max(), abs=1e-6)
    assert hidden.values[0, 0, 1, 1] == pytest.approx(d[3:6, 2:5].max(), abs=1e-6)
    assert shown.strongest_in_block(0, 2, 3, 3, 3) == tuple(
        np.add(np.unravel_index(attn[0, 2, 3:6, 3:6].argmax(), (3, 3)), 3))


@pytest.mark.parametrize("n_head,n_kv", [(12, 12), (9, 3), (32, 8), (8, 2), (15, 5), (14, 2), (6, 1)])
def test_columns_keep_kv_groups_whole_and_make_the_heads_largest(n_head, n_kv):
    gs = n_head // n_kv
    for w, h in ((1600, 900), (900, 900), (500, 1200), (EXPORT_ASPECT, 1)):
        ncols, side = layer_columns(n_head, gs, w, h)
        assert gs == 1 or ncols % gs == 0 or gs % ncols == 0  # a KV group never wraps
        whole = [c for c in range(1, n_head + 1) if gs == 1 or c % gs == 0 or gs % c == 0]
        sides = [min(w / layer_extent(n_head, gs, c)[0], h / layer_extent(n_head, gs, c)[1]) for c in whole]
        assert side >= max(sides) / 1.02 - 1e-9  # within 2% of the largest heads possible
        assert side == pytest.approx(min(w / layer_extent(n_head, gs, ncols)[0],
                                         h / layer_extent(n_head, gs, ncols)[1]))


@pytest.mark.parametrize("shape,p", [((5, 7), 3), ((2, 3, 10, 10), 4), ((4, 9), 1), ((2, 2), 5)])
def test_pooling_keeps_every_blocks_largest_weight(shape, p):
    x = np.random.default_rng(len(shape)).random(shape).astype(np.float32)
    n_q, n_k = -(-shape[-2] // p), -(-shape[-1] // p)
    padded = np.zeros((*shape[:-2], n_q * p, n_k * p), np.float32)  # zero padding: weights >= 0
    padded[..., :shape[-2], :shape[-1]] = x
    expect = padded.reshape(*shape[:-2], n_q, p, n_k, p).max(axis=(-3, -1))
    np.testing.assert_array_equal(max_pool(x, p), expect)


@pytest.mark.parametrize("shape,p,pk", [((7, 10), 2, 3), ((2, 9, 5), 4, 1), ((6, 6), 1, 4)])
def test_pooling_rows_and_keys_apart_keeps_every_blocks_largest_weight(shape, p, pk):
    """(The focus view pools query rows to its height and keys to its width.)"""
    x = np.random.default_rng(sum(shape)).random(shape).astype(np.float32)
    n_q, n_k = -(-shape[-2] // p), -(-shape[-1] // pk)
    padded = np.zeros((*shape[:-2], n_q * p, n_k * pk), np.float32)
    padded[..., :shape[-2], :shape[-1]] = x
    expect = padded.reshape(*shape[:-2], n_q, p, n_k, pk).max(axis=(-3, -1))
    np.testing.assert_array_equal(max_pool(x, p, pk), expect)


def test_the_strongest_cell_of_a_block_of_rows_and_keys_apart():
    attn = random_attn(T=9)
    q, k = Shown(result(attn)).strongest_in_block(1, 2, 2, 3, 2, 4)  # rows 2..3, keys 3..6
    assert 2 <= q < 4 and 3 <= k < 7 and attn[1, 2, q, k] == attn[1, 2, 2:4, 3:7].max()


def test_window_edge_follows_the_mask():
    """Left of the edge are exactly the keys a causal window of W masks (q - k >= W); no edge
    while the text fits in the window."""
    from attnviz.engine.computing.layers import causal_mask
    from attnviz.figures.view import window_edge

    T, W = 12, 5
    edge = window_edge(T, W)
    allowed = causal_mask(T, W)
    for q in range(T):
        xs = [k for k, y in edge if y == q + 1 or y == q]
        first = int(np.argmax(allowed[q]))  # the row's first visible key
        if q >= W:
            assert (first, q) in edge and (first, q + 1) in edge and first == q - W + 1
        else:
            assert first == 0 and all(x >= 1 for x in xs)
    assert window_edge(W, W) == [] and window_edge(T, None) == []


def test_every_row_with_no_weight_left_once_the_first_key_is_hidden_is_undefined():
    """A sink head whose float32 softmax left exactly 0 on every other key: with the first key
    hidden, rows 0..2 have nothing left to renormalise (0/0), as the exports leave them blank; row 3
    keeps weights. Without Hide first token no row is undefined."""
    a = np.zeros((1, 1, 4, 4), np.float32)
    a[0, 0, :, 0] = 1.0
    a[0, 0, 3] = [0.5, 0.2, 0.2, 0.1]
    hidden = Shown(SimpleNamespace(attentions=a), hide_first=True)
    assert [hidden.undefined(0, 0, q) for q in range(4)] == [True, True, True, False]
    shown = Shown(SimpleNamespace(attentions=a), hide_first=False)
    assert not any(shown.undefined(0, 0, q) for q in range(4))
