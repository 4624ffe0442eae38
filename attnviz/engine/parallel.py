"""Work shared out to threads: NumPy's products and element-wise passes release the GIL, so a
long text's blocks of rows (engine/computing/longdoc.py) run on every core, each thread with one
BLAS thread (threads of NumPy and BLAS, not of BLAS alone: a BLAS thread pool parallelises only its
products, and the passes between them, the softmax's exp, the MLP's activation, would run on one
core). Pure Python threads, no Qt."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from threadpoolctl import threadpool_limits

from attnviz.engine.errors import Cancelled

ROW_CHUNK = 128  # rows of a row-wise step (a projection, the MLP) per task: [128, 3072] in cache


_LIMIT: int | None = None  # limit_cores()
_AFFINITY: int | None = None  # _machine_cores(), read once per process


def cores() -> int:
    """The cores this process may run on: its CPU affinity where the system gives one (a container
    or `taskset` that leaves it fewer cores than the machine has: a thread or a worker per core of
    the machine would then share the few), else the machine's count; at most limit_cores()'s."""
    n = _AFFINITY if _AFFINITY is not None else _machine_cores()
    return n if _LIMIT is None else min(n, _LIMIT)


def _machine_cores() -> int:
    """The affinity's count, read once: every quantised product asks (117 a SmolLM2 keystroke),
    and the read is a system call that builds a set. A forked child reads its own again."""
    global _AFFINITY
    try:
        n = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # (no sched_getaffinity: macOS, Windows)
        n = os.cpu_count() or 1
    _AFFINITY = n
    return n


def _forget_affinity() -> None:
    global _AFFINITY
    _AFFINITY = None


if hasattr(os, "register_at_fork"):  # a child may be given other cores (a pool's worker)
    os.register_at_fork(after_in_child=_forget_affinity)


_KERNEL_THREADS: int | None = None  # limit_kernel_threads()
WIDE_KERNEL = 4 << 20  # weights of a matrix from which a capped kernel call takes more threads
_WIDE: int | None = WIDE_KERNEL  # limit_kernel_threads()'s `wide`
_SPARE = 1  # limit_kernel_threads()'s `spare`
_PAIR_STEPS = False  # limit_kernel_threads()'s `pair_steps`


def kernel_threads(weights: int = 0) -> int:
    """Threads a quantised kernel call on a matrix of `weights` weights shares its rows over
    (engine/computing/qmatvec.py): every core, or what limit_kernel_threads() set, except for a
    matrix of at least its `wide` weights (a 1B model's [2048, 2048] and larger), which takes
    every core but its `spare` ones (the one that paints): its rows split over them in a fraction
    of the time. (On a busy machine a split call waits for its slowest thread: `spare` 0 lets it
    wait for the painting core too.)"""
    n = cores()
    if _KERNEL_THREADS is None:
        return n
    cap = min(n, _KERNEL_THREADS)
    if _WIDE is not None and weights >= _WIDE:
        return max(cap, n - _SPARE)
    return cap


def limit_kernel_threads(n: int | None, wide: int | None = WIDE_KERNEL, spare: int = 1,
                         pair_steps: bool = False) -> None:
    """Cap the quantised kernels' threads at `n` (None: every core): the window caps them as it
    caps BLAS, so a keystroke's few-row products do not spin on the core that paints. A matrix of
    at least `wide` weights takes every core but `spare` (None: the cap holds for every matrix).
    `pair_steps`: a generation step's one-row run takes two threads whatever the cap (step_pair)."""
    global _KERNEL_THREADS, _WIDE, _SPARE, _PAIR_STEPS
    _KERNEL_THREADS = None if n is None else max(1, int(n))
    _WIDE = None if wide is None else int(wide)
    _SPARE = max(0, int(spare))
    _PAIR_STEPS = bool(pair_steps)


def kernel_limits() -> tuple:
    """(n, wide, spare, pair_steps) as limit_kernel_threads last set them (n None: no cap):
    limit_kernel_threads(*kernel_limits()) puts them back as they were."""
    return _KERNEL_THREADS, _WIDE, _SPARE, _PAIR_STEPS


def step_pair() -> bool:
    """Whether a generation step's one-row run takes its layers on two threads (onerow_pair, with
    its fallback to one thread where the pair does not pay): limit_kernel_threads' `pair_steps`,
    where this process has 2 cores or more."""
    return _PAIR_STEPS and cores() >= 2


def limit_cores(n: int | None) -> None:
    """Make cores() at most `n` for this process (None: no limit): a process that is one of several
    sharing the machine's cores (a scan's Dask worker) runs the engine's threads on one core."""
    global _LIMIT
    _LIMIT = None if n is None else max(1, int(n))


def core_limit() -> int | None:
    """What limit_cores() last set (None: no limit): limit_cores(core_limit()) puts it back."""
    return _LIMIT


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _turns(n: int, step: Callable):
    """(loop, state): loop() takes t = 0..n-1 in turn with the other threads running it, carry =
    step(t, carry) (a thread's own work array, None at first); the first error a thread meets is
    kept in state["error"] and stops the others before their next t."""
    lock, state = threading.Lock(), {"next": 0, "error": None}

    def loop():
        carry = None
        while True:
            with lock:
                t, state["next"] = state["next"], state["next"] + 1
                if t >= n or state["error"] is not None:
                    return
            try:
                carry = step(t, carry)
            except BaseException as exc:  # the others stop before their next t
                with lock:
                    state["error"] = state["error"] or exc
                return
    return loop, state


def in_parallel(n: int, task: Callable, workers: int | None = None,
                stop: Callable[[], bool] | None = None) -> None:
    """task(t, buf) -> buf for t = 0..n-1, taken in order by `workers` threads (None: one per core;
    the caller's thread is one of them), each passing its own work array from one task to its
    next; BLAS runs one thread per worker meanwhile (threads of NumPy and BLAS, not of BLAS alone:
    the element-wise passes are shared too). `stop()`, asked before each task, ends the work with
    Cancelled, once every worker has left its task."""
    global _POOL
    workers = min(n, cores() if workers is None else max(1, int(workers)))

    def step(t, buf):
        if stop is not None and stop():
            raise Cancelled("stopped: a newer result was asked for")
        return task(t, buf)
    loop, state = _turns(n, step)

    if workers <= 1:
        loop()
    else:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=max(1, cores() - 1),
                                           thread_name_prefix="attnviz-rows")
        with threadpool_limits(limits=1, user_api="blas"):
            helpers = [_POOL.submit(loop) for _ in range(workers - 1)]
            loop()
            for f in helpers:
                f.result()
    if state["error"] is not None:
        raise state["error"]


