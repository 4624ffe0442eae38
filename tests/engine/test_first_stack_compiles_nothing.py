"""A model's stack of every layer's blocks (engine/computing/onerow_stack.py) built by the first
one-row run that asks for it, where no warm-up built it before (a keystroke typed before the
window's warm-up has done so): in a fresh process, once the one-row steps that run waits for are
warm, it compiles nothing (a typed List built from Python compiles its methods once a process:
a freeze of a second on that keystroke)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

TESTS = str(Path(__file__).resolve().parents[1])  # (kernel_checks, for the child)
CHILD = """
import json
from kernel_checks import listen_for_compiles
from attnviz.engine import parallel
from attnviz.engine.computing import onerow_stack, qmatvec
from attnviz.engine.computing.load import load_model, packed_views
from attnviz.engine.reading import qpack

qpack.ask_for_kernels(rest_later=True)  # as the window asks
parallel.limit_kernel_threads(1)  # a one-row run on one thread, as the window's on 2 cores
model = load_model("SmolLM2-135M-Instruct")
model.run("The cat sat on")  # the first result: a few rows
qmatvec.warm(model.weights.packed_types, layers=packed_views(model))  # the window's warm-up (warm_the_rest)
seen = []
before = onerow_stack.prepared(model.weights.layers)
listen_for_compiles(seen)
rows = [model.run(text).cache_computed for text in ("The cat sat on the", "The cat sat on the mat")]
print(json.dumps({"before": before, "after": onerow_stack.prepared(model.weights.layers),
                  "rows": rows, "compiled": seen}))
"""


def test_the_first_one_row_run_builds_the_stack_and_compiles_nothing():
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS!r})\n" + CHILD], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["before"] is False and out["after"] is True  # built by the keystroke's run
    assert out["rows"] == [1, 1]
    assert out["compiled"] == []
