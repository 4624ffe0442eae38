"""Quantizing SmolLM2 in memory (engine/computing/quantized.py), to Q8_0 and to Q4_0: how long
`quantized_model(model, TYPE)` takes, and where the time goes. Not a test: run it, read the table.

    python -m benchmarks.quantize [--runs 3]

1. The whole call (goal: at most 3 s each), on every core the engine uses, the fastest of --runs
   (the machine may be shared: the fastest run is the one least disturbed; every run is recorded);
   then again with the quantised kernels asked for, as the window asks: each layer matrix is
   then also packed in the kernels' layout (engine/reading/qpack.py) at load.
2. Where the time goes, on one thread (parallel.limit_cores(1)), so the parts add up to the whole
   (the fastest of --runs runs, its parts):
   gguf's NumPy quantizer (its quantize_rows on cache-sized pieces, as quantize.quantize_rows
   calls it), the
   dequantization of the source's Q4_1 blocks and of the quantized layers (attnviz's
   dequant.dequantize_into), and the rest (reading the header, planning and checking the layers,
   the embedding table's QuantRows, copies). Each part is timed by wrapping that function.
3. For scale: gguf.quants.quantize() on every 2-D tensor of SmolLM2, one whole-matrix call each,
   one thread: the quantizer as gguf's own entry point runs it (in 16-row groups), without
   attnviz's pieces.
Writes benchmarks/results/quantize.json (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from contextlib import contextmanager

import numpy as np

from benchmarks import record

TYPES = ("Q8_0", "Q4_0")
GOAL_S = 3.0


@contextmanager
def timed(parts: dict, lock: threading.Lock):
    """Wrap the functions the parts are read from; parts[key] sums the seconds spent in each."""
    import attnviz.engine.reading.gguf_tensors as G
    import attnviz.engine.reading.quantize as Qm

    def wrap(f, key):
        def g(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                with lock:
                    parts[key] = parts.get(key, 0.0) + time.perf_counter() - t0
        return g

    rows_of = Qm._quantize_rows_of  # -> gguf's quantizer for a type, timed
    wrapped = [(Qm, "_quantize_rows_of", lambda qtype: wrap(rows_of(qtype), "gguf quantize")),
               (Qm, "dequantize_into", wrap(Qm.dequantize_into, "dequantize source")),
               (G, "dequantize_into", wrap(G.dequantize_into, "dequantize layers"))]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in wrapped]
    for mod, name, f in wrapped:
        setattr(mod, name, f)
    try:
        yield
    finally:
        for mod, name, f in saved:
            setattr(mod, name, f)


def whole_matrix_quantizer(path, qtype: str) -> float:
    """Seconds gguf.quants.quantize takes on every 2-D tensor of the file, one call each."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    from attnviz.engine.reading.gguf_file import open_gguf
    from attnviz.engine.reading.quantize import tensor_values

    spent = 0.0
    for t in open_gguf(path).tensors:
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        if len(shape) == 2:
            w = tensor_values(t, shape)
            t0 = time.perf_counter()
            quantize(w, GGMLQuantizationType[qtype])
            spent += time.perf_counter() - t0
    return spent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from attnviz.engine import load_model
    from attnviz.engine import parallel
    from attnviz.engine.computing.quantized import quantized_model

    model = load_model("SmolLM2")
    n_weights = sum(int(np.prod(t.shape)) for t in __import__("gguf").GGUFReader(model.path).tensors
                    if len(t.shape) == 2)
    print(f"{model.name}: {n_weights / 1e6:.1f} M weights in 2-D tensors, {parallel.cores()} cores")
    figures = []
    for qtype in TYPES:
        runs = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            quantized_model(model, qtype)
            runs.append(time.perf_counter() - t0)
        best = min(runs)
        print(f"{qtype}: {best:.2f} s (fastest of {args.runs}: {', '.join(f'{r:.2f}' for r in runs)}), "
              f"goal <= {GOAL_S:g} s: {'met' if best <= GOAL_S else 'NOT met'}")
        figures.append(record.figure(f"quantize SmolLM2 in memory to {qtype}", best, "s", runs=runs,
                                     goal=GOAL_S, headline=True,
                                     note=f"quantized_model(), {parallel.cores()} threads, fastest "
                                          f"of {args.runs} runs; load average at the end "
                                          f"{os.getloadavg()[0]:.1f}"))
    figures += packed_figures(model, args.runs)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("\nwhere the time goes, one thread (the parts add up to the whole):")
    parallel.limit_cores(1)
    try:
        for qtype in TYPES:
            tries = []  # (total, parts) of each run; the fastest is reported
            for _ in range(args.runs):
                parts, lock = {}, threading.Lock()
                with timed(parts, lock):
                    t0 = time.perf_counter()
                    quantized_model(model, qtype)
                    total = time.perf_counter() - t0
                parts["rest"] = total - sum(parts.values())
                tries.append((total, parts))
            total, parts = min(tries, key=lambda tp: tp[0])
            alones = [whole_matrix_quantizer(model.path, qtype) for _ in range(args.runs)]
            alone = min(alones)
            print(f"{qtype}: {total:.2f} s = " + " + ".join(f"{k} {v:.2f}" for k, v in parts.items())
                  + f"; gguf's quantizer on whole matrices: {alone:.2f} s")
            figures.append(record.figure(f"{qtype} on one thread", total, "s",
                                         runs=[t for t, _ in tries],
                                         note="quantized_model() with parallel.limit_cores(1), "
                                              f"fastest of {args.runs} runs"))
            for key, value in parts.items():
                figures.append(record.figure(f"{qtype} on one thread: {key}", value, "s",
                                             note=f"{100 * value / total:.0f} % of the fastest "
                                                  "one-thread run"))
            figures.append(record.figure(f"{qtype}: gguf's quantizer on whole matrices, one thread",
                                         alone, "s", runs=alones,
                                         note="gguf.quants.quantize, one call per 2-D tensor, fastest "
                                              f"of {args.runs} runs"))
    finally:
        parallel.limit_cores(None)
    path = record.write("quantize", figures)
    print(f"\nwrote {path}")
    return 0


def packed_figures(model, runs: int) -> list:
    """quantized_model() with the kernels asked for (the window's case): quantized and packed."""
    from attnviz.engine import parallel
    from attnviz.engine.computing.quantized import quantized_model
    from attnviz.engine.reading import qpack

    qpack.ask_for_kernels()
    if not qpack.kernels_on():
        qpack.ask_for_kernels(False)
        print("numba is not installed: no packed copy to time")
        return []
    figures = []
    try:
        for qtype in TYPES:
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                copy = quantized_model(model, qtype)
                times.append(time.perf_counter() - t0)
            assert copy.weights.layers.held_bytes() == 0  # packed: no float32 layer made
            best = min(times)
            print(f"{qtype} packed for the kernels: {best:.2f} s (fastest of {runs}: "
                  f"{', '.join(f'{r:.2f}' for r in times)}), goal <= {GOAL_S:g} s: "
                  f"{'met' if best <= GOAL_S else 'NOT met'}")
            figures.append(record.figure(
                f"quantize SmolLM2 in memory to {qtype}, packed for the kernels", best, "s",
                runs=times, goal=GOAL_S,
                note=f"quantized_model() with qpack.ask_for_kernels() (the window's case: each "
                     f"matrix quantized once and packed), {parallel.cores()} threads, fastest of "
                     f"{runs} runs; load average at the end {os.getloadavg()[0]:.1f}"))
    finally:
        qpack.ask_for_kernels(False)
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
