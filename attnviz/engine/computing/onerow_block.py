"""A pre-norm layer of one new row (a keystroke's run with the KV cache, a generation step) in three
compiled calls around the trace's points, on the quantised kernels (engine/computing/onerow.py's
steps, and the serial kernels compiled in: _matvec, each matrix on its own type's):

    _attention_in   x [1, d_model] -> xn = RMSNorm(x), qkv = xn W_qkvᵀ, q and k rotated by position
    (the trace's input and kv points, the one-row attention with its points, the z point)
    _attention_out  z -> mid = x + z W_oᵀ, hidden = RMSNorm(mid) W_inᵀ   [1, 2 d_ff] (gate | up)
    (SwiGLU's gate: the family's act, onerow.silu where it is SiLU)
    the kernel      m = (act(gate) up) W_outᵀ, (the trace's mlp_out point), mid + m

Every trace point is called where families.self_attention and families.mlp call it, with the
same arrays, so records and edits apply as on the step-by-step path; the arithmetic is that
path's with onerow's steps and the same serial kernel as qmatvec's for each matrix (every type
with a kernel: Q4_0, Q4_1, Q4_K, Q8_0, Q5_0, Q5_1, Q5_K, Q6_K), so the same bits
(tests/engine/test_onerow_block.py). A layer it does not cover (a float32 matrix, biases, several
parts in a matrix, float16 scales in some matrices and float32 in others, a kernel on several
threads, a family's other norms) takes the family's block. The calls are compiled for one scale
type at a time (float16 bits or float32: compile_block), the ones a model's layers use, each
type's its own dispatchers (Calls). A generation step's layer,
whose trace records and edits nothing at the points between, takes two calls instead (_plain):

    _step_in        _attention_in, the row's k and v written in place after the cached ones, the
                    scores and their softmax    (the trace's pattern point)
    _step_mid       the weighted values, _attention_out, SwiGLU, m and mid + m
"""

from __future__ import annotations

import weakref

import threading
from typing import NamedTuple

import numba
import numpy as np
from numba import njit, types

from attnviz.engine.computing import kernel_cache
from attnviz.engine.computing.qbytes import s_b16, s_b32
from attnviz.engine.computing.qmadd import s_nib, s_nib8
from attnviz.engine.computing.rowmath import (
    F32, I64, JIT, NO_BIAS, R2, R3, W3, array_type, prefix, rms_norm_of, rotate_of, scores_ahead_of,
    softmax_of, swiglu_of, weighted_of, whole)
from attnviz.engine.computing.trace import NOTHING, LayerCache
from attnviz.engine.parallel import kernel_threads
from attnviz.engine.reading.qpack import LANES

kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)



def _c(dtype, ndim: int, readonly: bool = True):  # a C-contiguous array (a mutable one converts)
    return types.Array(dtype, ndim, "C", readonly=readonly)


# a packed matrix's scale types (qpack.Packed.scale): float16 bits (qpack.HALF), float32
SCALES = {np.dtype(np.uint16): types.uint16, np.dtype(np.float32): F32}


_X, _OUT = _c(F32, 2), _c(F32, 2, False)  # [1, n] read, written
_KINDS = (s_nib, s_nib8, s_b32, s_b16)  # a matrix's kind: the index of its serial kernel here


def _kind(p) -> int:  # the kind of a Packed matrix (qmatvec._kernel_of's rule)
    if p.nibbles:
        return 1 if p.signed else 0
    return 2 if p.sub == 32 else 3


@njit(**JIT)
def _matvec(kind, q, scale, offset, x, y):
    """y = x Wᵀ on the serial kernel of W's kind (_KINDS), the one qmatvec runs on one thread."""
    if kind == 0:
        s_nib(q, scale, offset, x, y)
    elif kind == 1:
        s_nib8(q, scale, offset, x, y)
    elif kind == 2:
        s_b32(q, scale, offset, x, y)
    else:
        s_b16(q, scale, offset, x, y)


def _matvec_call(kind, q, scale, offset, x, y):  # (compiled by compile_block: an entry point)
    """_matvec called from Python."""
    _matvec(kind, q, scale, offset, x, y)


