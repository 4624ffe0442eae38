"""qsteps' goal figures, generate's step over the quantised-bytes floor, from fresh processes.

A generation step as generate takes it at T = 64 and 512 against the quantised-bytes floor
(benchmarks/qsteps.py), each figure the median over several processes run one after another. A
process's memory bandwidth and placement differ from the next one's by more than a code change
moves the ratio, so one process's figure says which process it was.

Each child (benchmarks/qsteps_child.py) loads SmolLM2 as qsteps does (load_smollm2), runs qsteps'
_as_generate at each T (one untimed block first, then --repeat blocks) and prints one JSON line
(summary): per T its steps' median ms, the process's floor (one thread's plain read of the packed
bytes: the fastest of the process's reads, 3 around each block and 25 after the steps), their
ratio, the median of the blocks' ratios to the reads around each, and the calls onerow_pair's
fallback gave the pair and one thread. qsteps (--processes N) runs N children (run_children) and
writes the medians (process_figures). This module never imports qsteps (qsteps imports it).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time


from benchmarks.children import ROOT, child_env
from benchmarks.record import figure

TS = (64, 512)  # the goal's T
FIGURES = ("step_ms", "floor_ms", "ratio", "block_ratio")  # a child's numbers at each T


class ChildError(Exception):
    """A child that failed or printed no figures; the message has what it printed."""


def load_smollm2(threads: int):
    """SmolLM2 as qsteps and its children measure it: BLAS and the kernels on `threads` threads
    (the caller sets qsteps.THREADS), packed as the window asks, the kernels warm -> (the model, its
    load's seconds, qm.warm's)."""
    from threadpoolctl import threadpool_limits

    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.computing.load import load_model
    from attnviz.engine.parallel import limit_kernel_threads
    from attnviz.engine.reading.qpack import ask_for_kernels
    threadpool_limits(threads, user_api="blas")
    limit_kernel_threads(2)  # (while the kernels warm: the stack's two-thread call compiled too)
    ask_for_kernels()  # as the window does
    t0 = time.perf_counter()
    model = load_model("SmolLM2-135M-Instruct")
    load_s = time.perf_counter() - t0
    warm = qm.warm([qm.Q.Q4_1])
    limit_kernel_threads(threads)
    return model, load_s, warm


def summary(runs: dict, floor: float, block: int, load: float) -> dict:
    """{T: (every timed step's ms, each block's ratio to its reads, the fallback's calls)} and the
    process's floor (ms) -> the child's JSON object."""
    steps = {}
    for T, (ms, ratios, taken) in runs.items():
        step = statistics.median(ms)
        steps[str(T)] = {"step_ms": step, "floor_ms": floor, "ratio": step / floor,
                         "block_ratio": statistics.median(ratios), "blocks": len(ratios),
                         "taken": {k: int(v) for k, v in taken.items()}}
    return {"block": block, "load_average": load, "steps": steps}


def parse_child(stdout: str) -> dict:
    """A child's output (its JSON the last line) -> {"block", "load_average", "steps": {T: {...}}},
    T an int, every T of TS there with FIGURES, "blocks" and "taken"; ChildError if not."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        doc = json.loads(lines[-1])
        steps = {}
        for T in TS:
            got = doc["steps"][str(T)]
            steps[T] = {**{k: float(got[k]) for k in FIGURES}, "blocks": int(got["blocks"]),
                        "taken": {k: int(v) for k, v in got["taken"].items()}}
        return {"block": int(doc["block"]), "load_average": float(doc["load_average"]), "steps": steps}
    except (IndexError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ChildError(f"no figures in the child's output ({exc!r}): {stdout[-1000:]!r}") from None


def run_children(n: int, repeat: int, threads: int) -> list[dict]:
    """n children (`python -m benchmarks.qsteps_child`, this checkout's code), one after
    another, each a fresh process -> their parse_child's, each with its "wall_s"."""
    children = []
    for i in range(n):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "benchmarks.qsteps_child", "--repeat",
                               str(repeat), "--threads", str(threads)],
                              capture_output=True, text=True, cwd=ROOT, env=child_env())
        if done.returncode:
            raise ChildError(f"process {i + 1} of {n} exited {done.returncode}: {done.stderr[-2000:]}")
        child = {**parse_child(done.stdout), "wall_s": time.perf_counter() - t0}
        print(f"process {i + 1} of {n}: " + "; ".join(
            f"T = {T} as generate takes it {s['step_ms']:.2f} ms, {s['ratio']:.3f}x (floor "
            f"{s['floor_ms']:.2f} ms; each block beside its reads {s['block_ratio']:.3f}x)"
            for T, s in child["steps"].items()) +
            f"  load {child['load_average']:.1f}, {child['wall_s']:.0f} s", flush=True)
        children.append(child)
    return children


def process_figures(children: list[dict]) -> list[dict]:
    """The goal's figures (qsteps' names) from the children's (parse_child's): each the median over
    the processes of each one's, every process's its runs; the load average each child read as it
    ended (the machine while it ran, not after the last)."""
    loads = ", ".join(f"{c['load_average']:.1f}" for c in children)
    figs, n = [], len(children)
    for T in TS:
        each = [c["steps"][T] for c in children]
        block = children[0]["block"]
        ms, ratios, blocks = ([s[k] for s in each] for k in ("step_ms", "ratio", "block_ratio"))
        pair, calls = (sum(s["taken"].get("pair", 0) for s in each),
                       sum(sum(s["taken"].values()) for s in each))
        where = (f"the median over {n} processes, each a fresh one started after the last ended "
                 f"(benchmarks/qsteps_processes.py: SmolLM2 loaded anew, these steps alone); in "
                 f"each, {each[0]['blocks']} blocks of {block} steps in a row at T = {T}..{T + block - 1} "
                 f"after an untimed one, each step's last row unembedded before the next as "
                 f"generate's loop does")
        figs += [
            figure(f"generation step T = {T}, as generate takes it", statistics.median(ms), "ms",
                   runs=ms, note=f"{where}; each process's median step: "
                                 f"{', '.join(f'{v:.2f} ms' for v in ms)}; two threads with fallback "
                                 f"(the pair in {pair} of {calls} calls, the blocks' untimed first steps "
                                 f"included); load average at each process's end {loads}"),
            figure(f"generation step T = {T}: as generate takes it / quantised-bytes floor",
                   statistics.median(ratios), "x", runs=ratios, goal=1.3, headline=T == 64,
                   note=f"{where}; each process's median step over its own floor (one thread's "
                        f"plain read of the packed bytes, the fastest of that process's: 3 around "
                        f"each block, 25 after the steps): " +
                        ", ".join(f"{s['ratio']:.3f}x (floor {s['floor_ms']:.2f} ms)" for s in each)),
            figure(f"generation step T = {T}: as generate takes it, each block beside its reads",
                   statistics.median(blocks), "x", runs=blocks,
                   note=f"{where}; in each, each block's median step over the faster of the two "
                        f"reads around it (3 each), taken in the same moments, the median of the "
                        f"blocks' ratios: {', '.join(f'{v:.3f}x' for v in blocks)}; no goal"),
        ]
        print(f"step T = {T} over {n} fresh processes: as generate takes it "
              f"{statistics.median(ms):.2f} ms, {statistics.median(ratios):.3f}x the floor (each: "
              f"{', '.join(f'{v:.3f}x' for v in ratios)}); each block beside its reads "
              f"{statistics.median(blocks):.3f}x", flush=True)
    return figs
