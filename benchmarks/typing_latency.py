"""Typing benchmark (not a test): drive the real window offscreen, type a sentence key by key, and
report per keystroke the time until the grid shows that text's result, the longest main-thread
stall, and cold start to first heatmaps.

    .venv/bin/python -m benchmarks.typing_latency [--repeat N]
    .venv/bin/python -m benchmarks.typing_latency --model PATH.gguf --modes layer --sentence all --json

--effects both: type each view twice in one run, without and with the What heads do panel shown
(the prediction, the logit lens and DLA follow every result; the sentence is typed the same way), and
print the difference (goal: <= 10 ms added to keystroke -> repaint p95, no stall over 16 ms).
Before typing with the panel, one word is typed and taken back so the first analysis (it dequantises
the unembedding, once per model) is not counted as a keystroke's.
--model: the model the window opens (name or path; default all-MiniLM-L6-v2), for typing and cold
start alike. --kept-runs 0: the KV cache keeps the last run only (the reference for its earlier
runs, timed in turns with the default). --modes: the views to type in. --sentence: type this
SENTENCES entry in every view (default: each view's own). --json: also print the rows and
cold-start runs as one JSON line.

Per keystroke: the key event is sent with QTest, then the event loop runs until the state holds the
result for exactly the typed text and the grid's viewport has finished painting it (an event filter
sees the paint; the time is taken right after it). The next key follows 40 ms later (idle event
loop). Also per keystroke, the first paint of the typed text: on a causal model with one layer
shown the grid paints the run's first layers before the run ends (--layer: the layer on screen);
otherwise it is the result's paint. Stall: the longest gap between ticks of a 1 ms precise timer
on the main thread, over the whole typing run, minus 1 ms. The sentence is typed twice per run: the
latencies come from the pass without that timer (its Python slot wakes the main thread 1,000 times
a second and takes the GIL from the engine's thread: the benchmark's load, not the app's), the
stall from the pass with it, whose p50 / p95 are printed too ("with probe"); the two passes take
turns being first over the runs. Before typing, one word is typed into
the empty window and taken back: a window's first heatmaps build the grid's titles and the colour
bar's ticks, once per window; that stall is printed apart. Each pass starts with the model's KV
cache cleared: it keeps a few earlier texts' runs, and the warm-up word's or the other pass's
would give some keys their rows for free.
On a causal model the keys are also reported by what their run computed (by_rows): the first
key, the keys whose run computed nothing (a run the KV cache kept held every token), one new row
(a kept run held the rest), or two or more (the tokenizer re-split the last tokens and no kept run
held the new prefix): a p95 over 100 keys falls among the few slowest, which are often these.
Also per key of the probe-free pass, where its time went, in stages (STAGES: the key event to the
run submitted, the job's queue, tokenising, the engine, the job's wrapper, the hand-off to the main
thread, the result's slots, the wait for the paint, the grid's paint): their p50s and p95s are
printed, and each stage's p50 is recorded as a figure (one layer shown, without What heads do).
ATTNVIZ_BENCH_PROFILE=FILE writes a cProfile of the main thread over the probe-free pass to FILE.
Cold start: a fresh Python process, from just before it is spawned to the first painted heatmaps.
Settings go to a temporary file, never the user's."""

import argparse
import atexit
import os
import subprocess
import sys
import time

from benchmarks.children import child_env
from benchmarks.scratch import scratch_settings
from benchmarks.typing_window import STAGES, run_typing

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

GOALS = {"layer": (32, 0.050), "all": (64, 0.100)}  # mode: (max tokens, p95 goal in s)
# keystroke -> repaint p95 goals for one layer on the bundled models: one frame each (SmolLM2's since
# its keystroke runs on the quantized kernels)
LAYER_GOALS = {"all-MiniLM-L6-v2": 0.016, "SmolLM2-135M-Instruct": 0.016}


def layer_goal(model: str) -> float:
    """The one-layer p95 goal of the model opened: a bundled model's own, whether it was named or
    given as its file (SmolLM2's GGUF path, or an alias such as 'smollm2'), else the view's."""
    from attnviz.engine.reading.registry import SMOLLM2_ALIASES, SMOLLM2_MODEL

    name = os.path.basename(str(model).rstrip("/"))
    if name.lower() in {a.lower() for a in (*SMOLLM2_ALIASES, SMOLLM2_MODEL)}:
        name = SMOLLM2_MODEL
    return LAYER_GOALS.get(name, GOALS["layer"][1])
