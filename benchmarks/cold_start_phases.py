"""Where a command's time goes, for benchmarks/cold_start.py: one run with its phases timed by the
clock in the process itself (PHASES_CHILD), one under cProfile split into phases by the functions
whose cumulative time they are (PHASES), and one under `python -X importtime` (cold_start.py's
docstring, "phases" and "profile")."""

from __future__ import annotations

import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

from benchmarks.children import ROOT, child_env

# A command run with its phases timed by the clock (not a profiler: every phase at its own speed):
# argv[1] the spawn's time.time(), argv[2:] the command's words. Prints one JSON line {phase:
# seconds} after the command's own output, and the process's CPU seconds. Each phase is the
# time the main thread spends in its functions (a phase inside another is taken out of the outer
# one); "imports and start-up" is the spawn to the command's start (the command's own lazy
# imports counted there: they are imported before the command starts). Where the kernels run, the
# wait for numba's cached kernels (loaded on a thread of their own) falls in the phase that waits.
PHASES_CHILD = r"""
import json, resource, sys, threading, time
spawn = float(sys.argv[1])
import attnviz.cli as cli
import attnviz.engine.computing.load, attnviz.engine.computing.logits as logits
import attnviz.engine.computing.model as model, attnviz.engine.reading.budget as budget
import attnviz.engine.reading.gguf_model as gguf_model, attnviz.engine.analysing.predict
import attnviz.engine.computing.generate, attnviz.commands.predict_cmd
import attnviz.commands.generate_cmd, attnviz.commands.checks
spent, inside = {}, []
MAIN = threading.main_thread()

def wrap(owner, name, phase):
    original = getattr(owner, name)
    def timed(*a, **k):
        if threading.current_thread() is not MAIN:
            return original(*a, **k)
        t0 = time.perf_counter()
        inside.append(0.0)
        try:
            return original(*a, **k)
        finally:
            dt = time.perf_counter() - t0
            inner = inside.pop()
            spent[phase] = spent.get(phase, 0.0) + dt - inner
            if inside:
                inside[-1] += dt
    for mod in list(sys.modules.values()):  # every module that imported it by name
        if getattr(mod, "__name__", "").startswith("attnviz") and getattr(mod, name, None) is original:
            setattr(mod, name, timed)
    if isinstance(owner, type):
        setattr(owner, name, timed)

wrap(gguf_model, "open_gguf", "file open (header, metadata)")
wrap(gguf_model, "gguf_tokenizer", "vocabulary (tokenizer built)")
wrap(budget.LayerStore, "expand_kept", "layers: dequantise to float32")
for name in ("_expand", "_expanded", "_output"):  # (a layer expanded when a run reaches it too)
    wrap(gguf_model, name, "layers: dequantise to float32")
wrap(budget.LayerStore, "read_views", "layers: pack for the kernels")
wrap(logits, "build_head", "unembedding: head built (packed)")
wrap(model.Model, "run", "first forward pass")
wrap(logits, "vocab_logits_of", "unembedding: products")
wrap(attnviz.commands.checks, "load_for_generation", "load (rest)")
wrap(attnviz.engine.computing.load, "load_model", "load (rest)")
import contextlib, io
out = io.StringIO()
t_start = time.time()
sys.argv = ["attnviz", *sys.argv[2:]]
with contextlib.redirect_stdout(out):
    rc = cli.main()  # (its own command line: the process set up as `python -m attnviz` sets it up)
t_end = time.time()
sys.stdout.write(out.getvalue())
total, command = t_end - spawn, t_end - t_start
phases = {"imports and start-up": t_start - spawn}
phases.update(spent)
phases["rest (the command's own work, output)"] = command - sum(spent.values())
use = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"rc": rc, "total_s": total, "phases_s": phases, "user_s": use.ru_utime,
                  "sys_s": use.ru_stime, "minor_faults": use.ru_minflt}))
"""

