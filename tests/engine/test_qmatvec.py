"""The quantised kernels (engine/computing/qmatvec.py on engine/reading/qpack.py's layout) against
dequantise-then-float32-matmul (gguf.quants.dequantize, the reader's own values): random blocks of
every type, a one-hot probe of every weight position (swapped halves, nibbles or sub-blocks show),
the packed layout against the file's values bit for bit, and SmolLM2's real tensors.

Tolerance, "1e-5 relative per output": each output y_r = sum_j x_j w_rj is held to
|y_r - ref_r| <= 1e-5 sum_j |x_j w_rj|. Float32 sums taken in another order (the kernels add 16
rows' products in vector lanes and sub-block by sub-block) differ by rounding of order
eps sum_j |x_j w_rj|, whatever y_r itself is; a bound relative to |y_r| alone fails for an output
that cancels to about 0, where any reordering changes its last bits."""


import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading.qpack import dequantized, pack

pytest.importorskip("numba")

SIMPLE = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]  # gguf.quants quantises these
K_QUANTS = [Q.Q4_K, Q.Q5_K, Q.Q6_K]  # gguf.quants only reads these: random bytes, sane scales
SCALE_AT = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}  # byte offsets of their f16 scales
REL = 1e-5


def _check(y, x, w):
    """y [m, n_out] against x [m, n_in] @ w [n_out, n_in]ᵀ, per output."""
    ref = x @ w.T
    scale = np.abs(x) @ np.abs(w).T
    err = np.abs(y - ref)
    assert np.all(err <= REL * scale + 1e-30), f"worst {np.max(err / (scale + 1e-30)):.2e} of scale"