SENTENCES = {
    # about 30 MiniLM tokens with [CLS] and [SEP]
    "layer": "The keys to the cabinet that my grandmother left us are on the kitchen table, "
             "next to the old radio.",
    # about 60 tokens
    "all": "When Mary and John went to the market on Saturday morning, John bought fresh bread and "
           "cheese while Mary looked for apples, and later they walked home along the river, talking "
           "about the old bridge that the town plans to repair next summer.",
}


def quiet_qt() -> None:
    """Drop the offscreen platform's "This plugin does not support propagateSizeHints()", which it
    prints at every window resize (dozens of lines a run, burying the table); every other Qt message
    still goes to stderr."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(_mode, _context, message):
        if "propagateSizeHints" not in message:
            sys.stderr.write(message + "\n")

    qInstallMessageHandler(handler)
    # Qt still talks while the interpreter shuts down: a Python handler then would crash it
    atexit.register(qInstallMessageHandler, None)


def _group_line(group: str, n: int, p50: float, p95: float, top: float) -> str:
    """One by_rows group as printed: 'first: 1 key 26.0 ms', '1 row: 95 keys, p50 .., p95 .., max ..'."""
    if n == 0:
        return f"{group}: no keys"
    if n == 1:
        return f"{group}: 1 key {top * 1e3:.1f} ms"
    return f"{group}: {n} keys, p50 {p50 * 1e3:.1f}, p95 {p95 * 1e3:.1f}, max {top * 1e3:.1f} ms"


def stages_line(p50s: dict) -> str:
    """The stages' p50s and p95s as printed: 'where a keystroke's time goes, p50/p95 ms over 100
    keys ...: key 0.70/0.95, queue 0.20/0.41, ...'."""
    parts = ", ".join(f"{k} {p50s[k] * 1e3:.2f}/{p50s[k + '_p95'] * 1e3:.2f}" for k, _ in STAGES)
    return (f"where a keystroke's time goes, p50/p95 ms over {p50s['keys']} keys of the probe-free "
            f"pass (stages in order; p50s do not add up to the keystroke's p50): {parts}; "
            f"{p50s['previewed']} keys' runs handed the main thread a preview of their first layers "
            "(its slots, before the result's, fall in the hand-off)")


def cold_child(t0: float, model: str | None = None) -> None:
    """Runs in a fresh process: time from the parent's spawn to the first painted heatmaps."""
    t_start = time.time()
    from PySide6.QtCore import QTimer

    from attnviz.ui.app import create_window, make_app

    app = make_app()
    t_imported = time.time()
    w = create_window(model, settings=scratch_settings("settings.ini"))  # what run_app() does
    w.show()
    app.processEvents()
    t_shown = time.time()
    while w.grid.update_count == 0:
        app.processEvents()
        time.sleep(0.001)
    w.grid.gw.viewport().repaint()
    t_painted = time.time()
    print(f"{t_painted - t0:.3f} {t_start - t0:.3f} {t_imported - t0:.3f} {t_shown - t0:.3f}", flush=True)
    # quit the way the app does (close, then leave a running event loop): a window closed with no
    # event loop after it left Qt objects to the interpreter's shutdown, which crashed (SIGSEGV) there
    QTimer.singleShot(0, w.close)
    QTimer.singleShot(50, app.quit)
    app.exec()


def cold_start(runs: int, model: str | None = None) -> list[list[float]]:
    out = []
    for _ in range(runs):
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--cold-child", repr(t0)]
                              + (["--model", model] if model else []),
                              capture_output=True, text=True, timeout=120, env=child_env())
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if proc.returncode or not line:
            raise RuntimeError(f"cold-start child failed: {proc.stderr[-2000:]}")
        out.append([float(x) for x in line.split()])
    return out