# phase -> the functions (file suffix, function name) whose cumulative time it is
PHASES = {
    "load": [("computing/load.py", "load_model")],
    "vocabulary": [("reading/gguf_vocab.py", "sentencepiece_bpe"), ("reading/gguf_vocab.py", "byte_level_bpe"),
                   ("reading/gguf_text_vocab.py", "sentencepiece_for_text"),
                   ("reading/gguf_text_vocab.py", "byte_level_for_text")],
    "dequantise": [("reading/budget.py", "expand_kept")],
    "run": [("computing/model.py", "run")],
    "unembedding": [("computing/logits.py", "build_head"), ("computing/logits.py", "vocab_logits_of")],
    "command": [("commands/predict_cmd.py", "cmd_predict"), ("commands/generate_cmd.py", "cmd_generate")],
}


def profile(argv: list[str]) -> dict:
    """One run of the command under cProfile in a fresh process: seconds per phase (module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.prof")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cProfile", "-o", out, "-m", "attnviz", *argv],
                       check=True, capture_output=True, env=child_env(), cwd=ROOT)
        wall = time.perf_counter() - t0
        stats = pstats.Stats(out).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    cum = {}
    for phase, funcs in PHASES.items():
        total = 0.0
        for (path, _, name), (_, _, _, ct, callers) in stats.items():
            if not any(path.endswith(suffix) and name == fname for suffix, fname in funcs):
                continue
            # count a function's calls from outside itself only (no double count of recursion)
            if any(c[0] == path and c[2] == name for c in callers):
                continue
            total += ct
        cum[phase] = total
    command = cum.pop("command")
    load = cum["load"]
    phases = {
        "imports and start-up": wall - command,
        "load (reading, layout)": load - cum["vocabulary"] - cum["dequantise"],
        "vocabulary (tokenizer from GGUF metadata)": cum["vocabulary"],
        "dequantise (kept layers to float32)": cum["dequantise"],
        "run (forward passes)": cum["run"],
        "unembedding (head table and products)": cum["unembedding"],
        "rest (sampling, output, tracing)": command - load - cum["run"] - cum["unembedding"],
    }
    return {"profiled_wall_s": round(wall, 3),
            "phases_s": {k: round(v, 3) for k, v in phases.items()},
            "slowest_imports": slowest_imports(argv)}


def phase_times(argv: list[str], root: str = str(ROOT)) -> dict:
    """One run of the command (the code in `root`) with its phases timed by the clock
    (PHASES_CHILD): {total_s, phases_s: {phase: seconds}, user_s, sys_s, minor_faults}."""
    spawn = time.time()
    proc = subprocess.run([sys.executable, "-c", PHASES_CHILD, repr(spawn), *argv], capture_output=True,
                          text=True, env=child_env(root), cwd=root)
    lines = [l for l in proc.stdout.splitlines() if l.startswith('{"rc"')]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"attnviz {' '.join(argv)} with its phases timed failed: {proc.stderr.strip()[-2000:]}")
    found = json.loads(lines[-1])
    found.pop("rc")
    return {k: ({p: round(t, 3) for p, t in v.items()} if isinstance(v, dict) else
                round(v, 3) if isinstance(v, float) else v) for k, v in found.items()}


def describe_phases(found: dict) -> str:
    return (f"{found['total_s']:.2f} s (user {found['user_s']:.2f}, system {found['sys_s']:.2f}): "
            + "; ".join(f"{k} {v:.2f}" for k, v in found["phases_s"].items()))


def slowest_imports(argv: list[str], n: int = 6) -> dict:
    """From `python -X importtime -m attnviz ARGV`: the n other packages that take longest to
    import (cumulative ms: theirs and what they import) and the n attnviz modules whose own code
    takes longest (self ms: without the modules they import)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnviz", *argv],
                          check=True, capture_output=True, text=True, env=child_env(), cwd=ROOT)
    packages, own = [], []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative, name = (part.strip() for part in line[len("import time:"):].split("|"))
        if name.startswith("attnviz"):
            own.append((int(self_us) / 1000, name))
        elif "." not in name and not name.startswith("_"):
            packages.append((int(cumulative) / 1000, name))
    return {"packages_cumulative_ms": {k: round(v, 1) for v, k in sorted(packages, reverse=True)[:n]},
            "attnviz_self_ms": {k: round(v, 1) for v, k in sorted(own, reverse=True)[:n]}}
