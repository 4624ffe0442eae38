"""The steps of a layer other than its matrix products, for one new row (a keystroke's run with the
KV cache, a generation step) on the quantised kernels: each step one compiled call instead of a
chain of NumPy calls on tiny arrays, whose per-call cost, not their arithmetic, is a one-row
layer's time beside its products.

    rms_norm(x, gain, eps)          [1, d] -> [1, d]
    rotate(q, k, cos, sin)          q [n_head, 1, d_head], k [n_kv_head, 1, d_head], rotate-half RoPE in place
    dense_attention(q, k, v, c, cache)  one query row of every head over all T keys (grouped-query:
                                    head h reads KV head h // n_group): scores, the trace's edits,
                                    softmax, its pattern recorded, weighted values -> z [n_head, 1, d_head];
                                    each KV head's keys and values read once for its n_group heads
    silu(x)                         [1, n] -> [1, n]: x / (1 + exp(-x)), SwiGLU's gate

Each computes what the NumPy step (layers.py) computes, in the same order of float32 operations
except the sums (a norm's mean square, a score's dot product), which are summed in another order:
equal within float32 rounding (tests/engine/test_onerow.py). The trace's named points are called
as families.dense_attention calls them (where the trace has no edits, the scores' hook, which
then changes nothing, is left out and each row's max is subtracted in the scores' call).
Softmax's and SwiGLU's exp are an expf of their own on vector lanes (numba's np.exp calls libm one
float at a time): within 2 ulp of NumPy's, and the same function on every one-row path.
A pre-norm layer of one row runs in three compiled calls around the trace's points where it can, a
generation step's in two (onerow_block.pre_norm_block, Consts.block; qmatvec.warm hands it the
serial kernel it compiles in).

Compiled by numba at import with explicit signatures (arrays of any layout; `cache=True`: loaded
from numba's cache at later starts), nogil like qmatvec's kernels; qmatvec.warm imports this module
while a model loads, and the forward pass takes these steps only once it has (layers.one_row_steps).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import njit, types

from attnviz.engine.computing.layers import silu as layers_silu
from attnviz.engine.computing.trace import NOTHING

_F = types.float32
_I = types.int64


def _array(ndim: int, readonly: bool = False):
    return types.Array(_F, ndim, "A", readonly=readonly)


_W1, _W2, _W3 = _array(1), _array(2), _array(3)  # written
_R1, _R2, _R3 = _array(1, True), _array(2, True), _array(3, True)  # read (a mutable array converts)
_C3 = types.Array(_F, 3, "C", readonly=True)  # keys or values: [n_kv_head, positions, d_head]
_W3C = types.Array(_F, 3, "C")  # a pattern row of its own (a generation step's)
_FAST = {"reassoc", "nsz"}  # dot products in several partial sums (vector lanes)
# nogil as qmatvec's kernels; NumPy's division (inf, nan) instead of Python's ZeroDivisionError
_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**_JIT)
def _rms_norm_of(x, gain, eps, out):  # [n, d] -> out [n, d]: x / sqrt(mean(x²) + eps) * gain
    n, d = x.shape
    for i in range(n):
        total = 0.0  # (float64: a sum as exact as NumPy's pairwise one, or more)
        for j in range(d):
            total += np.float64(x[i, j] * x[i, j])
        ms = np.float32(np.sqrt(np.float32(total) / np.float32(d) + eps))
        for j in range(d):
            out[i, j] = x[i, j] / ms * gain[j]


@njit(types.void(_R2, _R1, _F, _W2), **_JIT)
def _rms_norm(x, gain, eps, out):
    _rms_norm_of(x, gain, eps, out)


@njit(**_JIT)
def _rotate_of(x, cos, sin):  # x [h, n, d_head], cos, sin [n, d_head]: x cos + rotate_half(x) sin
    n_h, n, d = x.shape  # (in place)
    half = d // 2
    for h in range(n_h):
        for i in range(n):
            for j in range(half):
                a, b = x[h, i, j], x[h, i, j + half]
                x[h, i, j] = a * cos[i, j] + -b * sin[i, j]
                x[h, i, j + half] = b * cos[i, j + half] + a * sin[i, j + half]


@njit(types.void(_W3, _R2, _R2), **_JIT)
def _rotate(x, cos, sin):
    _rotate_of(x, cos, sin)


@njit(**_JIT)
def _prefix(a, whole):  # whether a [n_kv_head, T, d_head] is whole[:, :T] (whole of size 0: no)
    return (whole.size > 0 and whole.shape[0] == a.shape[0] and whole.shape[2] == a.shape[2]
            and whole.shape[1] >= a.shape[1] and a.strides[0] == whole.strides[0]
            and a.strides[1] == whole.strides[1] and a.strides[2] == whole.strides[2]
            and a.ctypes.data == whole.ctypes.data)


@njit(**_JIT)
def _minus_max_of(s):  # [n_head, 1, T] in place: each row minus its max (softmax's first step)
    n_head, _, T = s.shape
    for h in range(n_head):
        top = s[h, 0, 0]
        for t in range(1, T):
            top = max(top, s[h, 0, t])
        for t in range(T):
            s[h, 0, t] -= top


@njit(fastmath=_FAST, **_JIT)
def _scores_of(q, k, T, bias, scale, n_group, top, out):  # _scores on keys k[:, :T] of either layout
    n_head, _, d = q.shape
    qs = np.empty((n_group, d), np.float32)
    for g in range(n_head // n_group):  # a KV head's keys read once for its n_group query heads
        h0 = g * n_group
        for i in range(n_group):
            for j in range(d):
                qs[i, j] = q[h0 + i, 0, j] * scale
        for t in range(T):
            for i in range(n_group):
                s = np.float32(0.0)
                for j in range(d):
                    s += qs[i, j] * k[g, t, j]
                out[h0 + i, 0, t] = s + bias[0, t] if bias.size else s
    if top:
        _minus_max_of(out)


@njit(types.void(_R3, _R3, _C3, _R2, _F, _I, types.boolean, _W3), **_JIT)
def _scores(q, k, whole, bias, scale, n_group, top, out):
    """q [n_head, 1, d_head], k [n_kv_head, T, d_head] -> out [n_head, 1, T] = (q scale) kᵀ + bias,
    head h against KV head h // n_group; bias [1, T] (0 or -inf), or of size 0 (none); `top`:
    each row's max subtracted too (_minus_max). `whole`: the C-contiguous array k is the first
    positions of, if it is (a cached run's keys with room after them, trace.append_positions),
    read as such (vectorised); else k itself."""
    if _prefix(k, whole):
        _scores_of(q, whole, k.shape[1], bias, scale, n_group, top, out)
    else:
        _scores_of(q, k, k.shape[1], bias, scale, n_group, top, out)


@njit(types.void(_W3), **_JIT)
def _minus_max(s):  # _minus_max_of, after the trace's edits to the scores
    _minus_max_of(s)


@njit(fastmath=_FAST, **_JIT)
def _sum(e):  # [n] float32, C order -> its sum (on vector lanes; one order for every caller)
    total = np.float32(0.0)
    for t in range(e.shape[0]):
        total += e[t]
    return total


# exp on vector lanes (numba's np.exp calls libm one float at a time): Cephes' expf, x = k ln 2 + r
# (ln 2 in two parts), exp(r) a degree-6 polynomial, 2^k from its exponent bits; within 2 ulp of
# NumPy's exp (tests/engine/test_onerow.py); x below -88 (-inf too) gives 2^-127 y, taken as 0,
# and x above 88 is taken as 88 (exp's float32 range ends at 88.7).
_EXP_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                       4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_LOG2E, _LN2_HI, _LN2_LO = np.float32(1.44269504088896341), np.float32(0.693359375), np.float32(-2.12194440e-4)


@njit(**_JIT)
def _exp_into(x, out):  # x [n] -> out [n] = exp(x) (out may be x)
    n = x.shape[0]
    y = np.empty(n, np.float32)
    bits = np.empty(n, np.int32)
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


@njit(**_JIT)
def _softmax_of(s):  # [n_head, 1, T] in place, each row's max already subtracted: exp, over its sum
    n_head, _, T = s.shape
    e = np.empty(T, np.float32)  # (a row of its own: the same vector code whatever s's layout)
    for h in range(n_head):
        for t in range(T):
            e[t] = s[h, 0, t]
        _exp_into(e, e)
        total = _sum(e)
        for t in range(T):
            s[h, 0, t] = e[t] / total


@njit([types.void(_W3), types.void(_W3C)], **_JIT)
def _softmax(s):
    _softmax_of(s)


@njit(**_JIT)
def _silu_of(x, out):  # [1, n] -> out [1, n] = x / (1 + exp(-x)) (layers.silu's operations)
    n = x.shape[1]
    e = np.empty(n, np.float32)
    for j in range(n):
        e[j] = -x[0, j]
    _exp_into(e, e)
    for j in range(n):
        out[0, j] = x[0, j] / (e[j] + np.float32(1.0))


@njit(types.void(_R2, _W2), **_JIT)
def _silu(x, out):
    _silu_of(x, out)


def silu(x):  # [1, n] -> [1, n] (any other shape: layers.silu)
    if x.ndim != 2 or x.shape[0] != 1 or x.dtype != np.float32:
        return layers_silu(x)
    out = np.empty(x.shape, np.float32)
    _silu(x, out)
    return out


@njit(**_JIT)
def _weighted_of(pattern, v, n_group, z):  # _weighted_values on values v[:, :T] of either layout
    n_head, _, T = pattern.shape
    d = v.shape[2]
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


@njit(types.void(_R3, _R3, _C3, _I, _W3), **_JIT)
def _weighted_values(pattern, v, whole, n_group, z):
    """pattern [n_head, 1, T], v [n_kv_head, T, d_head] -> z [n_head, 1, d_head]: each head's
    weights times its KV head's values (h // n_group); `whole` as _scores'."""
    if _prefix(v, whole):
        _weighted_of(pattern, whole, n_group, z)
    else:
        _weighted_of(pattern, v, n_group, z)


_NO_BIAS = np.zeros((0, 0), np.float32)
USE_BLOCK = True  # False: a one-row layer takes these steps one by one (benchmarks time both)


def rms_norm(x, gain, eps):  # [1, d] -> [1, d] (any other shape: layers.rms_norm's NumPy)
    out = np.empty(x.shape, np.float32)
    _rms_norm(x, gain, np.float32(eps), out)
    return out


def rotate(q, k, cos, sin):  # q [n_head, n, d_head], k [n_kv_head, n, d_head], cos, sin [n, d_head]
    """Both rotated by position in place (layers.apply_rope's arithmetic) -> q, k."""
    _rotate(q, cos, sin)
    _rotate(k, cos, sin)
    return q, k


def dense_attention(q, k, v, c, cache=NOTHING):
    """families.dense_attention of one query row: q [n_head, 1, d_head], k and v [n_kv_head, T,
    d_head] -> z [n_head, 1, d_head]; the scores written into cache.rows when the trace gives them
    (its patterns), the trace's edits applied to the scores and the pattern as there."""
    n_head, _, d = q.shape
    T = k.shape[1]
    s = cache.rows if cache.rows is not None else np.empty((n_head, 1, T), np.float32)
    edits = _edits_scores(cache)
    _scores(q, k, _whole(k), _NO_BIAS if c.bias is None else c.bias, np.float32(c.scale),
            c.n_group, not edits, s)  # (no edits: each row's max subtracted in the same call)
    if edits:
        s = cache.scores(s)  # knockouts
        _minus_max(s)
    _softmax(s)
    cache.pattern(s)  # recorded (and patched); the run may stop here
    z = np.empty((n_head, 1, v.shape[-1]), np.float32)
    _weighted_values(s, v, _whole(v), c.n_group, z)
    return z


def _edits_scores(cache) -> bool:
    """Whether the trace slot may edit the scores: its trace has edits (knockouts among them)."""
    if cache is NOTHING:
        return False
    trace = getattr(cache, "trace", None)
    return trace is None or bool(trace.edits)  # (a slot of another kind: it may)


def _whole(a):
    """The C-contiguous float32 array a [n_kv_head, T, d_head] is a view of, where it may be its
    first T positions (checked by _prefix), else an empty one."""
    base = a.base
    if (isinstance(base, np.ndarray) and base.ndim == 3 and base.dtype == np.float32
            and base.flags.c_contiguous):
        return base
    return _NO_WHOLE


_NO_WHOLE = np.zeros((0, 0, 0), np.float32)


def fused(c, eps: float, rms: bool, block=None):
    """Consts c of a one-row run -> the same with these steps: attention, RoPE, SiLU, and the norm
    where the family's is RMSNorm (`rms`, of epsilon `eps`); and where `block` is given (the
    family's pre-norm block), the layer in compiled calls (onerow_block.pre_norm_block; `block`
    where those do not cover a layer)."""
    changes = {"attention": dense_attention, "rotate": rotate}
    if c.act is layers_silu:  # SwiGLU's gate on vector lanes (the block computes it the same)
        changes["act"] = silu
    if rms and block is not None:
        def one_row_block(x, layer, c1, cache=None):  # [1, d_model] -> [1, d_model]
            if not USE_BLOCK:
                return block(x, layer, c1, cache)
            return onerow_block.pre_norm_block(x, layer, c1, cache, eps, block)
        changes["block"] = one_row_block
    if rms:
        def norm(x, gain_bias):  # [1, d] -> [1, d]; a head's q and k norm [h, n, d] stay NumPy's
            if x.ndim == 2 and x.shape[0] == 1:
                return rms_norm(x, gain_bias[0], eps)
            return c.norm(x, gain_bias)
        changes["norm"] = norm
    return replace(c, **changes)


def warm(nibbles=None) -> None:
    """One call of each step on tiny arrays (the signatures are compiled, or loaded, at import);
    `nibbles`: the nibble types' serial kernel (qmatvec), the block's calls compiled (or loaded)
    around it."""
    x = np.ones((1, 4), np.float32)
    q, k = np.ones((2, 1, 4), np.float32), np.ones((1, 2, 4), np.float32)
    rms_norm(x, x[0], 1e-6)
    rotate(q, k[:, :1], x, x)

    class Cst:
        bias, scale, n_group = None, 0.5, 2
    dense_attention(q, k, k, Cst)
    if nibbles is not None:
        onerow_block.compile_block(nibbles)


from attnviz.engine.computing import onerow_block  # noqa: E402  (it builds on the steps above)
