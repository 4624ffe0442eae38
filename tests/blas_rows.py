"""Whether this machine's BLAS gives a row of x @ w the same bits whatever rows surround it and on
any number of threads. The engine's exactness checks (a cached prefix's rows, a patched run from
layer 0, one BLAS thread for a few rows) rely on it. OpenBLAS's AVX-512 kernels have it for the
tests' shapes; its AVX2 kernels (Haswell, Zen) round a row by where it falls in their row tiles,
so those rows agree to float32 rounding only. Tests assert bits where the BLAS has it, else a
float32 rounding bound (EXACT says which)."""

from __future__ import annotations

import functools

import numpy as np
from threadpoolctl import threadpool_limits

SHAPES = ((9, 64, 64), (9, 64, 192), (10, 576, 576), (23, 576, 1536))


def _rows_alike(rng) -> bool:
    for n, k, m in SHAPES:
        x = rng.standard_normal((n, k), dtype=np.float32)
        w = rng.standard_normal((k, m), dtype=np.float32)
        full = x @ w
        if any(not np.array_equal(x[a:] @ w, full[a:]) or not np.array_equal(x[a:a + 1] @ w, full[a:a + 1])
               for a in range(n)):
            return False
        for threads in (1, 2):
            with threadpool_limits(limits=threads, user_api="blas"):
                if not np.array_equal(x @ w, full):
                    return False
    return True


@functools.lru_cache(maxsize=None)
def exact() -> bool:
    """True where every row's bits are the same in any call (module docstring)."""
    return _rows_alike(np.random.default_rng(0))


def assert_same(actual, expected, rel: float = 1e-5, abs_: float = 1e-6) -> None:
    """actual == expected bit for bit where the BLAS is exact(); else within float32 rounding (a
    relative `rel` and absolute `abs_` bound), element by element, through dicts and lists."""
    if exact():
        same = np.array_equal(actual, expected) if isinstance(actual, np.ndarray) else actual == expected
        assert same, (actual, expected)
        return
    _close(actual, expected, rel, abs_, "")


def _close(a, b, rel, abs_, where) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], rel, abs_, f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, rel, abs_, f"{where}[{i}]")
    elif isinstance(a, (float, np.floating, np.ndarray)) or isinstance(b, (float, np.floating)):
        np.testing.assert_allclose(a, b, rtol=rel, atol=abs_, err_msg=where)
    else:
        assert a == b, (where, a, b)
