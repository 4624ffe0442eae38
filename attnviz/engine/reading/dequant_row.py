"""One row of a quantised table (a generation step's or a keystroke's token in an embedding kept
in its GGUF encoding) dequantised in a few NumPy calls: Q8_0 and the K-quants Q2_K..Q6_K.

dequant.py's fills are made for whole tensors (in-place passes over cache-sized pieces); on one
row's few blocks their dozens of small NumPy calls cost more than the arithmetic. Here every
integer a K-quant block stores (its 2- to 6-bit codes, its scales and mins) is read through lookup
tables indexed by the block's bytes, already as float32 (small integers: exact), so a row is a few
gathers and the type's float32 products in gguf.quants' formulas and order: the values of
gguf.quants.dequantize bit for bit. No Qt, no file access: bytes in, floats out.
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

_BYTES = np.arange(256, dtype=np.int32)  # every byte value


def _fields(shifts, mask: int, scale: int = 1, offset: int = 0) -> np.ndarray:  # -> float32 [256, k]
    """Each byte's bit fields ((byte >> shift) & mask) * scale + offset, one column a shift."""
    return (((_BYTES[:, None] >> np.array(shifts)) & mask) * scale + offset).astype(np.float32)


_NIBBLES = _fields((0, 4), 0x0F)  # low, high nibble
_PAIRS = _fields((0, 2, 4, 6), 0x03)  # four 2-bit codes, low bits first
_BIT16 = _fields(range(8), 0x01, 16)  # Q5_K: each bit as the code's fifth bit (0 or 16)
_HIGH6 = _fields((0, 2, 4, 6), 0x03, 16, -32)  # Q6_K: each 2-bit pair as bits 4..5, less 32
_HMASK3 = _fields(range(8), 0x01, 4, -4)  # Q3_K: -4 where a bit is 0 (gguf's "qh ^ 1" << 2)
_INT8 = _BYTES.astype(np.int8).astype(np.float32)  # a byte as int8


def _k_scales(s: np.ndarray) -> np.ndarray:  # uint8 [m, 12] -> [m, 16]
    """Q4_K's and Q5_K's 8 six-bit scales, then 8 mins (gguf's Q4_K.get_scale_min)."""
    lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    return np.concatenate([lo & 0x3F, (hi & 0x0F) | ((lo >> 2) & 0x30),
                           mid & 0x3F, (hi >> 4) | ((mid >> 2) & 0x30)], axis=1)


def _k3_scales(s: np.ndarray) -> np.ndarray:  # uint8 [m, 12] -> [m, 16]
    """Q3_K's 16 six-bit scales (before gguf's int8 less 32): scale k's low four bits are nibble
    k // 8 of byte k % 8, its top two pair k // 4 of byte 8 + k % 4."""
    low = (s[:, None, 0:8] >> np.array([0, 4], np.uint8)[:, None]) & 0x0F  # [m, 2, 8]
    high = (s[:, None, 8:12] >> np.array([0, 2, 4, 6], np.uint8)[:, None]) & 0x03  # [m, 4, 4]
    return low.reshape(-1, 16) | (high.reshape(-1, 16) << 4)


def _bit_worth(values) -> np.ndarray:  # -> float32 [96, 16]
    """What each of a 12-byte field's 96 bits (bit 8 i + j: bit j of byte i) adds to each value
    `values` puts together from them: each value's bits come from bits of their own, so a value
    is the sum of its bits' worth (unpacked bits @ this: small integers, exact in float32)."""
    units = np.packbits(np.eye(96, dtype=np.uint8), axis=1, bitorder="little")  # [96, 12]
    return values(units).astype(np.float32)


_K_SCALES = _bit_worth(_k_scales)
_K3_SCALES = _bit_worth(_k3_scales)


def _lut(table: np.ndarray, b: np.ndarray) -> np.ndarray:  # [256, ...] x uint8 [...] -> [..., ...]
    return np.take(table, b, axis=0)  # (np.take: a fraction of fancy indexing's time)


def _scales(worth: np.ndarray, s: np.ndarray) -> np.ndarray:  # s: uint8 [n, 12] -> float32 [n, 16]
    return np.unpackbits(s, axis=1, bitorder="little") @ worth


def _halves(b: np.ndarray) -> np.ndarray:  # uint8 [n, 2 k] -> float32 [n, k]: float16 fields
    return b.view(np.float16).astype(np.float32)


def q8_0_product(q, d, out=None):  # int8 [..., 32], float16 [..., 1] -> float32 [..., 32]: w = q * d
    return np.multiply(q, d, out=out, dtype=np.float32)  # (each cast to float32 exactly, then the product)


def q8_0_row(q, d):  # int8 [blocks, 32], float16 [blocks, 1] -> float32 [blocks, 32], or None
    """One row's q8_0_product (the same float32 products) in steps of one type each, which for a
    row cost a fraction of the mixed-type product's casting; None where a scale is not finite (then
    a product is not: inf x 0 is NaN), nothing computed or said."""
    d = d.astype(np.float32)
    if not np.isfinite(d).all():
        return None
    out = q.astype(np.float32)
    out *= d  # (each |q d| <= 128 x 65504: finite)
    return out


