"""`attnviz generate` on SmolLM2 for a few --max-new N, the quantised kernels forced on against
forced off, as whole processes (interpreter up to exit): where the kernels' faster steps repay
importing numba and reading its LLVM library (commands/checks.py KERNELS_STEPS).

    python -m benchmarks.gen_length [--lengths 8,16,32,64,128] [--runs 3] [--cold]

For each N, one untimed run of each path first (the page cache and numba's kernel cache warm),
then --runs runs of each, on and off in turns (a busy machine's changing load falls on both
alike); each figure is the median wall time. The crossover is where two lines fitted to the
medians (time = start + N * step, least squares, one a path) meet: the N from which the kernels'
path is the faster; it is absent where the kernels' steps are not the faster. --ignore-eos: every
run makes exactly N tokens.

--cold: the same again with the OS page cache dropped before each run (`sync` and `echo 3 >
/proc/sys/vm/drop_caches`: root, and a system that lets this process write it), as a first
command after a while meets it: numba's LLVM library read from disk then. Dropping the page cache
slows every other process on the machine for a while: keep the runs few.
"""

from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))  # this folder holds typing.py: keep it off sys.path
_ROOT = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _ROOT)

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from benchmarks import record  # noqa: E402

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "One, two, three, four, five"
PATHS = ("kernels", "float32")

# argv[1] "kernels" or "float32"; the rest: the command line. The path is forced whatever the
# file's size and the run's length.
CHILD = r"""
import sys
from attnviz.commands import checks
on = sys.argv[1] == "kernels"
checks.wants_kernels = lambda where, max_new=0: on
from attnviz.cli import main
sys.exit(main(sys.argv[2:]))
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
    done = subprocess.run(argv, capture_output=True, text=True, cwd=_ROOT,
                          env={**os.environ, "PYTHONPATH": _ROOT})
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return took


def fit(ns: list[int], ts: list[float]) -> tuple[float, float]:
    """(start, step) of the least-squares line t = start + n * step."""
    mn, mt = statistics.fmean(ns), statistics.fmean(ts)
    step = sum((n - mn) * (t - mt) for n, t in zip(ns, ts)) / sum((n - mn) ** 2 for n in ns)
    return mt - step * mn, step


def crossover(lines: dict[str, tuple[float, float]]) -> float | None:
    """The N where the kernels' line meets the float32 line; None where its steps are not faster."""
    (a_k, b_k), (a_f, b_f) = lines["kernels"], lines["float32"]
    if b_k >= b_f:
        return None
    return max(0.0, (a_k - a_f) / (b_f - b_k))


def measure(lengths: list[int], runs: int, cold: bool) -> dict:
    """{(path, N): every timed run's seconds}, the paths in turns."""
    times = {(p, n): [] for p in PATHS for n in lengths}
    for n in lengths:
        for p in PATHS:
            timed(argv_of(p, n))  # untimed: caches warm (numba's kernel cache too)
        for _ in range(runs):
            for p in PATHS:
                times[p, n].append(timed(argv_of(p, n), cold))
    return times


def figures_of(times: dict, lengths: list[int], cache: str) -> list[dict]:
    """Each (path, N)'s median, the fitted lines and where they cross, for one page cache state."""
    medians = {k: statistics.median(v) for k, v in times.items()}
    lines = {p: fit(lengths, [medians[p, n] for n in lengths]) for p in PATHS}
    figures = [record.figure(f"generate --max-new {n}, SmolLM2, {p} path, {cache} cache",
                             medians[p, n], "s", runs=times[p, n],
                             note="whole process, median, the paths in turns")
               for n in lengths for p in PATHS]
    for p in PATHS:
        figures.append(record.figure(f"{p} path, {cache} cache: start-up (fitted)", lines[p][0], "s",
                                     note="the fitted line's time at N = 0"))
        figures.append(record.figure(f"{p} path, {cache} cache: one step (fitted)", lines[p][1] * 1e3,
                                     "ms", note="the fitted line's slope: seconds per new token"))
    figures.append(record.figure(
        f"crossover, {cache} cache: --max-new from which the kernels are faster (SmolLM2)",
        crossover(lines), "tokens", headline=True,
        note="where the fitted lines meet (0: faster at every length); absent: the kernels' steps "
             "were not faster"))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="8,16,32,64,128", help="the --max-new values, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each path for each length")
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
        print(f"{f['name']}: {f['value']} {f['unit']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
