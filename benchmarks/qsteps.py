"""SmolLM2's few-row runs on its Q4_1 blocks (engine/computing/qmatvec.py) against the float32 path,
in one process, in turns (not a test).

- keystroke: the window's run of one new row with the KV cache (every layer's patterns), after a
  run of the first T - 1 tokens: engine time, kernels on against off (qmatvec.ENABLED). Goal: on
  / off <= 0.5. The kernels' runs take every layer in one compiled call (onerow_stack); the same
  runs a layer at a time (onerow_stack.ENABLED off) are timed in turns beside them.
- generation step at T = 64 and 512: a generation's cached one-row run (generate.run_step, _StepTrace: the
  cache, no dense patterns, every layer to its end), each way's generation going on a token a
  round (a cache of its own for each way): every timed step finds its cache as the step before
  it left it, as generate's steps do (its keys and values the lists that step handed over, its
  row appended in place, the run's constants new), at T = 64 (512) in the first timed round and
  one more token each round after. Kernels on (every layer in one call, the same call on two
  threads: onerow_pair, the same with its fallback to one thread where the pair does not pay,
  and a layer at a time) against off, in turns, and the step's unembedding (head.logits, the
  same either way) apart. In turns, each step comes after another way's step (a float32 pass of
  425 MB among them), not after the unembedding of its own last row as a generation's steps do.
  Goal: the layers' step as `generate` takes it (two threads with the fallback,
  parallel.step_pair), in blocks of BLOCK steps in a row at T..T + BLOCK - 1, each step's last row
  unembedded before the next step as generate's loop does (_as_generate; the block's first step
  untimed: it follows a read), <= 1.3x the quantised-bytes memory floor: the time one thread takes to
  read the packed bytes the kernels read (blocks, scales, offsets) and nothing else, measured in
  the same process by a plain read of those arrays themselves (benchmarks/streaming.py), 3 before
  and after each block and 25 more (the memory's bandwidth drifts from minute to minute, and
  differs from one process to the next by more than a code change moves the ratio). Each goal
  figure is the median over --processes fresh processes, one after another, of each one's
  (benchmarks/qsteps_processes.py: SmolLM2 loaded anew, these steps alone, against the process's
  fastest read). The same in this process, in turns with the rest, is named "..., in the main
  process", no goal (with --processes 0 or 1, the goal's: its floor the fastest of every read in
  the run, 25 after the timed steps, 3 beside each of as many more steps and 3 around each block).
  Beside it, each block against the faster of the reads around it (from the processes too), and
  each step in turns against the read beside it (the medians of their ratios, no goal). Beside them,
  for comparison with earlier runs, the step against the same bytes at the bandwidth of the
  float32 matrix-vector pass over the model's own matrices: no floor (that pass reads well under
  the memory's bandwidth, and the kernels' products beat it).
  Beside it, the layers' matrix products alone (every packed matrix once, one row, the serial
  kernels) against the same floor: what the kernels take, the step's rest being its other steps.
  Beside them, on two threads started together (benchmarks/pair_floor.py): the same bytes' plain
  read, each thread a half, and the layers' products alone in onerow_pair's chunks (each matrix a
  stage both threads share, as a step's are), against the one-thread floor: what the pair could
  reach, and what the kernels' own work leaves of it.
  Beside the goal's floor, one that also counts the float32 K and V the step reads (every layer's
  T positions: 23.6 MB for SmolLM2 at T = 512), at the same read bandwidth: no goal.
- run of n rows (16, 64, 128, 256, 512) where no layer's float32 copy is held (the model as loaded with
  the kernels): on the kernels against expanding every layer for the float32 product (a budget of
  one layer, so each run expands them again), in turns (benchmarks/qsteps_rows.py). Where the
  kernels stop being faster is qmatvec.ROWS_UNEXPANDED.
- memory: the bytes of the layers' packed views (their blocks as the kernels read them, no
  float32 copy of a packed matrix), and VmRSS of a fresh process after loading SmolLM2 and typing
  a sentence key by key (one run a key, as the window's engine does), with the kernels and
  without them (packing off: every layer float32). Goal: <= 350 MB (the window's RSS after
  typing; the engine's alone is measured here, the window adds Qt's).

    python -m benchmarks.qsteps [--repeat 15] [--threads 1] [--processes 3] [--steps-only]

--steps-only: the keystroke and the generation steps alone (the processes' too), printed, nothing
written.

Writes benchmarks/results/qsteps.json (benchmarks/record.py); each figure's note has the machine's
load average (other work on a shared machine slows both paths, not always alike).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import NamedTuple

import numpy as np

from attnviz.engine.computing.request import RunRequest
from benchmarks.pair_floor import packed_arrays, packed_bytes, products_alone, two_thread_figures
from benchmarks.qsteps_processes import load_smollm2, process_figures, run_children
from benchmarks.qsteps_rows import unexpanded_runs
from benchmarks.record import figure, write
from benchmarks.streaming import read_ms


def _ways(fn, repeat: int, setup=None, ways=None) -> dict[str, list[float]]:
    """ms of fn(way) each way of `ways` (WAYS: the kernels with every layer in one call, on one
    thread, two, two with the fallback; the kernels layer by layer, float32), `repeat` times
    each, in turns (the order rotated each round: no way always follows another); setup(way)
    before each, untimed."""
    ways = WAYS if ways is None else ways
    times: dict = {way: [] for way in ways}
    for r in range(repeat + 1):
        for k in range(len(ways)):
            way = ways[(r + k) % len(ways)]
            _set_way(way)
            if setup is not None:
                setup(way)
            t0 = time.perf_counter()
            fn(way)
            ms = (time.perf_counter() - t0) * 1e3
            if r:  # the first round warms every way
                times[way].append(ms)
    _set_way(WAYS[0])
    return times


PAIRED = "one call, two threads with fallback"  # generate's steps (parallel.step_pair)
WAYS = ("one call", PAIRED, "one call, two threads", "layer by layer", "float32")
KEYSTROKE_WAYS = tuple(w for w in WAYS if w != PAIRED)  # (a keystroke keeps one thread: PAIRED's is "one call")
THREADS = [1]  # --threads: the kernel threads of every way but "one call, two threads"


def _set_way(way: str) -> None:
    """The kernels on (qmatvec.ENABLED) or off, a one-row run's layers in one compiled call
    (onerow_stack.ENABLED) or one at a time, and the kernels' threads: two for "one call, two
    threads" (onerow_pair's call, every call: onerow_stack.FALLBACK off), a generation step's two
    with the fallback for PAIRED, --threads for the others."""
    from attnviz.engine.computing import onerow_stack
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.parallel import limit_kernel_threads
    qm.ENABLED = way != "float32"
    onerow_stack.ENABLED = way in ("one call", PAIRED, "one call, two threads")
    onerow_stack.FALLBACK = way != "one call, two threads"
    limit_kernel_threads(2 if way == "one call, two threads" else THREADS[0], pair_steps=way == PAIRED)


def back_to(cache, n: int) -> None:
    """The generation's cache as its step at n + 1 tokens finds it: the first n tokens, their K and
    V the first n positions of the arrays the last step wrote, with room after them, so the step
    appends its row in place (trace.append_positions) as generate's steps do. (A run that replaced
    the last token instead would copy every layer's K and V twice: a keystroke's work.)"""
    cache.ids = cache.ids[:n].copy()
    cache.k, cache.v = [a[:, :n] for a in cache.k], [a[:, :n] for a in cache.v]
    cache.nbytes = sum(a.nbytes for a in cache.k) + sum(a.nbytes for a in cache.v)


def _steps_beside_reads(step, arrays, rounds: int) -> tuple[list[float], list[float]]:
    """ms of one step on the kernels (every layer in one call) and of the fastest of 3 plain reads
    of `arrays` beside it, `rounds` times in turns (which goes first alternates): the floor read in
    the same moments as the steps, as the machine's memory bandwidth drifts from minute to minute."""
    steps, reads = [], []
    _set_way(WAYS[0])
    for r in range(rounds):
        for what in (("read", "step") if r % 2 else ("step", "read")):
            if what == "read":
                reads.append(read_ms(arrays, 3)[0])
                continue
            t0 = time.perf_counter()
            step(WAYS[0])
            steps.append((time.perf_counter() - t0) * 1e3)
    return steps, reads