def _attention_in(x, gain, eps, wk, wq, ws, wo, cos, sin, n_head, n_kv_head, xn, qkv):
    """x [1, d_model] -> xn = RMSNorm(x) [1, d_model], qkv = xn W_qkvᵀ [1, (n_head + 2 n_kv_head)
    d_head] (W_qkv packed: its kind wk, wq, ws, wo), its q and k heads rotated by position in place."""
    _attention_in_of(x, gain, eps, wk, wq, ws, wo, cos, sin, n_head, n_kv_head, xn, qkv)


@njit(**JIT)
def _attention_in_of(x, gain, eps, wk, wq, ws, wo, cos, sin, n_head, n_kv_head, xn, qkv):
    rms_norm_of(x, gain, eps, xn)
    _matvec(wk, wq, ws, wo, xn, qkv)
    d_head = cos.shape[1]
    q_end, k_end = n_head * d_head, (n_head + n_kv_head) * d_head
    rotate_of(qkv[0, :q_end].reshape(n_head, 1, d_head), cos, sin)
    rotate_of(qkv[0, q_end:k_end].reshape(n_kv_head, 1, d_head), cos, sin)


@njit(**JIT)
def _attention_out_of(z, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, attn, mid, xn, hidden):
    _matvec(ok, oq, os_, oo, z.reshape(1, z.size), attn)
    x_row, attn_row, mid_row = x[0], attn[0], mid[0]  # (rows with unit steps: on vector lanes)
    for j in range(x.shape[1]):
        mid_row[j] = x_row[j] + attn_row[j]
    rms_norm_of(mid, gain, eps, xn)
    _matvec(ik, iq, is_, io, xn, hidden)


def _attention_out(z, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, attn, mid, xn, hidden):
    """z [n_head, 1, d_head] (C order: merge_heads of one row is its flat order) -> attn = z W_oᵀ,
    mid = x + attn [1, d_model], xn = RMSNorm(mid), hidden = xn W_inᵀ [1, 2 d_ff]."""
    _attention_out_of(z, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, attn, mid, xn, hidden)


# A generation step's layer (a trace that records and edits nothing in it: _plain) in two calls
# (module docstring): the same steps in the same order as above, so the same bits.

def _step_in(x, gain, eps, wk, wq, ws, wo, cos, sin, n_head, n_kv_head, xn, qkv, kc, kw, vc, vw, bias,
             scale, n_group, s):
    """_attention_in, then (where the cached keys kc and values vc [n_kv_head, p, d_head] are the
    first p positions of kw, vw with room for one more: prefix) the new row's k and v written at
    position p, and s [n_head, 1, p + 1] = the scores minus each row's max (_scores); False
    (nothing written after qkv) where they are not."""
    _attention_in_of(x, gain, eps, wk, wq, ws, wo, cos, sin, n_head, n_kv_head, xn, qkv)
    p = kc.shape[1]
    if not (prefix(kc, kw) and prefix(vc, vw) and kw.shape[1] > p and vw.shape[1] > p
            and vc.shape[1] == p):
        return False
    _append_attend_of(qkv, kw, vw, p, n_head, n_kv_head, cos.shape[1], bias, scale, n_group, s)
    return True


@njit(**JIT)
def _append_attend_of(qkv, kw, vw, p, n_head, n_kv_head, d_head, bias, scale, n_group, s):
    """qkv's k and v written at position p of kw, vw [n_kv_head, > p, d_head], then s [n_head, 1,
    p + 1] = the softmax of q's scores against kw's first p + 1 keys (_step_in)."""
    q_end, k_end = n_head * d_head, (n_head + n_kv_head) * d_head
    for h in range(n_kv_head):
        for j in range(d_head):
            kw[h, p, j] = qkv[0, q_end + h * d_head + j]
            vw[h, p, j] = qkv[0, k_end + h * d_head + j]
    scores_ahead_of(qkv[0, :q_end].reshape(n_head, 1, d_head), kw, p + 1, bias, scale, n_group, True, s, vw)
    softmax_of(s)


def _step_mid(s, vw, n_group, d_head, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, wk, wq, ws, wo,
              out):
    """z = the pattern s [n_head, 1, T] times the values vw[:, :T] (_weighted_values), then
    _attention_out, h = SiLU(gate) up [1, d_ff] (onerow.silu), m = h W_outᵀ, out = mid + m
    [1, d_model]. (Its other arrays its own: an argument costs a call more than an allocation, and
    a returned array more than one given.)"""
    _step_mid_of(s, vw, n_group, d_head, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, wk, wq, ws, wo,
                 out)


