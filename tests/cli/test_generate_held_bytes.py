"""`generate --json`'s kv_held_bytes are the bytes the generation's KV cache holds, the same for a
process's first generation as for its later ones: its first step does not take another path (the
layer loop's arrays, copied into one buffer of every layer's at the next step) while the load's
warm-up of the one-row steps is still going, but waits for it, as the layer loop would. In a fresh
process: the warm-up is process-wide."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.commands.checks import KERNELS_STEPS
from attnviz.engine.computing.trace import kv_room
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

TESTS = str(Path(__file__).resolve().parents[1])
PROMPT = "3,1,4,1,5,9"
CHILD = """
import contextlib, io, json, sys
from attnviz.cli import main

held = []
for _ in range(2):  # one process, two generations of the same prompt
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["generate", "--model", sys.argv[1], "--ids", sys.argv[2], "--max-new", sys.argv[3],
                     "--ignore-eos", "--json"]) == 0
    steps = json.loads(out.getvalue())["steps"]
    held.append([[s["T"], s["kv_bytes"], s["kv_held_bytes"]] for s in steps])
print(json.dumps(held))
"""


def test_a_process_s_first_generation_holds_the_bytes_its_later_ones_do(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):  # an MLP of 64: every matrix in Q8_0 blocks (one call a step)
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            tensors[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, cfg["hidden_size"])) * 0.2).astype(np.float32)
    path = write_gguf(tmp_path / "q8.gguf", dict(cfg, intermediate_size=64), tensors, Q.Q8_0)
    steps = KERNELS_STEPS  # (from this many on, generate runs on the quantised kernels)
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS!r})\n" + CHILD,
                           str(path), PROMPT, str(steps)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = json.loads(proc.stdout.splitlines()[-1])
    assert first == second
    n = len(PROMPT.split(","))
    per = first[0][1] // n  # bytes of K and V a position
    # the prompt's own positions; then, from the first step, one buffer with room for kv_room more
    # (positions n + 1 + kv_room(n + 1) while they last)
    want = [n * per] + [(n + 1 + kv_room(n + 1)) * per] * (steps - 1)
    assert [held for _, _, held in first] == want
    assert all(T * per == kv for T, kv, _ in first)
