"""`attnviz generate` on SmolLM2 for a few --max-new N, the quantised kernels forced on against
forced off, as whole processes (interpreter up to exit): where the kernels' faster steps repay
importing numba and reading its LLVM library (commands/checks.py KERNELS_STEPS).

    python -m benchmarks.gen_length [--lengths 8,16,24,32,48,64] [--runs 4] [--cold]

One untimed run of each path first (the page cache and numba's kernel cache warm), then --runs
rounds, each a run of every path at every N: the lengths' order turned each round, the paths' order
swapped each time (a busy machine's changing load falls on every length and path alike). Each
child is `attnviz generate` as a user's shell starts it (cli.main reading sys.argv: a command's
own process set-up, one_shot_process, included), with the path forced; each (path, N) figure is
the median wall time. --ignore-eos: every run makes exactly N tokens.

Each path's line (time = start + N * step, least squares, every run a point) is recorded with its
95 % intervals. The crossover comes from the runs in pairs (a kernels run and the float32 run
beside it): a line fitted to their differences, read with its 95 % confidence band at every N
from the shortest length measured to the longest. It is given only where that band puts the
float32 path surely the faster at the short end and the kernels' surely the faster from some N
to the long end (no extrapolation); otherwise it is absent and its note says what the band shows.
Beside it, the N from which to the longest length the kernels are surely the faster.

--cold: the same again with the OS page cache dropped before each run (`sync` and `echo 3 >
/proc/sys/vm/drop_caches`: root, and a system that lets this process write it), as a first
command after a while meets it: numba's LLVM library read from disk then. Dropping the page cache
slows every other process on the machine for a while: keep the runs few.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks import record
from benchmarks.children import child_env

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "One, two, three, four, five"
PATHS = ("kernels", "float32")

# argv[1] "kernels" or "float32"; the rest: the command line. The path is forced whatever the
# file's size and the run's length. main() reads sys.argv as the `attnviz` script's does: given
# argv, it would leave out one_shot_process (a test's process kept as it is), which a user's
# command has.
CHILD = r"""
import sys
from attnviz.commands import checks
on = sys.argv[1] == "kernels"
checks.wants_kernels = lambda where, max_new=0: on
from attnviz.cli import main
sys.argv[:] = ["attnviz", *sys.argv[2:]]
sys.exit(main())
"""


def argv_of(path: str, n: int) -> list[str]:
    """The child process's command line: `generate` of exactly n tokens on `path`."""
    return [sys.executable, "-c", CHILD, path, "generate", "--model", SMOLLM2, "--text", TEXT,
            "--max-new", str(n), "--ignore-eos"]


def drop_page_cache() -> None:
    """Empty the OS page cache (cold_start's way); OSError where this process may not."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(argv: list[str], cold: bool = False) -> float:
    """Seconds from spawning the process to its exit (the page cache dropped first where `cold`);
    a failed run raises with its stderr."""
    if cold:
        drop_page_cache()
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=record.ROOT,
                          env=child_env())
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return took


# two-sided 95 % quantiles of Student's t by degrees of freedom (beyond the table: the last row's,
# which is larger than theirs: a band a little too wide, never too narrow)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
       18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000}


def t95(dof: int) -> float:
    """Student's t two-sided 95 % quantile for `dof` degrees of freedom (inf for none)."""
    if dof < 1:
        return math.inf
    return T95[max(k for k in T95 if k <= dof)]


@dataclass(frozen=True)
class Line:
    """The least-squares line t = start + n * step through points (n, t), with what its 95 %
    confidence band needs: the points' count, their mean n, the sum of squares of n about it and
    the residuals' variance (n - 2 degrees of freedom)."""

    start: float
    step: float
    count: int
    mean_n: float
    sxx: float
    s2: float

    def at(self, n: float) -> float:
        return self.start + n * self.step

    def half_width(self, n: float) -> float:
        """Half the width of the 95 % confidence band of the line's value at n."""
        if self.count < 3:
            return math.inf
        return t95(self.count - 2) * math.sqrt(self.s2 * (1 / self.count + (n - self.mean_n) ** 2 / self.sxx))

    def step_half_width(self) -> float:
        """Half the width of the 95 % confidence interval of the step."""
        return math.inf if self.count < 3 else t95(self.count - 2) * math.sqrt(self.s2 / self.sxx)


