"""What a generation step's layers read, and the floors of reading it on one thread and on two
(not a benchmark of its own: qsteps measures them in its run).

- packed_arrays: every array of the layers' packed matrices (blocks, scales, offsets), the bytes
  qsteps' floor reads (benchmarks/streaming.py: one thread's plain read); packed_bytes: their
  bytes as the packed matrices count them.
- products_alone: the layers' matrix products of one row on their own, on the serial kernels.
- two_threads: on two threads started together (the partner spins for each round, so no wake-up
  is timed), the same bytes' plain read (each thread a contiguous half of the arrays) and the
  layers' products alone split as onerow_pair splits a step's (each matrix a stage: its row
  groups in CHUNKS chunks either thread takes, both waiting for the stage's last chunk).
  Two threads read the bytes faster than one; the products then show what the kernels' own
  work leaves of that (where the two threads share a core's vector units, little).
  two_thread_figures: qsteps' figures of them.
"""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
from numba import njit
from numba.typed import List

from attnviz.engine.computing import onerow_pair as op
from benchmarks.record import figure

READ, PRODUCTS = 0, 1  # two_threads' ways
GO, WAY, DONE = 0, 8, 16  # the control array's slots (each on a cache line of its own)


def _packed_parts(store) -> list:
    """Every Packed part of every layer's packed matrices (W_qkv, W_o, W_in, W_out), in order."""
    mats = [m for i in range(len(store)) for m in (lambda pl: (pl.w_qkv, pl.w_o, pl.w_in, pl.w_out))(
        store.packed_view(i).packed) if m is not None]
    return [p for m in mats for _, p in m.parts]


def part_arrays(parts) -> list:
    """Every array of Packed parts (blocks, scales, offsets): what the kernels read of them."""
    return [a for p in parts for a in (p.q, p.scale, p.offset) if a is not None]


def packed_arrays(store) -> list:
    """Every array the layers' packed matrices hold: what a step's products read."""
    return part_arrays(_packed_parts(store))


def packed_bytes(store) -> int:
    """The bytes of every layer's packed matrices (qpack's PackedLayer.nbytes): the quantised
    bytes qsteps' floor is the read of."""
    return sum(store.packed_view(i).packed.nbytes for i in range(len(store)))


def products_alone(store, repeat: int) -> list[float]:
    """ms of the layers' matrix products of one row on their own: every packed matrix of every
    layer once, on the serial kernel a generation step's layers take (qmatvec.SERIAL), x fixed."""
    from attnviz.engine.computing import qmatvec as qm
    parts = _packed_parts(store)
    rng = np.random.default_rng(3)
    calls = [(qm.SERIAL[qm._kernel_of(p)], p.args, rng.standard_normal((1, p.n_in), dtype=np.float32),
              np.empty((1, p.q.shape[0] * 16), np.float32)) for p in parts]
    times = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        for kernel, args, x, y in calls:
            kernel(*args, x, y)
        times.append((time.perf_counter() - t0) * 1e3)
    return times[1:]  # (the first warms)