def _blocks(qtype, n_out, n_in, rng):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if qtype in SIMPLE:
        w = rng.standard_normal((n_out, n_in)).astype(np.float32)
        w += np.linspace(-1, 2, n_in, dtype=np.float32)  # a ramp: no two positions alike
        return gguf.quants.quantize(w, qtype)
    raw = rng.integers(0, 256, (n_out, n_in // block * size), dtype=np.uint8)
    per = raw.reshape(n_out, -1, size)
    for at in SCALE_AT[qtype]:
        f16 = (rng.standard_normal(per.shape[:2]) * 0.01).astype(np.float16)
        per[:, :, at:at + 2] = f16[..., None].view(np.uint8)
    return raw


@pytest.mark.parametrize("qtype", SIMPLE + K_QUANTS, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 2, 5, 8])
def test_random_blocks_match_dequantised_matmul(qtype, m):
    rng = np.random.default_rng([int(qtype), m])
    n_in = 512 if qtype in K_QUANTS else 96
    raw = _blocks(qtype, 37, n_in, rng)  # 37 outputs: not a multiple of any chunk
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    x = rng.standard_normal((m, n_in)).astype(np.float32)
    _check(qm.qmatvec(pack(raw, qtype), x), x, w)


@pytest.mark.parametrize("qtype", SIMPLE + K_QUANTS, ids=lambda q: q.name)
def test_every_weight_position_is_read_from_its_own_bits(qtype):
    """x = one-hot rows: y is one column of W exactly (no sum to round), so a kernel that reads
    weight j from another nibble, half, or sub-block gives another column and fails."""
    rng = np.random.default_rng(int(qtype))
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    n_in = 2 * block
    raw = _blocks(qtype, 11, n_in, rng)
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    assert len({tuple(c) for c in w.T.round(6)}) > n_in * 3 // 4  # the columns differ
    for start in range(0, n_in, 8):
        x = np.zeros((8, n_in), np.float32)
        x[np.arange(8), start + np.arange(8)] = 1.0
        y = qm.qmatvec(pack(raw, qtype), x)
        np.testing.assert_allclose(y, w[:, start:start + 8].T, rtol=1e-6, atol=0)


def test_a_vector_gives_a_vector_and_out_is_written():
    rng = np.random.default_rng(3)
    raw = _blocks(Q.Q4_1, 20, 64, rng)
    w = gguf.quants.dequantize(raw, Q.Q4_1).astype(np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    y = qm.qmatvec(pack(raw, Q.Q4_1), x)
    assert y.shape == (20,)
    _check(y[None], x[None], w)
    out = np.full((1, 20), np.nan, np.float32)
    assert qm.qmatvec(pack(raw, Q.Q4_1), x[None], out=out) is out
    np.testing.assert_array_equal(out[0], y)


def test_wrong_shapes_and_types_are_refused():
    raw = np.zeros((4, 40), np.uint8)  # 2 Q4_1 blocks a row: 64 inputs
    with pytest.raises(ValueError, match="does not match a Q4_1 matrix of 64 inputs"):
        qm.qmatvec(pack(raw, Q.Q4_1), np.zeros((1, 96), np.float32))
    with pytest.raises(ValueError, match="no kernel layout for F16"):
        pack(raw, Q.F16)
    with pytest.raises(ValueError, match="not rows of 20-byte blocks"):
        pack(np.zeros((4, 30), np.uint8), Q.Q4_1)
    assert not qm.has_kernel(Q.F32) and not qm.has_kernel(Q.IQ4_NL)
    assert all(qm.has_kernel(q) for q in SIMPLE + K_QUANTS)


@pytest.mark.parametrize("qtype", SIMPLE + K_QUANTS, ids=lambda q: q.name)
def test_packed_layout_holds_the_files_values_bit_for_bit(qtype):
    """The packed integers, scales and offsets give back gguf.quants' own float32 values exactly
    (the same products in the same order), rows past a group of 16 included."""
    rng = np.random.default_rng(int(qtype) + 100)
    n_in = 512 if qtype in K_QUANTS else 96
    raw = _blocks(qtype, 21, n_in, rng)
    want = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    np.testing.assert_array_equal(dequantized(pack(raw, qtype)), want)
    # rows whose bytes are not adjacent (a column-major copy) pack to the same values
    np.testing.assert_array_equal(dequantized(pack(np.asfortranarray(raw), qtype)), want)


def test_warm_compiles_every_kernel_once():
    took = qm.warm()
    assert set(took) == {q.name for q in qm.KERNELS}
    again = qm.warm([Q.Q4_1])
    assert again == {"Q4_1": took["Q4_1"]}  # the first call's time, not a second compile


def test_warm_in_background_leaves_every_kernel_ready(monkeypatch):
    thread = qm.warm_in_background([Q.Q8_0, Q.Q6_K])
    thread.join(timeout=600)
    assert not thread.is_alive()
    calls = []
    monkeypatch.setattr(qm, "qmatvec", lambda *a: calls.append(a))  # a kernel call would show here
    took = qm.warm([Q.Q8_0, Q.Q6_K])  # ready: the first call's times, no kernel run now
    assert set(took) == {"Q8_0", "Q6_K"} and calls == []


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.0.attn_k.weight",
                                  "blk.7.ffn_gate.weight", "blk.29.ffn_down.weight",
                                  "token_embd.weight"])
def test_smollm2_tensors_match_dequantised_matmul(name, smollm2_tensors):
    t = smollm2_tensors[name]
    raw = np.asarray(t.data)  # the memory map, [n_out, row bytes]
    if name == "token_embd.weight":
        raw = raw[:3000]  # Q8_0: a slice of the vocabulary is enough
    w = gguf.quants.dequantize(raw, t.tensor_type).astype(np.float32)
    rng = np.random.default_rng(len(name))
    for m in (1, 3, 8):
        x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
        _check(qm.qmatvec(pack(raw, t.tensor_type), x), x, w)


def test_compiling_leaves_sys_stderr_alone():
    """numba's coloured error text runs colorama's init/deinit, which reassign sys.stderr from the
    compiling thread (the warm-up thread races the app's, and pytest's, own streams): the kernels
    ask for plain text, so formatting an error message leaves the stream as it is."""
    import io
    import sys

    from numba.core.errors import termcolor

    assert qm.numba is not None
    mine = io.StringIO()
    before, sys.stderr = sys.stderr, mine
    try:
        text = termcolor().errmsg("x")
        sys.stderr = before
        assert text == "x"  # no escape codes, no colorama round trip
    finally:
        sys.stderr = before