def fit(ns: list[float], ts: list[float]) -> Line:
    """The least-squares line through the points (ns[i], ts[i]); at least two distinct ns."""
    mn, mt = statistics.fmean(ns), statistics.fmean(ts)
    sxx = sum((n - mn) ** 2 for n in ns)
    if sxx == 0:
        raise ValueError("a line needs points at two lengths at least")
    step = sum((n - mn) * (t - mt) for n, t in zip(ns, ts)) / sxx
    start = mt - step * mn
    resid = sum((t - start - step * n) ** 2 for n, t in zip(ns, ts))
    s2 = resid / (len(ns) - 2) if len(ns) > 2 else math.inf
    return Line(start, step, len(ns), mn, sxx, s2)


@dataclass(frozen=True)
class Crossover:
    """Where the kernels' path becomes the faster, as far as the runs tell. `at`: the N where the
    fitted difference (kernels - float32) is 0, given only where its 95 % band puts the float32
    path surely the faster from the shortest length measured up to some N and the kernels' surely
    the faster from a later N to the longest; `surely_from`: the N from which to the longest
    length the kernels' path is surely the faster (None: at no such N); `says`: what the runs
    show, in words."""

    at: float | None
    surely_from: int | None
    says: str


def _spans(ns: list[int]) -> str:
    """[4, 5, 6, 9] -> "4 to 6, 9"."""
    out, first = [], None
    for i, n in enumerate(ns):
        first = n if first is None else first
        if i + 1 == len(ns) or ns[i + 1] != n + 1:
            out.append(str(n) if n == first else f"{first} to {n}")
            first = None
    return ", ".join(out)


def crossover(diff: Line, lengths: list[int]) -> Crossover:
    """The crossover of a line fitted to the paired runs' differences (kernels minus float32, s),
    read with its 95 % band at every N from the shortest length measured to the longest: a figure
    only where the band brackets it inside them (no extrapolation)."""
    lo, hi = min(lengths), max(lengths)
    every = list(range(lo, hi + 1))
    faster = [n for n in every if diff.at(n) + diff.half_width(n) < 0]
    slower = [n for n in every if diff.at(n) - diff.half_width(n) > 0]
    surely_from = faster[0] if faster and faster == every[every.index(faster[0]):] else None
    if len(faster) == len(every):
        return Crossover(None, lo, f"the kernels' path surely the faster at every length from {lo} to "
                                   f"{hi}: the crossover lies below {lo}, not measured")
    if len(slower) == len(every):
        return Crossover(None, None, f"the float32 path surely the faster at every length from {lo} "
                                     f"to {hi}: no crossover within them")
    if surely_from is not None and slower and slower == every[:len(slower)] and diff.step < 0:
        return Crossover(-diff.start / diff.step, surely_from,
                         f"the fitted difference is 0 there; the float32 path surely the faster to "
                         f"{slower[-1]}, the kernels' from {surely_from} (95 % band)")
    unsure = [n for n in every if n not in faster and n not in slower]
    if surely_from is not None and not slower:
        return Crossover(None, surely_from,
                         f"the kernels' path surely the faster from {surely_from} to {hi}; the "
                         f"difference's 95 % band holds 0 at {_spans(unsure)}: the crossover lies "
                         f"below {surely_from}, not placed")
    known = [f"the kernels' path surely the faster at {_spans(faster)}"] if faster else []
    known += [f"the float32 path at {_spans(slower)}"] if slower else []
    return Crossover(None, surely_from,
                     f"undetermined: the difference's 95 % band holds 0 at {_spans(unsure)}"
                     + (f"; {'; '.join(known)}" if known else ""))


