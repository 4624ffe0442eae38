"""GGUF's block types dequantised straight into a caller's float32 array (Q4_0, Q4_1, Q8_0 by the
code here; the other block types by gguf's own block functions, a piece at a time).

The values are the gguf package's (gguf.quants.dequantize), bit for bit: its formulas in its order,
each a float32 product (and sum) of the block's float16 scale with the stored integers. It spends
most of its time in Python and copies (a list of 16-row groups, concatenated, then copied again
into the caller's array; benchmarks/dequant.py measures both). Here a
block's values are written in place in cache-sized pieces. Any other type: False (the caller uses
gguf's). No Qt, no file access: bytes in, floats out.

A block of 32 weights, as llama.cpp lays it out:
- Q4_0 (18 bytes): d (f16), 16 bytes of 4-bit q (low nibbles are weights 0..15, high 16..31):
  w = d * (q - 8);
- Q4_1 (20 bytes): d (f16), m (f16), 16 bytes of 4-bit q: w = d * q + m;
- Q8_0 (34 bytes): d (f16), 32 int8 q: w = q * d;
- Q5_0 (22 bytes): d (f16), 4 bytes of high bits (bit j of a little-endian uint32 is weight j's
  fifth bit), 16 bytes of 4-bit q as Q4_0's: w = d * (q - 16).
"""

from __future__ import annotations

import numpy as np

import gguf.quants as gguf_quants
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

BLOCK = 32  # weights per block of Q4_0, Q4_1, Q8_0
PIECE_BLOCKS = 2048  # 32-weight blocks a pass (64 Ki weights, 256 KiB of float32): each pass in cache


def dequantize_into(src: np.ndarray, qtype, out: np.ndarray) -> bool:
    """src: uint8 [rows, row bytes] of `qtype` blocks -> out: float32 [rows, row bytes / type size *
    block size], C-contiguous, written in place. Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K: this
    module's code; another block type gguf.quants knows (Q5_1, the other K-quants, the IQ types,
    BF16): gguf's own
    block function on pieces of blocks (the same values by construction, without its per-16-rows
    grouping and its concatenated copy; benchmarks/dequant.py). False (out untouched) for F32 and
    F16 (gguf's plain view and cast) and any type gguf has no block function for."""
    fill = _OWN.get(qtype)
    if fill is None:
        blocks_of = _gguf_blocks(qtype)
        if blocks_of is None:
            return False
        fill = lambda blocks, flat, _q: _gguf_pieces(blocks_of, blocks, flat)  # noqa: E731
    if not (out.dtype == np.float32 and out.flags.c_contiguous):  # (a reshape would copy: lost writes)
        raise ValueError(f"dequantize_into writes a C-contiguous float32 array, not {out.dtype} {out.strides}")
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = np.ascontiguousarray(src, dtype=np.uint8).reshape(-1, size)  # [n_blocks, size]
    flat = out.reshape(-1, block)  # [n_blocks, block], a view
    if flat.shape[0] != blocks.shape[0]:
        raise ValueError(f"{blocks.shape[0]} blocks of {qtype.name} do not fill {out.shape}")
    with np.errstate(all="ignore"):  # a bad scale's NaN or Inf is the caller's check to name
        fill(blocks, flat, qtype)
    return True


COLUMN_TYPES = frozenset({Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0})  # the types columns_into writes


