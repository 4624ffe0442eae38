"""qsteps' runs of n rows (16, 64, 128, 256, 512) where no layer's float32 copy is held (SmolLM2 as
loaded with the kernels, a budget of one layer, so each run expands them again): on the kernels
against expanding every layer for the float32 product, in turns. Where the kernels stop being
faster is qmatvec.ROWS_UNEXPANDED."""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from attnviz.engine.computing.request import RunRequest
from benchmarks.record import figure


def unexpanded_runs(store, repeat: int) -> list:
    """Runs of n rows on a SmolLM2 that holds no float32 layer (module docstring); `store`: the
    layers of qsteps' SmolLM2, whose largest layer is the budget."""
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.computing.load import load_model
    small = load_model("SmolLM2-135M-Instruct", budget=max(store.sizes))  # room for one layer
    rng = np.random.default_rng(2)
    figs, crossover = [], qm.ROWS_UNEXPANDED
    for n in (16, 64, 128, 256, 512):
        ids = rng.integers(100, small.config.vocab_size, n).tolist()
        times: dict = {"kernels": [], "expanding": []}
        for r in range(max(2, repeat // 5) + 1):
            for way in (("kernels", "expanding") if r % 2 else ("expanding", "kernels")):
                qm.ROWS_UNEXPANDED = 1 << 30 if way == "kernels" else 0
                t0 = time.perf_counter()
                small.run(ids=ids, request=RunRequest(use_cache=False))
                if r:  # the first round warms both ways
                    times[way].append((time.perf_counter() - t0) * 1e3)
        qm.ROWS_UNEXPANDED = crossover
        a, b, load = statistics.median(times["kernels"]), statistics.median(times["expanding"]), os.getloadavg()[0]
        figs += [figure(f"run of {n} rows, no float32 copy held: kernels", a, "ms", runs=times["kernels"],
                        note=f"every layer's patterns; median; load average {load:.1f}"),
                 figure(f"run of {n} rows, no float32 copy held: expanding the layers", b, "ms",
                        runs=times["expanding"],
                        note=f"each layer expanded for the float32 product, in turns with the kernels; "
                             f"median; load average {load:.1f}"),
                 figure(f"run of {n} rows: kernels / expanding", a / b, "x",
                        note=f"ROWS_UNEXPANDED = {crossover}: below it the kernels run")]
        print(f"run of {n} rows, no float32 held: kernels {a:.0f} ms, expanding {b:.0f} ms "
              f"({a / b:.2f}x)  load {load:.1f}", flush=True)
    return figs