def _float32_pass(weights, repeat: int) -> tuple[float, int]:
    """Fastest ms of one x @ w over every float32 layer matrix, and their bytes."""
    from attnviz.engine.computing.layers import linear
    mats = [w for layer in weights.layers for w in (layer.w_qkv, layer.w_o, layer.w_in, layer.w_out)
            if w is not None]
    rng = np.random.default_rng(1)
    xs = {m.shape[0]: rng.standard_normal((1, m.shape[0]), dtype=np.float32) for m in mats}
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for m in mats:
            linear(xs[m.shape[0]], m)
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best, sum(int(m.nbytes) for m in mats)


def _kv_bytes(cfg, T: int) -> int:
    """Bytes of float32 K and V a step at T tokens reads: every layer's [n_kv_head, T, d_head] x2."""
    return 2 * cfg.n_layer * cfg.n_kv_head * T * cfg.d_head * 4


def keystroke_figures(model, ids: list[int], fresh, repeat: int, threads: int) -> list[dict]:
    """A keystroke: one new row after T - 1 cached tokens (a new last token each time: the run
    shares T - 1 tokens with the one before and computes one row), every layer's patterns, the
    three ways in turns."""
    T = 24
    model.clear_cache()
    model.run(ids=ids[:T - 1])

    def keystroke(way):
        assert model.run(ids=ids[:T - 1] + [next(fresh)]).cache_computed == 1
    # (each timed keystroke after an untimed one the same way: the cache then holds its K and V as
    # that way's keystrokes leave them, as typing leaves them)
    times = _ways(keystroke, repeat, keystroke, KEYSTROKE_WAYS)
    on, off = times["one call"], times["float32"]
    a, b, load = statistics.median(on), statistics.median(off), os.getloadavg()[0]
    loop = statistics.median(times["layer by layer"])
    figs = [*_ways_figures(f"keystroke engine time, {{}}, T = {T}", times, load,
                           f"one new row, every layer's patterns, every layer in one compiled call "
                           f"(onerow_stack); {threads} thread(s)"),
            figure("keystroke: kernels / float32", a / b, "x", goal=0.5, headline=True,
                   note=f"medians {a:.2f} / {b:.2f} ms")]
    print(f"keystroke T = {T}: kernels {a:.2f} ms (layer by layer {loop:.2f} ms), float32 {b:.2f} ms, "
          f"ratio {a / b:.2f}  load {load:.1f}", flush=True)
    return figs