def columns_into(src: np.ndarray, qtype, out: np.ndarray) -> None:
    """src: uint8 [rows, row bytes] of Q4_0, Q4_1, Q5_0 or Q8_0 blocks -> out: float32 [row bytes / type
    size * 32, rows], any strides (columns of a wider matrix too): the transpose of what
    dequantize_into writes, bit for bit (the same float32 products and sums of the same operands).
    Each block's bytes are gathered across the rows first (a quarter of the floats' bytes or less),
    so every float32 pass runs along out's rows instead of a transposed copy of the floats."""
    size = GGML_QUANT_SIZES[qtype][1]
    blocks = src.reshape(src.shape[0], -1, size)  # [rows, k, size]
    n_k = blocks.shape[1]
    if out.shape != (BLOCK * n_k, src.shape[0]) or out.dtype != np.float32:
        raise ValueError(f"{n_k} blocks a row of {src.shape[0]} rows do not fill {out.shape} {out.dtype}")
    with np.errstate(all="ignore"):  # a bad scale's NaN or Inf is the caller's check to name
        d = _half_t(blocks, 0)  # [k, 1, rows]
        o = out.reshape(n_k, BLOCK, -1)  # [k, 32, rows]: weight 32 k + j of every row
        # each integer cast to float32 inside the first arithmetic pass (the same value): one
        # pass over the floats fewer than a cast of its own
        if qtype == Q.Q8_0:
            np.multiply(blocks[:, :, 2:].view(np.int8).transpose(1, 2, 0), d, out=o)  # x * d
            return
        if qtype == Q.Q5_0:
            np.subtract(_q5_codes(blocks), np.float32(16), out=o)  # (q - 16), as dequantize_into
            o *= d  # d * (q - 16)
            return
        qs = np.ascontiguousarray(blocks[:, :, size - 16:].transpose(1, 2, 0))  # [k, 16, rows]
        halves = o.reshape(n_k, 2, 16, -1)  # weights 0..15 from the low nibbles, 16..31 from the high
        nib = np.bitwise_and(qs, np.uint8(0x0F))
        for half, q in ((halves[:, 0], nib), (halves[:, 1], np.right_shift(qs, np.uint8(4), out=qs))):
            if qtype == Q.Q4_0:
                np.subtract(q, np.float32(8), out=half)  # (q - 8), as dequantize_into
                half *= d  # d * (q - 8)
            else:
                np.multiply(q, d, out=half)  # d * q
        if qtype == Q.Q4_1:
            o += _half_t(blocks, 2)  # + m


def _q5_codes(blocks: np.ndarray) -> np.ndarray:  # [rows, k, 22] uint8 -> [k, 32, rows] uint8
    """Q5_0's 5-bit integers of every block, rows last (each byte pass along the rows): weight j's
    low four bits from the nibbles (0..15 low, 16..31 high), its fifth bit j of the uint32."""
    qs = np.ascontiguousarray(blocks[:, :, 6:].transpose(1, 2, 0))  # [k, 16, rows]
    high = np.ascontiguousarray(blocks[:, :, 2:6].transpose(1, 2, 0))  # [k, 4, rows]: bits 8 i..
    codes = np.empty((qs.shape[0], 32, qs.shape[2]), np.uint8)
    bits = codes.reshape(qs.shape[0], 4, 8, -1)  # weight 8 i + b: bit b of byte i
    np.right_shift(high[:, :, None], _BITS, out=bits)
    bits &= np.uint8(1)
    bits <<= np.uint8(4)
    codes[:, :16] |= qs & np.uint8(0x0F)
    codes[:, 16:] |= qs >> np.uint8(4)
    return codes


_BITS = np.arange(8, dtype=np.uint8)[:, None]  # [8, 1]: a byte's bits, over the rows


def f16(b: np.ndarray) -> np.ndarray:  # uint8 [..., 2] (its last axis contiguous) -> float16 [...]
    """A block's float16 field, read in place: a view of the blocks (qpack's scales are read so
    too)."""
    return b.view(np.float16)[..., 0]


def halves(blocks: np.ndarray, with_m: bool):  # uint8 [..., size] -> d, m [...] float16, at
    """A 32-weight block's leading float16 fields, read in place (f16): d, m (None where the
    type has no m: Q4_0, Q5_0, Q8_0), and the byte `at` where the block's integers begin."""
    d = f16(blocks[..., 0:2])
    m = f16(blocks[..., 2:4]) if with_m else None
    return d, m, 2 if m is None else 4


def _half_t(blocks: np.ndarray, at: int) -> np.ndarray:  # [rows, k, size] uint8 -> [k, 1, rows] float32
    """The float16 field at byte `at` of every block, as float32, blocks' rows last (read in place:
    a view of the blocks, one strided pass)."""
    return f16(blocks[:, :, at:at + 2]).T.astype(np.float32)[:, None]


