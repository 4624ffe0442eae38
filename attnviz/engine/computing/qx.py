"""x as the quantised kernels take it (engine/computing/qdot.py): each sub-block's sum of x, and
where the CPU has VNNI, x split into int8 pieces for the nibble kernels (qdot's module docstring
gives the decomposition and its error). Written so LLVM vectorises the loops over a sub-block's
32 inputs: the largest |x| found on the float32 bits as integers, the digits without a branch."""

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

if njit:

    @njit(cache=True, nogil=True)
    def pieces_x(x, n_sub):
        """x [m, n_sub 32] -> ((xp int8 [m, n_sub PIECES 32], cs float32 [m, n_sub]), xs [m, n_sub]):
        per sub-block, x_j = (65536 xp_0,j + 256 xp_1,j + xp_2,j) cs + a remainder within cs / 2,
        the pieces in [-128, 127], cs the power of 2 that puts the sub-block's largest |x| within
        TOP cs; xs as sums gives it. A sub-block with a non-finite x gets unit nan (its outputs
        nan), one of zeros pieces 0."""
        m = x.shape[0]
        xp = np.zeros((m, n_sub * PIECES * 32), np.int8)
        cs = np.empty((m, n_sub), np.float32)
        wide, top32 = np.empty(1), np.empty(1, np.float32)  # (float bits: frexp and ldexp call libm)
        exponent, top_bits = wide.view(np.int64), top32.view(np.int32)
        for i in range(m):
            bits = x[i].view(np.int32)
            for s in range(n_sub):
                top_bits[0] = _top(bits[s * 32:s * 32 + 32])
                wide[0] = np.float64(top32[0]) / TOP
                e = max((exponent[0] >> 52) - 1022, -149) if top_bits[0] > 0 else 0  # top < TOP 2^e
                exponent[0] = (e + 1023) << 52  # (2^-149: float32's least, x's own unit)
                cs[i, s] = wide[0] if top_bits[0] < _FINITE else np.nan
                exponent[0] = (1023 - e) << 52  # 1 / cs
                if top_bits[0] < _FINITE:
                    _digits(x[i, s * 32:s * 32 + 32], wide[0], xp[i, s * PIECES * 32:(s + 1) * PIECES * 32])
        return (xp, cs), sums(x, n_sub, 32)

    @njit(cache=True, nogil=True)
    def _top(bits):  # the bits of a sub-block's largest |x| (x as int32 bits: their order is |x|'s)
        top = 0
        for j in range(32):
            top = max(top, bits[j] & 0x7FFFFFFF)
        return top

    @njit(cache=True, nogil=True)
    def _digits(x, inverse, xp):
        """xp[32 i + j] = digit i of N_j = round(x_j inverse) (a power of 2: exact) in balanced base
        256: N_j = 65536 d_0 + 256 d_1 + d_2, each in [-128, 127]."""
        for j in range(32):
            n = np.int64(np.rint(np.float64(x[j]) * inverse))
            for i in range(PIECES - 1, -1, -1):
                d = ((n + 128) & 255) - 128
                xp[32 * i + j] = np.int8(d)
                n = (n - d) >> 8

    @njit(cache=True, nogil=True)
    def sums(x, n_sub, S):  # x [m, n_sub S] -> [m, n_sub]: each sub-block's sum, as the kernels take it
        xs = np.zeros((x.shape[0], n_sub), np.float32)
        for i in range(x.shape[0]):
            for j in range(S):  # (j outer: the sub-blocks' sums are independent chains, each in order j)
                for s in range(n_sub):
                    xs[i, s] += x[i, s * S + j]
        return xs
