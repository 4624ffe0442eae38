"""BLAS thread control. On small matrices (T <= a few hundred) extra BLAS threads cost more than
they give, and on a 2-core machine their busy-waiting starves the UI thread; the window caps them."""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def limit_blas_threads(n: int = 1):
    """Cap the BLAS thread pools of this process at `n` threads (returns the limiter)."""
    return threadpool_limits(limits=n, user_api="blas")
