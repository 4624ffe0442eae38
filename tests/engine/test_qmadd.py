"""The 4-bit kernels' integer sums where the CPU has AVX2 and not AVX512-VNNI
(engine/computing/qmadd.py): chosen there, x's table of digit pairs laid out as the kernels read
it, the outputs the bits of the documented combination of exact integer sums (the VNNI kernels'),
and the int16 sums exact at the largest digits (no saturation, no wrap)."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading.qpack import pack
from kernel_checks import check_within_rel, climbing_blocks

numba = pytest.importorskip("numba")
from attnviz.engine.computing import qdot, qmadd, qx  # noqa: E402  (needs numba)

needs_madd = pytest.mark.skipif(not qmadd.MADD, reason="the vpmaddubsw kernels need AVX2 (and no AVX-512)")


def _host_avx2() -> bool:  # numba compiles for this host's features, and they include AVX2
    from llvmlite import binding as llvm
    return (not numba.config.CPU_NAME and not numba.config.CPU_FEATURES and numba.config.ENABLE_AVX
            and bool(llvm.get_host_cpu_features().get("avx2", False)))


def test_the_integer_kernels_are_chosen_where_avx2_is_and_avx512_is_not():
    assert qmadd.MADD == (_host_avx2() and not qdot.VNNI and not qdot.PERMUTE)
    p = pack(climbing_blocks(Q.Q4_1, 16, 32, np.random.default_rng(0)), Q.Q4_1)
    assert (qm._kernel_of(p) is qmadd.k_nib) and (qm.SERIAL[qmadd.k_nib] is qmadd.s_nib)
    assert (qmadd.k_nib is qdot.k_nib) == (not qmadd.MADD)


@needs_madd
def test_the_table_of_x_holds_each_digit_pair_where_the_kernels_read_it():
    """Per sub-block, digit i and even byte j: (p_ij, p_i,j+16) 8 times, then (p_i,j+1, p_i,j+17)
    8 times; the units and sums as pieces_x gives them."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 96)).astype(np.float32)
    x[1, 40] = 1000.0
    (xt, cs), xs = qmadd.madd_x(x, 3)
    (xp, want_cs), want_xs = qx.pieces_x(x, 3)
    np.testing.assert_array_equal(cs, want_cs)
    np.testing.assert_array_equal(xs, want_xs)
    assert xt.shape == (2, 3 * qmadd.TABLE)
    table = xt.reshape(2, 3, qx.PIECES, 8, 2, 8, 2)  # [m, s, i, j // 2, j % 2, copy, pair]
    digits = xp.reshape(2, 3, qx.PIECES, 2, 8, 2)  # [m, s, i, j >= 16, j % 16 // 2, j % 2]
    for k in range(8):
        for h in range(2):
            for copy in range(8):
                np.testing.assert_array_equal(table[:, :, :, k, h, copy, 0], digits[:, :, :, 0, k, h])
                np.testing.assert_array_equal(table[:, :, :, k, h, copy, 1], digits[:, :, :, 1, k, h])


def _f32(v):
    return np.asarray(v, np.float64).astype(np.float32)


def _combined(p, x) -> np.ndarray:
    """y [m, n_out] as the integer kernels compute it (qdot's docstring), in float64 and exact
    integers: S_i = sum_j q_j p_ij, t = u (256 (256 S_0 + S_1) + S_2) each step rounded to float32
    once (a fused multiply-add once), then the sub-blocks' scale t + offset xs in order."""
    n_sub = p.q.shape[1]
    (xp, cs), xs = qx.pieces_x(x, n_sub)
    q = p.q.astype(np.int64)  # [G, n_sub, 16 bytes, 16 rows]
    weights = np.concatenate([q & 15, q >> 4], axis=2)  # [G, n_sub, 32 inputs, 16 rows]
    digits = xp.reshape(x.shape[0], n_sub, qx.PIECES, 32).astype(np.int64)
    s = np.einsum("gsjr,msij->imgsr", weights, digits)  # exact
    top = _f32(256 * s[0] + s[1]).astype(np.float64)  # (exact: below 2^24)
    t = _f32(top * 256 + s[2])  # one rounding: the fused multiply-add
    t = t * cs[:, None, :, None]  # float32 product
    xs64 = xs.astype(np.float64)[:, None, :, None]
    if p.signed:
        t = _f32(-8 * xs64 + t)
    scale = p.scale.astype(np.float64)
    offset = None if p.offset is None else p.offset.astype(np.float64)
    total = np.zeros(t.shape[:2] + (16,), np.float32)
    for b in range(n_sub):
        total = _f32(scale[None, :, b] * t[:, :, b] + total)
        if offset is not None:
            total = _f32(offset[None, :, b] * xs64[:, :, b] + total)
    return total.reshape(x.shape[0], -1)[:, :p.n_out]


