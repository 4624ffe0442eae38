"""The compiled arithmetic of one new row that engine/computing/onerow.py's steps and onerow_block.py's
calls share (numba, `cache=True`): RMSNorm, RoPE, the scores of one query row against the cached
keys (the keys ahead and the values fetched into the cache as they are read: a step's K and V
come from memory; a key's vectors loaded once for up to 3 query heads, and where d_head is 64 or
128 the query heads' vectors held through every key), softmax (its exp an expf on vector lanes:
exp_into), the weighted values (a KV head's values read once for up to 3 query heads, the sums
in registers), SiLU, and the array types their signatures use; the vector code they call is
lanes.py's. No Qt, no file access: arrays in, arrays out."""

from __future__ import annotations

import numpy as np
from numba import njit, types

from attnviz.engine.computing import kernel_cache
from attnviz.engine.computing.lanes import (
    dot_lanes, dots_lanes_2, dots_lanes_3, keys_run_1x4, keys_run_1x8, keys_run_2x4, keys_run_2x8,
    keys_run_3x4, keys_run_3x8, max_lanes, prefetch_at, sum_lanes, weighted_1x1, weighted_1x2,
    weighted_1x4, weighted_2x1, weighted_2x2, weighted_2x4, weighted_3x1, weighted_3x2, weighted_3x4)

kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)
F32 = types.float32
I64 = types.int64


def array_type(ndim: int, readonly: bool = False):
    return types.Array(F32, ndim, "A", readonly=readonly)


W1, W2, W3 = array_type(1), array_type(2), array_type(3)  # written
R1, R2, R3 = array_type(1, True), array_type(2, True), array_type(3, True)  # read (a mutable array converts)
C3 = types.Array(F32, 3, "C", readonly=True)  # keys or values: [n_kv_head, positions, d_head]
W3C = types.Array(F32, 3, "C")  # a pattern row of its own (a generation step's)
# nogil as qmatvec's kernels; NumPy's division (inf, nan) instead of Python's ZeroDivisionError
JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**JIT)
def rms_norm_of(x, gain, eps, out):  # [n, d] -> out [n, d]: x / sqrt(mean(x²) + eps) * gain
    n, d = x.shape
    g = np.ascontiguousarray(gain)  # (a gain of either layout read with unit steps: vector lanes)
    d8 = d // 8 * 8
    for i in range(n):
        # (float64: a sum as exact as NumPy's pairwise one, or more; square j on lane j % 8, the
        # lanes added in one fixed tree, the tail after: eight sums at a time, not one chain)
        t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = 0.0
        for j in range(0, d8, 8):
            t0 += np.float64(x[i, j] * x[i, j])
            t1 += np.float64(x[i, j + 1] * x[i, j + 1])
            t2 += np.float64(x[i, j + 2] * x[i, j + 2])
            t3 += np.float64(x[i, j + 3] * x[i, j + 3])
            t4 += np.float64(x[i, j + 4] * x[i, j + 4])
            t5 += np.float64(x[i, j + 5] * x[i, j + 5])
            t6 += np.float64(x[i, j + 6] * x[i, j + 6])
            t7 += np.float64(x[i, j + 7] * x[i, j + 7])
        total = ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7))
        for j in range(d8, d):
            total += np.float64(x[i, j] * x[i, j])
        ms = np.float32(np.sqrt(np.float32(total) / np.float32(d) + eps))
        for j in range(d):
            out[i, j] = x[i, j] / ms * g[j]


@njit(**JIT)
def rotate_of(x, cos, sin):  # x [h, n, d_head], cos, sin [n, d_head]: x cos + rotate_half(x) sin
    n_h, n, d = x.shape  # (in place)
    half = d // 2
    for h in range(n_h):
        for i in range(n):
            for j in range(half):
                a, b = x[h, i, j], x[h, i, j + half]
                x[h, i, j] = a * cos[i, j] + -b * sin[i, j]
                x[h, i, j + half] = b * cos[i, j + half] + a * sin[i, j + half]


@njit(**JIT)
def prefix(a, whole):  # whether a [n_kv_head, T, d_head] is whole[:, :T] (whole of size 0: no)
    return (whole.size > 0 and whole.shape[0] == a.shape[0] and whole.shape[2] == a.shape[2]
            and whole.shape[1] >= a.shape[1] and a.strides[0] == whole.strides[0]
            and a.strides[1] == whole.strides[1] and a.strides[2] == whole.strides[2]
            and a.ctypes.data == whole.ctypes.data)


