"""The byte types' kernels (engine/computing/qbytes.py: integer sums where the CPU has VNNI and
VBMI, qdot's float32 kernels elsewhere): x's digit sums as the kernels correct by them, weights at
the ends of int8's range beside x at the ends of its digits' (the int32 sums' bound), x of wide
range, a nan, and the serial and parallel kernels the same bits, on every byte type (Q6_K's
16-input sub-blocks read either half of x's 32-input digits)."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading.qpack import pack
from kernel_checks import (check_rows_restart_and_threads_agree, check_wide_range_and_nan, check_within_rel,
                           climbing_blocks)

pytest.importorskip("numba")
from attnviz.engine.computing import qbytes, qdot, qx  # noqa: E402  (needs numba)

BYTES = [Q.Q8_0, Q.Q5_0, Q.Q5_1, Q.Q5_K, Q.Q6_K]
SCALE_AT = {Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # byte offsets of the K-quants' f16 scales


def _blocks(qtype, n_out, n_in, rng):
    """Weights that climb along the inputs and differ by row (gguf quantises the simple types);
    the K-quants: random bytes with sane float16 scales."""
    if qtype not in SCALE_AT:
        return climbing_blocks(qtype, n_out, n_in, rng)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_out, n_in // block * size), dtype=np.uint8)
    per = raw.reshape(n_out, -1, size)
    for at in SCALE_AT[qtype]:
        per[:, :, at:at + 2] = (rng.standard_normal(per.shape[:2]) * 0.01).astype(np.float16)[..., None].view(np.uint8)
    return raw


def test_the_byte_kernels_are_the_integer_ones_where_the_cpu_has_vnni():
    assert qm._k_b32 is qbytes.k_b32 and qm._k_b16 is qbytes.k_b16
    assert qbytes.VNNI == qdot.VNNI
    assert (qbytes.k_b32 is qdot.k_b32) == (not qdot.VNNI)


@pytest.mark.skipif(not qbytes.VNNI, reason="the integer byte kernels need AVX512-VNNI and VBMI")
@pytest.mark.parametrize("S", [32, 16])
def test_bytes_x_gives_each_sub_blocks_digit_sums_and_sums(S):
    rng = np.random.default_rng(S)
    x = rng.standard_normal((2, 128)).astype(np.float32)
    x[0, 3] = 1000.0
    x[1, 64:96] = 0.0
    n_sub = 128 // S
    (xp, cs, dd), xs = qbytes.bytes_x(x, n_sub, S)
    (want_xp, want_cs), _ = qdot.pieces_x(x, 4)
    np.testing.assert_array_equal(xp, want_xp)
    np.testing.assert_array_equal(cs, want_cs)
    digits = xp.reshape(2, 4, 3, 2, 16).astype(np.int64)  # [m, block, digit, half, 16]
    d = digits.sum(-1) if S == 16 else digits.sum((-1, -2))[..., None]  # [m, block, digit, halves]
    d = d.transpose(0, 1, 3, 2).reshape(2, n_sub, 3)
    np.testing.assert_array_equal(dd.reshape(2, n_sub, 2)[..., 0], 128 * (256 * d[..., 0] + d[..., 1]))
    np.testing.assert_array_equal(dd.reshape(2, n_sub, 2)[..., 1], 128 * d[..., 2])
    np.testing.assert_allclose(xs, x.reshape(2, n_sub, S).sum(-1), rtol=1e-6)


def test_weights_and_digits_at_the_ends_of_their_range_are_summed_exactly():
    """Q8_0 weights of -128 and 127 (the flipped bytes 0 and 255) against x whose every digit is
    at its end: the largest int32 sums the kernel makes, within REL; one-hot rows give each
    weight exactly."""
    n_out, n_in = 32, 64
    rng = np.random.default_rng(7)
    raw = np.zeros((n_out, n_in // 32, 34), np.uint8)
    raw[:, :, :2] = np.float16(0.5).reshape(1, 1, 1).view(np.uint8)
    q = np.where(rng.random((n_out, n_in // 32, 32)) < 0.5, -128, 127).astype(np.int8)
    q[0] = -128
    q[1] = 127
    raw[:, :, 2:] = q.view(np.uint8)
    raw = raw.reshape(n_out, -1)
    w = gguf.quants.dequantize(raw, Q.Q8_0).astype(np.float32)
    # TOP - 1 keeps the unit at 1 (TOP itself doubles it): digits 127, 127, 126; 8,290,176 is
    # 65536 * 127 - 256 * 128 - 128: digits 127, -128, -128
    x = np.full((4, n_in), np.float32(qdot.TOP - 1), np.float32)
    x[1] = -x[1]
    x[2, ::2] = -x[2, ::2]
    x[3] = np.float32(65536 * 127 - 256 * 128 - 128)
    (xp, cs), _ = qx.pieces_x(x, n_in // 32)
    assert (cs == 1).all() and xp.max() == 127 and xp.min() == -128
    y = qm.qmatvec(pack(raw, Q.Q8_0), x)
    check_within_rel(y, x, w)  # (an int32 sum that wrapped would be off by 2^32 units)
    eye = np.eye(n_in, dtype=np.float32)
    np.testing.assert_array_equal(qm.qmatvec(pack(raw, Q.Q8_0), eye), w.T)


@pytest.mark.parametrize("qtype", BYTES, ids=lambda q: q.name)
def test_byte_kernels_hold_x_of_wide_range_and_a_nan(qtype):
    """x whose sub-blocks each hold an outlier 1000 times the rest, and x of 1e-30 and 1e30:
    within REL; a nan in x gives nan outputs."""
    rng = np.random.default_rng(30 + int(qtype))
    check_wide_range_and_nan(_blocks(qtype, 48, 512, rng), qtype, rng)


@pytest.mark.parametrize("qtype", BYTES, ids=lambda q: q.name)
def test_byte_kernels_serial_and_parallel_give_the_same_bits_and_each_row_starts_from_zero(
        qtype, kernels_on_every_core):
    rng = np.random.default_rng(40 + int(qtype))
    check_rows_restart_and_threads_agree(_blocks(qtype, 64, 256, rng), qtype, rng)
