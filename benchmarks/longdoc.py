"""Long documents and generation on SmolLM2-135M-Instruct (the bundled Q4_1 GGUF), side by side in
one run. Not a test: run it, read the table.

    .venv/bin/python -m benchmarks.longdoc [--json] [--T 1024,4096,8192] [--gen-T 64,512,2048]
                                           [--zoom-T 8192] [--zoom-options] [--scores-T 2048]

1. sgemm peak: the best of a few [2048, 2048] @ [2048, 2048] float32 products at BLAS's default
   threads, measured first, in this run.
2. Full forward of a long text (longdoc.run_long: row-block attention, no dense patterns) at each T,
   each in a fresh child process: wall time, peak RSS (VmHWM, whole process: weights included), and
   FLOP/s as a fraction of (1). FLOPs counted: the projections and MLP (2 T d_in d_out each) and the
   attention pairs a causal model needs (T (T + 1) / 2 per head, 2 d_head for q.k and 2 d_head for
   a.v); the engine's row blocks compute at most a block's worth of masked pairs more.
3. Generation: per T, a prompt of T - 1 random ids, then 16 greedy steps with the KV cache
   (engine/computing/generate.py); median seconds per step vs one float32 matrix-vector pass over
   the model's layer matrices (benchmarks/smollm2.py's float32_pass: one product with each): a
   reference, not a floor (that pass reads well under the memory's bandwidth). Beside it, one
   thread's plain read of the same float32 bytes (benchmarks/streaming.py), measured in the same
   run: their read floor on one thread. The unembedding (49,152 x 576, 113 MB as float32) is part
   of each step but not of that pass: the pass with it is shown too.
4. The window's long view after a zoom, at T = 8,192 (a fresh child process, offscreen Qt): the
   pane and the tiles of ui/views/long_view.py on a long run's patterns, ZOOM_STEPS wheel notches in
   (about points spread over the pattern) and back out. Per notch: `repaint`, the pane painted
   at once with the last image moved and scaled to the new region (what the screen shows first);
   `pane`, the new overview of the focused head at the pane's pixels computed and painted (the
   runner gathers view changes for OVERVIEW_DELAY_MS before it starts: not counted); `tiles`, the
   same for every head of the layer. p50 and p95 of each. With --zoom-options, a second run with
   Hide first token and Value-weighted on (figures/view.Shown: cells of exact shown rows, each
   row's total over every key computed once and kept).
5. A long text's head scores (the roles panel's badges), per T in --scores-T (a fresh child
   process, BLAS capped at one thread as in the window): heads.score_blocks on one thread (the
   reference) against heads.score_layers with the layers shared out to one thread per core (the
   window's way), in turns, twice each; the two must give the same
   scores, and the ratio is measured in the same run.

The machine is shared: each section reports the CPU time other processes took while it ran
(`other_cpu_s`) and the load average; on 2 cores shared with other work, read the figures with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from benchmarks import record
from benchmarks.children import child_env
from benchmarks.smollm2 import Foreign, float32_pass, smollm2_path

GOALS = {"peak_fraction_4096": 0.5, "rss_gib_8192": 3.0, "pass_ratio_512": 2.0, "zoom_p95_ms": 50}
N_STEPS = 16
# (a generated step's goal is read against this pass: the memory's bandwidth allows faster)
STEP_AGAINST = ("against one float32 matrix-vector pass over the model's layer matrices without the "
                "unembedding (a reference, not a floor)")
ZOOM_STEPS = 12  # wheel notches in, then as many out


def sgemm_peak(n: int = 2048, runs: int = 5) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up
    best = min(_timed(lambda: a @ b) for _ in range(runs))
    return 2 * n ** 3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def forward_flops(cfg, T: int) -> float:
    d, dh = cfg.d_model, cfg.d_head
    proj = 2 * T * d * (cfg.n_head + 2 * cfg.n_kv_head) * dh + 2 * T * cfg.n_head * dh * d
    mlp = 2 * T * d * 2 * cfg.d_ff + 2 * T * cfg.d_ff * d
    attn = 4 * dh * cfg.n_head * T * (T + 1) / 2
    return cfg.n_layer * (proj + mlp + attn)


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def child_forward(T: int) -> dict:
    from attnviz.engine import load_model
    from attnviz.engine.computing.longdoc import run_long

    model = load_model(smollm2_path())
    loaded = _status()
    ids = np.random.default_rng(T).integers(0, model.config.vocab_size, T)
    layers = []
    with Foreign() as f:
        t0 = time.perf_counter()
        run = run_long(model, ids=ids, progress=lambda i, n: layers.append(time.perf_counter() - t0))
        wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    run.patterns.overview(model.config.n_layer // 2, (512, 512), "max")
    overview_s = time.perf_counter() - t0
    return {"T": T, "wall_s": wall, "other_cpu_s": f.other_cpu_s, "flops": forward_flops(model.config, T),
            "rss_after_load": loaded["VmRSS"], "hwm": _status()["VmHWM"], "kept_bytes": run.patterns.nbytes,
            "overview_512_s": overview_s, "load": os.getloadavg()[0]}


def child_generate(T: int) -> dict:
    from attnviz.engine import load_model
    from attnviz.engine.computing.generate import generate
    from benchmarks.streaming import read_ms  # (numba: here only, off the other children's RSS)

    model = load_model(smollm2_path())
    head = model.lm_head()
    pass_fn, mats, pass_bytes, _ = float32_pass(model.weights)
    x = np.random.default_rng(0).standard_normal((1, model.config.d_model), dtype=np.float32)
    pass_fn()
    f32_pass = statistics.median(_timed(pass_fn) for _ in range(9))
    read = read_ms(mats, 9)[0] / 1e3
    unembed = statistics.median(_timed(lambda: head.logits(x)) for _ in range(9))
    ids = np.random.default_rng(T).integers(0, model.config.vocab_size, T - 1)
    stamps = []
    with Foreign() as f:
        generate(model, ids=ids, max_new=N_STEPS + 1, ignore_eos=True,
                 on_step=lambda s: stamps.append(time.perf_counter()))
    step = statistics.median(np.diff(stamps))  # the steps after the prefill: T .. T + 16 tokens read
    return {"T": T, "step_s": step, "tokens_per_s": 1 / step, "pass_s": f32_pass, "pass_bytes": pass_bytes,
            "pass_with_unembed_s": f32_pass + unembed, "pass_ratio": step / f32_pass,
            "pass_ratio_with_unembed": step / (f32_pass + unembed), "read_s": read,
            "read_ratio": step / read, "other_cpu_s": f.other_cpu_s, "load": os.getloadavg()[0]}


def child_zoom(T: int, options: bool = False) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from attnviz.engine import load_model
    from attnviz.engine.computing.longdoc import run_long
    from attnviz.ui.app import make_app
    from attnviz.ui.views.long_view import LongView
    from attnviz.ui.machinery.state import AppState

    from attnviz.ui.machinery.tuning import limit_blas_threads

    model = load_model(smollm2_path())
    ids = np.random.default_rng(T).integers(0, model.config.vocab_size, T)
    run = run_long(model, ids=ids)
    app = make_app()
    limit_blas_threads()  # the window's jobs run on one BLAS thread (app.assemble)
    state = AppState()
    state.set_model(model)
    state.set_layer(model.config.n_layer // 2)
    state.set_hide_first(options)  # --zoom-options: Hide first token and Value-weighted on
    state.set_value_weighted(options)
    view = LongView(state)
    view.resize(1200, 800)
    view.show()
    lg = state.long
    lg.set_run(run)
    app.processEvents()
    lp, layer = run.patterns, state.layer
    shown = lg.shown()  # the one display model, as the window's overview jobs ask it

    def new_images():
        t0 = time.perf_counter()
        pane = shown.cells(layer, lg.region, lg.pane_px, lg.reduce, [lg.head()])
        lg.set_images(pane=pane)
        view.pane.repaint()
        t1 = time.perf_counter()
        tiles = shown.cells(layer, lg.region, (lg.tile_px, lg.tile_px), lg.reduce)
        lg.set_images(tiles=tiles)
        view.tiles.repaint()
        return t1 - t0, time.perf_counter() - t1

    new_images()
    rng = np.random.default_rng(0)
    out = {"repaint": [], "pane": [], "tiles": []}
    with Foreign() as f:
        for notch in [1] * ZOOM_STEPS + [-1] * ZOOM_STEPS:
            r0, r1, c0, c1 = lg.region
            at = (r0 + rng.random() * (r1 - r0), c0 + rng.random() * (c1 - c0))
            at = (at[0], min(at[1], at[0]))  # a point of the causal pattern's lower half
            t0 = time.perf_counter()
            lg.zoom(notch, at)
            view.pane.repaint()  # the last image, moved and scaled to the new region
            out["repaint"].append(time.perf_counter() - t0)
            pane_s, tiles_s = new_images()
            out["pane"].append(pane_s)
            out["tiles"].append(tiles_s)
    res = {"T": T, "pane_px": list(lg.pane_px), "tile_px": lg.tile_px, "n_head": lp.n_head,
           "other_cpu_s": f.other_cpu_s, "load": os.getloadavg()[0], "options": options}
    for k, v in out.items():
        res[k + "_p50_ms"] = 1e3 * float(np.percentile(v, 50))
        res[k + "_p95_ms"] = 1e3 * float(np.percentile(v, 95))
    return res


def child_scores(T: int) -> dict:
    from threadpoolctl import threadpool_limits

    from attnviz.engine import load_model
    from attnviz.engine.analysing import heads as H
    from attnviz.engine.computing.longdoc import run_long

    threadpool_limits(limits=1, user_api="blas")  # the window's cap (ui/machinery/tuning.py)
    model = load_model(smollm2_path())
    ids = np.random.default_rng(T).integers(0, model.config.vocab_size, T)
    run = run_long(model, ids=ids)
    p = run.patterns
    args = (p.n_layer, p.n_head, ids, p.causal)
    one = lambda: H.score_blocks(((layer, a, rows) for layer in range(p.n_layer)  # noqa: E731
                                  for a, rows in p.blocks(layer)), *args)
    many = lambda: H.score_layers(p.blocks, *args, threads=os.cpu_count())  # noqa: E731
    times = {"one_thread": [], "every_core": []}
    results = {}
    with Foreign() as f:
        for _ in range(2):
            for name, fn in (("one_thread", one), ("every_core", many)):
                t0 = time.perf_counter()
                results[name] = fn()
                times[name].append(time.perf_counter() - t0)
    same = all(np.array_equal(results["one_thread"].scores[k], results["every_core"].scores[k])
               for k in H.SCORE_NAMES)
    best = {k: min(v) for k, v in times.items()}
    return {"T": T, **{f"{k}_s": v for k, v in best.items()}, "runs": times,
            "speedup": best["one_thread"] / best["every_core"], "same_scores": same,
            "cores": os.cpu_count(), "other_cpu_s": f.other_cpu_s, "load": os.getloadavg()[0]}


def spawn(kind: str, T: int) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, "--T", str(T)],
                          capture_output=True, text=True, timeout=3600, cwd=record.ROOT,
                          env=child_env())
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        raise RuntimeError(f"{kind} child failed: {proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def report(res: dict) -> None:
    peak = res["sgemm_flops"]
    print(f"sgemm peak {peak / 1e9:.1f} GFLOP/s (2048^3, best of 5); load average at start {res['load']:.1f}")
    print(f"{'T':>6} {'forward s':>10} {'GFLOP/s':>8} {'of peak':>8} {'peak RSS':>9} {'kept':>8} "
          f"{'overview':>9} {'other CPU s':>11}")
    for r in res["forward"]:
        rate = r["flops"] / r["wall_s"]
        print(f"{r['T']:>6} {r['wall_s']:>10.1f} {rate / 1e9:>8.1f} {rate / peak:>7.0%} "
              f"{r['hwm'] / 2**30:>7.2f} G {r['kept_bytes'] / 2**20:>6.0f} M {r['overview_512_s']:>8.2f}s "
              f"{r['other_cpu_s']:>11.1f}")
    print(f"{'T':>6} {'step ms':>8} {'tok/s':>7} {'pass ms':>8} {'ratio':>6} {'+unembed':>9} "
          f"{'ratio':>6} {'read ms':>8} {'ratio':>6} {'other CPU s':>11}   (pass: one float32 "
          "matrix-vector pass, a reference, not a floor; read: one thread's plain read of its bytes)")
    for r in res["generate"]:
        print(f"{r['T']:>6} {r['step_s'] * 1e3:>8.1f} {r['tokens_per_s']:>7.1f} {r['pass_s'] * 1e3:>8.1f} "
              f"{r['pass_ratio']:>5.2f}x {r['pass_with_unembed_s'] * 1e3:>9.1f} "
              f"{r['pass_ratio_with_unembed']:>5.2f}x {r['read_s'] * 1e3:>8.1f} {r['read_ratio']:>5.2f}x "
              f"{r['other_cpu_s']:>11.1f}")
    for r in res.get("zoom", []):
        print(f"zoom{' (Hide first token, Value-weighted)' if r.get('options') else ''} at T = {r['T']:,} (pane {r['pane_px'][1]}x{r['pane_px'][0]} px, {r['n_head']} tiles of "
              f"{r['tile_px']} px), ms p50 / p95: repaint with the last image {r['repaint_p50_ms']:.1f} / "
              f"{r['repaint_p95_ms']:.1f}; new pane {r['pane_p50_ms']:.0f} / {r['pane_p95_ms']:.0f}; new tiles "
              f"{r['tiles_p50_ms']:.0f} / {r['tiles_p95_ms']:.0f}; other CPU {r['other_cpu_s']:.1f} s")
    for r in res.get("scores", []):
        print(f"head scores of a long text at T = {r['T']:,}: one thread {r['one_thread_s']:.1f} s, the layers "
              f"over {r['cores']} cores {r['every_core_s']:.1f} s ({r['speedup']:.2f}x; best of 2 each, in "
              f"turns: {', '.join(f'{a:.1f}' for a in r['runs']['one_thread'])} against "
              f"{', '.join(f'{a:.1f}' for a in r['runs']['every_core'])}); the same scores: {r['same_scores']}; "
              f"other CPU {r['other_cpu_s']:.1f} s")
    print("goals: >= 50 % of the sgemm peak at T = 4,096; peak RSS <= 3 GiB at 8,192; a step <= 2x one "
          "float32 matrix-vector pass at T <= 512; overview repaint after a zoom at 8,192 p95 <= 50 ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--T", default="1024,4096,8192")
    ap.add_argument("--gen-T", default="64,512,2048")
    ap.add_argument("--zoom-T", default="8192")
    ap.add_argument("--zoom-options", action="store_true",
                    help="also the zoom with Hide first token and Value-weighted on")
    ap.add_argument("--scores-T", default="2048", help="T of the long-text head scores (empty: none)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.child:
        fn = {"forward": child_forward, "generate": child_generate, "zoom": child_zoom,
              "zoom-options": lambda T: child_zoom(T, options=True), "scores": child_scores}[args.child]
        print(json.dumps(fn(int(args.T))))
        return 0
    res = {"load": os.getloadavg()[0], "sgemm_flops": sgemm_peak(), "forward": [], "generate": [], "zoom": [],
           "scores": []}
    for T in (int(t) for t in args.T.split(",") if t):
        res["forward"].append(spawn("forward", T))
        print(res["forward"][-1], file=sys.stderr, flush=True)
    for T in (int(t) for t in args.gen_T.split(",") if t):
        res["generate"].append(spawn("generate", T))
        print(res["generate"][-1], file=sys.stderr, flush=True)
    for T in (int(t) for t in args.zoom_T.split(",") if t):
        for kind in ("zoom", "zoom-options") if args.zoom_options else ("zoom",):
            res["zoom"].append(spawn(kind, T))
            print(res["zoom"][-1], file=sys.stderr, flush=True)
    for T in (int(t) for t in args.scores_T.split(",") if t):
        res["scores"].append(spawn("scores", T))
        print(res["scores"][-1], file=sys.stderr, flush=True)
    print(json.dumps(res, indent=1)) if args.json else report(res)
    record.write("longdoc", figures(res))
    return 0


def figures(res: dict) -> list[dict]:
    """The goals' figures: share of the sgemm peak, peak RSS, a generated step against one float32
    matrix-vector pass over the model's layer matrices without the unembedding,
    the new pane after a zoom; and the long head scores' speed-up."""
    peak, out = res["sgemm_flops"], []
    for r in res["forward"]:
        out.append(record.figure(
            f"long forward at T = {r['T']:,}, share of the sgemm peak", 100 * r["flops"] / r["wall_s"] / peak,
            "%", goal=50.0 if r["T"] == 4096 else None, goal_is="min", headline=r["T"] == 4096,
            note=f"{r['wall_s']:.1f} s; peak {peak / 1e9:.0f} GFLOP/s measured in the same run"))
        out.append(record.figure(
            f"long forward at T = {r['T']:,}, peak RSS", r["hwm"] / 2 ** 30, "GiB",
            goal=3.0 if r["T"] == 8192 else None, headline=r["T"] == 8192, note="whole process"))
    for r in res["generate"]:
        out.append(record.figure(
            f"a generated step at T = {r['T']:,}, {STEP_AGAINST}", r["pass_ratio"],
            "x", goal=GOALS["pass_ratio_512"] if r["T"] <= 512 else None, headline=r["T"] == 512,
            note=f"median of 16 greedy steps, {r['step_s'] * 1e3:.1f} ms a step; the pass "
                 f"{r['pass_s'] * 1e3:.1f} ms; one thread's plain read of the same "
                 f"{r['pass_bytes'] / 2 ** 20:.0f} MiB (their read floor on one thread; the step "
                 f"and the pass run on BLAS's default threads) {r['read_s'] * 1e3:.1f} ms, the step "
                 f"{r['read_ratio']:.2f}x that; measured in the same run"))
    for r in res["zoom"]:
        opts = ", Hide first token and Value-weighted" if r.get("options") else ""
        out.append(record.figure(
            f"long view at T = {r['T']:,}: the new pane after a zoom{opts}, p95", r["pane_p95_ms"], "ms",
            goal=50.0, headline=not opts, note=f"p50 {r['pane_p50_ms']:.0f} ms"))
    for r in res["scores"]:
        out.append(record.figure(
            f"a long text's head scores at T = {r['T']:,}, every core against one thread",
            r["speedup"], "x", note=f"{r['every_core_s']:.1f} s against {r['one_thread_s']:.1f} s, "
            f"best of 2 each in turns"))
    return out


if __name__ == "__main__":
    sys.exit(main())