@needs_madd
@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0], ids=lambda q: q.name)
def test_the_outputs_are_the_bits_of_the_exact_integer_sums_combined(qtype, kernels_on_every_core):
    """On blocks whose every position differs, x with an outlier: the parallel and serial kernels
    equal _combined bit for bit (the integer sums exact, combined as on VNNI), within REL of the
    dequantised product."""
    rng = np.random.default_rng(30 + int(qtype))
    raw = climbing_blocks(qtype, 48, 256, rng)
    p = pack(raw, qtype)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    x[0, 70] = 1000.0
    want = _combined(p, x)
    y = np.empty((3, 48), np.float32)
    qmadd.SERIAL[qm._kernel_of(p)](*p.args, x, y)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(qm.qmatvec(p, x), want)
    check_within_rel(y, x, gguf.quants.dequantize(raw, qtype).astype(np.float32))


def _all_fifteen(qtype, n_out: int, n_in: int) -> np.ndarray:
    """Blocks of every nibble 15 but input 0's (0), scale 1 (offset 0): Q4_1 (d, m, 16 bytes) or
    Q4_0 (d, 16 bytes)."""
    head = 4 if qtype == Q.Q4_1 else 2
    raw = np.full((n_out, n_in // 32, head + 16), 0xFF, np.uint8)
    raw[..., :head] = 0
    raw[..., head] = 0xF0
    raw[..., :2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    return raw.reshape(n_out, -1)


@needs_madd
@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0], ids=lambda q: q.name)
def test_the_largest_digits_sum_exactly_in_int16(qtype):
    """q = 15 everywhere against x whose first input of a sub-block is TOP - 1 (its unit then 1)
    and every other one 32639 (digits 0, 127, 127), -32896 (0, -128, -128) or +-127 65536
    (+-127, 0, 0): each row's int16 sum of a sub-block's odd bytes (16 inputs) reaches 30480 and
    -30720, the most vpmaddubsw's products can; the outputs are the exact sums' (no saturation,
    no wrap; input 0's q is 0, so the first two rows' t_s = 256 S_1 + S_2 are exact floats)."""
    raw = _all_fifteen(qtype, 32, 64)
    p = pack(raw, qtype)
    x = np.array([[32639.0], [-32896.0], [127 * 65536.0]], np.float32).repeat(64, 1)
    x[2, 32:] = -x[2, 32:]
    x[:, ::32] = qx.TOP - 1
    (xp, cs), _ = qx.pieces_x(x, 2)
    digits = xp.reshape(3, 2, qx.PIECES, 32)[..., 1:]
    assert (cs == 1).all()
    assert (digits[0, :, 1:] == 127).all() and (digits[1, :, 1:] == -128).all()
    assert (digits[2, 0, 0] == 127).all() and (digits[2, 1, 0] == -127).all()
    y = np.empty((3, 32), np.float32)
    qmadd.SERIAL[qm._kernel_of(p)](*p.args, x, y)
    np.testing.assert_array_equal(y, _combined(p, x))
    check_within_rel(y, x, gguf.quants.dequantize(raw, qtype).astype(np.float32))
