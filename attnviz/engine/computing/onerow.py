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
generation step's in two (onerow_block.pre_norm_block, Consts.block; qmatvec.warm has it
compiled); and where the trace asks for nothing between the layers (a generation step, a
keystroke's patterns) every layer runs in one call (onerow_stack.stacked_rows).

Compiled by numba at import with explicit signatures (arrays of any layout; `cache=True`: loaded
from numba's cache at later starts), nogil like qmatvec's kernels; qmatvec.warm imports this module
while a model loads, and the forward pass takes these steps only once it has (layers.one_row_steps).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numba import njit, types

from attnviz.engine.computing import kernel_cache
from attnviz.engine.computing.rowmath import (
    C3, F32, I64, JIT, NO_BIAS, R1, R2, R3, W2, W3, W3C, minus_max_of, prefix, rms_norm_of,
    rotate_of, scores_of, silu_of, softmax_of, weighted_of, whole)
from attnviz.engine.computing.trace import NOTHING

kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

@njit(types.void(R2, R1, F32, W2), **JIT)
def _rms_norm(x, gain, eps, out):
    rms_norm_of(x, gain, eps, out)


@njit(types.void(W3, R2, R2), **JIT)
def _rotate(x, cos, sin):
    rotate_of(x, cos, sin)


@njit(types.void(R3, R3, C3, R2, F32, I64, types.boolean, W3), **JIT)
def _scores(q, k, whole, bias, scale, n_group, top, out):
    """q [n_head, 1, d_head], k [n_kv_head, T, d_head] -> out [n_head, 1, T] = (q scale) kᵀ + bias,
    head h against KV head h // n_group; bias [1, T] (0 or -inf), or of size 0 (none); `top`:
    each row's max subtracted too (_minus_max). `whole`: the C-contiguous array k is the first
    positions of, if it is (a cached run's keys with room after them, trace.append_positions),
    read as such (vectorised); else k itself."""
    if prefix(k, whole):
        scores_of(q, whole, k.shape[1], bias, scale, n_group, top, out)
    else:
        scores_of(q, k, k.shape[1], bias, scale, n_group, top, out)


@njit(types.void(W3), **JIT)
def _minus_max(s):  # minus_max_of, after the trace's edits to the scores
    minus_max_of(s)


@njit([types.void(W3), types.void(W3C)], **JIT)
def _softmax(s):
    softmax_of(s)


@njit(types.void(R2, W2), **JIT)
def _silu(x, out):
    silu_of(x, out)


def silu(x):  # [1, n] -> [1, n] (any other shape: NumPy's, as layers.silu computes it)
    if x.ndim != 2 or x.shape[0] != 1 or x.dtype != np.float32:
        out = np.negative(x)
        np.exp(out, out=out)
        out += np.float32(1.0)
        return np.divide(x, out, out=out)
    out = np.empty(x.shape, np.float32)
    _silu(x, out)
    return out


@njit(types.void(R3, R3, C3, I64, W3), **JIT)
def _weighted_values(pattern, v, whole, n_group, z):
    """pattern [n_head, 1, T], v [n_kv_head, T, d_head] -> z [n_head, 1, d_head]: each head's
    weights times its KV head's values (h // n_group); `whole` as _scores'."""
    if prefix(v, whole):
        weighted_of(pattern, whole, n_group, z)
    else:
        weighted_of(pattern, v, n_group, z)


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
    _scores(q, k, whole(k), NO_BIAS if c.bias is None else c.bias, np.float32(c.scale),
            c.n_group, not edits, s)  # (no edits: each row's max subtracted in the same call)
    if edits:
        s = cache.scores(s)  # knockouts
        _minus_max(s)
    _softmax(s)
    cache.pattern(s)  # recorded (and patched); the run may stop here
    z = np.empty((n_head, 1, v.shape[-1]), np.float32)
    _weighted_values(s, v, whole(v), c.n_group, z)
    return z


def _edits_scores(cache) -> bool:
    """Whether the trace slot may edit the scores: its trace has edits (knockouts among them)."""
    if cache is NOTHING:
        return False
    trace = getattr(cache, "trace", None)
    return trace is None or bool(trace.edits)  # (a slot of another kind: it may)


def _is_silu(act) -> bool:  # layers.silu, known by name (layers imports the kernels: no import back)
    return (getattr(act, "__module__", None) == "attnviz.engine.computing.layers"
            and getattr(act, "__name__", None) == "silu")


def fused(c, eps: float, rms: bool, block=None):
    """Consts c of a one-row run -> the same with these steps: attention, RoPE, SiLU, and the norm
    where the family's is RMSNorm (`rms`, of epsilon `eps`); and where `block` is given (the
    family's pre-norm block), the layer in compiled calls (onerow_block.pre_norm_block; `block`
    where those do not cover a layer)."""
    changes = {"attention": dense_attention, "rotate": rotate}
    if _is_silu(c.act):  # SwiGLU's gate on vector lanes (the block computes it the same)
        changes["act"] = silu
    if rms and block is not None:
        def one_row_block(x, layer, c1, cache=None):  # [1, d_model] -> [1, d_model]
            if not USE_BLOCK:
                return block(x, layer, c1, cache)
            return onerow_block.pre_norm_block(x, layer, c1, cache, eps, block, dense_attention)
        changes["block"] = one_row_block
    if rms:
        def norm(x, gain_bias):  # [1, d] -> [1, d]; a head's q and k norm [h, n, d] stay NumPy's
            if x.ndim == 2 and x.shape[0] == 1:
                return rms_norm(x, gain_bias[0], eps)
            return c.norm(x, gain_bias)
        changes["norm"] = norm
    return replace(c, **changes)


def warm(scales=()) -> None:
    """One call of each step on tiny arrays (the signatures are compiled, or loaded, at import);
    and the block's calls and the stack's compiled (or loaded), the serial kernels in them, for
    each scale type in `scales` (dtypes: onerow_block.SCALES' keys)."""
    x = np.ones((1, 4), np.float32)
    q, k = np.ones((2, 1, 4), np.float32), np.ones((1, 2, 4), np.float32)
    rms_norm(x, x[0], 1e-6)
    rotate(q, k[:, :1], x, x)

    class Cst:
        bias, scale, n_group = None, 0.5, 2
    dense_attention(q, k, k, Cst)
    for scale in scales:
        onerow_block.compile_block(scale)
        onerow_stack.compile_stack(scale)


from attnviz.engine.computing import onerow_block, onerow_stack  # noqa: E402  (they build on the steps above)
