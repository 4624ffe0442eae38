"""A product of a few rows with a layer's weights, as a keystroke's cached run makes it (not a
test): x [M, 576] @ W [576, 3072] float32 over 30 matrices (SmolLM2's MLP in, one layer each, C
order as the loader keeps it), on every core as the window's runs (--threads to change it). M = 1
is NumPy's matrix-vector product; M = 2 the matrix product,
and beside it M matrix-vector products (what engine/computing/layers.linear does up to
GEMV_ROWS rows), up to M = 8, where the matrix product wins again. Prints the fastest of --repeat runs each.

    .venv/bin/python -m benchmarks.gemv_rows [--repeat 7] [--threads N]

benchmarks/row_products.py measures the same on the model's own matrices, both layouts.
"""

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None, help="BLAS threads (default: every core)")
    args = ap.parse_args()
    from attnviz.engine.parallel import cores
    from benchmarks import record

    threads = args.threads or cores()
    threadpool_limits(threads, user_api="blas")
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((576, 3072), dtype=np.float32) for _ in range(30)]  # 212 MB
    xs = {m: rng.standard_normal((m, 576), dtype=np.float32) for m in range(1, 9)}

    def best(f) -> float:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for w in ws:
                f(w)
            times.append(time.perf_counter() - t0)
        return min(times) * 1e3

    rows = [("M = 1, matrix-vector", best(lambda w: xs[1] @ w))]
    for m in range(2, 9):
        rows.append((f"M = {m}, matrix product", best(lambda w: xs[m] @ w)))
        rows.append((f"M = {m}, {m} matrix-vector", best(lambda w: np.stack([r @ w for r in xs[m]]))))
    print(f"{os.cpu_count()} CPUs, {threads} BLAS thread(s), 30 x [576, 3072] float32, fastest of {args.repeat}")
    base = rows[0][1]
    for name, ms in rows:
        print(f"  {name:28s} {ms:7.2f} ms  {ms / base:5.2f}x M = 1")
    note = f"30 x [576, 3072] float32, {threads} BLAS thread(s), fastest of {args.repeat}"
    record.write("gemv_rows", [record.figure(f"products of {name}", ms, "ms", note=note)
                               for name, ms in rows])


if __name__ == "__main__":
    main()
