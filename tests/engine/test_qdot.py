"""The kernels' inner loop (engine/computing/qdot.py): the nibble kernels' rewritten x (l x'_j + b
x''_j for l x_j + h x_{j+16}), both ways of decoding a low nibble (a table lookup on AVX-512, a
mask and a conversion elsewhere) giving the same bits, a group's sum starting from zero for every
row of x, and the serial and parallel kernels the same bits, on blocks whose every position holds
another value (a swapped half or nibble shows)."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading.qpack import LANES, pack
from kernel_checks import (check_rows_restart_and_threads_agree, check_wide_range_and_nan, check_within_rel,
                           climbing_blocks)

numba = pytest.importorskip("numba")
from attnviz.engine.computing import qdot  # noqa: E402  (needs numba)

def test_nibble_x_rewrites_each_pair_and_sums_each_sub_block():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    xt, xs = qdot.nibble_x(x, 2)
    pairs = x.reshape(3, 2, 2, 16)
    np.testing.assert_array_equal(xt.reshape(3, 2, 2, 16)[:, :, 1], pairs[:, :, 1] / np.float32(16))
    np.testing.assert_array_equal(xt.reshape(3, 2, 2, 16)[:, :, 0],
                                  pairs[:, :, 0] - pairs[:, :, 1] / np.float32(16))
    np.testing.assert_allclose(xs, x.reshape(3, 2, 32).sum(-1), rtol=1e-6)
    # a byte b = l + 16 h: l x'_j + b x''_j is l x_j + h x_{j+16}, to rounding
    l, h = rng.integers(0, 16, 16), rng.integers(0, 16, 16)
    got = (l * xt[0, :16] + (l + 16 * h) * xt[0, 16:32]).sum()
    np.testing.assert_allclose(got, (l * x[0, :16] + h * x[0, 16:32]).sum(), rtol=1e-5)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0], ids=lambda q: q.name)
def test_both_ways_of_decoding_low_nibbles_give_the_same_bits(qtype, monkeypatch):
    """The kernel compiled with the table lookup where this CPU has AVX-512, and again with the
    mask and conversion (as on a CPU without it), on the same blocks: the same bits, and both
    equal the dequantised matmul."""
    rng = np.random.default_rng(int(qtype))
    raw = climbing_blocks(qtype, 48, 96, rng)
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    p = pack(raw, qtype)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    kind = "nib8" if p.signed else "nib"
    ways = {}
    for permute in {qdot.PERMUTE, False}:
        monkeypatch.setattr(qdot, "PERMUTE", permute)
        rows = qdot._rows_intrinsic(kind)  # compiled below, with this way

        @numba.njit
        def kernel(q, scale, offset, x, y):
            n_sub = q.shape[1]
            xt, xs = qdot.nibble_x(x, n_sub)
            for g in range(q.shape[0]):
                for i in range(x.shape[0]):
                    rows(q, g * n_sub * 16 * LANES, scale, offset, g * n_sub * LANES, xt, i * n_sub * 32,
                         xs, i * n_sub, n_sub, y, i * y.shape[1] + g * LANES)
        y = np.empty((3, 48), np.float32)
        kernel(*p.args, x, y)
        check_within_rel(y, x, w)
        ways[permute] = y
    for y in ways.values():
        np.testing.assert_array_equal(y, ways[False])
    y = qm.qmatvec(p, x)
    if qdot.VNNI or qdot.MADD:  # (qmatvec's nibble kernels there take x as int8 pieces: bits of their own)
        check_within_rel(y, x, w)
    else:
        np.testing.assert_array_equal(ways[False], y)


def test_pieces_of_x_add_up_to_x_within_half_the_unit():
    """pieces_x: per sub-block, PIECES int8 pieces, the balanced base-256 digits of an integer N_j
    with (65536 p_0 + 256 p_1 + p_2) u within u / 2 of each x, the unit u the power of 2 that puts
    the sub-block's largest |x| within TOP u (a sub-block of an outlier 1000 times the rest, and
    of 1e-30 and 1e30, included); a sub-block of zeros is all zero pieces, one with an inf or a
    nan gets unit nan."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 192)).astype(np.float32)
    x[0, 40] = 1000.0
    x[0, 128:160] *= np.float32(1e-30)
    x[0, 160:192] *= np.float32(1e30)
    x[1, 64:96] = 0.0
    x[1, 100] = np.inf
    x[0, 127] = np.nan
    (xp, cs), xs = qdot.pieces_x(x, 6)
    assert qdot.PIECES == 3
    xp, u = xp.reshape(2, 6, 3, 32).astype(np.float64), cs.astype(np.float64)
    assert np.all((xp >= -128) & (xp <= 127))
    finite = np.isfinite(u)
    assert finite.tolist() == [[True, True, True, False, True, True], [True, True, True, False, True, True]]
    n = (xp * np.array([65536.0, 256.0, 1.0])[:, None]).sum(2)[finite]  # N_j, exact in float64
    xb = x.reshape(2, 6, 32).astype(np.float64)[finite]
    unit = u[finite][:, None]
    assert np.all(np.abs(n * unit - xb) <= unit / 2)
    top = np.abs(xb).max(-1)
    some = top > 0
    assert np.all(np.frexp(u[finite])[0] == 0.5)
    assert np.all(u[finite][some] * qdot.TOP >= top[some])
    assert np.all(u[finite][some] * qdot.TOP <= top[some] * 2)
    assert np.all(xp[1, 2] == 0)
    np.testing.assert_allclose(xs, x.reshape(2, 6, 32).sum(-1), rtol=1e-6)


