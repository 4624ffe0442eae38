"""The packed layout keeps Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1's scales and offsets as the file's own
float16 (engine/reading/qpack.py HALF) and the kernels widen them to float32 (exact): every kernel,
parallel and serial, gives the same bits as on a float32 copy of the same scales (the layout's
float32 form, built here from the same blocks), on random blocks and on SmolLM2's real tensors.
The K-types keep float32 (their scales are float32 products)."""

import dataclasses

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading import qpack

pytest.importorskip("numba")

SCALES_AT = {Q.Q8_0: (0,), Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
             Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # byte offsets of a block's float16s


def _as_float32(p: qpack.Packed) -> qpack.Packed:
    """The same matrix with float32 scales and offsets (the layout before HALF)."""
    return dataclasses.replace(p, scale=p.scale.astype(np.float32),
                               offset=None if p.offset is None else p.offset.astype(np.float32))


def _random_blocks(qtype, n_out, n_blocks, rng):
    """Random bytes with finite float16 scales of mixed sign and size (subnormals included), so the
    widening is tried on every kind of float16 a file holds."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, (n_out, n_blocks * size), dtype=np.uint8)
    per = raw.reshape(n_out, n_blocks, size)
    for at in SCALES_AT[qtype]:
        f16 = (rng.standard_normal(per.shape[:2]) * 10.0 ** rng.integers(-7, 2, per.shape[:2]))
        per[:, :, at:at + 2] = f16.astype(np.float16)[..., None].view(np.uint8)
    return raw


def _all_ways(p: qpack.Packed, x: np.ndarray) -> list:
    """y from qmatvec (the parallel kernel on every thread numba has) and from the serial twin."""
    serial = np.empty((x.shape[0], p.q.shape[0] * qpack.LANES), np.float32)
    qm.SERIAL[qm._kernel_of(p)](*p.args, x, serial)
    return [qm.qmatvec(p, x), serial[:, :p.n_out]]


def _same_bits(p: qpack.Packed, x: np.ndarray) -> None:
    for new, old in zip(_all_ways(p, x), _all_ways(_as_float32(p), x), strict=True):
        assert np.isfinite(new).all() and np.abs(new).max() > 0
        assert np.array_equal(new.view(np.uint32), old.view(np.uint32))


@pytest.mark.parametrize("qtype", qpack.PACKED, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 3, 7])
def test_half_scales_give_the_float32_layouts_bits(qtype, m, kernels_on_every_core):
    rng = np.random.default_rng([int(qtype), m, 45])
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    n_blocks = 2 if block == 256 else 5
    p = qpack.pack(_random_blocks(qtype, 37, n_blocks, rng), qtype)  # 37 rows: a padded group
    half = qtype in qpack.HALF
    assert p.scale.dtype == (np.float16 if half else np.float32)
    assert p.offset is None or p.offset.dtype == p.scale.dtype
    x = rng.standard_normal((m, n_blocks * block)).astype(np.float32)
    _same_bits(p, x)


@pytest.mark.parametrize("qtype", qpack.HALF, ids=lambda q: q.name)
def test_half_scales_halve_their_bytes_and_the_accounting_follows(qtype):
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    rng = np.random.default_rng(int(qtype))
    p = qpack.pack(_random_blocks(qtype, 40, 4, rng), qtype)
    wide = _as_float32(p)
    scales = p.scale.nbytes + (0 if p.offset is None else p.offset.nbytes)
    assert wide.nbytes - p.nbytes == scales  # the float32 scales took twice the bytes
    assert p.nbytes == qpack.packed_nbytes(qtype, 40, 4 * block)
    np.testing.assert_array_equal(qpack.dequantized(p), qpack.dequantized(wide))


def test_a_non_finite_half_scale_is_seen():
    rng = np.random.default_rng(1)
    raw = _random_blocks(Q.Q4_1, 16, 2, rng)
    raw.reshape(16, 2, 20)[3, 1, 2:4] = np.array([np.inf], np.float16).view(np.uint8)  # m of a block
    pm = qpack.pack_parts([(Q.Q4_1, raw, 0)])
    assert pm.parts[0][1].offset.dtype == np.float16 and not pm.finite


@pytest.mark.parametrize("qtype", qpack.PACKED, ids=lambda q: q.name)
def test_a_packed_matrix_is_finite_exactly_where_its_dequantised_weights_are(qtype):
    """Packed.finite (asked of a block packed alone) and PackedMatrix.finite answer as the
    weights do: every float16 field of a block (d, m, dmin) NaN or Inf in turn, in one row of a
    padded group."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    rng = np.random.default_rng([int(qtype), 80])
    raw = _random_blocks(qtype, 19, 2, rng)
    cases = [(None, None)] + [(at, bad) for at in SCALES_AT[qtype] for bad in (np.nan, -np.inf)]
    for at, bad in cases:
        blocks = raw.copy()
        if at is not None:
            blocks.reshape(19, 2, size)[17, 1, at:at + 2] = np.array([bad], np.float16).view(np.uint8)
        with np.errstate(all="ignore"):  # (a K-type's NaN times its integer scales)
            p = qpack.pack(blocks, qtype)
            weights_finite = bool(np.isfinite(qpack.dequantized(p)).all())
            whole = qpack.pack_parts([(qtype, blocks, 0)])
        assert weights_finite == (at is None)
        assert p.finite == weights_finite == whole.finite


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.14.ffn_up.weight",
                                  "blk.29.ffn_down.weight", "token_embd.weight"])
def test_smollm2_tensors_give_the_float32_layouts_bits(name, smollm2_tensors):
    t = smollm2_tensors[name]
    raw = np.asarray(t.data)  # the memory map, [n_out, row bytes]
    if name == "token_embd.weight":
        raw = raw[:3000]  # Q8_0: a slice of the vocabulary is enough
    p = qpack.pack(raw, t.tensor_type)
    assert p.scale.dtype == np.float16
    rng = np.random.default_rng(len(name))
    for m in (1, 2, 4):
        _same_bits(p, rng.standard_normal((m, p.n_in)).astype(np.float32))
