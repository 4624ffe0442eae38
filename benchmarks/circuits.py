"""QK attribution and the weight-space circuit scores on SmolLM2-135M-Instruct: what they cost.

    python -m benchmarks.circuits [--runs 5] [--blas-threads N]

1. One cell's QK attribution (engine/analysing/qk.py) at T = 64 with the run's trace already held
   (what the window's Why here? panel does on a click): cells in the first, a middle and the last
   layer (the last has the most components: 30 layers x 10 + 2); the figure is the last layer's
   median over the runs. Goal: <= 100 ms.
2. `circuits` for all 270 heads (copying and Q/K/V-composition, engine/analysing/circuits.py) from
   a loaded model, the unembedding and every layer already expanded; the figure is the median.
   Goal: <= 10 s.
The note of each figure records the machine's 1-minute load average when it ran.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C, qk as Q
from attnviz.engine.computing.request import RunRequest
from benchmarks.record import figure, write

MODEL = "SmolLM2-135M-Instruct"
TEXT = ("When Mary and John went to the market on Saturday morning, John bought fresh bread and "
        "cheese while Mary looked for apples, and later they walked home along the river, talking "
        "about the old bridge that the town plans to repair next summer. ") * 2


def _load():
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def qk_cell(model, runs: int) -> dict:
    ids = model.tokenizer.encode(TEXT).ids[:64]
    r = model.run(ids=ids, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    cfg = model.config
    times = {}
    for layer in (0, cfg.n_layer // 2, cfg.n_layer - 1):
        Q.qk_attribution(model, r.trace, layer, 0, 63, 40)  # first call: the layer's weights read
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            Q.qk_attribution(model, r.trace, layer, 0, 63, 40)
            ts.append(time.perf_counter() - t)
        times[layer] = ts
        print(f"QK attribution, layer {layer}: median {np.median(ts) * 1e3:.1f} ms", flush=True)
    last = [t * 1e3 for t in times[cfg.n_layer - 1]]
    return figure("QK attribution of one cell, SmolLM2, T = 64, trace held", float(np.median(last)),
                  "ms", runs=last, goal=100.0, headline=True,
                  note=f"last layer ({cfg.n_layer - 1}, {2 + (cfg.n_layer - 1) * (cfg.n_head + 1)} "
                       f"components), median of {runs}; layer 0 median "
                       f"{np.median(times[0]) * 1e3:.1f} ms; {_load()}")


def circuits_all(model, runs: int) -> dict:
    model.lm_head()  # the unembedding dequantised once, as a model that predicts holds it
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        C.circuits(model)
        ts.append(time.perf_counter() - t)
        print(f"circuits, all heads: {ts[-1]:.2f} s", flush=True)
    return figure("circuits (copying + Q/K/V-composition) for all 270 heads, SmolLM2",
                  float(np.median(ts)), "s", runs=ts, goal=10.0, headline=True,
                  note=f"median of {runs}; {_load()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--circuit-runs", type=int, default=3)
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="BLAS threads (default: the library's own)")
    args = ap.parse_args()
    model = load_model(MODEL)
    with threadpool_limits(limits=args.blas_threads, user_api="blas"):
        figures = [qk_cell(model, args.runs), circuits_all(model, args.circuit_runs)]
    print(write("circuits", figures))


if __name__ == "__main__":
    main()
