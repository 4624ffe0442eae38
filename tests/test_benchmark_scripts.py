"""Every file in benchmarks/ runs both ways from the repository root: as a module
(`python -m benchmarks.NAME`) and as a file (`python benchmarks/NAME.py`, the root on PYTHONPATH),
with no sys.path code of its own; none is named as a module that something imports, which a file
run (its folder first on the import path) would shadow."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")

# One interpreter for every file, both ways, so the heavy imports are paid once: a file run's
# folder first on sys.path and the root after it (PYTHONPATH), as `python benchmarks/NAME.py` has.
# Prints {"how NAME": what went wrong} for each run that did not show its usage and exit 0 (a
# helper module without a __main__ block: that did not import).
CHILD = """
import contextlib, io, json, os, runpy, sys, warnings
folder, names = sys.argv[1], sys.argv[2:]
sys.path[0] = folder
warnings.simplefilter("ignore", RuntimeWarning)  # runpy: a module already imported by another one
failed = {}
for name, main in (n.split(":") for n in names):
    for how in ("module", "file"):
        out, argv = io.StringIO(), sys.argv
        sys.argv = [name, "--help"]
        try:
            with contextlib.redirect_stdout(out):
                if how == "module":
                    runpy.run_module("benchmarks." + name, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(os.path.join(folder, name + ".py"), run_name="__main__")
            code = 0 if main == "0" else "no usage shown"
        except SystemExit as exc:
            code = exc.code if "usage:" in out.getvalue() else f"exit {exc.code}, no usage shown"
        except BaseException as exc:
            code = repr(exc)
        finally:
            sys.argv = argv
        if code != 0:
            failed[how + " " + name] = code
print(json.dumps(failed))
"""


def _has_main(path: Path) -> bool:
    return 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")


def test_every_benchmark_shows_its_help_as_a_module_and_as_a_file():
    names = [f"{p.stem}:{int(_has_main(p))}" for p in FILES]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "benchmarks"), *names],
                          capture_output=True, text=True, timeout=120, cwd=ROOT / "benchmarks", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_no_benchmark_is_named_as_a_module_it_would_shadow():
    """A file run puts benchmarks/ first on the import path: a file there named as a standard
    library module or an installed package's (typing.py was) would be imported in its place."""
    taken = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    assert [p.name for p in FILES if p.stem in taken] == []


def test_no_benchmark_edits_the_import_path():
    """The root reaches a file run through PYTHONPATH (children.child_env gives it to a child),
    never through a benchmark's own sys.path code."""
    assert [p.name for p in FILES if "sys.path" in p.read_text(encoding="utf-8")] == []