def products_floor(model: str, max_t: int):
    """(seconds, rows, MB, matrices): the median time of one product of a keystroke's rows with
    each of the model's weight matrices (a causal model's cached keystroke computes 1 new row, an
    encoder's all T), on every core as the window's runs (ui/machinery/tuning.wide_blas): what a
    keystroke's run cannot go below with these weights and this BLAS. None if it cannot load."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from attnviz.engine import load_model
    from attnviz.engine.parallel import cores

    try:
        m = load_model(model)
    except Exception:  # noqa: BLE001 - a benchmark's reference line, not its result
        return None
    layers = m.weights.layers  # every layer's four products, but the last layer's QKV only: a
    # run for the patterns stops at the last layer's pattern (trace.LayerCache: "pattern")
    mats = [w for layer in layers[:-1] for w in (layer.w_qkv, layer.w_o, layer.w_in, layer.w_out)
            if w is not None] + [layers[-1].w_qkv]
    n_rows = 1 if m.config.causal else max_t
    rng = np.random.default_rng(1)
    xs = {a.shape[0]: rng.standard_normal((n_rows, a.shape[0]), dtype=np.float32) for a in mats}
    times = []
    with threadpool_limits(limits=cores(), user_api="blas"):
        for _ in range(11):
            t0 = time.perf_counter()
            for a in mats:
                xs[a.shape[0]] @ a
            times.append(time.perf_counter() - t0)
    return sorted(times)[5], n_rows, sum(a.nbytes for a in mats) / 1e6, len(mats)


def model_label(model: str) -> str:
    low = model.lower()
    if "minilm" in low:
        return "MiniLM"
    if "smollm2" in low:
        return "SmolLM2"
    return os.path.basename(model.rstrip("/"))


def figures(rows: list[dict], cold: list, model: str, record) -> list[dict]:
    """Per view: the keystroke's p95 (the worst run's: a goal is met where every run met it), the
    first paint's for a previewed layer, and the stall; the cold start's best run."""
    label, out, groups = model_label(model), [], {}
    for r in rows:
        groups.setdefault((r["mode"], r["effects"], r.get("layer")), []).append(r)
    for (mode, effects, layer), runs in groups.items():
        goal = layer_goal(model) if mode == "layer" else GOALS[mode][1]
        view = (f"layer {layer} on screen" if mode == "layer" and layer is not None else
                "one layer" if mode == "layer" else "all layers") + (
            ", What heads do shown" if effects else "")
        note = f"the worst of {len(runs)} run(s)"
        p95s = [r["p95"] * 1e3 for r in runs]
        out.append(record.figure(f"typing, {label}, {view}: keystroke to the whole result painted, p95",
                                 max(p95s), "ms", runs=p95s, goal=goal * 1e3, note=note,
                                 headline=mode == "layer" and not effects))
        firsts = [r["first_p95"] * 1e3 for r in runs if r.get("previews")]
        if firsts:
            out.append(record.figure(f"typing, {label}, {view}: keystroke to the first paint, p95",
                                     max(firsts), "ms", runs=firsts, goal=goal * 1e3, note=note))
        if mode == "layer" and not effects:  # where a keystroke's time goes: each stage's p50
            for stage, what in STAGES:
                vals = [r["stages"][stage] * 1e3 for r in runs if r["stages"]["keys"]]
                if vals:
                    out.append(record.figure(
                        f"typing, {label}, {view}: stage '{stage}', p50", min(vals), "ms", runs=vals,
                        note=f"{what}; the fastest of {len(vals)} run(s), per-key p50 over the "
                             "probe-free pass"))
        stalls = [r["stall"] * 1e3 for r in runs]
        out.append(record.figure(f"typing, {label}, {view}: main-thread stall", max(stalls), "ms",
                                 runs=stalls, goal=16.0, note=note, headline=mode == "layer" and not effects))
    if cold:
        starts = [c[0] for c in cold]
        out.append(record.figure(f"typing, {label}: cold start to the first painted heatmaps",
                                 min(starts), "s", runs=starts, goal=1.5, note="the best run"))
    return out


def report(rows: list[dict], cold: list, model: str, panels: tuple[str, ...], effects: str) -> None:
    """The run's tables as printed: per view the keystroke's latencies against its goal, where its
    time goes and by what each key's run computed; the cold start; the Anatomy panel's and What
    heads do's costs where they were shown; the products a keystroke's run cannot go below."""
    from attnviz.engine.computing import trace
    from attnviz.engine.reading.registry import DEFAULT_MODEL

    model_desc = "all-MiniLM-L6-v2 (6 layers x 12 heads)" if model == DEFAULT_MODEL else model
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, model {model_desc}, "
          f"side panels: {', '.join(panels) or 'none'}, earlier runs the KV cache keeps: "
          f"{trace.EARLIER_RUNS}")
    print()
    print(f"{'view':<22}{'keys':>5}{'max T':>7}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}"
          f"{'engine p50':>12}{'stall ms':>10}{'with probe':>12}{'goal p95':>10}   first paint of the text: p50, p95, "
          "max ms (keys whose run's first layers were painted before its result)")
    for r in rows:
        max_t, goal = GOALS[r["mode"]]
        if r["mode"] == "layer":
            goal = layer_goal(model)
        name = ("one layer" if r["mode"] == "layer" else "all layers") + (
            " + what heads do" if r["effects"] else "")
        print(f"{name:<22}{r['keys']:>5}{r['max_T']:>7}{r['p50'] * 1e3:>9.1f}{r['p95'] * 1e3:>9.1f}"
              f"{r['max'] * 1e3:>9.1f}{r['compute_p50'] * 1e3:>10.1f}ms{r['stall'] * 1e3:>10.1f}"
              f"{'%.1f/%.1f' % (r['probed_p50'] * 1e3, r['probed_p95'] * 1e3):>12}"
              f"{'<= %d' % (goal * 1e3):>10}   {r['first_p50'] * 1e3:.1f}, {r['first_p95'] * 1e3:.1f}, "
              f"{r['first_max'] * 1e3:.1f} ({r['previews']} of {r['keys']} keys)")
    print()
    print("p50 / p95 / max: keystroke -> the grid painted with the typed text's result (every view has "
          "it), typed without the stall probe; with probe: p50/p95 of the same keys typed again with the "
          "1 ms stall timer running (the stall pass); first paint: keystroke -> the grid first painted the typed text, from a preview of "
          "its run's first layers (the layer on screen and those before it, handed over before the "
          "layers after it are computed: causal models, one layer shown) or from its result")
    for r in rows:
        if r["mode"] == "layer":
            goal = layer_goal(model)
            print(f"goal keystroke -> repaint p95 <= {goal * 1e3:.0f} ms, layer {r['layer']} on screen: "
                  f"the grid's first paint of the text {r['first_p95'] * 1e3:.1f} ms "
                  f"{'met' if r['first_p95'] <= goal else 'NOT met'}; its whole result "
                  f"{r['p95'] * 1e3:.1f} ms {'met' if r['p95'] <= goal else 'NOT met'}; stall "
                  f"{r['stall'] * 1e3:.1f} ms {'met' if r['stall'] <= 0.016 else 'NOT met'} (<= 16); "
                  f"the window's first heatmaps (a word typed into it empty, before the typing "
                  f"timed): stall {r['first_heatmaps_stall'] * 1e3:.1f} ms, once per window")
            print("  " + stages_line(r["stages"]))
            if r["by_rows"]:
                print("  the same keys by what their run computed: "
                      + "; ".join(_group_line(g, *v) for g, v in r["by_rows"].items())
                      + " (first: typed into the empty box; 0 rows: a run the KV cache kept held "
                      "every token; 1 row: a kept run held every token before the new one; 2+ rows: "
                      "the tokenizer re-split the last tokens and no kept run held the new prefix)")
    print()
    if cold:  # --cold-runs 0 skips it
        best = min(c[0] for c in cold)
        print("cold start to first painted heatmaps (s), per run: "
              + ", ".join(f"{c[0]:.2f} (python up {c[1]:.2f}, QtWidgets up {c[2]:.2f}, "
                          f"window shown {c[3]:.2f})" for c in cold)
              + f"; best {best:.2f}, goal <= 1.5")
    for r in rows:
        if r["anatomy"] == "shown":
            ms = {k: v * 1e3 for k, v in r.items() if isinstance(v, float)}
            print(f"anatomy shown ({r['mode']}), {r['anatomy_draws']} results: the panel's rebuild + "
                  f"repaint per result p50 {ms['anatomy_draw_p50']:.1f} ms, p95 "
                  f"{ms['anatomy_draw_p95']:.1f} ms (CPU {ms['anatomy_draw_cpu_p50']:.1f} / "
                  f"{ms['anatomy_draw_cpu_p95']:.1f}; goal <= 20 extra)")
            print(f"  {r['switches']} head / layer switches: to the anatomy repainted p50 "
                  f"{ms['switch_p50']:.1f} ms, p95 {ms['switch_p95']:.1f} ms, max {ms['switch_max']:.1f}"
                  f" (goal p95 <= 50); the panel's part p50 {ms['switch_panel_p50']:.1f}, p95 "
                  f"{ms['switch_panel_p95']:.1f} (CPU {ms['switch_panel_cpu_p50']:.1f} / "
                  f"{ms['switch_panel_cpu_p95']:.1f})")
    if effects == "both":
        for off, on in zip(rows[::2], rows[1::2]):
            print(f"what heads do shown ({on['mode']}): keystroke -> repaint p95 {on['p95'] * 1e3:.1f} ms "
                  f"against {off['p95'] * 1e3:.1f} without, added {(on['p95'] - off['p95']) * 1e3:+.1f} ms "
                  f"(goal <= 10); p50 added {(on['p50'] - off['p50']) * 1e3:+.1f} ms; stall "
                  f"{on['stall'] * 1e3:.1f} ms (goal <= 16); {on['analyses']} analyses shown for "
                  f"{on['keys']} keys, the analysis job p50 {on['analysis_p50'] * 1e3:.1f} ms, "
                  f"p95 {on['analysis_p95'] * 1e3:.1f} ms (on the pool, not the main thread)")
    floor = products_floor(model, max(r["max_T"] for r in rows)) if rows else None
    if floor is not None:
        floor_s, n_rows, mb, n_mats = floor
        for r in rows:
            print(f"reference ({r['mode']}): the products alone, one {n_rows}-row product with each of "
                  f"the {n_mats} weight matrices a run reads ({mb:.0f} MB of float32) on every core, as a "
                  f"keystroke's run makes them, timed in this run: {floor_s * 1e3:.1f} ms; the run at "
                  f"the sentence's end p50 {r['compute_end_p50'] * 1e3:.1f} ms "
                  f"({r['compute_end_p50'] / floor_s:.2f}x those products); the rest of a keystroke "
                  f"(key, job start, the result's slots, paint) p50 {r['rest_p50'] * 1e3:.1f} ms, p95 "
                  f"{r['rest_p95'] * 1e3:.1f} ms: the products plus the rest's p50 "
                  f"{(floor_s + r['rest_p50']) * 1e3:.1f} ms")
    print("goals: stall <= 16 ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="typing runs per mode")
    ap.add_argument("--cold-runs", type=int, default=3)
    ap.add_argument("--panels", default="calc,roles",
                    help="side panels in the window (comma list; 'none' measures the grid path alone)")
    ap.add_argument("--model", default=None, help="model to open (default: all-MiniLM-L6-v2)")
    ap.add_argument("--modes", default="layer,all", help="views to type in (comma list: layer, all)")
    ap.add_argument("--layer", type=int, default=None,
                    help="the layer on screen while typing (default: the window's, layer 0)")
    ap.add_argument("--sentence", choices=sorted(SENTENCES), default=None,
                    help="type this sentence in every view (default: each view's own)")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    ap.add_argument("--anatomy", choices=("off", "none", "hidden", "shown"), default="off",
                    help="none: a head focused, no Anatomy panel (the baseline for the next two); "
                         "hidden / shown: the same with the Anatomy panel, its tab behind Focus "
                         "head or shown while typing (shown: also time head / layer switches; "
                         "goals <= 20 ms extra per result, <= 50 ms p95 per switch)")
    ap.add_argument("--effects", choices=("off", "both"), default="off",
                    help="both: each view typed without and then with the What heads do panel shown")
    ap.add_argument("--kept-runs", type=int, default=None,
                    help="earlier texts' runs the KV cache keeps (default: the engine's, "
                         "trace.EARLIER_RUNS; 0: the last run only, the reference for them)")
    ap.add_argument("--cold-child", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    quiet_qt()
    if args.kept_runs is not None:
        from attnviz.engine.computing import trace

        trace.EARLIER_RUNS = max(0, args.kept_runs)
    if args.cold_child is not None:
        cold_child(args.cold_child, args.model)
        return 0

    # the window's own first-start model is SmolLM2 (registry.WINDOW_MODEL): name the default here,
    # or a run "on MiniLM" measures SmolLM2
    from attnviz.engine.reading.registry import DEFAULT_MODEL

    args.model = args.model or DEFAULT_MODEL
    cold = cold_start(args.cold_runs, args.model)
    panels = tuple(p for p in args.panels.split(",") if p and p != "none")
    if args.anatomy in ("hidden", "shown") and "anatomy" not in panels:
        panels += ("anatomy",)
    modes = [m for m in args.modes.split(",") if m]
    rows = [run_typing(mode, SENTENCES[args.sentence or mode],
                       panels + (("predict",) if effects else ()), args.model, args.anatomy, effects,
                       args.layer, probe_first=bool(i % 2))
            for mode in modes for i in range(args.repeat)
            for effects in ((False, True) if args.effects == "both" else (False,))]
    report(rows, cold, args.model, panels, args.effects)
    from benchmarks import record

    record.write("typing_latency", figures(rows, cold, args.model, record))
    if args.json:
        import json

        print(json.dumps({"model": args.model, "cpus": os.cpu_count(),
                          "panels": list(panels), "sentence": args.sentence, "rows": rows,
                          "cold": cold}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
