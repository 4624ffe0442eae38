"""x as the quantised kernels take it (engine/computing/qdot.py): each sub-block's sum of x, and
where the CPU has VNNI or AVX2 (qmadd.py), x split into int8 pieces for the nibble kernels (qdot's
module docstring gives the decomposition and its error). Written so LLVM vectorises the loops over
a sub-block's 32 inputs: the largest |x| found on the float32 bits as integers, the digits without
a branch, in float32 arithmetic (exact there), which AVX2 converts in vectors as it does not int64."""

from __future__ import annotations

import numpy as np

try:
    from numba import njit

    from attnviz.engine.computing import kernel_cache
except ImportError:  # qmatvec then has no kernels
    njit = None
else:
    kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

PIECES = 3  # int8 pieces a nibble kernel splits x into where the CPU has VNNI (qdot's docstring)
TOP = 127 * 65793  # the largest integer of PIECES balanced base-256 digits
_FINITE = 0x7F800000  # float32 bits of |x| below this: finite (inf and nan at or above)
_HALF, _BASE, _BASE_INV = np.float32(128), np.float32(256), np.float32(1 / 256)  # (float32: pieces_x's digits)

if njit:

    @njit(cache=True, nogil=True)
    def pieces_x(x, n_sub):
        """x [m, n_sub 32] -> ((xp int8 [m, n_sub PIECES 32], cs float32 [m, n_sub]), xs [m, n_sub]):
        per sub-block, x_j = (65536 xp_0,j + 256 xp_1,j + xp_2,j) cs + a remainder within cs / 2,
        the pieces in [-128, 127], cs the power of 2 that puts the sub-block's largest |x| within
        TOP cs; xs as sums gives it. A sub-block with a non-finite x gets unit nan (its outputs
        nan), one of zeros pieces 0. The digits of N_j = round(x_j / cs) (exact: cs a power of 2)
        in float32, which AVX2 rounds and converts 8 lanes at a time (it has no packed float64 ->
        int64): |N_j| <= TOP < 2^23, so N_j and each step after it are integers float32 holds."""
        m = x.shape[0]
        xp = np.zeros((m, n_sub * PIECES * 32), np.int8)
        cs = np.empty((m, n_sub), np.float32)
        inverse = np.empty(n_sub)  # 1 / cs; 0: a non-finite sub-block (its pieces stay 0)
        wide, top32 = np.empty(1), np.empty(1, np.float32)  # (float bits: frexp and ldexp call libm)
        exponent, top_bits = wide.view(np.int64), top32.view(np.int32)
        for i in range(m):
            bits, xi, xpi = x[i].view(np.int32), x[i], xp[i]  # (bits as integers: their order is |x|'s)
            for s in range(n_sub):
                top = 0  # the bits of the sub-block's largest |x|
                for j in range(s * 32, s * 32 + 32):
                    top = max(top, bits[j] & 0x7FFFFFFF)
                top_bits[0] = top
                wide[0] = np.float64(top32[0]) / TOP
                e = max((exponent[0] >> 52) - 1022, -149) if top > 0 else 0  # top < TOP 2^e
                exponent[0] = (e + 1023) << 52  # (2^-149: float32's least, x's own unit)
                cs[i, s] = wide[0] if top < _FINITE else np.nan
                exponent[0] = (1023 - e) << 52  # 1 / cs
                inverse[s] = wide[0] if top < _FINITE else 0.0
            for s in range(n_sub):
                u, o = inverse[s], s * PIECES * 32  # (digit i of input j at o + 32 i + j; PIECES = 3)
                if u == 0:
                    continue
                for j in range(32):
                    n = np.float32(np.rint(np.float64(xi[s * 32 + j]) * u))  # N_j
                    high = np.floor((n + _HALF) * _BASE_INV)  # (N_j - d_2) / 256
                    d0 = np.floor((high + _HALF) * _BASE_INV)  # d_0 (|N_j| <= TOP: no wrap)
                    xpi[o + 64 + j] = np.int8(n - _BASE * high)  # d_2, balanced: in [-128, 127]
                    xpi[o + 32 + j] = np.int8(high - _BASE * d0)  # d_1
                    xpi[o + j] = np.int8(d0)
        return (xp, cs), sums(x, n_sub, 32)

    @njit(cache=True, nogil=True)
    def sums(x, n_sub, S):  # x [m, n_sub S] -> [m, n_sub]: each sub-block's sum, as the kernels take it
        xs = np.zeros((x.shape[0], n_sub), np.float32)
        for i in range(x.shape[0]):
            for j in range(S):  # (j outer: the sub-blocks' sums are independent chains, each in order j)
                for s in range(n_sub):
                    xs[i, s] += x[i, s * S + j]
        return xs
