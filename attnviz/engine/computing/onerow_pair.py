"""onerow_stack's layer loop on two threads: the caller's and one partner thread of the process,
both in the same compiled call (_pair_layers, nogil) over the same arrays, each layer's work in
five stages, each stage's work in chunks that either thread takes (an atomic counter a stage; of
a matrix's chunks, the caller takes the first, then the next, the partner the last, then the one
before: _ends):

    S0  xn = RMSNorm(x) (each thread its own, on its first chunk), qkv = xn W_qkvᵀ: chunks of
        W_qkv's row groups (LANES rows each), written into the one qkv
    S1  a KV head's chunk: its k and its query heads' q rotated, its k and v written at position p,
        its query heads' scores, softmax (their rows of the pattern) and z = s V
    S2  attn = z W_oᵀ (row groups)
    S3  xn = RMSNorm(x + attn) (each thread its own), hidden = xn W_inᵀ (row groups)
    S4  h = SwiGLU(hidden) (each thread its own), m = h W_outᵀ and x = (x + attn) + m on the
        chunk's rows

A thread prepares a stage's x once, as the one-thread call's serial kernel for the matrix does,
and runs each row group of its chunks by that kernel's group body: the same operations on the
same inputs, so every output has the same bits (tests/engine/test_onerow_pair.py). A stage
starts once every chunk of the one before it is done (its `done` count, read with acquire; the
wait spins).

Neither thread waits for the other to arrive: a partner woken late finds a stage's chunks taken
and goes on to the next, so the caller may run the whole call alone; a thread waits only for a
chunk the other has taken and not finished. Each call has counters of its own (`sync`, made by
the caller), so a partner still in an earlier call takes nothing of a later one, and one that
comes after the caller has left the call skips it (its arrays may be read-only by then). A thread that
fails (an exception in the call) marks the call aborted; the other stops waiting and the caller
raises. Only where the CPU is x86-64 (the spin's `pause`); elsewhere onerow_stack's one thread.
A chunk the partner took waits for the partner's turn on its core: where the other core is busy
with other work, the call is slower than one thread's. So the calls of a run's layers are chosen by
a Fallback (pair_fallback; onerow_stack keeps one per model and layer range): it times each call,
and while the pair does not pay (the faster of its last PAIR_RUNS calls above PAYS times the faster
of the last one-thread calls) takes the one-thread call instead for the next `backoff` calls
(BACKOFF at first, doubled each time the pair fails again, at most MAX_BACKOFF; back to BACKOFF
once it pays), then tries the pair again; every PROBE pair calls one one-thread call renews the
reference (a run's calls grow slower as T grows). Either call gives the same bits, so the choice
never changes a number. `generate` and the window's generation take it for their steps
(parallel.limit_kernel_threads' `pair_steps`); a keystroke keeps its one thread (the window's cap:
the core that paints stays free).
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import threading
import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from attnviz.engine.computing import kernel_cache
from attnviz.engine.computing import qbytes, qdot, qmadd
from attnviz.engine.computing.rowmath import (
    JIT, rms_norm_of, rotate_of, scores_ahead_of, softmax_of, swiglu_of, weighted_of)
from attnviz.engine.computing.qx import sums
from attnviz.engine.computing.pair_fallback import (  # noqa: F401 (this module's names for its callers)
    BACKOFF, MAX_BACKOFF, PAIR_RUNS, PAYS, PROBE, TAKEN, Fallback)
from attnviz.engine.reading.qpack import LANES

kernel_cache.use()  # (before any function is decorated: numba's cache folder is chosen then)

log = logging.getLogger(__name__)

AVAILABLE = platform.machine().lower() in ("x86_64", "amd64")
STAGES = 5  # a layer's stages (S0..S4)
LINE = 8  # int64 slots a cache line: a stage's `taken` and `done` each on a line of their own
ABORTED = 0  # sync[ABORTED] != 0: a thread failed; stage s's counters at LINE (1 + 2 s), LINE (2 + 2 s)
OVER = 1  # sync[OVER] != 0: the caller's thread has left the call (Partner.run)
LEFT = 2  # sync[LEFT] != 0: the partner thread has left the call, or skipped it
LEFT_WAIT_S = 1.0  # a failed caller waits this long at most for the partner to leave the call
CHUNKS = 4  # chunks of a matrix's row groups a stage


def _slot(context, builder, arrty, arr, i):  # a pointer to arr[i] (a 1-D int64 array)
    return builder.gep(context.make_array(arrty)(context, builder, arr).data, [i])


@intrinsic
def _take(typingctx, a, i):
    """a[i] += 1 atomically (acquire and release) -> the value before."""
    sig = types.int64(a, i)

    def codegen(context, builder, signature, args):
        ptr = _slot(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 1), "acq_rel")
    return sig, codegen


@intrinsic
def _seen(typingctx, a, i):
    """a[i], loaded with acquire (what was written before its release is seen after)."""
    sig = types.int64(a, i)

    def codegen(context, builder, signature, args):
        ptr = _slot(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)
    return sig, codegen


@intrinsic
def _pause(typingctx):
    """x86's spin-loop hint."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                               "llvm.x86.sse2.pause")
        builder.call(pause, [])
        return context.get_dummy_value()
    return sig, codegen