@njit(nogil=True)
def _share(way, t, sync, n, kinds, qs, ss, os_, xs, ys, words):
    """Thread t's share of one round: READ, a contiguous half of `words`; PRODUCTS, each matrix's
    chunks (n a matrix) as onerow_pair's stages take them, then its wait."""
    acc = np.uint64(0)
    if way == READ:
        for a in range(len(words) * t // 2, len(words) * (t + 1) // 2):
            w = words[a]
            for i in range(w.size):
                acc ^= w[i]
        return acc
    for j in range(len(qs)):
        c = op._chunk(sync, j)
        if c < n:
            op._chunks(sync, j, c, n, kinds[j], qs[j], ss[j], os_[j], xs[j], ys[j], ys[j], ys[j], False, t == 1)
        op._wait(sync, j, n)
    return acc


@njit(nogil=True)
def _partner(ctl, sync, n, kinds, qs, ss, os_, xs, ys, words):
    """The second thread: spins for each round (ctl[GO] counted up), takes its share, counts it
    done; leaves where ctl[GO] < 0."""
    seen = 0
    while True:
        while op._seen(ctl, GO) == seen:
            op._pause()
        seen = op._seen(ctl, GO)
        if seen < 0:
            return
        _share(ctl[WAY], 1, sync, n, kinds, qs, ss, os_, xs, ys, words)
        op._take(ctl, DONE)


@njit(nogil=True)
def _round(ctl, way, sync, n, kinds, qs, ss, os_, xs, ys, words):
    """One round on both threads: this one's share, then the partner's done."""
    sync[:] = 0
    ctl[WAY] = way
    done = op._seen(ctl, DONE)
    op._take(ctl, GO)
    _share(way, 0, sync, n, kinds, qs, ss, os_, xs, ys, words)
    while op._seen(ctl, DONE) == done:
        op._pause()


def _typed(arrays) -> List:
    out = List()
    for a in arrays:
        out.append(a)
    return out


def two_threads(store, repeat: int) -> dict[str, list[float]] | None:
    """ms of each round of READ and PRODUCTS on two threads (module docstring), in turns, `repeat`
    each after one warming round; None where the pair does not run here or the matrices are not
    of one kernel type (one compiled share for them all)."""
    from attnviz.engine.computing import onerow_block as ob
    parts = _packed_parts(store)
    if not op.AVAILABLE or len({(ob._kind(p), *(a.dtype for a in p.args)) for p in parts}) != 1:
        return None
    rng = np.random.default_rng(4)
    words = _typed([np.ascontiguousarray(a).reshape(-1).view(np.uint8)[:a.nbytes // 8 * 8].view(np.uint64)
                    for a in part_arrays(parts)])
    args = (op.sync_for(len(parts)), op.CHUNKS, np.array([ob._kind(p) for p in parts], np.int64),
            *(_typed([p.args[k] for p in parts]) for k in range(3)),
            _typed([rng.standard_normal((1, p.n_in)).astype(np.float32) for p in parts]),
            _typed([np.empty((1, p.q.shape[0] * op.LANES), np.float32) for p in parts]), words)
    ctl = np.zeros(24, np.int64)
    partner = threading.Thread(target=_partner, args=(ctl, *args), daemon=True)
    partner.start()
    times: dict = {"read": [], "products": []}
    try:
        for r in range(repeat + 1):
            for way in ((READ, PRODUCTS) if r % 2 else (PRODUCTS, READ)):
                t0 = time.perf_counter()
                _round(ctl, way, *args)
                if r:  # (the first warms)
                    times["read" if way == READ else "products"].append((time.perf_counter() - t0) * 1e3)
    finally:
        ctl[GO] = -1
        partner.join()
    return times


def two_thread_figures(store, T: int, floor: float, alone: float, repeat: int) -> list[dict]:
    """qsteps' figures of two_threads at T: the packed bytes' plain read and the layers' products
    alone on two threads, against one thread's floor and products (`alone`: their median ms)."""
    times = two_threads(store, repeat)
    if times is None:
        return []
    read, prods = statistics.median(times["read"]), statistics.median(times["products"])
    print(f"  two threads: plain read {read:.2f} ms ({read / floor:.2f}x one thread's floor), the "
          f"products alone {prods:.2f} ms ({prods / floor:.2f}x; one thread's {alone:.2f} ms)", flush=True)
    return [
        figure(f"generation step T = {T}: two threads' plain read / quantised-bytes floor", read / floor, "x",
               runs=[t / floor for t in times["read"]], note=f"median {read:.2f} ms: each thread a contiguous half of the "
                                        f"packed arrays, both started together; floor {floor:.2f} ms "
                                        f"(one thread's); no goal"),
        figure(f"generation step T = {T}: the layers' products alone on two threads / quantised-bytes "
               f"floor", prods / floor, "x", runs=[t / floor for t in times["products"]],
               note=f"median {prods:.2f} ms (one thread's serial kernels {alone:.2f} ms): every packed "
                    f"matrix a stage of onerow_pair's chunks on two threads, in turns with the read "
                    f"above; no goal"),
    ]
