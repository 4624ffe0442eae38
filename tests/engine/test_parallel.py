"""Work shared out to threads (engine/parallel.py): every task runs once, on at most the
workers asked for; an error in one task reaches the caller once every worker has stopped; stop()
ends the work with Cancelled."""

import threading

import pytest

from attnviz.engine import parallel
from attnviz.engine.errors import Cancelled


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_every_task_runs_once_and_each_worker_keeps_its_buffer(workers):
    seen, threads, lock = [], set(), threading.Lock()

    def task(t, buf):
        with lock:
            seen.append(t)
            threads.add(threading.get_ident())
        assert buf is None or buf[0] == threading.get_ident()  # its own thread's buffer
        return (threading.get_ident(),)

    parallel.in_parallel(50, task, workers)
    assert sorted(seen) == list(range(50)) and len(threads) <= workers


def test_an_error_in_a_task_reaches_the_caller_and_stops_the_rest():
    ran, raised = [], threading.Event()

    def task(t, buf):
        ran.append(t)
        if t == 3:
            raised.set()
            raise ValueError("task 3")
        if t > 3:  # the tasks after it wait for the raise, so the other thread cannot take all 1,000 first
            assert raised.wait(60)
        return buf

    with pytest.raises(ValueError, match="task 3"):
        parallel.in_parallel(1000, task, 2)
    assert len(ran) < 1000
    with pytest.raises(Cancelled):
        parallel.in_parallel(10, lambda t, buf: buf, 2, stop=lambda: True)


def test_row_chunks_cover_every_row_once():
    got = []
    parallel.for_row_chunks(1000, lambda a, b: got.append((a, b)), 2, rows=128)
    assert sorted(got) == [(a, min(1000, a + 128)) for a in range(0, 1000, 128)]



def test_a_limit_on_the_cores_holds_them_and_its_reading_puts_it_back():
    """limit_cores(n): cores() and the kernels' threads at most n (a scan's Dask worker: one);
    core_limit() says what was set, and limit_cores(core_limit()) puts it back."""
    was, found = parallel.core_limit(), parallel.cores()
    parallel.limit_cores(1)
    assert (parallel.core_limit(), parallel.cores(), parallel.kernel_threads(10 ** 9)) == (1, 1, 1)
    parallel.limit_cores(None)
    assert parallel.core_limit() is None and parallel.cores() >= found
    parallel.limit_cores(was)
    assert (parallel.core_limit(), parallel.cores()) == (was, found)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no CPU affinity here")
def test_cores_are_the_ones_this_process_may_run_on():
    """A process held to one core (a container's or taskset's CPU set) counts one core, so the
    window's BLAS, a long text's threads and the scan's LocalCluster do not put a thread per core of
    the whole machine on it."""
    import os
    import subprocess
    import sys

    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from attnviz.engine.parallel import cores; print(cores())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
    assert parallel.cores() == len(os.sched_getaffinity(0))


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="no CPU affinity here")
def test_the_cores_are_read_once_per_process(monkeypatch):
    """Every quantised product asks for the cores (a keystroke's run: over a hundred times): the
    affinity is read once, not a system call per product."""
    import os

    reads = []
    real = os.sched_getaffinity
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: reads.append(pid) or real(pid))
    monkeypatch.setattr(parallel, "_AFFINITY", None)
    counts = {parallel.cores() for _ in range(200)} | {parallel.kernel_threads() for _ in range(200)}
    assert len(reads) == 1
    assert max(counts) == len(real(0))


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity") or not hasattr(
    __import__("os"), "fork"), reason="no CPU affinity or fork here")
def test_a_forked_child_held_to_one_core_counts_one():
    """The count read once is the parent's: a child forked and given one core reads its own (in a
    fresh single-threaded process, which forks)."""
    import subprocess
    import sys

    code = ("import os\n"
            "from attnviz.engine.parallel import cores\n"
            "cores()\n"  # the parent's count is known before the fork
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
            "    print(cores(), flush=True)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