@njit(**JIT)
def _step_mid_of(s, vw, n_group, d_head, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, wk, wq, ws, wo,
                 out):
    scratch = _mid_scratch(s.shape[0], d_head, x.shape[1], iq.shape[0] * LANES // 2)
    _step_mid_in(s, vw, n_group, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, wk, wq, ws, wo, out,
                 scratch)


@njit(**JIT)
def _mid_scratch(n_head, d_head, d_model, d_ff):
    """_step_mid_in's arrays for layers of up to d_ff hidden units (z, attn, mid, xn, m, the
    flat rows hidden and h are cut from, and swiglu_of's scratch): made once for every layer of a call that runs several
    (onerow_stack); each value is written before it is read."""
    return (np.empty((n_head, 1, d_head), np.float32), np.empty((1, d_model), np.float32),
            np.empty((1, d_model), np.float32), np.empty((1, d_model), np.float32),
            np.empty((1, d_model), np.float32), np.empty(2 * d_ff, np.float32),
            np.empty(d_ff, np.float32), np.empty(d_ff, np.float32), np.empty(d_ff, np.int32))


@njit(**JIT)
def _step_mid_in(s, vw, n_group, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, wk, wq, ws, wo, out,
                 scratch):
    """_step_mid's arithmetic in the arrays `scratch` (_mid_scratch); out may be x (x is read
    before out is written)."""
    z, attn, mid, xn, m, hidden_row, h_row, y, bits = scratch
    d_model, d_ff = x.shape[1], iq.shape[0] * LANES // 2  # (w_in's rows: gate | up; _plan: none padded)
    hidden, h = hidden_row[:2 * d_ff].reshape(1, 2 * d_ff), h_row[:d_ff].reshape(1, d_ff)
    weighted_of(s, vw, n_group, z)
    _attention_out_of(z, ok, oq, os_, oo, x, gain, eps, ik, iq, is_, io, attn, mid, xn, hidden)
    swiglu_of(hidden_row, d_ff, h_row, y, bits)  # SiLU(gate) up
    _matvec(wk, wq, ws, wo, h, m)
    out_row, mid_row, m_row = out[0], mid[0], m[0]
    for j in range(d_model):
        out_row[j] = mid_row[j] + m_row[j]


class Calls(NamedTuple):
    """The block's entry points compiled for one scale type (compile_block)."""
    attention_in: object
    attention_out: object
    step_in: object
    step_mid: object
    matvec: object


_CALLS: dict = {}  # scale dtype -> its Calls, once compile_block has made them
_COMPILING = threading.Lock()


def compile_block(scale) -> None:
    """The block's calls for matrices whose scales are of dtype `scale` (a key of SCALES), every
    kind of kernel in them (_matvec), compiled (or loaded from numba's cache) as dispatchers of
    their own, each closed to other signatures once compiled (an array of another layout or type
    is converted, never compiled for on a keystroke); the block takes such layers from then on.
    The other scale type's are compiled only where a model asks for them (warm)."""
    scale = np.dtype(scale)
    if scale in _CALLS:
        return
    with _COMPILING:
        if scale in _CALLS:
            return
        m = (I64, _c(types.uint8, 4), _c(SCALES[scale], 3), _c(SCALES[scale], 3))  # kind, q, scale, offset
        _R1A = array_type(1, True)
        _KW = types.Array(F32, 3, "C")  # a cache's keys or values with room (written)
        _IN = (_X, _R1A, F32)  # x, gain, eps
        made = []
        for fn, args, ret in (
                (_attention_in, (*_IN, *m, R2, R2, I64, I64, _OUT, _OUT), types.void),
                (_attention_out, (_c(F32, 3), *m, *_IN, *m, _OUT, _OUT, _OUT, _OUT), types.void),
                (_step_in, (*_IN, *m, R2, R2, I64, I64, _OUT, _OUT, R3, _KW, R3, _KW, R2, F32, I64, W3),
                 types.boolean),
                (_step_mid, (R3, _KW, I64, I64, *m, *_IN, *m, *m, _OUT), types.void),
                (_matvec_call, (*m, _X, _OUT), types.void)):
            call = njit(**JIT)(fn)
            call.compile(ret(*args))
            call.disable_compile()
            made.append(call)
        _CALLS[scale] = Calls(*made)


_PLANS: dict = {}  # id(PackedLayer) -> (a weak reference to it, its plan or None), while it lives


def _plan(layer):
    """(the four matrices' (kind, q, scale, offset), the largest's weights, w_in's outputs, their
    scales' dtype) where the layer is a packed view (no float32 matrix: linear() multiplies on the
    kernels) whose every matrix is one part with no padded rows, all four with scales of one type,
    and it has no biases and no norms but its two; else None. Kept per packed layer (its arrays
    never change)."""
    if any(getattr(layer, name, None) is not None for name in ("w_qkv", "w_o", "w_in", "w_out")):
        return None  # (its float32 copy, not its packed view: not kept, the view's plan may differ)
    pl = layer.packed  # (asked after: the float32 copy shares its view's, whose plan may be kept)
    kept = _PLANS.get(id(pl))
    if kept is not None and kept[0]() is pl:
        return kept[1]
    plan = None
    mats = (pl.w_qkv, pl.w_o, pl.w_in, pl.w_out)
    plain = all(getattr(layer, name, None) is None for name in (
        "b_qkv", "b_o", "b_in", "b_out", "post_attn_norm", "post_mlp_norm", "q_norm", "k_norm"))
    if plain and all(m is not None and len(m.parts) == 1 for m in mats):
        parts = [m.parts[0][1] for m in mats]
        if (all(p.n_out == m.n_out and p.q.shape[0] * LANES == p.n_out and _compiled_for(p.args)
                for p, m in zip(parts, mats))
                and len({p.args[1].dtype for p in parts}) == 1):  # (one signature: one scale type)
            plan = ([(_kind(p), *p.args) for p in parts], max(p.n_out * p.n_in for p in parts),
                    mats[2].n_out, parts[0].args[1].dtype)
    if len(_PLANS) > 1024:
        _PLANS.clear()
    key = id(pl)  # (a freed model's plan and arrays go with it; an entry cleared takes its callback along)
    _PLANS[key] = (weakref.ref(pl, lambda _gone: _PLANS.pop(key, None)), plan)
    return plan


def block_scale(layer):
    """The dtype of the scales (a key of SCALES) the block runs `layer` with, a one-row run's view
    of it (layers.layer_for); None where the block does not cover it (_plan: a float32 matrix,
    biases, a family's other norms, float16 scales in some matrices and float32 in others), so no
    compile_block is of use to it."""
    plan = _plan(layer) if getattr(layer, "packed", None) is not None else None
    return None if plan is None else plan[3]


def _compiled_for(args) -> bool:  # (q, scale, offset) of the types compile_block compiles for
    q, scale, offset = args
    return (q.dtype == np.uint8 and q.ndim == 4 and scale.dtype in SCALES
            and offset.dtype == scale.dtype and scale.ndim == offset.ndim == 3
            and all(a.flags.c_contiguous for a in args))


def _takes(plan) -> bool:
    """Whether the block runs now: compiled for the plan's scale type, and each kernel call would
    run on one thread (the serial kernel: qmatvec.qmatvec's rule, asked for the largest matrix)."""
    return plan[3] in _CALLS and min(kernel_threads(plan[1]), numba.config.NUMBA_NUM_THREADS) == 1


def _calls(plan) -> Calls:  # the entry points compiled for the plan's scale type (_takes: there)
    return _CALLS[plan[3]]


def pre_norm_block(x, layer, c, cache, eps: float, fallback, attention=None):
    """families.pre_norm_block of one row x [1, d_model] in the calls above (module docstring);
    `fallback` (the family's block) where they do not cover the layer or the run; a generation
    step's two calls where c.attention is `attention` (onerow's, which they compute)."""
    plan = _plan(layer) if getattr(layer, "packed", None) is not None else None
    if (plan is None or x.shape[0] != 1 or x.dtype != np.float32 or c.rope is None
            or not c.gated_mlp or c.qk_norm is not None or not _takes(plan)):
        return fallback(x, layer, c, cache)
    cache = NOTHING if cache is None else cache
    (wqkv, wo, win, wout), calls = plan[0], _calls(plan)
    x = np.ascontiguousarray(x)
    d_model, n_head, n_kv, d_head = x.shape[1], c.n_head, c.n_kv_head, c.d_head
    xn = np.empty((1, d_model), np.float32)
    qkv = np.empty((1, (n_head + 2 * n_kv) * d_head), np.float32)
    if _plain(cache, c, attention):  # a generation step's layer: two calls (_step_in, _step_mid)
        kc, vc = cache.past.k[cache.i], cache.past.v[cache.i]
        kw, vw = whole(kc), whole(vc)
        s = cache.rows if cache.rows is not None else np.empty((n_head, 1, kc.shape[1] + 1), np.float32)
        if calls.step_in(x, layer.norm1[0], np.float32(eps), *wqkv, *c.rope, n_head, n_kv, xn, qkv, kc, kw,
                    vc, vw, NO_BIAS if c.bias is None else c.bias, np.float32(c.scale), c.n_group, s):
            return _step_rest(x, layer, c, cache, eps, plan, calls, s, kw, vw)
    else:  # (_step_in computed qkv where it found no room)
        calls.attention_in(x, layer.norm1[0], np.float32(eps), *wqkv, *c.rope, n_head, n_kv, xn, qkv)
    cache.input(xn)
    q_end, k_end = n_head * d_head, (n_head + n_kv) * d_head
    q = qkv[:, :q_end].reshape(1, n_head, d_head).transpose(1, 0, 2)  # [n_head, 1, d_head]
    k = qkv[:, q_end:k_end].reshape(1, n_kv, d_head).transpose(1, 0, 2)  # [n_kv_head, 1, d_head]
    v = qkv[:, k_end:].reshape(1, n_kv, d_head).transpose(1, 0, 2)
    k, v = cache.kv(k, v)  # [n_kv_head, T, d_head] x2, cached keys and values first
    z = np.ascontiguousarray(cache.z(c.attention(q, k, v, c, cache)))  # [n_head, 1, d_head]
    attn, mid, xn2 = (np.empty((1, d_model), np.float32) for _ in range(3))
    hidden = np.empty((1, plan[2]), np.float32)  # [1, 2 d_ff] gate | up
    calls.attention_out(z, *wo, x, layer.norm2[0], np.float32(eps), *win, attn, mid, xn2, hidden)
    d_ff = hidden.shape[1] // 2
    h = c.act(hidden[:, :d_ff])
    h *= hidden[:, d_ff:]  # [1, d_ff] SwiGLU
    m = np.empty((1, d_model), np.float32)
    calls.matvec(*wout, np.ascontiguousarray(h), m)
    return mid + cache.mlp_out(m)


def _step_rest(x, layer, c, cache, eps, plan, calls, s, kw, vw):
    """pre_norm_block after _step_in (the pattern s [n_head, 1, T], the new row's k and v at
    position T - 1 of kw, vw): the slot's keys and values as LayerCache.kv gives them, the
    pattern point, then _step_mid -> the layer's output [1, d_model]."""
    (_, wo, win, wout) = plan[0]
    T = s.shape[2]
    t = cache.trace
    t.k[cache.i], t.v[cache.i] = kw[:, :T], vw[:, :T]
    cache.pattern(s)
    out = np.empty(x.shape, np.float32)
    calls.step_mid(s, vw, c.n_group, c.d_head, *wo, x, layer.norm2[0], np.float32(eps), *win, *wout, out)
    return out


_SLOT_POINTS = ("input", "kv", "scores", "z", "mlp_out")  # the points the two calls leave out


def _plain(cache, c, attention) -> bool:
    """Whether the slot's layer may take the two calls of a generation step: a cached run's slot
    (LayerCache, its points as there; the pattern's may differ: it is called) whose trace has no
    edits, keeps K and V and records no inputs, z or MLP output, the run not stopping at its z,
    and `attention` the dense attention of one row (onerow.dense_attention: None, never)."""
    if not isinstance(cache, LayerCache) or not cache._p or cache.past is None:
        return False
    t, kind = cache.trace, type(cache)
    if kind not in _SLOT_KINDS:  # (a class's methods do not change)
        _SLOT_KINDS[kind] = all(getattr(kind, n) is getattr(LayerCache, n) for n in _SLOT_POINTS)
    return (_SLOT_KINDS[kind] and not t.edits and t.want_kv and t.attention is None
            and cache._stop_at != "z" and not (t.want["inputs"] or t.want["z"] or t.want["mlp_out"])
            and c.attention is attention and cache.past.k[cache.i].shape[1] == cache._p)


_SLOT_KINDS: dict = {}  # slot class -> whether it has LayerCache's own _SLOT_POINTS