def test_pieces_of_x_are_the_balanced_digits_of_x_rounded_to_its_unit():
    """pieces_x's pieces are exactly the balanced base-256 digits of N_j = rint(x_j / u) (ties to
    even), as integer arithmetic gives them, for x at the ends of the range (+-TOP u), on ties
    (x_j = (k + 1/2) u), subnormal, -0 and over many magnitudes; its sums and units as before."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 320)) * 10.0 ** rng.uniform(-44, 37, (3, 320))).astype(np.float32)
    ends = rng.integers(-qdot.TOP, qdot.TOP + 1, 32).astype(np.float64)
    x[1, :32] = ends * 2.0 ** -149  # (unit 2^-148 where the largest is TOP 2^-149: halves, ties)
    ends[:2] = qdot.TOP - 0.5, 0.5 - qdot.TOP  # the largest |x| a unit of 2^power holds
    for s, power in enumerate((-140, -20, 0, 60), 1):
        x[1, 32 * s:32 * s + 32] = ends * 2.0 ** power  # (exact in float32)
    x[2, :32] = (np.arange(32) - 16 + 0.5) * np.float32(2.0 ** -130)  # ties, below float32's normals
    x[2, :2] = [qdot.TOP * 2.0 ** -131, -0.0]
    x[2, 40] = np.float32(1e-45)
    (xp, cs), xs = qdot.pieces_x(x, 10)
    u = cs.astype(np.float64)[..., None]  # [3, 10, 1]
    assert np.all(np.isfinite(u))
    assert np.all(u[1, 1:5, 0] == 2.0 ** np.array([-140, -20, 0, 60]))
    n = np.rint(x.reshape(3, 10, 32).astype(np.float64) / u).astype(np.int64)  # N_j
    digits = []
    for _ in range(qdot.PIECES):
        d = ((n + 128) & 255) - 128
        digits.insert(0, d)
        n = (n - d) >> 8
    assert np.all(n == 0)
    np.testing.assert_array_equal(xp.reshape(3, 10, 3, 32), np.stack(digits, 2))
    np.testing.assert_array_equal(xs, qdot.sums(x, 10, 32))


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0], ids=lambda q: q.name)
def test_nibble_kernels_hold_x_of_wide_range(qtype):
    """The nibble kernels (integer sums of x's digits where the CPU has VNNI or AVX2, else float32) on x whose sub-blocks
    each hold an outlier 1000 times the rest, and on x of 1e-30 and 1e30: within REL; a nan in x
    gives nan outputs."""
    rng = np.random.default_rng(20 + int(qtype))
    check_wide_range_and_nan(climbing_blocks(qtype, 48, 256, rng), qtype, rng)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0, Q.Q8_0, Q.Q5_1], ids=lambda q: q.name)
def test_every_row_of_x_starts_from_zero_and_threads_give_the_same_bits(qtype, kernels_on_every_core):
    """Rows of x that are the same vector give the same y (a group's running sum restarts for each
    row), and the parallel kernel equals its serial twin bit for bit."""
    rng = np.random.default_rng(10 + int(qtype))
    check_rows_restart_and_threads_agree(climbing_blocks(qtype, 64, 128, rng), qtype, rng)
