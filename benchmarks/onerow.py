"""Where a SmolLM2 keystroke's engine time goes on its Q4_1 blocks, and the two cuts of the one-row
path, each timed in turns with what it replaced, in one process (not a test).

- keystroke (one new row after T - 1 cached tokens, every layer's patterns, one kernel thread as
  the window gives a small matrix) at T = 24, and a step row at T = 512 (a generation step's
  trace: its own cache, no dense patterns; its last token replaced each time, so each layer's K
  and V are copied once as a keystroke's are): the compiled one-row steps
  (engine/computing/onerow.py: norm, RoPE, attention over the cache) against the NumPy steps,
  and the kernels' serial twins against their parallel form on one thread (qmatvec.SERIAL).
- split: the kernels' own time inside the keystroke (each kernel call timed) and the rest (norms,
  RoPE, attention, the MLP's gate, the trace's points, Python), for both steps.

    python -m benchmarks.onerow [--repeat 40]

Writes benchmarks/results/onerow.json (benchmarks/record.py); each note has the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from benchmarks.record import figure, write

WAYS = ("one-row steps", "NumPy steps", "parallel kernel on one thread")


def _set_way(qm, way: str, steps, serial: dict) -> None:
    qm.ONE_ROW = None if way == "NumPy steps" else steps
    qm.SERIAL = ({k: k for k in serial} if way == "parallel kernel on one thread" else serial)


def _timed_kernels(qm, serial: dict, spent: list) -> dict:
    """qmatvec.SERIAL with each call's time added to spent[0]."""
    def timed(kernel):
        def call(*args):
            t0 = time.perf_counter()
            kernel(*args)
            spent[0] += time.perf_counter() - t0
        return call
    return {k: timed(f) for k, f in serial.items()}


def _keystrokes(model, T: int, repeat: int, qm) -> dict:
    """ms per keystroke for each way, in turns, then ms of the kernel calls inside a keystroke for
    the two steps (timed apart: the timing wraps each call). T > 64: a generation step (its own
    cache, no dense patterns: generate._StepTrace), else the window's keystroke (patterns)."""
    from attnviz.engine.computing.generate import _StepTrace
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.computing.trace import KVCache

    rng = np.random.default_rng(T)
    ids = rng.integers(100, model.config.vocab_size, T - 1).tolist()
    fresh = iter(rng.integers(100, model.config.vocab_size, 10 * repeat + 100).tolist())
    cache = KVCache()

    def run(new=None):
        tokens = ids + ([] if new is None else [new])
        if T <= 64:
            return model.run(ids=tokens)
        return model.run(ids=np.asarray(tokens), trace=_StepTrace(False, cache),
                         request=RunRequest(labels=False))
    steps, serial = qm.ONE_ROW, dict(qm.SERIAL)
    model.clear_cache()
    run()
    out = {way: {"ms": [], "kernels": []} for way in WAYS}
    for r in range(repeat + 1):
        for way in (WAYS if r % 2 else WAYS[::-1]):
            _set_way(qm, way, steps, serial)
            t0 = time.perf_counter()
            assert run(next(fresh)).cache_computed == 1
            if r:  # the first round warms every way
                out[way]["ms"].append((time.perf_counter() - t0) * 1e3)
    spent = [0.0]
    for r in range(repeat):
        for way in WAYS[:2]:
            _set_way(qm, way, steps, _timed_kernels(qm, serial, spent))
            spent[0] = 0.0
            t0 = time.perf_counter()
            run(next(fresh))
            out[way]["kernels"].append(spent[0] * 1e3)
            out[way].setdefault("timed", []).append((time.perf_counter() - t0) * 1e3)
    _set_way(qm, "one-row steps", steps, serial)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args()
    import numba
    from threadpoolctl import threadpool_limits

    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.computing.load import load_model
    from attnviz.engine.parallel import limit_kernel_threads
    from attnviz.engine.reading.qpack import ask_for_kernels

    threadpool_limits(1, user_api="blas")  # the window's keystroke: one BLAS thread,
    limit_kernel_threads(1)  # one kernel thread for SmolLM2's matrices
    numba.set_num_threads(1)  # (the parallel form's own count, for its turn)
    ask_for_kernels()
    model = load_model("SmolLM2-135M-Instruct")
    qm.warm([qm.Q.Q4_1])
    figs = []
    for T in (24, 512):
        out = _keystrokes(model, T, args.repeat, qm)
        load = os.getloadavg()[0]
        med = {way: statistics.median(o["ms"]) for way, o in out.items()}
        ker = {way: statistics.median(o["kernels"]) for way, o in out.items() if way != WAYS[2]}
        base = med["NumPy steps"]
        what = "keystroke" if T <= 64 else "step row"
        pats = "every layer's patterns" if T <= 64 else "no dense patterns"
        for way in WAYS:
            figs.append(figure(f"{what} T = {T}, {way}", med[way], "ms", runs=out[way]["ms"],
                               note=f"one new row, {pats}, one thread; median; in turns; load "
                                    f"average {load:.1f}"))
        rest = {way: statistics.median([a - b for a, b in zip(out[way]["timed"], out[way]["kernels"])])
                for way in ker}
        figs += [
            figure(f"{what} T = {T}: one-row steps / NumPy steps", med[WAYS[0]] / base, "x",
                   headline=T == 24, note=f"medians {med[WAYS[0]]:.2f} / {base:.2f} ms"),
            figure(f"{what} T = {T}: serial kernels / parallel form on one thread",
                   med[WAYS[1]] / med[WAYS[2]], "x",
                   note=f"NumPy steps both; medians {med[WAYS[1]]:.2f} / {med[WAYS[2]]:.2f} ms"),
            figure(f"{what} T = {T}: kernel calls, one-row steps", ker[WAYS[0]], "ms",
                   runs=out[WAYS[0]]["kernels"],
                   note="the kernel calls' own time (117 a keystroke; 120 a step); median"),
            figure(f"{what} T = {T}: everything else, one-row steps", rest[WAYS[0]], "ms",
                   note="norms, RoPE, attention, the MLP's gate, the trace's points, Python; "
                        "median"),
            figure(f"{what} T = {T}: everything else, NumPy steps", rest[WAYS[1]], "ms",
                   note=f"the same with the NumPy steps; median; load average {load:.1f}"),
        ]
        print(f"T = {T}: " + ", ".join(f"{w} {med[w]:.2f} ms" for w in WAYS)
              + f"; kernels {ker[WAYS[0]]:.2f} ms, rest {rest[WAYS[0]]:.2f} ms (NumPy steps: "
              f"rest {rest[WAYS[1]]:.2f} ms)  load {load:.1f}", flush=True)
    print(f"wrote {write('onerow', figs)}")


if __name__ == "__main__":
    main()
