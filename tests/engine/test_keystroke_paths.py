"""What a keystroke's engine run reuses or shares out: layer_consts kept for runs of a few rows
(equal to the ones built anew), the quantised kernels' thread count (a large matrix takes every
core even where the kernels are capped, with the same result bit for bit), and the finiteness check
of the pattern rows the run computed only (the cached ones were checked when computed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attnviz.engine import parallel
from attnviz.engine.computing import families
from attnviz.engine.computing.families import _layer_consts, layer_consts
from attnviz.engine.reading.config import config_from_dict
from tiny import llama_config, tiny_llama


def _same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "norm":  # a closure built per call: compare what it computes
            v = np.random.default_rng(0).standard_normal((2, 32)).astype(np.float32)
            g = (np.linspace(0.5, 1.5, 32, dtype=np.float32),)
            np.testing.assert_array_equal(x(v, g), y(v, g))
        elif isinstance(x, tuple) and x and isinstance(x[0], np.ndarray):
            for xa, ya in zip(x, y):
                np.testing.assert_array_equal(xa, ya)
        elif isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            np.testing.assert_array_equal(x, y)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("T, p, masks", [(24, 23, True), (24, 22, True), (9, 8, False), (3, 0, True)])
def test_kept_consts_equal_rebuilt_ones(T, p, masks):
    cfg = config_from_dict(llama_config(n_layer=3))
    first = layer_consts(cfg, T, p, masks)
    again = layer_consts(cfg, T, p, masks)
    assert again is not first and all(a is b for a, b in zip(first, again))  # kept, a new list
    fresh = _layer_consts(cfg, T, p, masks)
    assert len(again) == len(fresh) == cfg.n_layer
    for a, b in zip(again, fresh):
        _same(a, b)
    assert (first[0].bias is not None) == (masks and T - p > 1)  # (a last row sees every key)
    assert not first[0].rope[0].flags.writeable  # shared: no run may write into them
    if first[0].bias is not None:
        assert not first[0].bias.flags.writeable


def test_a_row_that_sees_every_key_has_no_mask_and_one_a_window_cuts_has_its_own():
    """A one-row run's last row (a keystroke, a generation step) under the causal mask sees every
    key: no mask (the one-row scores' path without one); a local layer's window that cuts it
    off from the first keys masks them, and one that does not cut nothing."""
    from attnviz.engine.reading.config import GLOBAL, LOCAL
    cfg = config_from_dict(llama_config(n_layer=3))
    assert [c.bias for c in layer_consts(cfg, 24, 23)] == [None] * 3
    local = dataclasses.replace(cfg, layer_types=(GLOBAL, LOCAL, GLOBAL), sliding_window=8)
    c = layer_consts(local, 24, 23)
    assert c[0].bias is None and c[2].bias is None
    np.testing.assert_array_equal(c[1].bias, np.where(np.arange(24) >= 16, 0.0, -np.inf)[None])
    assert [c.bias for c in layer_consts(local, 8, 7)] == [None] * 3  # (8 keys: the window holds all)
    two = layer_consts(cfg, 24, 22)[0].bias  # (two rows: the first does not see the last key)
    np.testing.assert_array_equal(two, [[0.0] * 23 + [-np.inf], [0.0] * 24])


def test_consts_are_kept_per_config_rows_and_workers():
    cfg = config_from_dict(llama_config(n_layer=2))
    other = config_from_dict(llama_config(n_layer=2, rope_theta=50.0))
    a = layer_consts(cfg, 10, 9)
    assert layer_consts(other, 10, 9)[0] is not a[0]
    assert not np.array_equal(layer_consts(other, 10, 9)[0].rope[1], a[0].rope[1])
    assert layer_consts(cfg, 10, 8)[0].bias.shape == (2, 10)
    assert layer_consts(cfg, 10, 9, workers=2)[0].workers == 2
    assert layer_consts(cfg, 10, 9)[0].workers == 1
    long = layer_consts(cfg, 40, 0)  # more rows than CONSTS_ROWS: built each time, writable
    assert long[0] is not layer_consts(cfg, 40, 0)[0] and long[0].bias.flags.writeable
    big = families.CONSTS_MASK // 2 + 1  # one row, but a mask too large to keep
    assert layer_consts(cfg, big, big - 2)[0] is not layer_consts(cfg, big, big - 2)[0]
    assert layer_consts(cfg, big, big - 2, masks=False)[0] is layer_consts(cfg, big, big - 2, masks=False)[0]
    for i in range(families.CONSTS_KEPT + 3):  # the oldest go
        layer_consts(cfg, 50 + i, 50 + i - 1)
    assert len(families._CONSTS) <= families.CONSTS_KEPT


def test_kernel_threads_rule(monkeypatch):
    parallel.limit_cores(None)
    monkeypatch.setattr(parallel, "_AFFINITY", 8)  # an 8-core machine
    parallel.limit_kernel_threads(1)
    assert parallel.kernel_threads(parallel.WIDE_KERNEL - 1) == 1  # SmolLM2's [3072, 576]: capped
    assert parallel.kernel_threads(parallel.WIDE_KERNEL) == 7  # a 1B model's: all but one core
    parallel.limit_kernel_threads(1, spare=0)
    assert parallel.kernel_threads(parallel.WIDE_KERNEL) == 8
    parallel.limit_kernel_threads(1, wide=None)
    assert parallel.kernel_threads(10 ** 9) == 1
    parallel.limit_kernel_threads(3, spare=6)  # never under the cap
    assert parallel.kernel_threads(10 ** 9) == 3
    parallel.limit_kernel_threads(None)
    assert parallel.kernel_threads() == 8 and parallel.kernel_threads(10 ** 9) == 8
    monkeypatch.setattr(parallel, "_AFFINITY", 2)  # 2 cores: a wide call stays off the painting one
    parallel.limit_kernel_threads(1)
    assert parallel.kernel_threads(10 ** 9) == 1


def test_a_wide_call_gives_the_capped_result_bit_for_bit(monkeypatch):
    numba = pytest.importorskip("numba")
    from gguf import GGMLQuantizationType as Q

    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.reading.qpack import pack

    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (100, 256 // 32 * 20), dtype=np.uint8)  # Q4_1: 20 bytes a block
    raw.reshape(100, -1, 20)[:, :, :4] = (rng.standard_normal((100, 8, 2)) * 0.01).astype(np.float16).view(np.uint8)
    p = pack(raw, Q.Q4_1)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    qm.warm([Q.Q4_1])  # the kernel and its serial twin
    serial = []  # the one-thread calls: the kernels' serial twins, no parallel region started
    monkeypatch.setattr(qm, "SERIAL", {k: (lambda f: lambda *a: (serial.append(f), f(*a)))(f)
                                       for k, f in qm.SERIAL.items()})
    parallel.limit_kernel_threads(1, wide=None)
    capped = qm.qmatvec(p, x)
    assert len(serial) == 1
    parallel.limit_kernel_threads(1, wide=0, spare=0)  # every matrix counts as wide, every core
    wide = qm.qmatvec(p, x)
    threads = min(parallel.cores(), numba.config.NUMBA_NUM_THREADS)
    assert numba.get_num_threads() == threads and len(serial) == (1 if threads > 1 else 2)
    np.testing.assert_array_equal(wide, capped)  # each group of rows is summed by one thread alike


def test_a_cached_run_checks_the_rows_it_computed(tmp_path, monkeypatch):
    from attnviz.engine.computing import model as model_module
    from attnviz.engine.computing.load import load_model

    model = load_model(tiny_llama(tmp_path / "m"))
    checked = []
    real = model_module.check_finite
    monkeypatch.setattr(model_module, "check_finite",
                        lambda name, rows: (checked.append(rows.shape), real(name, rows)))
    n_layer, n_head = model.config.n_layer, model.config.n_head
    model.run(ids=[1, 2, 3])
    model.run(ids=[1, 2, 3, 4])  # one new row
    model.run(ids=[1, 2, 3, 4])  # every row cached: nothing new to check
    assert checked == [(n_layer, n_head, 3, 3), (n_layer, n_head, 1, 4)]


def _alike(cfg, i, j):  # whether layers i and j have the same window, RoPE and score scale
    return (cfg.window(i) == cfg.window(j) and cfg.rope_of(i) == cfg.rope_of(j)
            and (i == j or not cfg.attn_scale_by_layer))


@pytest.mark.parametrize("kind", ["llama", "local and global", "RoPE by layer", "scale by layer"])
@pytest.mark.parametrize("T, p", [(12, 11), (12, 0)])
def test_layers_alike_share_one_consts_and_each_has_its_own_layers_values(kind, T, p):
    """_layer_consts builds one Consts per (window, RoPE, scale) (a generation step, each at a new
    T, builds them all): each layer's still holds that layer's window, RoPE tables, mask and scale."""
    from attnviz.engine.computing.layers import causal_mask, mask_bias
    from attnviz.engine.computing.rope import rope_tables
    from attnviz.engine.reading.config import GLOBAL, LOCAL
    cfg = config_from_dict(llama_config(n_layer=4))
    if kind == "local and global":
        cfg = dataclasses.replace(cfg, sliding_window=3, layer_types=(LOCAL, LOCAL, GLOBAL, LOCAL),
                                  rope_local=dataclasses.replace(cfg.rope, theta=50.0))
    elif kind == "RoPE by layer":  # (one window: the layers differ in their RoPE alone)
        cfg = dataclasses.replace(cfg, layer_types=(GLOBAL, LOCAL, GLOBAL, LOCAL),
                                  rope_local=dataclasses.replace(cfg.rope, theta=50.0))
    elif kind == "scale by layer":
        cfg = dataclasses.replace(cfg, attn_scale_by_layer=True)
    consts = _layer_consts(cfg, T, p)
    base = 1.0 / np.sqrt(cfg.d_head)
    for i, c in enumerate(consts):
        assert c.window == cfg.window(i)
        assert c.scale == (base / (i + 1) if cfg.attn_scale_by_layer else base)
        seen = causal_mask(T, cfg.window(i), start=p)
        if seen.all():  # (a row that sees every key: no mask)
            assert c.bias is None
        else:
            np.testing.assert_array_equal(c.bias, mask_bias(seen))
        for a, b in zip(c.rope, rope_tables(np.arange(p, T), cfg.d_head, cfg.rope_of(i)), strict=True):
            np.testing.assert_array_equal(a, b)
        for j, other in enumerate(consts):
            assert (other is c) == _alike(cfg, i, j)
    assert len({id(c) for c in consts}) == {"llama": 1, "local and global": 2, "RoPE by layer": 2,
                                               "scale by layer": 4}[kind]