def _ways_figures(name: str, times: dict, load: float, what: str) -> list[dict]:
    """The figures of _ways' three ways (name.format: "kernels", "kernels layer by layer",
    "float32"), each its median of the runs; `what`: the first way's runs, said in its note."""
    notes = {"one call": what, "layer by layer": "the same runs in turns, a layer's compiled calls at a time",
             "one call, two threads": "the same runs in turns, the one call on two threads (onerow_pair)",
             PAIRED: "the same runs in turns, the one call on two threads or one as onerow_pair's "
                     "fallback chooses (generate's and the window's steps)",
             "float32": "the same runs in turns"}
    labels = {"one call": "kernels", "one call, two threads": "kernels on two threads",
              PAIRED: "kernels on two threads with fallback",
              "layer by layer": "kernels layer by layer", "float32": "float32"}
    return [figure(name.format(labels[way]), statistics.median(times[way]), "ms", runs=times[way],
                   note=f"{notes[way]}; median; load average {load:.1f}") for way in times]


def _generation_times(model, ids: list[int], fresh, T: int, repeat: int):
    """Each way's own generation from T - 1 tokens, one new row a step, the ways in turns: their
    times, and the step (a way's next one)."""
    from attnviz.engine.computing.generate import _StepTrace, run_step
    from attnviz.engine.computing.trace import KVCache

    caches = {way: KVCache() for way in WAYS}  # (each way's as its own steps leave it)
    seqs = {way: ids[:T - 2] for way in WAYS}  # (the untimed first round runs T - 1 tokens)
    for way, cache in caches.items():
        model.run(ids=np.asarray(seqs[way]), trace=_StepTrace(False, cache),
                  request=RunRequest(labels=False))

    def step(way):  # (generate's own step: run_step)
        cache, seq = caches[way], seqs[way]
        seq.append(next(fresh))
        run_step(model, np.asarray(seq, dtype=np.int64), False, cache)
        assert cache.reused == len(seq) - 1 and not cache.earlier
    return _ways(step, repeat), step


