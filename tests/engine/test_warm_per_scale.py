"""The one-row block is warm per scale type, not per block type (engine/computing/qmatvec.py): in a
process that warms the rest later (the window), a model of some block type that the one-call path
does not cover warms that type first, with no block; a model of the same type loaded after it,
which the path covers (Compare's B, warmed by no load), then starts the block's warm-up at its
first one-row run, and its one-row runs take every layer in one call (onerow_stack) once that is
done, not the layer loop for the rest of the process. In a fresh process: the block state is
process-wide."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from gguf_files import gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

TESTS = str(Path(__file__).resolve().parents[1])
CHILD = """
import json, sys, threading
from attnviz.engine import parallel
from attnviz.engine.computing import onerow_stack, qmatvec
from attnviz.engine.computing.load import load_gguf, packed_views
from attnviz.engine.reading import qpack

qpack.ask_for_kernels(rest_later=True)  # as the window asks
parallel.limit_kernel_threads(1)  # a one-row run on one thread, as the window's on 2 cores
calls, real = [], onerow_stack._layers
def counted(x, a, b, *rest):
    calls.append([a, b])
    return real(x, a, b, *rest)
onerow_stack._layers = counted

def settled():  # every warm-up thread ended
    for t in threading.enumerate():
        if t.name.startswith(("qmatvec-warm", "attnviz-kernels-warm")):
            t.join(timeout=600)

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
uncovered = load_gguf(sys.argv[1])
settled()
qmatvec.warm(uncovered.weights.packed_types, layers=packed_views(uncovered))  # A's warm-up (warm_the_rest)
uncovered.run(ids=IDS[:-1]); uncovered.run(ids=IDS)  # (its keystroke: the layer loop, as always)
covered = load_gguf(sys.argv[2])  # B: no load warms the rest
settled()
covered.run(ids=IDS[:-2])
first = covered.run(ids=IDS[:-1]).cache_computed  # one row: the block's warm-up starts, not waited for
settled()
before = len(calls)
rows = covered.run(ids=IDS).cache_computed
print(json.dumps({"rows": [first, rows], "calls": calls[before:], "n_layer": covered.config.n_layer}))
"""


def test_a_covered_model_after_an_uncovered_one_of_its_type_takes_the_one_call_path(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")  # (an MLP of 48: its down projection float32)
    uncovered = write_gguf(tmp_path / "uncovered.gguf", cfg, tensors, Q.Q8_0)
    wide = dict(tensors)
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):  # an MLP of 64: every matrix in Q8_0 blocks
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            wide[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, cfg["hidden_size"])) * 0.2).astype(np.float32)
    covered = write_gguf(tmp_path / "covered.gguf", dict(cfg, intermediate_size=64), wide, Q.Q8_0)
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS!r})\n" + CHILD,
                           str(uncovered), str(covered)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["rows"] == [1, 1]
    assert out["calls"] == [[0, out["n_layer"]]]  # every layer in one call
