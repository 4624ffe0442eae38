"""How a benchmark starts a child Python (a fresh process it times, or one kept apart from its own
imports): with a checkout's root first on PYTHONPATH, so that the child imports that checkout's
attnviz and benchmarks whether it runs a module or a file (a file run puts only its own folder on
the import path). Cheap to import: a timed child's own start-up imports it too."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # this checkout


def child_env(root: str | Path = ROOT, **extra: str) -> dict[str, str]:
    """This process's environment with `root` first on PYTHONPATH, and `extra` set."""
    paths = [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **extra}