BLOCK = 8  # _as_generate's timed steps in a row


def _as_generate(model, head, ids: list[int], fresh, T: int, rounds: int, arrays):
    """Generate's own steps (PAIRED): `rounds` blocks of BLOCK + 1 steps in a row from T - 2
    tokens, each step's last row unembedded (head.logits) before the next, as generate's loop does,
    the first step of a block (T - 1 tokens) untimed, the timed ones at T..T + BLOCK - 1 tokens;
    each block between two plain reads of `arrays` (the
    fastest of 3 each) -> (every timed step's ms, each block's median over the faster of its two
    reads, every read's ms, the calls the fallback gave the pair and one thread)."""
    from attnviz.engine.computing import onerow_pair
    from attnviz.engine.computing.generate import _StepTrace, run_step
    from attnviz.engine.computing.trace import KVCache

    _set_way(PAIRED)
    cache = KVCache()
    model.run(ids=np.asarray(ids[:T - 2]), trace=_StepTrace(False, cache), request=RunRequest(labels=False))
    before = dict(onerow_pair.TAKEN)
    steps, ratios, reads = [], [], []
    for _ in range(rounds):
        reads.append(read_ms(arrays, 3)[0])
        back_to(cache, T - 2)
        seq, block = np.array(ids[:T - 2] + [0] * (BLOCK + 1), np.int64), []  # (as generate's ids)
        for k in range(BLOCK + 1):
            seq[T - 2 + k] = next(fresh)
            t0 = time.perf_counter()
            trace = run_step(model, seq[:T - 1 + k], False, cache)
            ms = (time.perf_counter() - t0) * 1e3
            head.logits(trace.final)
            if k:
                block.append(ms)
        reads.append(read_ms(arrays, 3)[0])
        steps += block
        ratios.append(statistics.median(block) / min(reads[-2:]))
    _set_way(WAYS[0])
    return steps, ratios, reads, {k: onerow_pair.TAKEN[k] - before[k] for k in before}


