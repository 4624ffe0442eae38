"""Every layer of a one-row run (a generation step, a keystroke's run with the KV cache) in one
compiled call, where nothing between the layers needs Python: onerow_block's generation-step
layer (_step_in, _step_mid: the same njit steps in the same order, so the same bits) in a loop
over the layers, reading each layer's packed matrices from numba typed Lists and its keys and
values from one buffer of every layer's.

    _layers_of  for each layer i in a..b-1: x kept as resid[i] (where asked), xn = RMSNorm(x),
                qkv = xn W_qkvᵀ, q and k rotated, the row's k and v written at position p of the
                layer's K and V, s = softmax(scores) written into rows[i, :, r] [n_head, T], then
                (but the last layer of a run that stops at its pattern) z = s V, kept as z[i]
                (where asked), mid = x + z W_oᵀ, SwiGLU, x = mid + m

The run it covers (stacked_rows says which): a cached run of one new row whose trace is a plain
Trace (patterns, optionally values, the residual stream and z: a window's run kept for Compare
and What heads do) or a generation step's (generate._StepTrace), with no edits, no resume point,
no end, no inputs or MLP outputs recorded, no attention strategy of its own; every layer a
packed view the block covers (onerow_block._plan: one part a matrix, one scale type, serial
kernels) and every layer's constants alike (RoPE tables, mask, scale). A trace's early hand-over
(RunRequest(early=...)) splits the call in two around it; its stop check is asked before each
call. Anything else takes families._forward_rows' layer loop.

The call runs on one thread where the kernels take one (kernel_threads, numba's threads at most:
the window's cap); where they take two, or the run is a generation step and steps take two
(parallel.step_pair), onerow_pair's _pair_layers instead: the same layers on this thread and a
partner thread at once, the same bits (onerow_pair's docstring), each call chosen by the
stack's onerow_pair.Fallback for its layers (the one-thread call where the pair does not pay);
more, the layer loop. It is compiled for one scale type at a time (compile_stack: the one the
model's layers use; the pair's where the kernels or the steps take two threads then).
The lists of a store's matrices and gains are built once (_STACKS, for the store's life), by calls
compiled with the stack (_lister), so the run that builds them compiles nothing. Every
layer's keys and values live in one buffer [2, n_layer, n_kv_head, positions, d_head], the trace's
K and V views of it; a generation's next step writes after them in place, a keystroke's next run
that replaces the last token moves the cached views to one copy of their own and writes into
the buffer in place where no one else holds a view of it, else copies their first positions into
a new one (_KeptKV, which lets the buffer go with its cache).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref

import numba
import numpy as np
from numba import njit, types
from numba.typed import List

from attnviz.engine.computing import kernel_cache, onerow_pair
from attnviz.engine.computing import onerow_block as ob
from attnviz.engine.computing.rowmath import F32, I64, JIT, NO_BIAS, R2, array_type
from attnviz.engine.computing.trace import kv_room
from attnviz.engine.errors import Cancelled
from attnviz.engine.parallel import kernel_threads, step_pair

kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

ENABLED = True  # False: a one-row run takes the layer loop (benchmarks time both in one process)
FALLBACK = True  # False: two threads take every call, paying or not (benchmarks time both)
_COMPILED: dict = {}  # scale dtype -> _layers_of compiled for it (compile_stack)
_PAIRS: dict = {}  # scale dtype -> onerow_pair._pair_layers compiled for it (compile_stack)
_COMPILING = threading.Lock()


def _layers(x, a, b, full_last, compiled, *args):
    """_layers_of(x, a, b, full_last, *args) on `compiled`, its dispatcher for the stack's scale
    type (compile_stack)."""
    compiled(x, a, b, full_last, *args)


def _layers_of(x, a, b, full_last, kinds, qs, ss, os_, gains1, gains2, eps, cos, sin, n_head,
               n_kv_head, bias, scale, n_group, kv, p, rows, r, resid, z):
    """x [1, d_model] through layers a..b-1 in place (module docstring): matrix j of layer i
    (W_qkv, W_o, W_in, W_out) is kinds[i, j] and (qs, ss, os_)[4 i + j]; its keys and values
    kv[0, i], kv[1, i] [n_kv_head, > p, d_head] (the row's written at position p); each layer's
    pattern row into rows[i, :, r:r + 1, :p + 1]; the last layer stops after it unless full_last.
    resid [n_layer, 1, d_model] gets the row entering each layer and z [n_layer, n_head, 1, d_head]
    each layer's head outputs, where they have rows (NO_RESID, NO_Z: not asked)."""
    d_model, d_head = x.shape[1], cos.shape[1]
    xn = np.empty((1, d_model), np.float32)
    qkv = np.empty((1, (n_head + 2 * n_kv_head) * d_head), np.float32)
    d_ff = 0  # (the most any layer has: every layer's arrays cut from one set)
    for i in range(a, b):
        d_ff = max(d_ff, qs[4 * i + 2].shape[0] * ob.LANES // 2)
    mid = ob._mid_scratch(n_head, d_head, d_model, d_ff)
    for i in range(a, b):
        j = 4 * i
        s = rows[i, :, r:r + 1, :p + 1]  # [n_head, 1, T]
        if resid.shape[0]:
            resid[i] = x
        ob._attention_in_of(x, gains1[i], eps, kinds[i, 0], qs[j], ss[j], os_[j], cos, sin, n_head,
                            n_kv_head, xn, qkv)
        ob._append_attend_of(qkv, kv[0, i], kv[1, i], p, n_head, n_kv_head, d_head, bias, scale,
                             n_group, s)
        if i == b - 1 and not full_last:
            break
        ob._step_mid_in(s, kv[1, i], n_group, kinds[i, 1], qs[j + 1], ss[j + 1], os_[j + 1], x, gains2[i],
                        eps, kinds[i, 2], qs[j + 2], ss[j + 2], os_[j + 2], kinds[i, 3], qs[j + 3],
                        ss[j + 3], os_[j + 3], x, mid)  # (x written in place: mid + m)
        if z.shape[0]:
            z[i] = mid[0]  # (the scratch's z: s V)


def _pair(x, a, b, full_last, compiled, stack, *args):
    """_layers' call on two threads: onerow_pair._pair_layers on this thread and the partner's,
    with the call's own shared arrays and counters."""
    n_head, n_kv_head, d_head = args[9], args[10], args[7].shape[1]
    shared = np.empty(onerow_pair.shared_size(n_head, n_kv_head, d_head, x.shape[1], stack.d_ff), np.float32)
    sync = onerow_pair.sync_for(b - a)
    common = (x, a, b, full_last, *args, shared, sync, onerow_pair.CHUNKS)
    onerow_pair.PARTNER.run(compiled, (*common, False), sync, (*common, True))  # (the partner from the back)


def _call(stack, threads, x, a, b, full_last, compiled, one, args, p: int):
    """Layers a..b-1 of the row at position p on `compiled` (one: the one-thread call's
    dispatcher): on one thread, or threads == 2: on two (_pair) or one, as the stack's Fallback
    for a..b chooses (FALLBACK)."""
    if threads != 2:
        _layers(x, a, b, full_last, compiled, *args)
        return
    fallback = None
    if FALLBACK:
        fallback = stack.fallbacks.get((a, b)) or stack.fallbacks.setdefault((a, b), onerow_pair.Fallback())
    two = fallback is None or fallback.take_pair(p)
    t0 = time.perf_counter()
    if two:
        _pair(x, a, b, full_last, compiled, stack, *args)
    else:
        _layers(x, a, b, full_last, one, *args)
    if fallback is not None:
        fallback.record(two, time.perf_counter() - t0)


_GAIN = array_type(1, True)
NO_RESID, NO_Z = np.empty((0, 1, 1), np.float32), np.empty((0, 1, 1, 1), np.float32)  # (not asked)


def _list_types(scale):  # (q, scale or offset, gain) item types of the typed Lists
    return ob._c(types.uint8, 4), ob._c(scale, 3), _GAIN


def compile_stack(scale) -> None:
    """_layers_of for matrices whose scales are of dtype `scale` (a key of onerow_block.SCALES)
    compiled (or loaded from numba's cache) as a dispatcher of its own, then closed to others
    (compile_block's way); stacked_rows takes a stack of that scale type from then on. Where
    the kernels take two threads (_threads) and onerow_pair runs here, its _pair_layers too."""
    scale = np.dtype(scale)
    pair = onerow_pair.AVAILABLE and (_threads() == 2 or step_pair())
    if scale in _COMPILED and (scale in _PAIRS or not pair):
        return
    with _COMPILING:
        q, s, g = _list_types(ob.SCALES[scale])
        L = types.ListType
        args = (types.Array(F32, 2, "C"), I64, I64, types.boolean, types.Array(I64, 2, "C", readonly=True),
                L(q), L(s), L(s), L(g), L(g), F32, R2, R2, I64, I64, R2, F32, I64,
                types.Array(F32, 5, "C"), I64, types.Array(F32, 4, "C"), I64, types.Array(F32, 3, "C"),
                types.Array(F32, 4, "C"))
        if scale not in _COMPILED:
            compiled = njit(**JIT)(_layers_of)
            compiled.compile(types.void(*args))
            compiled.disable_compile()
            for item in (q, s, g):
                _lister(item)
            _COMPILED[scale] = compiled
        if pair and scale not in _PAIRS:
            compiled = njit(**JIT)(onerow_pair._pair_layers)
            compiled.compile(types.boolean(*args, types.Array(F32, 1, "C"), types.Array(I64, 1, "C"), I64,
                                           types.boolean))
            compiled.disable_compile()
            _PAIRS[scale] = compiled


def _threads(weights: int = 0) -> int:  # the threads a kernel call takes (numba's at most)
    return min(kernel_threads(weights), numba.config.NUMBA_NUM_THREADS)


def _list_of(a):  # a typed List of a's type holding a
    out = List()
    out.append(a)
    return out


def _append(out, a):
    out.append(a)


_LISTERS: dict = {}  # a typed List's item type -> (_list_of, _append) compiled for it (_lister)
_LISTING = threading.Lock()


def _lister(item):
    """(_list_of, _append) for items of numba type `item`, compiled (or loaded from numba's cache)
    as dispatchers of their own, closed to other signatures: a typed List built from Python
    compiles its methods in every process (numba caches none of them), a wait the keystroke that
    first builds a stack would have; compile_stack makes these with the stack."""
    made = _LISTERS.get(item)
    if made is not None:
        return made
    with _LISTING:
        if item not in _LISTERS:
            new, append = njit(**JIT)(_list_of), njit(**JIT)(_append)
            new.compile(types.ListType(item)(item))
            append.compile(types.void(types.ListType(item), item))
            new.disable_compile()
            append.disable_compile()
            _LISTERS[item] = new, append
        return _LISTERS[item]


def _typed(item, arrays) -> List:  # arrays (at least one) in a typed List of items of type `item`
    new, append = _lister(item)
    out = new(arrays[0])
    for a in arrays[1:]:
        append(out, a)
    return out


class _Stack:
    """A store's layers as _layers reads them: each matrix's kind and arrays, the norm gains (in
    typed Lists), the largest matrix's weights (_takes), and the KV buffers last used (_KeptKV)."""

    def __init__(self, plans, layers):
        self.scale = plans[0][3]  # (the dtype of every matrix's scales: _stack_of)
        q, s, g = _list_types(ob.SCALES[self.scale])
        mats = [m for plan in plans for m in plan[0]]  # (kind, q, scale, offset), 4 a layer
        self.kinds = np.array([[m[0] for m in plan[0]] for plan in plans], np.int64)
        self.kinds.flags.writeable = False
        self.qs, self.ss, self.os = (_typed(t, [m[k] for m in mats]) for k, t in ((1, q), (2, s), (3, s)))
        self.gains1 = _typed(g, [np.asarray(layer.norm1[0]) for layer in layers])
        self.gains2 = _typed(g, [np.asarray(layer.norm2[0]) for layer in layers])
        self.weights = (self.kinds, self.qs, self.ss, self.os, self.gains1, self.gains2)  # (_layers' first)
        self.largest = max(plan[1] for plan in plans)
        self.d_ff = max(plan[2] for plan in plans) // 2  # (w_in's outputs: gate | up)
        self.kept = _KeptKV()
        self.fallbacks: dict = {}  # (first, end) layers -> the onerow_pair.Fallback of their calls


KEEP = 3  # caches whose buffers a stack keeps (a window's, Compare's B of the same model, a generation's)
_STACKS = weakref.WeakKeyDictionary()  # LayerStore -> its _Stack or None, for the store's life
_UNSEEN = object()  # (_STACKS holds no entry for the store yet)
_LOCK = threading.Lock()


def _stack_of(store, n_layer: int, layer_for):
    """The store's _Stack where every layer's one-row view (layer_for(store, i, 1): layers.layer_for)
    is a packed one the block covers, with scales of one type throughout; else None. Built once a
    store (its packed views are held for the model's life); a None kept only where every layer
    was its packed view (a float32 layer, as while a kernel is still warming, is asked again)."""
    if getattr(store, "packed_view", None) is None:  # (a list of float32 layers: none packed)
        return None
    stack = _STACKS.get(store, _UNSEEN)
    if stack is not _UNSEEN:
        return stack
    with _LOCK:
        stack = _STACKS.get(store, _UNSEEN)
        if stack is not _UNSEEN:  # (built by another thread meanwhile: a warm-up's prepare)
            return stack
        layers = [layer_for(store, i, 1) for i in range(n_layer)]
        plans = [ob._plan(layer) if getattr(layer, "packed", None) is not None else None
                 for layer in layers]
        stack = None
        if (all(plan is not None for plan in plans)
                and len({plan[3] for plan in plans}) == 1
                and all(len(layer.norm1) == 1 and len(layer.norm2) == 1 for layer in layers)):
            stack = _Stack(plans, layers)
        if stack is not None or all(layer is store.packed_view(i) for i, layer in enumerate(layers)):
            _STACKS[store] = stack
    return stack


def prepared(store) -> bool:
    """Whether the store's stack has been built, or found not to cover its layers, for the store's
    life (_stack_of): a one-row run then builds nothing."""
    return not ENABLED or _STACKS.get(store, _UNSEEN) is not _UNSEEN


def prepare(store, n_layer: int, layer_for) -> None:
    """The store's stack built now (_stack_of; layer_for: layers.layer_for), where a warm-up thread
    calls it after the kernels: a model's first one-row run (a keystroke) then finds it built."""
    if ENABLED:
        _stack_of(store, n_layer, layer_for)


class _KeptKV:
    """The KV buffer the last call wrote into (every layer's keys and values, one array: _fresh),
    kept for each of the KEEP latest caches (_last_for),
    the views [:, :T] it handed to its trace and their addresses (one tuple, replaced whole: runs
    on two threads at worst copy once more). A generation's next step brings those views back as
    its cache (the same lists) and a keystroke's next run their first positions: the next call
    then writes after them in place (after its views moved out: _moved_out), or copies the
    buffer's first positions in one step."""

    def __init__(self):
        # (kv, trace.k, trace.v, T, kv's address, the cache's token)
        self.last = None
        self.kept: dict = {}  # a cache's token -> its last call's tuple (the KEEP latest caches)
        self.tokens: dict = {}  # id(cache) -> (a weak reference to it, its token), while it lives

    def _last_for(self, past):
        """The last call's tuple of this cache where one of the KEEP latest had it (caches that
        take turns on one model, e.g. a model compared with itself, each find their own buffer
        instead of copying the other's out), else the last call's."""
        entry = self.tokens.get(id(past))
        if entry is not None and entry[0]() is past:
            return self.kept.get(entry[1], self.last)
        return self.last

    def buffer(self, past, p: int, n_layer: int):
        """kv [2, n_layer, n_kv_head, > p, d_head]: each layer's cached keys (kv[0, i]) and values
        at their first p positions, room at p: the last call's buffer itself where past's K and V
        are its first p positions (append_positions' rule for writing in place) or, the lists it
        handed reaching past p, once they are moved to a copy of their own (_moved_out), else a
        new one with them copied in (as append_positions copies)."""
        last = self._last_for(past)
        if last is not None and len(past.k) == len(past.v) == n_layer:
            kv = last[0]
            handed = past.k is last[1] and past.v is last[2]
            n = last[3] if handed else _views_of(kv, last[4], past, p)
            if n > p and handed and kv.shape[3] > p and _moved_out(kv, past, n):
                return kv  # (its views handed out are now a copy of their own)
            if n == p and kv.shape[3] > p:  # (no cached view reaches past p)
                return kv
            if n >= p:
                new = _fresh(kv.shape[:3], p, kv.shape[4])
                new[:, :, :, :p] = kv[:, :, :, :p]
                return new
        k0 = past.k[0]
        new = _fresh((2, n_layer, k0.shape[0]), p, k0.shape[2])
        for i in range(n_layer):
            new[0, i, :, :p] = past.k[i][:, :p]
            new[1, i, :, :p] = past.v[i][:, :p]
        return new

    def hand(self, kv, trace, T: int, past) -> None:
        """The trace's K and V: the first T positions of kv's layers (buffer's answer), kept for
        the next call while `past` (the run's KVCache) lives: the buffer is let go with it."""
        trace.k[:] = kv[0, :, :, :T]  # (its layers' views kv[0, i, :, :T], their base kv)
        trace.v[:] = kv[1, :, :, :T]
        trace.kv_bytes = kv.nbytes // kv.shape[3] * T  # (those views' bytes together)
        trace.kv_held = kv.nbytes  # (the one array they are views of)
        last = self._last_for(past)
        at = last[4] if last is not None and last[0] is kv else kv.ctypes.data
        token = self.token(past)
        self.last = (kv, trace.k, trace.v, T, at, token)
        if next(reversed(self.kept), None) is token:  # (already the latest: in order)
            self.kept[token] = self.last
            return
        self.kept.pop(token, None)  # (the latest last in order)
        self.kept[token] = self.last
        for old in list(self.kept)[:-KEEP]:
            del self.kept[old]

    def token(self, past):
        """The cache's token (one while it lives: its end calls forget once)."""
        entry = self.tokens.get(id(past))
        if entry is None or entry[0]() is not past:
            entry = self.tokens[id(past)] = (weakref.ref(past), object())
            weakref.finalize(past, self.forget, id(past), entry[1])
        return entry[1]

    def forget(self, key: int, token) -> None:  # a cache is gone: the buffer it last had too
        entry = self.tokens.get(key)
        if entry is not None and entry[1] is token:
            self.tokens.pop(key, None)
        self.kept.pop(token, None)
        last = self.last
        if last is not None and last[5] is token:
            self.last = None


# references to a buffer while _moved_out asks: buffer's `kv`, the `last` tuple, _moved_out's
# argument and getrefcount's (a view of it anywhere else holds one more)
_OURS = 4


def _moved_out(kv, past, n: int) -> bool:
    """The cache's keys and values (the lists hand gave, kv's first n positions) replaced in those
    lists by one copy of their own [2, n_layer, n_kv_head, n, d_head] (as without_room copies an
    earlier run's): True where no other view of kv is then left (its references say), so the
    next run may write after its first p < n positions in place; False: a caller still holds a
    view of it (the next run copies into a new buffer)."""
    own = kv[:, :, :, :n].copy()
    past.k[:] = [own[0, i] for i in range(kv.shape[1])]
    past.v[:] = [own[1, i] for i in range(kv.shape[1])]
    return sys.getrefcount(kv) == _OURS


def _fresh(lead: tuple, p: int, d_head: int) -> np.ndarray:
    """An empty buffer [*lead, p + 1 + kv_room(p + 1), d_head] (lead: 2, n_layer, n_kv_head): room
    for the new row and kv_room positions more, as append_positions makes a layer's."""
    return np.empty((*lead, p + 1 + kv_room(p + 1), d_head), np.float32)


def _views_of(kv, at: int, past, p: int) -> int:
    """n where every layer's cached keys and values are kv[0, i, :, :n] and kv[1, i, :, :n] (views
    of them made anew, as a benchmark's cut of the cache makes), n >= p; else -1."""
    stride, half = kv.strides[1], kv.strides[0]
    n = past.k[0].shape[1]
    for j, arrays in enumerate((past.k, past.v)):
        for i, a in enumerate(arrays):
            if not (a.base is kv and a.shape[1] == n and a.strides == kv.strides[2:]
                    and a.shape[0] == kv.shape[2] and a.shape[2] == kv.shape[4]
                    and a.ctypes.data == at + j * half + i * stride):
                return -1
    return n if n >= p else -1


def stacked_rows(cfg, w, p: int, trace, past, consts, x, layer_for) -> bool:
    """families._forward_rows of one new row x [1, d_model] at position p (past holding the p
    before it) in _layers' calls, where they cover the run (module docstring) -> True; else
    False, nothing done (the layer loop runs it). The family is a pre-norm RMSNorm one with
    SwiGLU and RoPE (the caller's check); layer_for: layers.layer_for."""
    kind = _kind(trace)
    stack = _stack_of(w.layers, cfg.n_layer, layer_for) if kind is not None and ENABLED else None
    compiled = _COMPILED.get(stack.scale) if stack is not None else None
    threads = _threads(stack.largest) if compiled is not None else 0
    if compiled is not None and kind == "step" and step_pair() and onerow_pair.AVAILABLE and threads == 1:
        threads = 2  # (kernels that take more threads for wide matrices keep them: the layer loop)
        if stack.scale not in _PAIRS:  # (compiled before steps took two)
            compile_stack(stack.scale)
    one, compiled = compiled, (_PAIRS.get(stack.scale) if threads == 2 else compiled)
    if compiled is None or threads > 2:  # (the caller's thread and onerow_pair's partner at most)
        return False
    c0 = consts[0]
    if c0.rope is None or not (len(set(map(id, consts))) == 1 or all(  # (one Consts for every layer)
            c.rope is c0.rope and c.bias is c0.bias and c.scale == c0.scale for c in consts)):
        return False
    n_layer, T = cfg.n_layer, p + 1
    rows, r = trace.attentions, p  # [n_layer, n_head, T, T]: row p of each layer
    if rows is None:  # (a generation step's: its last rows handed over after)
        rows, r = np.empty((n_layer, c0.n_head, 1, T), np.float32), 0
    elif not (rows.dtype == np.float32 and rows.flags.c_contiguous and rows.flags.writeable):
        return False
    kv = stack.kept.buffer(past, p, n_layer)
    stack.kept.hand(kv, trace, T, past)  # (views of the buffer the calls fill)
    x = np.array(x, np.float32, order="C")  # (written in place, layer by layer)
    cos, sin = c0.rope
    want = trace.want
    resid = np.empty((n_layer, 1, x.shape[1]), np.float32) if want["resid"] else NO_RESID
    z = np.empty((n_layer, c0.n_head, 1, cos.shape[1]), np.float32) if want["z"] else NO_Z
    args = (*stack.weights, np.float32(cfg.norm_eps), cos, sin, c0.n_head, c0.n_kv_head,
            NO_BIAS if c0.bias is None else c0.bias, np.float32(c0.scale), c0.n_group, kv, p, rows, r,
            resid, z)
    # a plain trace's run stops at the last layer's pattern (LayerCache) unless it keeps what follows
    full = kind == "step" or trace.wants_output
    early = trace.early
    cut = early[0] if early is not None and 0 < early[0] < n_layer else n_layer
    for a, b in ((0, cut), (cut, n_layer)):
        if a == b:
            continue
        if trace.stop is not None and trace.stop():
            raise Cancelled(f"stopped before layer {a}: a newer run was asked for")
        _call(stack, threads, x, a, b, full or b < n_layer, compiled, one, args, p)
        if b == cut and early is not None:
            early[1](trace)  # layers 0..cut-1 are final
    if kind == "step" and trace.keep_rows:
        trace.last_rows[:] = [rows[i, :, 0] for i in range(n_layer)]  # [n_head, T] each
    for i in range(n_layer if want["resid"] else 0):  # (each after the cached rows)
        trace.record_resid(i, resid[i], past)
    for i in range(n_layer if want["z"] else 0):
        trace.record_rows("z", i, z[i], past)
    if full:
        trace.record_resid(n_layer, x, past)  # the final-norm input
    return True


def _kind(trace) -> str | None:
    """"patterns" (a plain Trace), "step" (a generation step's: generate._StepTrace) or None: a
    trace that edits anything, or records what the call does not keep (inputs, MLP outputs), or of
    a class that does not say how (Trace.one_call, in its own body)."""
    if (trace.edits or trace.start or trace.end is not None or trace.attention is not None
            or not trace.want_kv or trace.want["inputs"] or trace.want["mlp_out"]):
        return None
    return vars(type(trace)).get("one_call")