def prepare(qtype) -> None:
    """Make what dequantize_into needs for `qtype` once (gguf's lookup grids of the IQ types),
    before threads dequantise pieces of one tensor side by side."""
    if qtype not in _OWN:
        _gguf_blocks(qtype)


def _gguf_pieces(blocks_of, blocks, flat) -> None:  # gguf's block function, a cache-sized piece a call
    step = max(1, PIECE_BLOCKS * BLOCK // flat.shape[1])
    for a in range(0, len(blocks), step):
        flat[a:a + step] = blocks_of(blocks[a:a + step])


def _fill_q4k(blocks, flat, _qtype):  # [n_blocks, 144] uint8 -> [n_blocks, 256] float32, in place
    """Q4_K (256 weights, 144 bytes): d, dmin (f16), 12 bytes of eight 6-bit scales and mins, 128
    bytes of 4-bit q (each 32 bytes: low nibbles one sub-block of 32, high nibbles the next):
    w = (d * scale_j) * q - (dmin * min_j), as gguf's Q4_K, in its order."""
    step = PIECE_BLOCKS * BLOCK // 256
    nib = np.empty((min(step, len(blocks)), 4, 32), np.uint8)
    for a in range(0, len(blocks), step):
        b = blocks[a:a + step]
        n = len(b)
        d = f16(b[:, 0:2]).astype(np.float32)[:, None]  # [n, 1]
        dmin = f16(b[:, 2:4]).astype(np.float32)[:, None]
        s = b[:, 4:16].reshape(n, 3, 4)  # gguf's Q4_K.get_scale_min, the same integer steps
        lo, mid, hi = s[:, 0], s[:, 1], s[:, 2]
        sc = np.concatenate([lo & 0x3F, (hi & 0x0F) | ((lo >> 2) & 0x30)], axis=-1)  # [n, 8]
        mn = np.concatenate([mid & 0x3F, (hi >> 4) | ((mid >> 2) & 0x30)], axis=-1)
        dsub = d * sc.astype(np.float32)  # [n, 8]
        dm = dmin * mn.astype(np.float32)
        qs = b[:, 16:].reshape(n, 4, 32)
        o = flat[a:a + step].reshape(n, 4, 2, 32)
        q = nib[:n]
        np.bitwise_and(qs, np.uint8(0x0F), out=q)
        np.copyto(o[:, :, 0], q, casting="unsafe")
        np.right_shift(qs, np.uint8(4), out=q)
        np.copyto(o[:, :, 1], q, casting="unsafe")
        o8 = o.reshape(n, 8, 32)
        o8 *= dsub[:, :, None]
        o8 -= dm[:, :, None]


def _fill_q6k(blocks, flat, _qtype):  # [n_blocks, 210] uint8 -> [n_blocks, 256] float32, in place
    """Q6_K (256 weights, 210 bytes): 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8
    scales, d (f16). Weight 128 h + 32 j + k (h < 2, j < 4, k < 32) has low bits from byte
    64 h + 32 (j % 2) + k of the first part (nibble j // 2) and high bits 2j..2j+1 of byte 32 h + k
    of the second: w = (d * scale_(w // 16)) * (q - 32), as gguf's Q6_K, in its order."""
    step = PIECE_BLOCKS * BLOCK // 256
    buf = np.empty((min(step, len(blocks)), 2, 4, 32), np.uint8)
    hi = np.empty((min(step, len(blocks)), 2, 32), np.uint8)
    for a in range(0, len(blocks), step):
        b = blocks[a:a + step]
        n = len(b)
        d = f16(b[:, 208:210]).astype(np.float32)[:, None]  # [n, 1]
        dsub = d * b[:, 192:208].view(np.int8).astype(np.float32)  # [n, 16]
        ql = b[:, :128].reshape(n, 2, 2, 32)
        qh = b[:, 128:192].reshape(n, 2, 32)
        q = buf[:n]
        np.bitwise_and(ql, np.uint8(0x0F), out=q[:, :, 0:2])
        np.right_shift(ql, np.uint8(4), out=q[:, :, 2:4])
        h = hi[:n]
        for j in range(4):
            np.right_shift(qh, np.uint8(2 * j), out=h)
            h &= np.uint8(0x03)
            h <<= np.uint8(4)
            q[:, :, j] |= h
        o = flat[a:a + step].reshape(n, 2, 4, 32)
        np.copyto(o, q, casting="unsafe")
        o16 = o.reshape(n, 16, 16)
        o16 -= np.float32(32)  # (q - 32) as gguf's int8, exact either way
        o16 *= dsub[:, :, None]


def _fill_q5_0(blocks, flat, _qtype):  # [n_blocks, 22] uint8 -> [n_blocks, 32] float32, in place
    step = PIECE_BLOCKS
    q = np.empty((min(step, len(blocks)), 2, 16), np.uint8)
    for a in range(0, len(blocks), step):
        b = blocks[a:a + step]
        n = len(b)
        o = flat[a:a + step]  # [n, 32]
        d = f16(b[:, 0:2]).astype(np.float32)[:, None]  # [n, 1]
        qs = b[:, 6:]  # [n, 16] two weights a byte: 0..15 low nibbles, 16..31 high
        qn = q[:n]
        np.bitwise_and(qs, np.uint8(0x0F), out=qn[:, 0])
        np.right_shift(qs, np.uint8(4), out=qn[:, 1])
        high = np.unpackbits(b[:, 2:6], axis=1, bitorder="little")  # [n, 32]: bit j of the uint32
        high <<= np.uint8(4)
        q32 = qn.reshape(n, 32)
        q32 |= high
        np.copyto(o, q32, casting="unsafe")
        o -= np.float32(16)  # (q - 16) as gguf's int8, exact either way
        o *= d  # d * (q - 16)


def _gguf_blocks(qtype):
    """gguf.quants' block function for `qtype` ([n, type size] uint8 -> [n, block size] float32),
    its lookup grids ready; None where this gguf has none (its dequantize() then decides)."""
    cls = getattr(gguf_quants, "_type_traits", {}).get(qtype)
    fn = getattr(cls, "dequantize_blocks", None)
    if fn is None:
        return None
    init = getattr(cls, "init_grid", None)
    if init is not None:
        init()
    return fn


def _fill32(blocks, flat, qtype):  # Q4_0, Q4_1, Q8_0: [n_blocks, size] uint8 -> [n_blocks, 32] float32
    step = PIECE_BLOCKS
    q8 = None
    for a in range(0, len(blocks), step):
        b = blocks[a:a + step]
        o = flat[a:a + step]  # [n, 32]
        d, m, at = halves(b, qtype == Q.Q4_1)
        d = d.astype(np.float32)[:, None]  # [n, 1]
        if qtype == Q.Q8_0:
            np.copyto(o, b[:, at:].view(np.int8), casting="unsafe")  # q as float32
            o *= d  # x * d
            continue
        if q8 is None:
            q8 = np.empty((min(step, len(blocks)), 16), np.uint8)
        qs = b[:, at:]  # [n, 16] two weights a byte
        nib = q8[:len(b)]
        lo_hi = o.reshape(-1, 2, 16)  # weights 0..15 from the low nibbles, 16..31 from the high
        np.bitwise_and(qs, np.uint8(0x0F), out=nib)
        np.copyto(lo_hi[:, 0], nib, casting="unsafe")
        np.right_shift(qs, np.uint8(4), out=nib)
        np.copyto(lo_hi[:, 1], nib, casting="unsafe")
        if qtype == Q.Q4_0:
            o -= np.float32(8)  # (q - 8) as gguf's int8, exact either way
            o *= d  # d * (q - 8)
        else:
            o *= d  # d * q
            o += m.astype(np.float32)[:, None]  # + m


_OWN = {Q.Q4_0: _fill32, Q.Q4_1: _fill32, Q.Q8_0: _fill32, Q.Q4_K: _fill_q4k, Q.Q5_0: _fill_q5_0,
        Q.Q6_K: _fill_q6k}  # the code of this module