def _q8_0(b, out):  # [n, 34] -> [n, 32]
    q8_0_product(b[:, 2:].view(np.int8), b[:, :2].view(np.float16), out)


def _q2_k(b, out):  # [n, 84] -> [n, 256]: w = (d * sc) * q - (dmin * m), a scale a 16 weights
    n = len(b)
    s = _lut(_NIBBLES, b[:, :16]) * _halves(b[:, 80:84])[:, None, :]  # [n, 16, (d * sc, dmin * m)]
    q = _lut(_PAIRS, b[:, 16:80]).reshape(n, 2, 32, 4).transpose(0, 1, 3, 2)  # weight 128 h + 32 j + k
    o = out.reshape(n, 2, 4, 2, 16)
    np.multiply(q.reshape(n, 2, 4, 2, 16), s[:, :, 0].reshape(n, 2, 4, 2, 1), out=o)
    o -= s[:, :, 1].reshape(n, 2, 4, 2, 1)


def _q3_k(b, out):  # [n, 110] -> [n, 256]: w = (d * scale) * q, q = low 2 bits - (hmask bit ? 0 : 4)
    n = len(b)
    dl = _halves(b[:, 108:110]) * (_scales(_K3_SCALES, b[:, 96:108]) - np.float32(32))  # [n, 16]
    low = _lut(_PAIRS, b[:, 32:96]).reshape(n, 2, 32, 4).transpose(0, 1, 3, 2)  # weight 128 h + 32 j + k
    high = _lut(_HMASK3, b[:, :32]).transpose(0, 2, 1).reshape(n, 2, 4, 32)  # bit 4 h + j of byte k
    np.add(low, high, out=out.reshape(n, 2, 4, 32))
    out.reshape(n, 16, 16)[...] *= dl[:, :, None]


def _q4_5_k(b, out):  # [n, 144 | 176] -> [n, 256]: w = (d * sc) * q - (dmin * m), a scale a 32
    n = len(b)
    s = _scales(_K_SCALES, b[:, 4:16]).reshape(n, 2, 8) * _halves(b[:, 0:4])[:, :, None]
    q = _lut(_NIBBLES, b[:, -128:]).reshape(n, 4, 32, 2).transpose(0, 1, 3, 2)  # weight 64 i + 32 h + k
    o = out.reshape(n, 4, 2, 32)
    if b.shape[1] == GGML_QUANT_SIZES[Q.Q5_K][1]:  # the fifth bit: bit 2 i + h of byte 16 + k
        np.add(q, _lut(_BIT16, b[:, 16:48]).transpose(0, 2, 1).reshape(n, 4, 2, 32), out=o)
        q = o
    np.multiply(q, s[:, 0].reshape(n, 4, 2, 1), out=o)
    o -= s[:, 1].reshape(n, 4, 2, 1)


def _q6_k(b, out):  # [n, 210] -> [n, 256]: w = (d * scale) * (q - 32), a scale a 16 weights
    n = len(b)
    dl = _halves(b[:, 208:210]) * _lut(_INT8, b[:, 192:208])  # [n, 16]
    # weight 128 h + 32 j + k: nibble j // 2 of byte 64 h + 32 (j % 2) + k, bits 2 j of 128 + 32 h + k
    low = _lut(_NIBBLES, b[:, :128]).reshape(n, 2, 2, 32, 2).transpose(0, 1, 4, 2, 3)
    high = _lut(_HIGH6, b[:, 128:192]).reshape(n, 2, 32, 4).transpose(0, 1, 3, 2).reshape(n, 2, 2, 2, 32)
    np.add(low, high, out=out.reshape(n, 2, 2, 2, 32))
    out.reshape(n, 16, 16)[...] *= dl[:, :, None]


_ROW = {Q.Q8_0: _q8_0, Q.Q2_K: _q2_k, Q.Q3_K: _q3_k, Q.Q4_K: _q4_5_k, Q.Q5_K: _q4_5_k, Q.Q6_K: _q6_k}
ROW_TYPES = frozenset(_ROW)  # the types row_into writes


def row_into(src: np.ndarray, qtype, out: np.ndarray) -> None:
    """src: uint8 [row bytes] (or [1, row bytes]) of `qtype` blocks, a type of ROW_TYPES -> out:
    float32, C-contiguous, its row's values, written in place (gguf.quants.dequantize's, bit for
    bit; a non-finite scale's NaN or Inf is the caller's check to name)."""
    block, size = GGML_QUANT_SIZES[qtype]
    blocks = src.reshape(-1, size)  # [n_blocks, size]
    with np.errstate(all="ignore"):
        _ROW[qtype](blocks, out.reshape(-1, block))