def _as_generate_figures(T: int, steps, ratios, took, floor: float, load: float,
                         goal: bool = True) -> list[dict]:
    """_as_generate's steps against the run's floor (generation_figures'): the goal's figures, or
    (goal False: the goal's are the median over fresh processes, qsteps_processes) the same
    named as this process's, with no goal."""
    gen, here = statistics.median(steps), "" if goal else ", in the main process"
    where = (f"{len(ratios)} blocks of {BLOCK} steps in a row at T = {T}..{T + BLOCK - 1}, each "
             f"step's last row unembedded before the next as generate's loop does")
    return [
        figure(f"generation step T = {T}, as generate takes it{here}", gen, "ms", runs=steps,
               note=f"{where}; two threads with fallback (the pair in {took['pair']} of "
                    f"{sum(took.values())} calls, the blocks' untimed first steps included); "
                    f"median; load average {load:.1f}"),
        figure(f"generation step T = {T}: as generate takes it / quantised-bytes floor{here}",
               gen / floor, "x", goal=1.3 if goal else None, headline=goal and T == 64,
               note=f"{where}; floor {floor:.2f} ms, the fastest plain read of the packed bytes "
                    f"in the run (the next figures' notes say which reads)"
                    + ("" if goal else "; no goal: the goal's figure is the median over fresh processes")),
        figure(f"generation step T = {T}: as generate takes it, each block beside its reads{here}",
               statistics.median(ratios), "x", runs=ratios,
               note="each block's median step over the faster of the two reads around it (3 "
                    "each), taken in the same moments: the median of the blocks' ratios; no goal"),
    ]


class Floor(NamedTuple):
    """A run's quantised-bytes floor (generation_figures'): `ms`, one thread's plain read of the
    `packed` bytes at the run's fastest read (`read` ms for `read_bytes`), and the reads beside
    the steps in turns and around generate's blocks."""
    ms: float
    packed: int
    read: float
    read_bytes: int
    beside_steps: list
    around_blocks: list


def _ways_floor_figures(T: int, repeat: int, times: dict, took: dict, paired: list, fl: Floor) -> list[dict]:
    """The ways in turns against the floor (generation_figures'): generate's (two threads with
    fallback) and how often it took the pair, one thread, two threads, and one thread's steps each
    beside its own read (`paired`: their ratios)."""
    floor = fl.ms
    a, two = statistics.median(times["one call"]), statistics.median(times["one call, two threads"])
    gen = statistics.median(times[PAIRED])
    return [
        figure(f"generation step T = {T}: generate's kernels (two threads with fallback) / "
               f"quantised-bytes floor", gen / floor, "x",
               note=f"the one call as generate and the window's generation take it: on two "
                    f"threads, or one where onerow_pair's fallback finds the pair does not pay; "
                    f"in turns with the other ways, each step after another way's (not after its "
                    f"own unembedding, as in a generation); "
                    f"floor {floor:.2f} ms: one thread's plain read of the {fl.packed / 1e6:.0f} MB "
                    f"packed, the fastest of {25 + 3 * repeat + 6 * repeat} in the run, 25 after "
                    f"the steps, 3 beside each of {repeat} more steps and 3 around each block "
                    f"of generate's own ({fl.read_bytes / fl.read / 1e6:.1f} GB/s; reads beside the steps "
                    f"{min(fl.beside_steps):.2f}-{max(fl.beside_steps):.2f} ms, around the blocks "
                    f"{min(fl.around_blocks):.2f}-{max(fl.around_blocks):.2f} ms)"),
        figure(f"generation step T = {T}: generate's steps that took two threads",
               100 * took["pair"] / max(1, sum(took.values())), "%",
               note=f"onerow_pair's fallback chose the pair for {took['pair']} of generate's way's "
                    f"{sum(took.values())} steps (the untimed first round's included), one thread "
                    f"for the rest"),
        figure(f"generation step T = {T}: kernels / quantised-bytes floor", a / floor, "x",
               note=f"the one call on one thread (a keystroke's way), in turns with the others; "
                    f"floor {floor:.2f} ms as above"),
        figure(f"generation step T = {T}: kernels on two threads / quantised-bytes floor", two / floor, "x",
               note=f"the one call on two threads (onerow_pair) every step, no fallback, in turns "
                    f"with the others; floor {floor:.2f} ms as above"),
        figure(f"generation step T = {T}: kernels / quantised-bytes floor, each step beside its "
               f"own read", statistics.median(paired), "x", runs=paired,
               note=f"{repeat} more steps each way's generation on, each in turns with the "
                    f"fastest of 3 reads beside it: the median of step / read, the two taken "
                    f"in the same moments (the memory's bandwidth drifts); no goal"),
    ]