@njit(**JIT)
def _chunk(sync, s):  # the next chunk of stage s this thread takes (>= its count: none left)
    return _take(sync, LINE * (1 + 2 * s))


@njit(**JIT)
def _wait(sync, s, n):
    """Wait until stage s's n chunks are all done -> True; False once a thread has failed
    (sync[ABORTED]), before or meanwhile."""
    while not _seen(sync, ABORTED):
        if _seen(sync, LINE * (2 + 2 * s)) >= n:
            return True
        _pause()
    return False


# each kind's x as its serial kernel prepares it and its group body (onerow_block._KINDS' kernels:
# qmadd's nibble kernels where the CPU has AVX2 without AVX-512, else qdot's; qbytes' byte kernels
# where it has VNNI, else qdot's)
if qmadd.MADD:
    _NIB_X, _G_NIB, _G_NIB8 = qmadd.madd_x, qmadd._g_nib, qmadd._g_nib8
else:
    _NIB_X, _G_NIB, _G_NIB8 = qdot._nib_x, qdot._g_nib, qdot._g_nib8
if qbytes.VNNI:
    _BYTES_X, _G_B32, _G_B16 = qbytes.bytes_x, qbytes._g_b32, qbytes._g_b16
else:
    @njit(**JIT)
    def _BYTES_X(x, n_sub, S):  # (qdot's byte kernels take x as it is, and its sums)
        return x, sums(x, n_sub, S)
    _G_B32, _G_B16 = qdot._g_b32, qdot._g_b16


@njit(**JIT)
def _ends(j, n, back):
    """The chunk of a thread's j-th take of a stage's n: j, or n - 1 - j where `back`. The two
    threads' takes are at most n together (the stage's counter), so the caller's chunks from the
    first on and the partner's from the last on never meet, and each thread's chunks of a matrix
    lie side by side (one run of its rows each) instead of every other chunk."""
    return n - 1 - j if back else j