@njit(**JIT)
def minus_max_of(s):  # [n_head, 1, T] in place: each row minus its max (softmax's first step)
    n_head, _, T = s.shape
    n16 = T // 16 if s.strides[2] == 4 and s.strides[0] % 4 == 0 else 0  # (rows with unit steps)
    for h in range(n_head):
        top = s[h, 0, 0]
        if n16:  # (16 running maxima side by side; a max is the same whatever its order)
            top = max_lanes(s, h * (s.strides[0] // 4), n16)
        for t in range(16 * n16, T):
            top = max(top, s[h, 0, t])
        for t in range(T):
            s[h, 0, t] -= top


AHEAD = 16  # scores_ahead_of: the key this many positions on is fetched into the cache

NO_VALUES = np.zeros((0, 0, 0), np.float32)  # (scores_ahead_of: no values to fetch)


@njit(**JIT)
def scores_of(q, k, T, bias, scale, n_group, top, out):  # _scores on keys k[:, :T] of either layout
    scores_ahead_of(q, k, T, bias, scale, n_group, top, out, NO_VALUES)


@njit(**JIT)
def scores_ahead_of(q, k, T, bias, scale, n_group, top, out, v):
    """scores_of, the values v [n_kv_head, >= T, d_head] that the weighted values read next
    fetched into the cache beside the keys, position by position (v of size 0: none)."""
    n_head, _, d = q.shape
    kc = np.ascontiguousarray(k)  # (read at flat offsets; a cache's keys already are)
    qs = np.empty((n_group, d), np.float32)
    n16 = d // 16
    fetch_v = v.size > 0 and v.strides[2] == 4 and v.strides[0] % 4 == 0 and v.strides[1] % 4 == 0
    for g in range(n_head // n_group):  # a KV head's keys read once for its n_group query heads
        h0 = g * n_group
        for i in range(n_group):
            for j in range(d):
                qs[i, j] = q[h0 + i, 0, j] * scale
        if fetch_v and bias.size == 0 and d % 16 == 0:  # (no mask, no tail past the lanes)
            _fetching_keys(qs, kc, g, T, out, h0, v, AHEAD)
            continue
        for t in range(T):
            at = (g * kc.shape[1] + t) * d
            if t + AHEAD < T:
                for j in range(0, d, 16):
                    prefetch_at(kc, at + AHEAD * d + j)
            if fetch_v:
                at_v = (g * v.strides[0] + t * v.strides[1]) // 4
                for j in range(0, d, 16):
                    prefetch_at(v, at_v + j)
            for i in range(n_group):
                s = dot_lanes(qs, i * d, kc, at, n16)
                for j in range(16 * n16, d):
                    s += qs[i, j] * kc[g, t, j]
                out[h0 + i, 0, t] = s + bias[0, t] if bias.size else s
    if top:
        minus_max_of(out)


@njit(**JIT)
def _fetching_keys(qs, kc, g, T, out, h0, v, ahead):
    """out[h0 + i, 0, t] = dot_lanes of qs[i] and kc[g, t] (d_head a multiple of 16, no mask),
    the key `ahead` positions on (its read started before it is needed) and the value row at t
    fetched into the cache as key t is read."""
    n_group, d = qs.shape
    n16 = d // 16
    if (n16 == 4 or n16 == 8) and out.strides[2] == 4 and out.strides[0] % 4 == 0:
        _keys_runs(qs, kc, g, T, out, h0, v, ahead)
        return
    for t in range(T):
        at = (g * kc.shape[1] + t) * d
        if t + ahead < T:
            for j in range(0, d, 16):
                prefetch_at(kc, at + ahead * d + j)
        at_v = (g * v.strides[0] + t * v.strides[1]) // 4
        for j in range(0, d, 16):
            prefetch_at(v, at_v + j)
        i = 0  # (3 or 2 query heads at a time: the key's vectors loaded once for them)
        while i + 3 <= n_group:
            out[h0 + i, 0, t], out[h0 + i + 1, 0, t], out[h0 + i + 2, 0, t] = dots_lanes_3(
                qs, i * d, d, kc, at, n16)
            i += 3
        if i + 2 <= n_group:
            out[h0 + i, 0, t], out[h0 + i + 1, 0, t] = dots_lanes_2(qs, i * d, d, kc, at, n16)
        elif i < n_group:
            out[h0 + i, 0, t] = dot_lanes(qs, i * d, kc, at, n16)


@njit(**JIT)
def _keys_runs(qs, kc, g, T, out, h0, v, ahead):
    """_fetching_keys where d_head is 64 or 128 and out's rows are read with unit steps: up to 3
    query heads at a time through every key (keys_run_*), their query vectors held throughout."""
    n_group, d = qs.shape
    os_ = out.strides[0] // 4
    ko, vo, vs = g * kc.shape[1] * d, g * v.strides[0] // 4, v.strides[1] // 4
    i = 0
    while i < n_group:
        nh = min(3, n_group - i)
        oo = (h0 + i) * os_
        if d == 64:
            if nh == 3:
                keys_run_3x4(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
            elif nh == 2:
                keys_run_2x4(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
            else:
                keys_run_1x4(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
        elif nh == 3:
            keys_run_3x8(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
        elif nh == 2:
            keys_run_2x8(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
        else:
            keys_run_1x8(qs, i * d, d, kc, ko, T, out, oo, os_, v, vo, vs, ahead)
        i += nh


@njit(**JIT)
def lane_sum(e):  # [n] float32, C order -> its sum (on vector lanes; one order for every caller)
    n16 = e.shape[0] // 16
    total = sum_lanes(e, 0, n16)
    for t in range(16 * n16, e.shape[0]):
        total += e[t]
    return total


# exp on vector lanes (numba's np.exp calls libm one float at a time): Cephes' expf, x = k ln 2 + r
# (ln 2 in two parts), exp(r) a degree-6 polynomial, 2^k from its exponent bits; within 2 ulp of
# NumPy's exp (tests/engine/test_onerow.py); x below -88 (-inf too) gives 2^-127 y, taken as 0,
# and x above 88 is taken as 88 (exp's float32 range ends at 88.7).
_EXP_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                       4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_LOG2E, _LN2_HI, _LN2_LO = np.float32(1.44269504088896341), np.float32(0.693359375), np.float32(-2.12194440e-4)


@njit(**JIT)
def exp_into(x, out):  # x [n] -> out [n] = exp(x) (out may be x)
    n = x.shape[0]
    exp_with(x, out, np.empty(n, np.float32), np.empty(n, np.int32))


@njit(**JIT)
def exp_with(x, out, y, bits):  # exp_into, its two rows of scratch given: y [>= n] float32, bits int32
    n = x.shape[0]
    p0, p1, p2, p3, p4, p5 = _EXP_P
    for i in range(n):
        v = min(max(x[i], np.float32(-88.0)), np.float32(88.0))
        k = np.floor(v * _LOG2E + np.float32(0.5))
        r = v - k * _LN2_HI - k * _LN2_LO
        y[i] = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + np.float32(1.0)
        bits[i] = (np.int32(k) + np.int32(127)) << np.int32(23)  # 2^k (k = -127: 0)
    scale = bits.view(np.float32)
    for i in range(n):
        out[i] = y[i] * scale[i]


@njit(**JIT)
def softmax_of(s):  # [n_head, 1, T] in place, each row's max already subtracted: exp, over its sum
    n_head, _, T = s.shape
    e = np.empty(T, np.float32)  # (a row of its own: the same vector code whatever s's layout)
    y, bits = np.empty(T, np.float32), np.empty(T, np.int32)
    for h in range(n_head):
        for t in range(T):
            e[t] = s[h, 0, t]
        exp_with(e, e, y, bits)
        total = lane_sum(e)
        for t in range(T):  # (divided in e, read with unit steps: on vector lanes for any s)
            e[t] /= total
        for t in range(T):
            s[h, 0, t] = e[t]


@njit(**JIT)
def silu_of(x, out):  # [1, n] -> out [1, n] = x / (1 + exp(-x)) (layers.silu's operations)
    n = x.shape[1]
    xc = np.ascontiguousarray(x[0])  # (x and e read with unit steps: the division on vector lanes)
    e = np.empty(n, np.float32)
    for j in range(n):
        e[j] = -xc[j]
    exp_into(e, e)
    for j in range(n):
        e[j] = xc[j] / (e[j] + np.float32(1.0))
    for j in range(n):
        out[0, j] = e[j]


@njit(**JIT)
def swiglu_of(hidden, d_ff, h, y, bits):
    """hidden [>= 2 d_ff] (gate | up, C order) -> h [:d_ff] = silu(gate) up: silu_of's operations,
    then the product with up, element by element (the same bits as silu_of and a multiply), in
    rows read with unit steps and scratch given (y, bits: exp_with's, [>= d_ff])."""
    e = h[:d_ff]
    for j in range(d_ff):
        e[j] = -hidden[j]
    exp_with(e, e, y, bits)
    for j in range(d_ff):
        e[j] = hidden[j] / (e[j] + np.float32(1.0)) * hidden[d_ff + j]


@njit(**JIT)
def weighted_of(pattern, v, n_group, z):  # _weighted_values on values v[:, :T] of either layout
    n_head, _, T = pattern.shape
    d = v.shape[2]
    if (v.strides[2] == 4 and pattern.strides[2] == 4 and z.strides[2] == 4 and v.strides[0] % 4 == 0
            and v.strides[1] % 4 == 0 and pattern.strides[0] % 4 == 0 and z.strides[0] % 4 == 0):
        _weighted_rows(pattern, v, n_group, z)
        return
    zg = np.empty((n_group, d), np.float32)
    for g in range(n_head // n_group):  # a KV head's values read once for its n_group query heads
        h0 = g * n_group
        zg[:] = 0.0
        for t in range(T):
            for i in range(n_group):
                a = pattern[h0 + i, 0, t]
                for j in range(d):
                    zg[i, j] += a * v[g, t, j]
        for i in range(n_group):
            for j in range(d):
                z[h0 + i, 0, j] = zg[i, j]


@njit(**JIT)
def _weighted_rows(pattern, v, n_group, z):
    """weighted_of where each array's rows are read with unit steps: up to 3 query heads of a KV
    head at a time (their sums in registers), their outputs 64 (then 32, 16) at a time on vector
    lanes over the positions of its values (a value row read once for 64), the rest one by one;
    every output's sum over positions in order."""
    n_head, _, T = pattern.shape
    d = v.shape[2]
    n16, vs, as_, zs = d // 16, v.strides[1] // 4, pattern.strides[0] // 4, z.strides[0] // 4
    for g in range(n_head // n_group):
        h0, vo = g * n_group, g * v.strides[0] // 4
        for h in range(h0, h0 + n_group, 3):
            nh = min(3, h0 + n_group - h)  # (1, 2 or 3: weighted_1x, _2x, _3x)
            c = 0
            while c < n16:
                ao, vc, zc = h * as_, vo + 16 * c, h * zs + 16 * c
                if c + 4 <= n16:
                    if nh == 3:
                        weighted_3x4(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    elif nh == 2:
                        weighted_2x4(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    else:
                        weighted_1x4(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    c += 4
                elif c + 2 <= n16:
                    if nh == 3:
                        weighted_3x2(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    elif nh == 2:
                        weighted_2x2(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    else:
                        weighted_1x2(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    c += 2
                else:
                    if nh == 3:
                        weighted_3x1(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    elif nh == 2:
                        weighted_2x1(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    else:
                        weighted_1x1(pattern, ao, as_, v, vc, vs, T, z, zc, zs)
                    c += 1
            for i in range(h, h + nh):
                for j in range(16 * n16, d):
                    total = np.float32(0.0)
                    for t in range(T):
                        total += pattern[i, 0, t] * v[g, t, j]
                    z[i, 0, j] = total


NO_BIAS = np.zeros((0, 0), np.float32)
def whole(a):
    """The C-contiguous float32 array a [n_kv_head, T, d_head] is a view of, where it may be its
    first T positions (checked by prefix), else an empty one."""
    base = a.base
    if (isinstance(base, np.ndarray) and base.ndim == 3 and base.dtype == np.float32
            and base.flags.c_contiguous):
        return base
    return NO_WHOLE


NO_WHOLE = np.zeros((0, 0, 0), np.float32)
