"""The one-row steps' sums (a query row against each key, softmax's denominator) are taken in one
order wherever they are compiled (engine/computing/rowmath.py: 16 vector lanes, term j on lane
j % 16, one fixed tree, the tail after). With fastmath's reassoc the compiler chose the order, and
the attention of a first run, while numba compiled the steps, differed in its last bits from every
later run's, which loaded them from numba's cache."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lanes_sum(terms: np.ndarray) -> np.float32:
    """rowmath's order in NumPy float32: lanes summed chunk by chunk, halves added, tail after."""
    n16 = len(terms) // 16
    acc = np.zeros(16, np.float32)
    for c in range(n16):
        acc = acc + terms[16 * c:16 * c + 16]
    while len(acc) > 1:
        acc = acc[:len(acc) // 2] + acc[len(acc) // 2:]
    total = acc[0]
    for t in terms[16 * n16:]:
        total = np.float32(total + t)
    return total


@pytest.mark.parametrize("d", [64, 72, 7])
def test_scores_and_softmax_sums_take_the_lanes_order(d):
    from attnviz.engine.computing import rowmath as R

    rng = np.random.default_rng(d)
    n_head, n_kv, T = 4, 2, 21
    q = rng.standard_normal((n_head, 1, d)).astype(np.float32)
    k = rng.standard_normal((n_kv, T, d)).astype(np.float32)
    scale = np.float32(0.125)
    out = np.empty((n_head, 1, T), np.float32)
    R.scores_of(q, k, T, R.NO_BIAS, scale, 2, False, out)
    for h in range(n_head):
        for t in range(T):
            assert out[h, 0, t] == _lanes_sum((q[h, 0] * scale) * k[h // 2, t]), (h, t)
    fetched = np.empty_like(out)  # (the values fetched beside the keys: the same scores)
    R.scores_ahead_of(q, k, T, R.NO_BIAS, scale, 2, False, fetched, rng.standard_normal((n_kv, T + 3, d)).astype(np.float32))
    assert np.array_equal(fetched, out)
    e = rng.random(T * 3).astype(np.float32)
    assert R.lane_sum(e) == _lanes_sum(e)


@pytest.mark.parametrize("T", [1, 15, 16, 37, 512])
def test_each_pattern_row_less_its_max_is_numpys(T):
    """minus_max_of: each row of scores less its own max, wherever the max lies (on a vector lane,
    in the tail past them) and with masked (-inf) keys, for rows apart in memory or side by side."""
    from attnviz.engine.computing import rowmath as R

    rng = np.random.default_rng(T)
    s = rng.standard_normal((5, 1, T)).astype(np.float32)
    s[1, 0, -1] = 9.0  # (the last key: the tail's where T is no multiple of 16)
    s[2, 0, T // 2] = 9.0
    s[3, 0, T // 3 + 1:] = -np.inf  # (masked keys)
    want = s - s.max(axis=2, keepdims=True)
    for rows in (s.copy(), np.pad(s, ((0, 0), (1, 1), (0, 3)))[:, 1:2, :T]):
        R.minus_max_of(rows)
        assert np.array_equal(rows, want)


@pytest.mark.parametrize("d", [64, 72, 7, 80, 16, 48])
@pytest.mark.parametrize("n_group", [3, 4, 2, 1])
def test_weighted_values_sum_each_output_over_positions_in_order(d, n_group):
    """z[h, 0, j] = (..((0 + a_0 v_0j) + a_1 v_1j) ..) + a_{T-1} v_{T-1,j} in float32, each product
    rounded before its sum (no fused multiply-add), for values of either layout: the bits a plain
    loop over positions gives, whether or not the lanes run as vectors."""
    from attnviz.engine.computing import rowmath as R

    rng = np.random.default_rng(d)
    n_kv, T = 2, 23
    n_head = n_kv * n_group
    pattern = rng.random((n_head, 1, T)).astype(np.float32)
    v = rng.standard_normal((n_kv, T + 5, d)).astype(np.float32)
    for values in (v[:, :T], np.ascontiguousarray(v[:, :T]), v[:, :T, ::-1]):
        z = np.empty((n_head, 1, d), np.float32)
        R.weighted_of(pattern, values, n_group, z)
        for h in range(n_head):
            want = np.zeros(d, np.float32)
            for t in range(T):
                want = want + pattern[h, 0, t] * values[h // n_group, t]
            assert np.array_equal(z[h, 0], want), h


def test_silu_and_rms_norm_take_numpys_elementwise_steps_for_inputs_of_either_layout():
    """SiLU: x / (exp(-x) + 1) element by element (exp: exp_into's); RMSNorm: x / ms * gain with ms
    from the squares summed in float64 on 8 lanes (square j on lane j % 8, one tree, the tail
    after): the same bits for a slice of a wider row or a
    strided gain as for contiguous copies (their divisions on vector lanes or not)."""
    from attnviz.engine.computing import rowmath as R

    rng = np.random.default_rng(5)
    wide = (rng.standard_normal((1, 2 * 1541)) * 6).astype(np.float32)
    x = wide[:, :1541]  # (a gate: the first half of gate | up)
    e = np.negative(x[0])
    R.exp_into(e, e)
    want = x[0] / (e + np.float32(1.0))
    for given in (x, np.ascontiguousarray(x)):
        out = np.empty((1, 1541), np.float32)
        R.silu_of(given, out)
        assert np.array_equal(out[0], want)
    xs = rng.standard_normal((2, 577)).astype(np.float32)
    gains = rng.standard_normal(2 * 577).astype(np.float32)
    eps = np.float32(1e-5)
    for gain in (gains[::2], np.ascontiguousarray(gains[::2])):
        out = np.empty_like(xs)
        R.rms_norm_of(xs, gain, eps, out)
        for i in range(2):
            lanes = [0.0] * 8  # (square j on lane j % 8, the lanes in one tree, the tail after)
            for j, v in enumerate(xs[i][:576]):
                lanes[j % 8] += float(v * v)
            t = lanes
            total = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]))
            for v in xs[i][576:]:
                total += float(v * v)
            ms = np.float32(np.sqrt(np.float32(total) / np.float32(577) + eps))
            assert np.array_equal(out[i], xs[i] / ms * gains[::2])


def test_swiglu_is_silu_then_the_product_with_up_bit_for_bit():
    """swiglu_of (a step's SiLU(gate) up in one pass) gives the bits of silu_of, then a float32
    product with up, element by element."""
    from attnviz.engine.computing import rowmath as R

    rng = np.random.default_rng(7)
    d_ff = 1541
    hidden = (rng.standard_normal(2 * d_ff + 3) * 6).astype(np.float32)
    want = np.empty((1, d_ff), np.float32)
    R.silu_of(hidden[None, :d_ff], want)
    want = want[0] * hidden[d_ff:2 * d_ff]
    h = np.full(d_ff + 5, np.nan, np.float32)
    R.swiglu_of(hidden, d_ff, h, np.empty(d_ff + 5, np.float32), np.empty(d_ff + 5, np.int32))
    assert np.array_equal(h[:d_ff], want)
    assert np.isnan(h[d_ff:]).all()  # (nothing written past d_ff)


def outputs() -> dict:
    """The one-row steps on fixed arrays: attention over keys that are the first positions of a
    cache with room (read as such) and over a copy of them, d_head 256 and 72 (a tail past 16)."""
    from attnviz.engine.computing import onerow as O

    rng = np.random.default_rng(0)
    out = {}
    for d, n_head, n_group in ((256, 4, 4), (72, 6, 3)):
        q = rng.standard_normal((n_head, 1, d)).astype(np.float32)
        whole_k, whole_v = (rng.standard_normal((n_head // n_group, 24, d)).astype(np.float32) for _ in "kv")
        k, v = whole_k[:, :19], whole_v[:, :19]
        consts = type("Consts", (), {"bias": None, "scale": 1 / np.sqrt(d), "n_group": n_group})
        out[f"cached {d}"] = O.dense_attention(q, k, v, consts)
        out[f"copied {d}"] = O.dense_attention(q, k.copy(), v.copy(), consts)
    return out


def test_a_first_run_while_numba_compiles_gives_the_bits_of_later_runs(tmp_path):
    """The same steps in a fresh process with an empty NUMBA_CACHE_DIR (compiled there), then in a
    second one (loaded from the cache it wrote): the same bits, and the cached-keys path's the
    copy's."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": str(ROOT)}
    runs = []
    for i in range(2):
        path = tmp_path / f"run{i}.npz"
        subprocess.run([sys.executable, __file__, str(path)], env=env, check=True, timeout=600,
                       capture_output=True, text=True)
        if i == 0:
            assert list((tmp_path / "numba").rglob("onerow._scores*.nbi"))  # (the second loads)
        with np.load(path) as f:
            runs.append({key: f[key] for key in f.files})
    cold, warm = runs
    assert cold.keys() == warm.keys()
    for key in cold:
        assert np.array_equal(cold[key], warm[key]), key
    for d in (256, 72):
        assert np.array_equal(cold[f"cached {d}"], cold[f"copied {d}"])


if __name__ == "__main__":  # (the subprocesses above)
    np.savez(sys.argv[1], **outputs())
