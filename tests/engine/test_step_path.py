"""The Python around a generation step's compiled call, made cheaper without changing a number:
each layer's constants read once where every layer is alike (and per layer where not), the last
row's mask and each Rope's kept frequencies equal to the ones built anew, the cache's common
prefix, and a step's top tokens (the lowest id first among equals, as the greedy choice)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnviz.engine.computing import rope as rope_mod
from attnviz.engine.computing.families import _kinds, _layer_consts
from attnviz.engine.computing.generate import TOP_BLOCKS, top_ids
from attnviz.engine.computing.layers import causal_mask, mask_bias
from attnviz.engine.computing.trace import KVCache
from attnviz.engine.reading.config import GLOBAL, LOCAL, Rope, config_from_dict, read_config
from tiny import FIXTURES, llama_config


def _per_layer(cfg):  # each layer's (window, RoPE, scale) asked of the config layer by layer
    base = 1.0 / np.sqrt(cfg.query_pre_attn_scalar or cfg.d_head)
    return [(cfg.window(i), cfg.rope_of(i), base / (i + 1) if cfg.attn_scale_by_layer else base)
            for i in range(cfg.n_layer)]


def _configs():
    llama = config_from_dict(llama_config(n_layer=4))
    return {
        "llama": llama,
        "no layer types": dataclasses.replace(llama, layer_types=()),
        "local layers": dataclasses.replace(llama, layer_types=(LOCAL, GLOBAL, LOCAL, GLOBAL),
                                            sliding_window=3, rope_local=Rope(50.0)),
        "local layers, one RoPE": dataclasses.replace(llama, layer_types=(GLOBAL, LOCAL, GLOBAL, GLOBAL),
                                                      sliding_window=2),
        "scale by layer": dataclasses.replace(llama, attn_scale_by_layer=True),
        "gemma3": read_config(FIXTURES / "gemma3"),
    }


@pytest.mark.parametrize("name", list(_configs()))
def test_each_layers_kind_is_the_configs_and_layers_alike_share_one_consts(name):
    cfg = _configs()[name]
    assert list(_kinds(cfg)) == _per_layer(cfg)
    assert _kinds(cfg) is _kinds(cfg)  # kept for the config
    for T, p in ((9, 8), (9, 0), (9, 5)):
        consts = _layer_consts(cfg, T, p)
        assert len(consts) == cfg.n_layer
        for c, (window, rope, scale) in zip(consts, _per_layer(cfg)):
            assert c.window == window and c.scale == scale
            seen = causal_mask(T, window, start=p)
            assert c.bias is None if seen.all() else np.array_equal(c.bias, mask_bias(seen))
            want = rope_mod.rope_tables(np.arange(p, T), cfg.d_head, rope)
            for got, table in zip(c.rope, want):
                np.testing.assert_array_equal(got, table)
        kinds = {k: [c for c, kk in zip(consts, _per_layer(cfg)) if kk == k] for k in _per_layer(cfg)}
        for alike in kinds.values():  # one Consts a kind, a different one for each other kind
            assert all(c is alike[0] for c in alike)
        assert len({id(c) for c in consts}) == len(kinds)


def test_a_configs_kept_kinds_are_its_own():
    cfg = config_from_dict(llama_config(n_layer=3))
    scaled = dataclasses.replace(cfg, attn_scale_by_layer=True)
    local = dataclasses.replace(cfg, layer_types=(GLOBAL, LOCAL, GLOBAL), sliding_window=2)
    assert _kinds(cfg) is _kinds(cfg)
    assert [k[2] for k in _kinds(scaled)] == [k[2] for k in _per_layer(scaled)] != [k[2] for k in _kinds(cfg)]
    assert [k[0] for k in _kinds(local)] == [None, 2, None]
    assert all(k[0] is None for k in _kinds(cfg))


@pytest.mark.parametrize("T, window, p", [(1, None, 0), (7, None, 6), (7, None, 5), (7, 3, 6),
                                          (7, 3, 0), (7, None, 0), (7, 7, 6)])
def test_the_last_rows_mask_equals_the_one_built_from_the_causal_mask(T, window, p):
    """The rows' mask as the causal mask makes it, or none where every row sees every key (a last
    row with no window cutting it off: the one-row scores then take their unmasked path)."""
    cfg = config_from_dict(llama_config(n_layer=1))
    if window is not None:
        cfg = dataclasses.replace(cfg, layer_types=(LOCAL,), sliding_window=window)
    got, seen = _layer_consts(cfg, T, p)[0].bias, causal_mask(T, window, start=p)
    assert (got is None) == (p == T - 1 and (window is None or T <= window)) == seen.all()
    if got is None:
        return
    want = mask_bias(seen)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_ropes_kept_frequencies_are_its_own_and_read_only():
    for rope in (Rope(1000.0), Rope(1000.0, "linear", 4.0), Rope(10000.0, "llama3", 8.0, 1.0, 4.0, 16)):
        kept = rope_mod._kept_inv_freq(rope, 16)
        assert not kept.flags.writeable
        np.testing.assert_array_equal(kept, rope_mod.inv_freq(rope, 16))
        assert rope_mod._kept_inv_freq(dataclasses.replace(rope), 16) is kept  # an equal Rope: the same
    a, b = rope_mod._kept_inv_freq(Rope(1000.0), 16), rope_mod._kept_inv_freq(Rope(2000.0), 16)
    assert not np.array_equal(a, b)  # another base: its own
    assert len(rope_mod._kept_inv_freq(Rope(1000.0), 32)) == 16  # another d_head: its own
    pos = np.arange(3, 11)
    cos, sin = rope_mod.rope_tables(pos, 16, Rope(1000.0))
    angles = np.outer(pos.astype(np.float64), rope_mod.inv_freq(Rope(1000.0), 16)).astype(np.float32)
    np.testing.assert_array_equal(cos, np.cos(np.concatenate([angles, angles], axis=-1)))
    np.testing.assert_array_equal(sin, np.sin(np.concatenate([angles, angles], axis=-1)))


@pytest.mark.parametrize("rope", [Rope(1000.0), Rope(10000.0, "linear", 4.0),
                                  Rope(10000.0, "llama3", 8.0, 1.0, 4.0, 16),
                                  Rope(10000.0, "yarn", 4.0, original_max_positions=32,
                                       attention_factor=1.1386)], ids=lambda r: r.kind)
def test_one_positions_rope_row_is_the_tables_bit_for_bit(rope):
    d_head = 16
    for p in (0, 1, rope_mod.ANGLE_ROWS - 1, rope_mod.ANGLE_ROWS, 5 * rope_mod.ANGLE_ROWS + 17, 8191, 100_000):
        got, want = rope_mod.rope_row(p, d_head, rope), rope_mod.rope_tables(np.arange(p, p + 1), d_head, rope)
        for g, w in zip(got, want):
            assert g.shape == w.shape == (1, d_head) and g.dtype == w.dtype == np.float32
            np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
    block = rope_mod._angle_block(rope, d_head, 0)
    assert not block.flags.writeable
    other = rope_mod._angle_block(dataclasses.replace(rope, theta=rope.theta * 2), d_head, 0)
    assert not np.array_equal(block[1:], other[1:])  # another base: its own block


def test_a_steps_consts_equal_those_of_a_run_of_its_rows():
    cfg = config_from_dict(llama_config(n_layer=2))
    for p in (0, 63, 64, 200):
        step = _layer_consts(cfg, p + 1, p)[0]
        run = _layer_consts(cfg, p + 1, p, positions=np.arange(p, p + 1))[0]  # rope_tables' way
        for a, b in zip(step.rope, run.rope):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("cached, ids, want", [
    ([1, 2, 3], [1, 2, 3, 4], 3), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2),
    ([1, 2, 3], [1, 9, 3, 4], 1), ([1, 2, 3], [9], 0), ([], [1, 2], 0), ([5, 6], [5, 6, 7, 8], 2),
    ([1, 2, 3, 4], [1, 2, 3, 9], 3),
])
def test_the_caches_common_prefix(cached, ids, want):
    cache = KVCache(ids=np.array(cached, np.int64))
    assert cache.prefix(np.array(ids, np.int64)) == want


def _stable_top(x, k):
    return np.argsort(-x, kind="stable")[:min(k, len(x))]


@pytest.mark.parametrize("V", [3, 50, 4 * TOP_BLOCKS + 1, 1000, 49152])
@pytest.mark.parametrize("k", [1, 5, TOP_BLOCKS, TOP_BLOCKS + 3])
def test_a_steps_top_tokens_are_the_largest_the_lowest_id_first_among_equals(V, k):
    rng = np.random.default_rng(V * 100 + k)
    x = rng.standard_normal(V)
    cases = {"distinct": x, "ties": np.round(x, 1), "all equal": np.full(V, -2.5),
             "masked": np.where(rng.random(V) < 0.7, -np.inf, x)}
    nan = x.copy()
    nan[rng.integers(0, V, 2)] = np.nan
    cases["NaN"] = nan
    ties_last = np.full(V, -9.0)
    ties_last[V // 2:] = 1.0  # the k largest tied, in the vocabulary's second half
    cases["ties late"] = ties_last
    for name, values in cases.items():
        got = top_ids(values, k)
        assert np.array_equal(got, _stable_top(values, k)), name
    top = top_ids(cases["ties"], k)
    assert top[0] == int(np.argmax(cases["ties"]))  # the greedy token heads the list


@pytest.mark.parametrize("V", [3, 1000, 49152])
def test_no_top_tokens_asked_gives_none(V):
    got = top_ids(np.random.default_rng(V).standard_normal(V), 0)
    assert got.shape == (0,) and got.dtype == np.int64


def test_a_one_row_runs_kept_consts_are_its_positions_own_on_alternating_configs():
    from attnviz.engine.computing import families

    configs = list(_configs().values())
    positions = (0, 1, 63, 64, 65, 130, 400, 1000, 2000, 5000, 1, 64)  # (more blocks than are kept)
    for p in positions:
        for cfg in configs:
            got, want = families.layer_consts(cfg, p + 1, p), _layer_consts(cfg, p + 1, p)
            assert len(got) == len(want) == cfg.n_layer
            assert len({id(c) for c in got}) == len({id(c) for c in want})  # layers alike share one
            for c, w in zip(got, want, strict=True):
                assert (c.n_head, c.n_kv_head, c.d_head, c.scale, c.window, c.causal, c.workers) == (
                    w.n_head, w.n_kv_head, w.d_head, w.scale, w.window, w.causal, w.workers)
                assert (c.bias is None) == (w.bias is None)
                if c.bias is not None:
                    np.testing.assert_array_equal(c.bias, w.bias)
                for a, b in zip(c.rope, w.rope, strict=True):
                    assert a.shape == b.shape == (1, cfg.d_head) and not a.flags.writeable
                    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_block_of_one_row_consts_used_between_four_others_stays_kept():
    """layer_consts keeps a run of one row's Consts per block of ANGLE_ROWS positions, the least
    recently used let go first: a block asked again between each of four other blocks (five
    blocks, four kept) is the one made first each time (first in, first out let it go)."""
    from attnviz.engine.computing import families

    cfg = config_from_dict(llama_config(n_layer=2))
    at = [k * rope_mod.ANGLE_ROWS + 1 for k in range(5)]  # a position in each of five blocks
    first = {}
    hot = families.layer_consts(cfg, at[0] + 1, at[0])
    for k in range(1, 5):
        first[k] = families.layer_consts(cfg, at[k] + 1, at[k])
        assert families.layer_consts(cfg, at[0] + 1, at[0])[0] is hot[0]
    assert families.layer_consts(cfg, at[2] + 1, at[2])[0] is first[2][0]  # (four kept)
    assert families.layer_consts(cfg, at[1] + 1, at[1])[0] is not first[1][0]  # (the least recent went)


def test_a_config_with_a_window_takes_no_kept_blocks_place():
    """A config with a windowed layer has no one-row Consts kept by block (its mask depends on T):
    its steps at many positions leave another config's kept block in place."""
    from attnviz.engine.computing import families

    cfg = config_from_dict(llama_config(n_layer=2))
    local = _configs()["local layers"]
    kept = families.layer_consts(cfg, 11, 10)
    for p in range(0, 6 * rope_mod.ANGLE_ROWS, rope_mod.ANGLE_ROWS // 2):
        got, want = families.layer_consts(local, p + 1, p), _layer_consts(local, p + 1, p)
        assert [c.window for c in got] == [c.window for c in want]
        assert [c.bias is None for c in got] == [c.bias is None for c in want]
    assert families.layer_consts(cfg, 11, 10)[0] is kept[0]
