"""Benchmark results as data: every script in benchmarks/ writes benchmarks/results/<name>.json.

One file per benchmark, rewritten by each run, holding the latest run's figures on this machine:

    {"benchmark": "typing_latency", "commit": "7efdeb9", "dirty": false, "date": "2026-12-04",
     "command": "python -m benchmarks.typing_latency --runs 3",
     "machine": {"cpu": "...", "vectors": "AVX2", "cores": 2, "python": "3.11.7", "numpy": "2.4.6",
                 "blas": "openblas 0.3.30", "blas_threads": 2, "platform": "Linux-...",
                 "load_average": 0.8},
     "figures": [{"name": "keystroke p95, SmolLM2", "value": 17.2, "unit": "ms",
                  "goal": 16.0, "goal_is": "max", "met": false, "runs": [17.2, 18.0, 17.9],
                  "headline": true, "note": "layer 29 on screen"}]}

`goal_is` says which side of the goal passes: "max" (value <= goal) or "min" (value >= goal);
a figure without a goal has goal null and met null. `value` is the figure the goal is read
against (a benchmark says in its `note` whether that is the fastest, the median, the worst of
several runs...), `runs` every run's value. `python -m benchmarks.report` renders
docs/benchmarks.md and the README's summary from these files. History lives in git, not here.

A run that measures only some of a benchmark's figures (one model of two, `--only probe`) keeps
the others: `write` carries each figure it does not replace over from the file, with that
figure's own `commit`, `dirty`, `date`, `command` and `machine` stored in the figure, so every
figure still says where and when it was measured. `provenance(doc, fig)` reads them back.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _vectors() -> str | None:
    """The vector instructions the quantised kernels were compiled for in this process (their inner
    loop differs between these: figures of one kind are comparable): "AVX-512 VNNI", "AVX-512",
    "AVX2", or "below AVX2" (the float32 kernels on narrower vectors, NEON on ARM); None without
    numba (no kernels)."""
    try:
        from attnviz.engine.computing import qdot
    except ImportError:
        return None
    return vectors_label(qdot.VNNI, qdot.PERMUTE, qdot.MADD) if qdot.numba else None


def vectors_label(vnni: bool, permute: bool, madd: bool) -> str:
    """The kernels' paths (qdot.VNNI, qdot.PERMUTE, qdot.MADD) -> the instructions they run on."""
    return "AVX-512 VNNI" if vnni else "AVX-512" if permute else "AVX2" if madd else "below AVX2"


def _blas() -> tuple[str, int | None]:
    try:
        from threadpoolctl import threadpool_info
        import numpy  # noqa: F401  (loads its BLAS so threadpoolctl can see it)

        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                return f"{pool.get('internal_api')} {pool.get('version')}", pool.get("num_threads")
    except Exception:  # a machine without threadpoolctl still records the rest
        pass
    return "unknown", None


def machine() -> dict:
    """What a figure was measured on: CPU model and its widest vector instructions, cores, Python, NumPy,
    numba and llvmlite, BLAS and its threads, and
    the load average over the last minute when the results were written (other work on a shared
    machine slows every timing)."""
    import numpy

    blas, threads = _blas()
    return {"cpu": _cpu_model(), "vectors": _vectors(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "numba": _version("numba"), "llvmlite": _version("llvmlite"),
            "blas": blas, "blas_threads": threads,
            "platform": platform.platform(), "load_average": round(os.getloadavg()[0], 2)}


def _version(package: str) -> str | None:
    """An installed package's version (the kernels' compiler: its runtime's size is in every RSS)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def figure(name: str, value: float, unit: str, *, runs=None, goal: float | None = None,
           goal_is: str = "max", headline: bool = False, note: str = "",
           n_runs: int | None = None) -> dict:
    """One figure: its value, every run's value, and whether it meets its goal.

    `n_runs`: how many runs there were where `runs` holds fewer (figures entered by hand from
    notes that kept only a range, or a median)."""
    if goal_is not in ("max", "min"):
        raise ValueError(f"goal_is must be 'max' or 'min', not {goal_is!r}")
    value = None if value is None else float(value)  # None: not measured (the note says why)
    met = None if goal is None or value is None else (value <= goal if goal_is == "max" else value >= goal)
    if runs is None:  # (a figure not measured has no runs)
        runs = [] if value is None else [value]
    fig = {"name": name, "value": value, "unit": unit, "goal": goal, "goal_is": goal_is,
           "met": met, "runs": [float(v) for v in runs], "headline": headline, "note": note}
    if n_runs is not None and n_runs > len(fig["runs"]):
        fig["n_runs"] = int(n_runs)
    return fig


PROVENANCE = ("commit", "dirty", "date", "command", "machine")


def provenance(doc: dict, fig: dict) -> dict:
    """Where and when `fig` was measured: its own fields where it was carried over, else the run's."""
    return {key: fig.get(key, doc.get(key)) for key in PROVENANCE}


def _merged(path: Path, figures: list[dict]) -> list[dict]:
    """These figures, and those of an earlier file at `path` that this run does not measure (each
    with its own provenance), in the file's order with new names last."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return list(figures)
    new = {fig["name"]: fig for fig in figures}
    kept = [new.pop(fig["name"]) if fig.get("name") in new else {**fig, **provenance(old, fig)}
            for fig in old.get("figures", [])]
    return kept + list(new.values())


def write(benchmark: str, figures: list[dict], *, command: str | None = None,
          folder: Path = RESULTS, measured: dict | None = None, details: dict | None = None) -> Path:
    """benchmarks/results/<benchmark>.json with these figures, the machine, commit and date;
    `details`: what else the run found (a profile, a reason a figure is absent), kept as given.

    `measured` overrides the provenance (`commit`, `dirty`, `date`, `command`, `machine`) for
    figures measured elsewhere and entered by hand."""
    folder = Path(folder)
    path = folder / f"{benchmark}.json"
    doc = {"benchmark": benchmark, "commit": _git("rev-parse", "--short", "HEAD"),
           "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
           "date": _dt.date.today().isoformat(),
           "command": command or "python -m benchmarks." + benchmark + " " + " ".join(sys.argv[1:]),
           "machine": machine()}
    doc.update(measured or {})
    doc["figures"] = _merged(path, figures)
    if details is not None:
        doc["details"] = details
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