def measure(lengths: list[int], runs: int, cold: bool) -> dict:
    """{(path, N): every timed run's seconds}: a round of every length each run (their order turned
    each round), the paths in turns (their order swapped each time), so that a busy machine's
    changing load falls on every length and path alike; one untimed run of each path first (the
    page cache and numba's kernel cache warm)."""
    times = {(p, n): [] for p in PATHS for n in lengths}
    for p in PATHS:
        timed(argv_of(p, lengths[0]))
    turn = 0
    for r in range(runs):
        for n in lengths[r % len(lengths):] + lengths[:r % len(lengths)]:
            for p in (PATHS if turn % 2 == 0 else PATHS[::-1]):
                times[p, n].append(timed(argv_of(p, n), cold))
            turn += 1
    return times


def paired(times: dict, lengths: list[int]) -> tuple[list[int], list[float]]:
    """(N, kernels - float32 seconds) of each pair of runs taken one after the other."""
    ns, ds = [], []
    for n in lengths:
        for k, f in zip(times["kernels", n], times["float32", n]):
            ns.append(n)
            ds.append(k - f)
    return ns, ds


def figures_of(times: dict, lengths: list[int], cache: str) -> list[dict]:
    """Each (path, N)'s median, each path's fitted line (every run a point) and the crossover of the
    paired differences' line, for one page cache state."""
    medians = {k: statistics.median(v) for k, v in times.items()}
    figures = [record.figure(f"generate --max-new {n}, SmolLM2, {p} path, {cache} cache",
                             medians[p, n], "s", runs=times[p, n],
                             note="whole process, median, the paths in turns")
               for n in lengths for p in PATHS]
    for p in PATHS:
        ns = [n for n in lengths for _ in times[p, n]]
        line = fit(ns, [t for n in lengths for t in times[p, n]])
        figures.append(record.figure(
            f"{p} path, {cache} cache: start-up (fitted)", line.start, "s",
            note=f"the fitted line's time at N = 0, ± {line.half_width(0):.2f} s (95 %), every run a point"))
        figures.append(record.figure(
            f"{p} path, {cache} cache: one step (fitted)", line.step * 1e3, "ms",
            note=f"the fitted line's slope: seconds per new token, ± {line.step_half_width() * 1e3:.1f} ms "
                 f"(95 %), every run a point"))
    cross = crossover(fit(*paired(times, lengths)), lengths)
    how = ("a line fitted to each pair of runs' difference (kernels - float32), every pair a point, "
           "read with its 95 % band at each N from the shortest length measured to the longest")
    figures.append(record.figure(
        f"crossover, {cache} cache: --max-new from which the kernels are faster (SmolLM2)",
        cross.at, "tokens", headline=cross.at is not None or cross.surely_from is None,
        note=f"{cross.says}; {how}; absent where the band does not bracket it within them"))
    figures.append(record.figure(
        f"crossover's upper bound, {cache} cache: --max-new from which the kernels are surely faster "
        "(SmolLM2)",
        cross.surely_from, "tokens", headline=cross.at is None and cross.surely_from is not None,
        note=f"{cross.says}; {how}; the first N from which to the longest the band lies below 0; "
             f"absent where none"))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="8,16,24,32,48,64",
                    help="the --max-new values, comma-separated (around the crossover: the band is "
                         "narrowest near their mean)")
    ap.add_argument("--runs", type=int, default=4, help="timed runs of each path for each length")
    ap.add_argument("--cold", action="store_true", help="also with the page cache dropped before each run")
    args = ap.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    load = {"load_average_at_start": round(os.getloadavg()[0], 2)}
    figures = figures_of(measure(lengths, args.runs, False), lengths, "warm")
    if args.cold:
        figures += figures_of(measure(lengths, args.runs, True), lengths, "cold")
    load["load_average_at_end"] = round(os.getloadavg()[0], 2)
    out = record.write("gen_length", figures, details=load)
    for f in figures:
        print(f"{f['name']}: {f['value']} {f['unit']}"
              + (f"  ({f['note'].split('; ')[0]})" if f["name"].startswith("crossover") else ""))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
