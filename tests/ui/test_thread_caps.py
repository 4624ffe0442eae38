"""The window's thread caps (tuning.limit_blas_threads): BLAS and the quantised kernels agree on the
latest call's n, capped_blas puts back the BLAS threads it found, and the caps a window test sets
are put back after it (tests/conftest.py), so a later test runs under the caps its process had (an
xdist worker's share of the cores)."""

import threading

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from attnviz.engine import parallel
from attnviz.ui.machinery.tuning import BLAS_THREADS, capped_blas, limit_blas_threads, wide_blas

OURS = (3, None, 0, False)  # this module's kernel caps: none a window sets (n, wide, spare, pair_steps)


def blas_threads() -> set:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.fixture(scope="module")
def module_caps():
    """Caps of this module's own, unlike a window's: the kernels' OURS, BLAS on 2 threads where
    BLAS takes them (else as it was) -> (kernel caps, BLAS threads); the process's put back after."""
    kernels, blas = parallel.kernel_limits(), blas_threads()
    parallel.limit_kernel_threads(*OURS)
    with threadpool_limits(limits=2, user_api="blas"):
        yield parallel.kernel_limits(), blas_threads()
    parallel.limit_kernel_threads(*kernels)
    assert blas_threads() == blas


def test_a_second_call_caps_blas_and_the_kernels_at_its_own_n():
    if parallel.cores() < 2:
        pytest.skip("one core: a cap of 2 is every core, the same as none")
    limit_blas_threads(1)
    assert (parallel.kernel_threads(), blas_threads()) == (1, {1})
    limit_blas_threads(2)
    assert (parallel.kernel_threads(), blas_threads()) == (2, {2})
    limit_blas_threads()
    assert (parallel.kernel_threads(), blas_threads()) == (BLAS_THREADS, {BLAS_THREADS})


def test_capped_blas_puts_back_the_threads_it_found_not_the_cap():
    """Under a cap other than BLAS_THREADS (another caller's limit_blas_threads), and inside
    wide_blas on a job's thread (where a long run meets it): BLAS_THREADS inside capped_blas, the
    threads found before it again after it."""
    other = BLAS_THREADS + 1
    if parallel.cores() < other:
        pytest.skip(f"{parallel.cores()} cores: no cap above BLAS_THREADS")
    limit_blas_threads(other)
    with capped_blas():
        assert blas_threads() == {BLAS_THREADS}
    assert blas_threads() == {other} and parallel.kernel_limits()[0] == other
    found = []

    def job():
        with wide_blas():
            with capped_blas():
                found.append(blas_threads())
            found.append(blas_threads())
    t = threading.Thread(target=job)
    t.start()
    t.join()
    assert found == [{BLAS_THREADS}, {parallel.cores()}]


def test_a_window_caps_blas_and_the_kernels_at_its_own(module_caps, window):
    """(What the next test finds put back.)"""
    assert parallel.kernel_limits() != OURS and parallel.kernel_limits()[0] == BLAS_THREADS
    assert blas_threads() == {BLAS_THREADS}


def test_the_caps_a_window_test_changed_are_put_back_after_it(module_caps):
    """Run after the test above (pytest keeps a module's order; xdist's loadfile too)."""
    kernels, blas = module_caps
    assert parallel.kernel_limits() == kernels == OURS
    assert blas_threads() == blas
