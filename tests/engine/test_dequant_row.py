"""One row of a Q8_0 or K-quant table (a generation step's token looked up in an embedding kept in
its GGUF encoding) is gguf.quants.dequantize's values bit for bit, on random blocks: every byte
value in every place, scales of both signs from subnormal to large, rows of 1 to 16 blocks."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.dequant_row import ROW_TYPES
from attnviz.engine.reading.gguf_tensors import QuantRows

SCALES_AT = {Q.Q8_0: (0,), Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2),
             Q.Q6_K: (208,)}  # byte offsets of a block's float16 scales


def _table(qtype, rows: int, n_blocks: int, rng) -> np.ndarray:  # -> uint8 [rows, row bytes]
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, (rows, n_blocks, size), dtype=np.uint8)
    for at in SCALES_AT[qtype]:  # finite float16s of mixed sign and size (subnormals included)
        f16 = rng.standard_normal((rows, n_blocks)) * 10.0 ** rng.integers(-7, 3, (rows, n_blocks))
        raw[:, :, at:at + 2] = f16.astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


def test_the_row_types_are_q8_0_and_the_k_quants():
    assert ROW_TYPES == {Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}


@pytest.mark.parametrize("qtype", sorted(ROW_TYPES), ids=lambda q: q.name)
@pytest.mark.parametrize("n_blocks", [1, 3, 16])
def test_one_row_is_ggufs_values_bit_for_bit(qtype, n_blocks):
    rng = np.random.default_rng([int(qtype), n_blocks])
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    rows, cols = 200, n_blocks * block
    raw = _table(qtype, rows, n_blocks, rng)
    want = np.asarray(gguf.quants.dequantize(raw, qtype), np.float32).reshape(rows, cols)
    assert np.isfinite(want).all() and (want != 0).mean() > 0.5
    table = QuantRows("token_embd.weight", raw, qtype, (rows, cols))
    for i in range(rows):
        got = table[np.array([i])]
        assert got.shape == (1, cols) and got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(np.uint32), want[i:i + 1].view(np.uint32), err_msg=str(i))


@pytest.mark.parametrize("qtype", sorted(ROW_TYPES), ids=lambda q: q.name)
def test_a_row_with_a_non_finite_scale_is_named(qtype):
    rng = np.random.default_rng(int(qtype))
    raw = _table(qtype, 4, 2, rng)
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    at = size + SCALES_AT[qtype][0]  # the second block's scale
    raw[2, at:at + 2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)
    table = QuantRows("token_embd.weight", raw, qtype, (4, 2 * gguf.GGML_QUANT_SIZES[qtype][0]))
    assert np.isfinite(table[np.array([1])]).all()
    with pytest.raises(ModelLoadError, match="token_embd.weight row 2 "):
        table[np.array([2])]


def test_a_q8_0_row_with_scales_of_both_infinities_is_named_without_a_warning(recwarn):
    """+inf and -inf scales in one row: refused by its row, and nothing else said on the way (a sum of
    the two is NaN, and NumPy would warn of it)."""
    rng = np.random.default_rng(5)
    raw = _table(Q.Q8_0, 4, 3, rng)
    size = gguf.GGML_QUANT_SIZES[Q.Q8_0][1]
    for block, value in ((0, np.inf), (2, -np.inf)):
        raw[1, block * size:block * size + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    table = QuantRows("token_embd.weight", raw, Q.Q8_0, (4, 3 * 32))
    with pytest.raises(ModelLoadError, match="token_embd.weight row 1 "):
        table[np.array([1])]
    assert [str(w.message) for w in recwarn] == []


def test_a_q8_0_rows_product_is_the_tables_product_bit_for_bit_at_the_extremes():
    """q8_0_row (a generation step's embedding row) gives q8_0_product's bits (the product of many
    rows) at every int8 q and scales from the smallest subnormal to the largest float16 of both signs
    and zeros, and None for a row with an infinite or NaN scale."""
    from attnviz.engine.reading.dequant_row import q8_0_product, q8_0_row

    q = np.arange(-128, 128, dtype=np.int8).reshape(8, 32)
    d = np.array([6e-8, -6e-8, 65504, -65504, 0.0, -0.0, 1e-3, -3.5], np.float16).reshape(8, 1)
    got, want = q8_0_row(q, d), q8_0_product(q, d)
    assert got.dtype == np.float32 and got.shape == (8, 32) and np.isfinite(got).all()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for bad in (np.inf, -np.inf, np.nan):
        assert q8_0_row(q, np.where(np.arange(8)[:, None] == 5, np.float16(bad), d)) is None


def test_one_row_past_a_tables_end_is_refused_not_wrapped_around():
    """A single id past the table (as a text's id list of one gives it) raises as indexing does;
    it never reads row id % rows."""
    rows, cols = 8, 64
    rng = np.random.default_rng(0)
    blocks = np.zeros((rows, cols // 32, 34), np.uint8)
    scales = np.full(rows * cols // 32, 0.01, np.float16).tobytes()
    blocks[:, :, :2] = np.frombuffer(scales, np.uint8).reshape(rows, cols // 32, 2)
    blocks[:, :, 2:] = rng.integers(0, 255, (rows, cols // 32, 32), dtype=np.uint8)
    table = QuantRows("token_embd.weight", blocks.reshape(rows, -1), Q.Q8_0, (rows, cols))
    np.testing.assert_array_equal(table[np.array([-1])], table[np.array([7])])
    for bad in (8, 9, -9):
        with pytest.raises(IndexError):
            table[np.array([bad])]