def for_row_chunks(n: int, fn: Callable[[int, int], None], workers: int | None = None,
                   rows: int | None = None) -> None:
    """fn(a, b) for rows a..b-1 of n, `rows` (default ROW_CHUNK) at a time, on `workers` threads
    (in_parallel); fn writes its rows' results itself (disjoint rows: no lock)."""
    rows = ROW_CHUNK if rows is None else rows

    def task(t, buf):
        fn(t * rows, min(n, (t + 1) * rows))
        return buf
    in_parallel(-(-n // rows), task, workers)


def in_threads(n: int, task: Callable[[int], None], threads: int | None = None) -> None:
    """task(t) for t = 0..n-1 on `threads` threads of their own (None: one per core; the caller's
    thread is one of them), each taking the next t in turn. Unlike in_parallel, no shared pool and
    BLAS's thread count left as it is: for a long job that runs beside the window's own runs (a
    long text's head scores), which would otherwise wait for a pool thread it holds, or have their
    BLAS threads changed under them. A helper thread inherits the caller's scheduling priority. The
    first error a thread meets stops the others before their next t and is raised here."""
    threads = min(n, cores() if threads is None else max(1, int(threads)))
    loop, state = _turns(n, lambda t, _carry: task(t))
    helpers = [threading.Thread(target=loop, name=f"attnviz-threads-{i}", daemon=True)
               for i in range(threads - 1)]
    for h in helpers:
        h.start()
    loop()
    for h in helpers:
        h.join()
    if state["error"] is not None:
        raise state["error"]