@njit(**JIT)
def _chunks(sync, s, c, n, kind, q, scale, offset, x, y, out, attn, update, back):
    """The chunk this thread has taken of stage s (c < n: its take's count) and each one it takes
    after: the j-th it takes is chunk k = j, or n - 1 - j where `back` (_ends), W's row groups
    G k / n .. G (k + 1) / n of y = x Wᵀ (y [1, G LANES]), x prepared once as W's serial kernel
    prepares it (onerow_block._matvec's), every group by that kernel's group body; where
    `update`, out = (out + attn) + y on the chunk's rows (out, attn [1, G LANES])."""
    G = q.shape[0]
    j = 0
    if kind <= 1:
        xt, xs = _NIB_X(x, q.shape[1])
        while c < n:
            k = _ends(j, n, back)
            for g in range(G * k // n, G * (k + 1) // n):
                if kind == 0:
                    _G_NIB(q, scale, offset, xt, xs, y, g)
                else:
                    _G_NIB8(q, scale, offset, xt, xs, y, g)
            _finish(sync, s, y, out, attn, update, G * k // n, G * (k + 1) // n)
            c, j = _chunk(sync, s), j + 1
    else:
        xb, xbs = _BYTES_X(x, q.shape[1], 32 if kind == 2 else 16)
        while c < n:
            k = _ends(j, n, back)
            for g in range(G * k // n, G * (k + 1) // n):
                if kind == 2:
                    _G_B32(q, scale, offset, xb, xbs, y, g)
                else:
                    _G_B16(q, scale, offset, xb, xbs, y, g)
            _finish(sync, s, y, out, attn, update, G * k // n, G * (k + 1) // n)
            c, j = _chunk(sync, s), j + 1


@njit(**JIT)
def _finish(sync, s, y, out, attn, update, g0, g1):
    """A chunk of stage s done (groups g0..g1-1): out = (out + attn) + y on its rows where
    `update` (onerow_block._step_mid_in's mid + m), then counted."""
    if update:
        y_row, out_row, attn_row = y[0], out[0], attn[0]
        for j in range(g0 * LANES, g1 * LANES):
            mid = out_row[j] + attn_row[j]
            out_row[j] = mid + y_row[j]
    _take(sync, LINE * (2 + 2 * s))


@njit(**JIT)
def _matrix_stage(sync, s, n, kind, q, scale, offset, x, y, keep, i, back):
    """Stage s: chunks of y = x Wᵀ (n of them; `back`: _chunks') -> _wait's answer; the thread of
    the stage's first take keeps x as keep[i] (where asked: keep has rows)."""
    c = _chunk(sync, s)
    if c < n:
        if c == 0 and keep.shape[0]:
            keep[i] = x.reshape(keep.shape[1:])
        _chunks(sync, s, c, n, kind, q, scale, offset, x, y, y, y, False, back)
    return _wait(sync, s, n)


@njit(**JIT)
def _qkv_stage(sync, s, n, x, gain, eps, kind, q, scale, offset, xn, qkv, resid, i, back):
    """S0: xn = RMSNorm(x) on this thread's first chunk, then qkv's chunks; the thread of the
    stage's first take keeps x as resid[i] (where asked)."""
    c = _chunk(sync, s)
    if c < n:
        rms_norm_of(x, gain, eps, xn)
        if c == 0 and resid.shape[0]:
            resid[i] = x
        _chunks(sync, s, c, n, kind, q, scale, offset, xn, qkv, qkv, qkv, False, back)
    return _wait(sync, s, n)


@njit(**JIT)
def _attend_stage(sync, s, qkv, kw, vw, p, cos, sin, n_head, n_kv_head, bias, scale, n_group, rows,
                  z):
    """S1: KV head g's chunk: rotate_of on its k and its query heads' q, its k and v written at
    position p of kw, vw [n_kv_head, > p, d_head], its heads' pattern rows [n_group, 1, p + 1]
    of rows (scores_ahead_of, softmax_of) and z [n_head, 1, d_head] (weighted_of): the one-thread
    call's steps (onerow_block._append_attend_of, _step_mid_in) on one KV head's group."""
    d_head = cos.shape[1]
    q_end, k_end = n_head * d_head, (n_head + n_kv_head) * d_head
    while True:
        g = _chunk(sync, s)
        if g >= n_kv_head:
            break
        h0 = g * n_group
        qg = qkv[0, h0 * d_head:(h0 + n_group) * d_head].reshape(n_group, 1, d_head)
        rotate_of(qg, cos, sin)
        rotate_of(qkv[0, q_end + g * d_head:q_end + (g + 1) * d_head].reshape(1, 1, d_head), cos, sin)
        for j in range(d_head):
            kw[g, p, j] = qkv[0, q_end + g * d_head + j]
            vw[g, p, j] = qkv[0, k_end + g * d_head + j]
        sg = rows[h0:h0 + n_group]
        scores_ahead_of(qg, kw[g:g + 1], p + 1, bias, scale, n_group, True, sg, vw[g:g + 1])
        softmax_of(sg)
        weighted_of(sg, vw[g:g + 1], n_group, z[h0:h0 + n_group])
        _take(sync, LINE * (2 + 2 * s))
    return _wait(sync, s, n_kv_head)


@njit(**JIT)
def _in_stage(sync, s, n, x, attn, gain, eps, kind, q, scale, offset, mid, xn, hidden, back):
    """S3: mid = x + attn, xn = RMSNorm(mid) on this thread's first chunk, then hidden's chunks."""
    c = _chunk(sync, s)
    if c < n:
        x_row, attn_row, mid_row = x[0], attn[0], mid[0]
        for j in range(x.shape[1]):
            mid_row[j] = x_row[j] + attn_row[j]
        rms_norm_of(mid, gain, eps, xn)
        _chunks(sync, s, c, n, kind, q, scale, offset, xn, hidden, hidden, hidden, False, back)
    return _wait(sync, s, n)


@njit(**JIT)
def _out_stage(sync, s, n, hidden, d_ff, kind, q, scale, offset, h, y, bits, m, x, attn, back):
    """S4: h = SwiGLU(hidden) on this thread's first chunk, then m's chunks, each with x = (x +
    attn) + m on its rows (no other thread reads them in this stage)."""
    c = _chunk(sync, s)
    if c < n:
        swiglu_of(hidden[0], d_ff, h, y, bits)
        _chunks(sync, s, c, n, kind, q, scale, offset, h[:d_ff].reshape(1, d_ff), m, x, attn, True, back)
    return _wait(sync, s, n)


def _pair_layers(x, a, b, full_last, kinds, qs, ss, os_, gains1, gains2, eps, cos, sin, n_head,
                 n_kv_head, bias, scale, n_group, kv, p, rows, r, resid, z, shared, sync, n, back):
    """onerow_stack._layers_of's layers a..b-1 (its arguments, the same meaning) with another
    thread in the same call (module docstring): shared [the sizes of qkv, z, attn, hidden, m]
    float32, the arrays both write; sync int64 [LINE (1 + 2 STAGES (b - a))] zeros, the call's
    counters; n chunks a matrix; `back`: this thread takes each matrix's chunks from its last one
    on (the partner's; the caller's from the first: _chunks) -> False where a thread failed (x then
    not the run's)."""
    d_model, d_head = x.shape[1], cos.shape[1]
    d_ff = 0
    for i in range(a, b):
        d_ff = max(d_ff, qs[4 * i + 2].shape[0] * LANES // 2)
    n_qkv = (n_head + 2 * n_kv_head) * d_head
    o = (0, n_qkv, n_qkv + n_head * d_head, n_qkv + n_head * d_head + d_model)
    qkv = shared[o[0]:o[1]].reshape(1, n_qkv)
    zs = shared[o[1]:o[2]].reshape(n_head, 1, d_head)
    attn = shared[o[2]:o[3]].reshape(1, d_model)
    xn, mid = np.empty((1, d_model), np.float32), np.empty((1, d_model), np.float32)
    h, y, bits = np.empty(d_ff, np.float32), np.empty(d_ff, np.float32), np.empty(d_ff, np.int32)
    for i in range(a, b):
        j, s = 4 * i, STAGES * (i - a)
        w_ff = qs[j + 2].shape[0] * LANES // 2
        hidden = shared[o[3]:o[3] + 2 * w_ff].reshape(1, 2 * w_ff)
        m = shared[o[3] + 2 * d_ff:o[3] + 2 * d_ff + d_model].reshape(1, d_model)
        if not _qkv_stage(sync, s, n, x, gains1[i], eps, kinds[i, 0], qs[j], ss[j], os_[j], xn, qkv,
                          resid, i, back):
            return False
        if not _attend_stage(sync, s + 1, qkv, kv[0, i], kv[1, i], p, cos, sin, n_head, n_kv_head,
                             bias, scale, n_group, rows[i, :, r:r + 1, :p + 1], zs):
            return False
        if i == b - 1 and not full_last:
            break
        if not _matrix_stage(sync, s + 2, n, kinds[i, 1], qs[j + 1], ss[j + 1], os_[j + 1],
                             zs.reshape(1, n_head * d_head), attn, z, i, back):
            return False
        if not _in_stage(sync, s + 3, n, x, attn, gains2[i], eps, kinds[i, 2], qs[j + 2], ss[j + 2],
                         os_[j + 2], mid, xn, hidden, back):
            return False
        if not _out_stage(sync, s + 4, n, hidden, w_ff, kinds[i, 3], qs[j + 3], ss[j + 3], os_[j + 3],
                          h, y, bits, m, x, attn, back):
            return False
    return True


def shared_size(n_head: int, n_kv_head: int, d_head: int, d_model: int, d_ff: int) -> int:
    """Floats of _pair_layers' `shared`: qkv, z, attn, hidden (2 d_ff), m."""
    return (n_head + 2 * n_kv_head) * d_head + n_head * d_head + 2 * d_model + 2 * d_ff


def sync_for(n_layers: int) -> np.ndarray:
    """A call's counters over n_layers layers, zeros: ABORTED, OVER and LEFT, then each stage's taken
    and done counts, each on a cache line of its own."""
    return np.zeros(LINE * (1 + 2 * STAGES * n_layers), np.int64)


class Partner:
    """The process's partner thread (a daemon, started on first use; again after a fork): each
    call's arguments queued to it, the newest run, older ones skipped (their calls are over)."""

    def __init__(self):
        self._jobs: queue.SimpleQueue | None = None
        self._pid = None
        self._lock = threading.Lock()

    def _queue(self) -> queue.SimpleQueue:
        with self._lock:
            if self._jobs is None or self._pid != os.getpid():
                self._jobs, self._pid = queue.SimpleQueue(), os.getpid()
                threading.Thread(target=self._loop, args=(self._jobs,), name="attnviz-pair",
                                 daemon=True).start()
            return self._jobs

    @staticmethod
    def _loop(jobs: queue.SimpleQueue) -> None:
        while True:
            job = jobs.get()
            while not jobs.empty():  # (the latest call only: a caller never waits for the partner)
                job[2][LEFT] = 1
                job = jobs.get()
            Partner._share(*job)
            job = None  # (nothing of the call held while waiting: its model and KV buffer may go)

    @staticmethod
    def _share(compiled, args, sync) -> None:  # the partner's share of one call
        try:
            if not sync[OVER]:
                compiled(*args)
        except BaseException:  # the caller stops waiting for its chunk and raises
            if not sync[OVER]:  # (a call over before the partner came: its arrays may be read-only now)
                sync[ABORTED] = 1
                log.exception("the partner thread's share of a one-row run failed")
        finally:
            sync[LEFT] = 1

    def start(self, compiled, args, sync) -> None:
        """compiled(*args) queued for the partner thread (args' sync is `sync`)."""
        self._queue().put((compiled, args, sync))

    def run(self, compiled, args, sync, partner_args=None) -> None:
        """compiled(*args) on the partner thread (start; compiled(*partner_args) where given) and on
        this one: raises where either thread failed (compiled returned False, or raised here)."""
        self.start(compiled, args if partner_args is None else partner_args, sync)
        try:
            ok = compiled(*args)
        except BaseException:
            sync[ABORTED] = 1  # (the partner stops waiting for this thread's chunk)
            sync[OVER] = 1
            _partner_left(sync)  # (it may be writing a chunk's rows: not after this call is over)
            raise
        finally:
            sync[OVER] = 1
        if not ok:
            raise RuntimeError("the partner thread failed in a one-row run (logged)")


PARTNER = Partner()


def _partner_left(sync, wait_s: float = LEFT_WAIT_S) -> None:
    """Until the partner has left (or skipped) the call of `sync`, at most wait_s (a partner busy
    with another model's call meanwhile comes to this one later, and skips it then)."""
    deadline = time.monotonic() + wait_s
    while not sync[LEFT] and time.monotonic() < deadline:
        time.sleep(0.0005)
