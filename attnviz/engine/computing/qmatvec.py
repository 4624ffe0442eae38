"""y = x Wᵀ straight from a GGUF tensor's quantised blocks: the few-rows products of a keystroke or
a generation step read 4-8-bit weights instead of float32 copies.

W [n_out, n_in] is the tensor as the file stores it: `blocks` uint8 [n_out, n_in / block * size],
one row of blocks per output (llama.cpp's layout). x is float32 [m, n_in] with m small (a few new
rows); y is float32 [m, n_out]. Each block is decoded in the inner loop and never written out; the
sums are float32, so y equals dequantise-then-float32-matmul to float32 rounding
(tests/engine/test_qmatvec.py). The output rows are split over every core (numba's prange).

Block layouts (llama.cpp's, as gguf.quants reads them; d, m, dmin are float16):
- Q8_0 (32 w, 34 B): d, q int8[32]: w = d q.
- Q4_0 (32 w, 18 B): d, qs[16] (weight j < 16 the low nibble of qs[j], j >= 16 the high nibble of
  qs[j - 16]): w = d (q - 8).
- Q4_1 (32 w, 20 B): d, m, qs[16] as Q4_0: w = d q + m.
- Q5_0 (32 w, 22 B): d, qh uint32 (bit j: weight j's fifth bit), qs[16] as Q4_0: w = d (q - 16).
- Q5_1 (32 w, 24 B): d, m, qh, qs[16]: w = d q + m.
- Q4_K (256 w, 144 B): d, dmin, 12 bytes of eight 6-bit scales sc and mins mn, qs[128] (32 bytes
  per pair of sub-blocks: low nibbles sub-block 2c, high 2c + 1): w = (d sc_j) q - (dmin mn_j).
- Q5_K (256 w, 176 B): d, dmin, scales as Q4_K, qh[32] (bit j of qh[l]: sub-block j's fifth bit
  of weight l), qs[128] as Q4_K: w = (d sc_j) q - (dmin mn_j).
- Q6_K (256 w, 210 B): ql[128], qh[64], int8 scales[16] (one per 16 weights), d: in each half h
  of 128 weights, weight 32k + l takes ql[64h + 32(k % 2) + l]'s low (k < 2) or high nibble and bits
  2k, 2k+1 of qh[32h + l]: w = (d scale) (q - 32).

No Qt, no file access: arrays in, arrays out.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

log = logging.getLogger(__name__)

try:
    import numba
    from numba import njit, prange
except ImportError:  # the float32 path is always there; has_kernel() then says no
    numba = None

CHUNK = 8  # output rows a parallel task takes: its scratch made once per chunk, not per row
FAST = {"reassoc", "contract"}  # float32 sums may be reordered (SIMD); no NaN/Inf assumptions
_F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def _jit(fn):
    return njit(parallel=True, cache=True, fastmath=FAST, nogil=True)(fn) if numba else None


def _f16(b, o, table):  # float16 at bytes o, o + 1 of b (little-endian), as float32
    return table[np.int64(b[o]) | (np.int64(b[o + 1]) << 8)]


if numba:
    _f16 = njit(inline="always", cache=True)(_f16)


def _block_sums(x, block):  # [m, n_in] -> [m, n_in / block]: each block's sum of x, float32
    m, n = x.shape
    return x.reshape(m, n // block, block).sum(axis=2, dtype=np.float32)


@_jit
def _q8_0(blocks, x, table, y):
    n_out, m, nb = blocks.shape[0], x.shape[0], x.shape[1] // 32
    for c in prange((n_out + CHUNK - 1) // CHUNK):
        w = np.empty(32, np.float32)
        for r in range(c * CHUNK, min(n_out, (c + 1) * CHUNK)):
            row = blocks[r]
            for i in range(m):
                y[i, r] = 0.0
            for b in range(nb):
                o = b * 34
                d = _f16(row, o, table)
                for j in range(32):
                    w[j] = np.float32(np.int8(row[o + 2 + j]))
                for i in range(m):
                    s = np.float32(0.0)
                    for j in range(32):
                        s += w[j] * x[i, b * 32 + j]
                    y[i, r] += d * s


@_jit
def _q4(blocks, x, xs, table, y, size):
    """Q4_0 (size 18: w = d q - 8 d) and Q4_1 (size 20: w = d q + m): d (sum q x) + c (sum x),
    c = -8 d or m; xs [m, n_in / 32] the blocks' sums of x. A byte's nibbles are split in float32
    (hi = floor(v / 16), lo = v - 16 hi: exact for 0..255), which LLVM vectorises."""
    n_out, m, nb = blocks.shape[0], x.shape[0], x.shape[1] // 32
    for r in prange(n_out):
        row = blocks[r]
        for i in range(m):
            acc = np.float32(0.0)
            for b in range(nb):
                o = b * size
                d = _f16(row, o, table)
                k = _f16(row, o + 2, table) if size == 20 else np.float32(-8.0) * d
                q = o + size - 16
                s = np.float32(0.0)
                for j in range(16):
                    v = np.float32(row[q + j])
                    hi = np.floor(v * np.float32(0.0625))
                    s += (v - np.float32(16.0) * hi) * x[i, b * 32 + j] + hi * x[i, b * 32 + 16 + j]
                acc += d * s + k * xs[i, b]
            y[i, r] = acc


@_jit
def _q5(blocks, x, xs, table, y, size):
    """Q5_0 (size 22: w = d q - 16 d) and Q5_1 (size 24: w = d q + m), as _q4 with a fifth bit."""
    n_out, m, nb = blocks.shape[0], x.shape[0], x.shape[1] // 32
    for c in prange((n_out + CHUNK - 1) // CHUNK):
        w = np.empty(32, np.float32)
        for r in range(c * CHUNK, min(n_out, (c + 1) * CHUNK)):
            row = blocks[r]
            for i in range(m):
                y[i, r] = 0.0
            for b in range(nb):
                o = b * size
                d = _f16(row, o, table)
                k = _f16(row, o + 2, table) if size == 24 else np.float32(-16.0) * d
                h = o + size - 20
                qh = (np.int64(row[h]) | (np.int64(row[h + 1]) << 8)
                      | (np.int64(row[h + 2]) << 16) | (np.int64(row[h + 3]) << 24))
                q = h + 4
                for j in range(16):
                    v = np.int64(row[q + j])
                    w[j] = np.float32((v & 15) | (((qh >> j) & 1) << 4))
                    w[j + 16] = np.float32((v >> 4) | (((qh >> (j + 16)) & 1) << 4))
                for i in range(m):
                    s = np.float32(0.0)
                    for j in range(32):
                        s += w[j] * x[i, b * 32 + j]
                    y[i, r] += d * s + k * xs[i, b]


@_jit
def _k45(blocks, x, xs, table, y, size):
    """Q4_K (size 144) and Q5_K (size 176): per sub-block j of 32, (d sc_j)(sum q x) - (dmin mn_j)
    (sum x); xs [m, n_in / 32] the sub-blocks' sums of x."""
    n_out, m, nb = blocks.shape[0], x.shape[0], x.shape[1] // 256
    five = size == 176
    for c in prange((n_out + CHUNK - 1) // CHUNK):
        w = np.empty(256, np.float32)
        ds = np.empty(8, np.float32)
        dm = np.empty(8, np.float32)
        for r in range(c * CHUNK, min(n_out, (c + 1) * CHUNK)):
            row = blocks[r]
            for i in range(m):
                y[i, r] = 0.0
            for b in range(nb):
                o = b * size
                d = _f16(row, o, table)
                dmin = _f16(row, o + 2, table)
                s = o + 4
                for j in range(4):
                    lo, mid, hi = np.int64(row[s + j]), np.int64(row[s + 4 + j]), np.int64(row[s + 8 + j])
                    ds[j] = d * np.float32(lo & 0x3F)
                    dm[j] = dmin * np.float32(mid & 0x3F)
                    ds[j + 4] = d * np.float32((hi & 0x0F) | ((lo >> 2) & 0x30))
                    dm[j + 4] = dmin * np.float32((hi >> 4) | ((mid >> 2) & 0x30))
                h = o + 16
                q = h + 32 if five else h
                for cc in range(4):
                    for l in range(32):
                        v = np.int64(row[q + cc * 32 + l])
                        w[64 * cc + l] = np.float32(v & 15)
                        w[64 * cc + 32 + l] = np.float32(v >> 4)
                if five:
                    for j in range(8):
                        for l in range(32):
                            w[32 * j + l] += np.float32(((np.int64(row[h + l]) >> j) & 1) << 4)
                for i in range(m):
                    acc = np.float32(0.0)
                    for j in range(8):
                        t = np.float32(0.0)
                        for l in range(32):
                            t += w[32 * j + l] * x[i, b * 256 + 32 * j + l]
                        acc += ds[j] * t - dm[j] * xs[i, b * 8 + j]
                    y[i, r] += acc


@_jit
def _q6_k(blocks, x, table, y):
    n_out, m, nb = blocks.shape[0], x.shape[0], x.shape[1] // 256
    for c in prange((n_out + CHUNK - 1) // CHUNK):
        w = np.empty(256, np.float32)
        ds = np.empty(16, np.float32)
        for r in range(c * CHUNK, min(n_out, (c + 1) * CHUNK)):
            row = blocks[r]
            for i in range(m):
                y[i, r] = 0.0
            for b in range(nb):
                o = b * 210
                d = _f16(row, o + 208, table)
                for g in range(16):
                    ds[g] = d * np.float32(np.int8(row[o + 192 + g]))
                for hh in range(2):
                    ql, qh = o + 64 * hh, o + 128 + 32 * hh
                    for k in range(4):
                        for l in range(32):
                            lo = np.int64(row[ql + 32 * (k % 2) + l])
                            lo = (lo & 15) if k < 2 else (lo >> 4)
                            hi = (np.int64(row[qh + l]) >> (2 * k)) & 3
                            w[128 * hh + 32 * k + l] = np.float32((lo | (hi << 4)) - 32)
                for i in range(m):
                    acc = np.float32(0.0)
                    for g in range(16):
                        t = np.float32(0.0)
                        for l in range(16):
                            t += w[16 * g + l] * x[i, b * 256 + 16 * g + l]
                        acc += ds[g] * t
                    y[i, r] += acc


KERNELS = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K)


def has_kernel(qtype) -> bool:
    """Whether qmatvec computes on `qtype`'s blocks (numba installed and a kernel for the type)."""
    return numba is not None and qtype in KERNELS


def qmatvec(blocks: np.ndarray, qtype, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """y [m, n_out] = x [m, n_in] @ Wᵀ, W the `qtype` tensor whose blocks are `blocks` uint8
    [n_out, row bytes] (a memory map is read in place). x: float32 (a vector is one row)."""
    if not has_kernel(qtype):
        raise ValueError(f"no quantised kernel for {getattr(qtype, 'name', qtype)}")
    block, size = GGML_QUANT_SIZES[qtype]
    x = np.ascontiguousarray(x, dtype=np.float32)
    one = x.ndim == 1
    x2 = x.reshape(1, -1) if one else x
    n_out, n_in = blocks.shape[0], x2.shape[1]
    if blocks.dtype != np.uint8 or blocks.ndim != 2 or blocks.shape[1] * block != n_in * size:
        raise ValueError(f"{qtype.name} blocks {blocks.dtype} {blocks.shape} do not hold "
                         f"[n_out, {n_in}] weights")
    y = out if out is not None else np.empty((x2.shape[0], n_out), np.float32)
    _run(qtype, blocks, x2, y)
    return y[0] if one and out is None else y


def _run(qtype, blocks, x, y) -> None:
    if qtype == Q.Q8_0:
        _q8_0(blocks, x, _F16, y)
    elif qtype in (Q.Q4_0, Q.Q4_1):
        _q4(blocks, x, _block_sums(x, 32), _F16, y, GGML_QUANT_SIZES[qtype][1])
    elif qtype in (Q.Q5_0, Q.Q5_1):
        _q5(blocks, x, _block_sums(x, 32), _F16, y, GGML_QUANT_SIZES[qtype][1])
    elif qtype in (Q.Q4_K, Q.Q5_K):
        _k45(blocks, x, _block_sums(x, 32), _F16, y, GGML_QUANT_SIZES[qtype][1])
    else:
        _q6_k(blocks, x, _F16, y)


_warm_lock = threading.Lock()
_warmed: dict = {}  # qtype -> seconds its first call took (compile, or load from numba's cache)


def warm(qtypes=KERNELS) -> dict:
    """Compile (or load from numba's on-disk cache) the kernels of `qtypes` with a tiny call each;
    {qtype name: seconds}. Safe from any thread; a type already warm costs nothing."""
    took = {}
    for qtype in qtypes:
        if not has_kernel(qtype):
            continue
        with _warm_lock:
            if qtype not in _warmed:
                block, size = GGML_QUANT_SIZES[qtype]
                t0 = time.perf_counter()
                _run(qtype, np.zeros((1, size), np.uint8), np.zeros((1, block), np.float32),
                     np.empty((1, 1), np.float32))
                _warmed[qtype] = time.perf_counter() - t0
        took[qtype.name] = _warmed[qtype]
    return took


def warm_in_background(qtypes) -> threading.Thread | None:
    """warm(qtypes) on a daemon thread (at model load), so no keystroke waits for a compile."""
    if numba is None:
        return None
    t = threading.Thread(target=warm, args=(tuple(qtypes),), name="qmatvec-warm", daemon=True)
    t.start()
    return t
