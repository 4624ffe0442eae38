"""Where a SmolLM2 keystroke's engine time goes on its Q4_1 blocks, and the two cuts of the one-row
path, each timed in turns with what it replaced, in one process (not a test).

- keystroke (one new row after T - 1 cached tokens, every layer's patterns, one kernel thread as
  the window gives a small matrix) at T = 24, and a generation step at T = 64, 512 and 2048 (each
  way's own cache, no dense patterns, its row appended in place as in a generation: qsteps.back_to): the
  one-row block (engine/computing/onerow_block.py's pre_norm_block: a layer in three compiled
  calls, a generation step's in two), the compiled one-row steps (engine/computing/onerow.py: norm, RoPE, attention over the cache, one
  call each) and the NumPy steps, and the kernels' serial twins against their parallel form on
  one thread (qmatvec.SERIAL).
- split: the kernels' own time inside the keystroke (each kernel call timed) and the rest (norms,
  RoPE, attention, the MLP's gate, the trace's points, Python), for both steps.

    python -m benchmarks.onerow [--repeat 40] [--type Q8_0]

`--type`: SmolLM2 quantized in memory to that type first (packed for the kernels, as Compare's
"A quantized to…" is), e.g. Compare's Q8_0 twin. Writes benchmarks/results/onerow.json, or
onerow_<type>.json with --type (benchmarks/record.py); each note has the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from benchmarks.qsteps import back_to
from benchmarks.record import figure, write

WAYS = ("one-row block", "one-row steps", "NumPy steps", "parallel kernel on one thread")


def _set_way(qm, way: str, steps, serial: dict) -> None:
    qm.ONE_ROW = None if way == "NumPy steps" else steps
    steps.USE_BLOCK = way == "one-row block"
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
    the two steps (timed apart: the timing wraps each call). T >= 64: a generation step (its own
    cache, no dense patterns: generate._StepTrace), else the window's keystroke (patterns)."""
    from attnviz.engine.computing.generate import _StepTrace
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.computing.trace import KVCache

    rng = np.random.default_rng(T)
    ids = rng.integers(100, model.config.vocab_size, T - 1).tolist()
    fresh = iter(rng.integers(100, model.config.vocab_size, 10 * repeat + 100).tolist())
    # each way's own cache, as its own generation leaves it: a cache another way wrote last would
    # make the one-row block copy every layer's K and V into its buffer first (onerow_stack _KeptKV)
    caches = {way: KVCache() for way in WAYS}

    def run(way, new=None):
        tokens = ids + ([] if new is None else [new])
        if T < 64:
            return model.run(ids=tokens)
        back_to(caches[way], T - 1)  # (a slice per layer's K and V: a few microseconds)
        return model.run(ids=np.asarray(tokens), trace=_StepTrace(False, caches[way]),
                         request=RunRequest(labels=False))
    steps, serial = qm.ONE_ROW, dict(qm.SERIAL)
    model.clear_cache()
    for way in WAYS:
        run(way)
    out = {way: {"ms": [], "kernels": []} for way in WAYS}
    for r in range(repeat + 1):
        for way in (WAYS if r % 2 else WAYS[::-1]):
            _set_way(qm, way, steps, serial)
            t0 = time.perf_counter()
            assert run(way, next(fresh)).cache_computed == 1
            if r:  # the first round warms every way
                out[way]["ms"].append((time.perf_counter() - t0) * 1e3)
    spent = [0.0]
    for r in range(repeat):
        for way in WAYS[1:3]:  # (the block calls its kernels inside its compiled calls: not timed)
            _set_way(qm, way, steps, _timed_kernels(qm, serial, spent))
            spent[0] = 0.0
            t0 = time.perf_counter()
            run(way, next(fresh))
            out[way]["kernels"].append(spent[0] * 1e3)
            out[way].setdefault("timed", []).append((time.perf_counter() - t0) * 1e3)
    _set_way(qm, "one-row block", steps, serial)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--type", default=None, help="quantize SmolLM2 in memory to this type first")
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
    qtype = qm.Q.Q4_1
    if args.type:
        from attnviz.engine.computing.quantized import quantized_model
        model, qtype = quantized_model(model, args.type), qm.Q[args.type]
        assert model.weights.layers.held_bytes() == 0  # packed: the kernels' layers
    qm.warm([qtype])
    figs = []
    for T in (24, 64, 512, 2048):
        out = _keystrokes(model, T, args.repeat, qm)
        load = os.getloadavg()[0]
        med = {way: statistics.median(o["ms"]) for way, o in out.items()}
        block, one, numpy, par = WAYS
        ker = {way: statistics.median(out[way]["kernels"]) for way in (one, numpy)}
        what = "keystroke" if T < 64 else "generation step"
        pats = "every layer's patterns" if T < 64 else "no dense patterns, appended in place"
        for way in WAYS:
            figs.append(figure(f"{what} T = {T}, {way}", med[way], "ms", runs=out[way]["ms"],
                               note=f"{qtype.name} blocks, one new row, {pats}, one thread; median; "
                                    f"in turns; load average {load:.1f}"))
        rest = {way: statistics.median([a - b for a, b in zip(out[way]["timed"], out[way]["kernels"])])
                for way in ker}
        figs += [
            figure(f"{what} T = {T}: one-row block / NumPy steps", med[block] / med[numpy], "x",
                   headline=T == 24, note=f"medians {med[block]:.2f} / {med[numpy]:.2f} ms"),
            figure(f"{what} T = {T}: one-row block / one-row steps", med[block] / med[one], "x",
                   note=f"medians {med[block]:.2f} / {med[one]:.2f} ms"),
            figure(f"{what} T = {T}: one-row steps / NumPy steps", med[one] / med[numpy], "x",
                   note=f"medians {med[one]:.2f} / {med[numpy]:.2f} ms"),
            figure(f"{what} T = {T}: serial kernels / parallel form on one thread",
                   med[one] / med[par], "x",
                   note=f"one-row steps both; medians {med[one]:.2f} / {med[par]:.2f} ms"),
            figure(f"{what} T = {T}: kernel calls, one-row steps", ker[one], "ms",
                   runs=out[one]["kernels"],
                   note="the kernel calls' own time (117 a keystroke; 120 a step); median"),
            figure(f"{what} T = {T}: everything else, one-row steps", rest[one], "ms",
                   note="norms, RoPE, attention, the MLP's gate, the trace's points, Python; "
                        "median"),
            figure(f"{what} T = {T}: everything else, one-row block", med[block] - ker[one], "ms",
                   note="the block's median less the one-row steps' kernel calls (the same "
                        "kernels, called inside the block's compiled calls)"),
            figure(f"{what} T = {T}: everything else, NumPy steps", rest[numpy], "ms",
                   note=f"the same with the NumPy steps; median; load average {load:.1f}"),
        ]
        print(f"T = {T}: " + ", ".join(f"{w} {med[w]:.2f} ms" for w in WAYS)
              + f"; kernels {ker[one]:.2f} ms, rest: steps {rest[one]:.2f}, block "
              f"{med[block] - ker[one]:.2f}, NumPy {rest[numpy]:.2f} ms  load {load:.1f}", flush=True)
    name = "onerow" if not args.type else f"onerow_{args.type.lower()}"
    print(f"wrote {write(name, figs, command='python -m benchmarks.onerow ' + ' '.join(sys.argv[1:]))}")


if __name__ == "__main__":
    main()