def _unembedding_ms(model, head) -> list[float]:
    """ms of head.logits of one row, 5 times."""
    logits = []
    final = np.zeros((1, model.config.d_model), np.float32)
    for _ in range(5):
        t = time.perf_counter()
        head.logits(final)
        logits.append((time.perf_counter() - t) * 1e3)
    return logits


def generation_figures(model, head, ids: list[int], fresh, T: int, repeat: int,
                       goal: bool = True) -> list[dict]:
    """Generation steps at T: the three ways' medians, against the floors of the bytes a step
    reads (the packed blocks alone, beside each step, with K and V) and the float32 pass's
    bandwidth; the products alone and the unembedding. `goal`: _as_generate_figures'."""
    store = model.weights.layers
    packed = packed_bytes(store)
    from attnviz.engine.computing import onerow_pair
    before = dict(onerow_pair.TAKEN)
    times, step = _generation_times(model, ids, fresh, T, repeat)
    took = {k: onerow_pair.TAKEN[k] - before[k] for k in before}  # (the fallback's calls: PAIRED's alone)
    on, off, loop = times["one call"], times["float32"], statistics.median(times["layer by layer"])
    floor_ms, f32_bytes = _float32_pass(model.weights, 5)
    blas = packed * floor_ms / f32_bytes  # (the float32 pass's bandwidth: a reference, no floor)
    arrays = packed_arrays(store)
    read, read_bytes = read_ms(arrays, 25)
    paired_steps, paired_reads = _steps_beside_reads(step, arrays, repeat)
    as_gen, gen_ratios, gen_reads, gen_took = _as_generate(model, head, ids, fresh, T, repeat, arrays)
    read = min([read] + paired_reads + gen_reads)  # (the fastest read of the run: the floor)
    paired = [a_ / r_ for a_, r_ in zip(paired_steps, paired_reads)]
    floor = packed * read / read_bytes
    fl = Floor(floor, packed, read, read_bytes, paired_reads, gen_reads)
    kv = _kv_bytes(model.config, T)
    floor_kv = (packed + kv) * read / read_bytes
    logits = _unembedding_ms(model, head)
    alone = products_alone(store, repeat)
    a, b, load = statistics.median(on), statistics.median(off), os.getloadavg()[0]
    two, gen = statistics.median(times["one call, two threads"]), statistics.median(times[PAIRED])
    figs = [
        figure(f"generation step T = {T}: the layers' products alone / quantised-bytes floor",
               statistics.median(alone) / floor, "x", runs=[t / floor for t in alone],
               note=f"every packed layer matrix once on the serial kernels, one row, nothing "
                    f"else: median {statistics.median(alone):.2f} ms of the step's {a:.2f} ms; "
                    f"the rest is the layers' other steps (norms, RoPE, attention over T keys, "
                    f"SwiGLU's gate) and the calls between"),
        *_ways_figures(f"generation step T = {T}, {{}}", times, load,
                       f"the layers' one-row run, every layer in one compiled call (onerow_stack); "
                       f"a generation's steps at T = {T}..{T + repeat - 1}"),
        *_as_generate_figures(T, as_gen, gen_ratios, gen_took, floor, load, goal),
        *_ways_floor_figures(T, repeat, times, took, paired, fl),
        figure(f"generation step T = {T}: kernels / the packed bytes at the float32 pass's "
               f"bandwidth", a / blas, "x",
               note=f"{blas:.2f} ms: {packed / 1e6:.0f} MB at the float32 matrix-vector pass's "
                    f"{f32_bytes / floor_ms / 1e6:.1f} GB/s ({floor_ms:.2f} ms for "
                    f"{f32_bytes / 1e6:.0f} MB): a reference, no floor (a plain read reaches "
                    f"{read_bytes / read / 1e6:.1f} GB/s)"),
        figure(f"generation step T = {T}: kernels / floor of the packed and KV-cache bytes",
               a / floor_kv, "x",
               note=f"floor {floor_kv:.2f} ms: the packed bytes and the {kv / 1e6:.1f} MB of "
                    f"float32 K and V the step reads (every layer's T positions), at the same "
                    f"read bandwidth"),
        *two_thread_figures(store, T, floor, statistics.median(alone), repeat),
        figure(f"generation step T = {T}: unembedding", statistics.median(logits), "ms",
               runs=logits, note="head.logits of the last row, on the unembedding's packed blocks "
                                 "where the head is packed (the kernels)"),
    ]
    own = statistics.median(as_gen)
    print(f"step T = {T}: as generate takes it {own:.2f} ms ({own / floor:.2f}x; each block beside its "
          f"reads {statistics.median(gen_ratios):.2f}x; the pair in {gen_took['pair']} of "
          f"{sum(gen_took.values())} calls); in turns: generate's {gen:.2f} ms ({gen / floor:.2f}x; the "
          f"pair in {took['pair']} of {sum(took.values())} steps), one thread {a:.2f} ms ({a / floor:.2f}x), "
          f"two threads {two:.2f} ms ({two / floor:.2f}x; layer by layer "
          f"{loop:.2f} ms), float32 {b:.2f} ms, floor {floor:.2f} ms (one thread each step beside its own read "
          f"{statistics.median(paired):.2f}x; with K and V {floor_kv:.2f} ms, "
          f"{a / floor_kv:.2f}x; at the float32 pass's bandwidth {blas:.2f} ms, {a / blas:.2f}x), "
          f"the products alone {statistics.median(alone):.2f} ms "
          f"({statistics.median(alone) / floor:.2f}x), unembedding {statistics.median(logits):.2f} ms  "
          f"load {load:.1f}", flush=True)
    return figs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS and kernel threads (default 1: what the window gives a keystroke)")
    ap.add_argument("--steps-only", action="store_true",
                    help="the keystroke and generation steps alone, printed (no runs of n rows, no "
                         "RSS, nothing written)")
    ap.add_argument("--processes", type=int, default=3,
                    help="fresh processes the goal figures are the median over (0 or 1: this one's)")
    args = ap.parse_args()
    THREADS[0] = args.threads
    model, load_s, warm = load_smollm2(args.threads)
    store = model.weights.layers
    packed = packed_bytes(store)
    views = store.view_bytes()
    rng = np.random.default_rng(0)
    ids = rng.integers(100, model.config.vocab_size, 600).tolist()
    figs = []
    load = os.getloadavg()[0]
    figs.append(figure("packed views held (no float32 copy of a packed matrix)", views / 2**20, "MiB",
                       note=f"blocks, scales and offsets {packed / 2**20:.1f} MiB, the rest the "
                            f"layers' vectors; float32 layers held at load "
                            f"{store.held_bytes() / 2**20:.0f} MiB; load {load_s:.1f} s; kernels "
                            f"from numba's cache {warm['Q4_1']:.2f} s"))
    print(f"loaded in {load_s:.1f} s; packed views {views / 2**20:.0f} MiB, float32 held "
          f"{store.held_bytes() / 2**20:.0f} MiB; {args.threads} thread(s); load average {load:.1f}")
    if not args.steps_only:
        figs += unexpanded_runs(store, args.repeat)

    fresh = iter(rng.integers(100, model.config.vocab_size, 100_000).tolist())
    figs += keystroke_figures(model, ids, fresh, args.repeat, args.threads)
    head = model.lm_head()
    for T in (64, 512):
        figs += generation_figures(model, head, ids, fresh, T, args.repeat, goal=args.processes < 2)
    if args.processes >= 2:
        figs += process_figures(run_children(args.processes, args.repeat, args.threads))
    if args.steps_only:
        return
    from benchmarks.qsteps_rss import rss_figures
    figs += rss_figures()
    print(f"wrote {write('qsteps', figs)}")


if __name__ == "__main__":
    main()
