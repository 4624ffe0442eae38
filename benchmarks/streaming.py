"""The memory floor of a pass over some arrays: the time one thread takes to read their bytes and
nothing else (not a benchmark of its own: qsteps and qmatvec measure it in their run).

A kernel bound by memory alone could not read its bytes faster than a plain loop that only loads
them (8 bytes at a time, combined by xor so the loads cannot be left out). The float32
matrix-vector pass is no such floor: it reads well under this bandwidth, and the quantised
kernels' products beat it.

    read_ms(arrays, repeat)   fastest ms of one read of every array in turn, and their bytes
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit


@njit(nogil=True)
def _read64(a):  # a [n] uint64 -> xor of every word (each loaded once)
    acc = np.uint64(0)
    for i in range(a.size):
        acc ^= a[i]
    return acc


@njit(nogil=True)
def _read8(a):  # a [n] uint8 -> xor of every byte
    acc = np.uint8(0)
    for i in range(a.size):
        acc ^= a[i]
    return acc


def _words(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A C-contiguous array's bytes as (its whole 8-byte words, the bytes after them)."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    n = b.size // 8 * 8
    return b[:n].view(np.uint64), b[n:]


def read_ms(arrays, repeat: int = 7) -> tuple[float, int]:
    """Fastest ms of one plain read of every array's bytes in turn, on the calling thread, over
    `repeat` reads (the first compiles and is not counted), and their bytes. Arrays larger than
    the CPU's caches together (the layers' packed matrices) make it a read from memory."""
    parts = [_words(a) for a in arrays]
    for words, rest in parts[:1]:
        _read64(words[:8])
        _read8(rest)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for words, rest in parts:
            _read64(words)
            if rest.size:
                _read8(rest)
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best, sum(int(np.asarray(a).nbytes) for a in arrays)
