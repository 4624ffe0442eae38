"""The window's thread caps (tuning.limit_blas_threads): BLAS and the quantised kernels agree on the
latest call's n."""

import pytest
from threadpoolctl import threadpool_info

from attnviz.engine import parallel
from attnviz.ui.machinery.tuning import BLAS_THREADS, limit_blas_threads


def blas_threads() -> set:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_a_second_call_caps_blas_and_the_kernels_at_its_own_n():
    if parallel.cores() < 2:
        pytest.skip("one core: a cap of 2 is every core, the same as none")
    limit_blas_threads(1)
    assert (parallel.kernel_threads(), blas_threads()) == (1, {1})
    limit_blas_threads(2)
    assert (parallel.kernel_threads(), blas_threads()) == (2, {2})
    limit_blas_threads()
    assert (parallel.kernel_threads(), blas_threads()) == (BLAS_THREADS, {BLAS_THREADS})
