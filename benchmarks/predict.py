"""Prediction, DLA, the logit lens, ablation and the ablation scan on SmolLM2-135M-Instruct: what
they cost, side by side in one run (not a test: run it, read the table).

    .venv/bin/python -m benchmarks.predict [--blas-threads 1] [--skip-typing] [--skip-scan]

1. Per keystroke (typing a sentence token by token, T = 1..64, each run reusing the KV cache): the
   engine's plain run (patterns only) against the run the window makes while What heads do is
   shown (it also keeps z and the residual stream); then the analysis job (prediction, lens and DLA
   at the last token: one pass over the unembedding in blocks) and the longest step between its
   stop checks, which is what a keystroke arriving during the analysis waits. The two runs use
   separate model objects (each its own cache) and alternate keystroke by keystroke. The window's
   keystroke -> repaint with the panel shown and hidden: benchmarks/typing_latency.py --effects both.
2. One zero-ablation at T = 64 (a head in layer 0, the worst case, and one in layer 15), resumed
   from the ablated layer, against a full forward of the same ids.
3. The full scan of the 270 heads on the repeated-random probe (--loss repeat), on one thread and
   on every core (a layer's heads on N threads, one BLAS thread each; the window's scan uses every
   core but one), with the time to the first progress report and where the time goes (resumed
   forward passes, unembedding).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from attnviz.engine import load_model
from attnviz.engine.analysing import ablation as A, effects as E, predict as P
from attnviz.engine.computing.families import forward
from attnviz.engine.analysing.probes import probe_ids
from benchmarks import record

MODEL = "SmolLM2-135M-Instruct"
SENTENCE = ("When Mary and John went to the market on Saturday morning, John bought fresh bread and "
            "cheese while Mary looked for apples, and later they walked home along the river, talking "
            "about the old bridge that the town plans to repair next summer.")
TEXT = SENTENCE + " " + SENTENCE  # 64 SmolLM2 tokens and more: cut to 64


def pct(xs, p):
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def keystrokes(args) -> list[dict]:
    plain, live = load_model(MODEL), load_model(MODEL)
    live.lm_head()
    ids = plain.tokenizer.encode(TEXT).ids[:64]
    t_plain, t_live, t_analysis, waits = [], [], [], []
    for rep in range(args.repeat):
        plain.clear_cache()
        live.clear_cache()
        for n in range(1, len(ids) + 1):
            t0 = time.perf_counter()
            plain.run(ids=ids[:n])
            t1 = time.perf_counter()
            run = E.window_run(live, "", ids=ids[:n])  # the run the window makes for these views
            t2 = time.perf_counter()
            asked = [t2]

            def stop():
                asked.append(time.perf_counter())
                return False
            E.analyse(live, run, stop=stop)  # prediction, lens and DLA, as the window's job
            t3 = time.perf_counter()
            asked.append(t3)
            t_plain.append(t1 - t0)
            t_live.append(t2 - t1)
            t_analysis.append(t3 - t2)
            waits.append(max(b - a for a, b in zip(asked, asked[1:])))
    added = [b - a for a, b in zip(t_plain, t_live)]
    print(f"1. per keystroke, T = 1..{len(ids)}, {args.repeat} x {len(ids)} keystrokes (ms)")
    print(f"   {'':<46}{'median':>8}{'p95':>8}{'max':>8}")
    rows = [("plain run (patterns only)", t_plain), ("run keeping z and resid (the window's)", t_live),
            ("added to the run (paired)", added),
            ("analysis job: prediction + lens + DLA", t_analysis),
            ("longest step between its stop checks", waits)]
    for label, xs in rows:
        print(f"   {label:<46}{pct(xs, 50):8.1f}{pct(xs, 95):8.1f}{pct(xs, 100):8.1f}")
    print("   The analysis runs on the runner's thread after results pause; a keystroke makes it "
          "stale and it stops at its next check, so a keystroke waits at most the longest step.")
    note = f"p95 over {args.repeat} x {len(ids)} keystrokes, T = 1..{len(ids)}"
    return [record.figure("the analysis job (prediction, lens, DLA) per keystroke, p95",
                          pct(t_analysis, 95), "ms", runs=[pct(t_analysis, 95)], note=note),
            record.figure("a keystroke's wait for a stale analysis (longest step between stop "
                          "checks), p95", pct(waits, 95), "ms", note=note)]


def one_ablation(args) -> list[dict]:
    model = load_model(MODEL)
    head = model.lm_head()
    cfg, w = model.config, model.weights
    ids = np.array(model.tokenizer.encode(TEXT).ids[:64])
    clean = forward(cfg, w, ids, P.prediction_trace())
    cases = {"full forward (z and resid kept)": lambda: forward(cfg, w, ids, P.prediction_trace())}
    for layer in (0, 15, 29):
        edits = A.head_edits(clean, [(layer, 4)])
        cases[f"ablate L{layer} H4, resumed"] = lambda e=edits: A.run_edited(model, clean, e)
    print(f"2. one zero-ablation at T = {len(ids)} (ms, {args.repeat * 3} runs each, interleaved)")
    times = {k: [] for k in cases}
    for _ in range(args.repeat * 3):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    for k, xs in times.items():
        print(f"   {k:<34}{pct(xs, 50):8.1f} median {min(xs) * 1e3:8.1f} min")
    pred = P.predict(head, A.run_edited(model, clean, A.head_edits(clean, [(15, 4)])))
    assert np.isfinite(pred.logprobs).all()
    return [record.figure(f"{k}, T = {len(ids)}", pct(xs, 50), "ms", runs=[x * 1e3 for x in xs],
                          note="median, the cases in turns") for k, xs in times.items()]


def scan(args) -> list[dict]:
    model = load_model(MODEL)
    head = model.lm_head()
    ids, _ = probe_ids(model)
    figures = []
    for threads in sorted({1, os.cpu_count() or 1}):
        first = []
        t0 = time.perf_counter()

        def progress(done, total):
            if done == 1:
                first.append(time.perf_counter() - t0)

        with threadpool_limits(limits=1, user_api="blas"):  # one BLAS thread per scan thread
            s = A.ablation_scan(model, head, ids, "repeat", progress=progress, threads=threads)
        total = time.perf_counter() - t0
        n = s.effect.size
        print(f"3. ablation scan, {n} heads, repeated-random probe T = {len(ids)} (loss repeat), "
              f"{threads} thread{'s' if threads > 1 else ''} (goal <= 30 s)")
        print(f"   total {total:.1f} s; first head done after {first[0]:.2f} s; resumed forward passes "
              f"{s.seconds['forward']:.1f} s, unembedding for the loss {s.seconds['unembedding']:.1f} s, "
              f"rest {total - s.seconds['forward'] - s.seconds['unembedding']:.1f} s")
        figures.append(record.figure(
            f"ablation scan of every head on the probe, {threads} thread{'s' * (threads > 1)}",
            total, "s", goal=30.0, headline=threads > 1,
            note=f"{n} heads, T = {len(ids)}, loss repeat; first head after {first[0]:.2f} s"))
    top = ", ".join(f"L{l} H{h} {e:+.2f}" for l, h, e in s.ranked()[:5])
    print(f"   baseline loss {s.baseline_loss:.3f} nats; largest effects: {top}")
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="cap BLAS threads (default 1, as the window's runner does)")
    ap.add_argument("--repeat", type=int, default=2, help="typing runs (default 2)")
    ap.add_argument("--skip-typing", action="store_true", help="leave out the keystroke timing")
    ap.add_argument("--skip-scan", action="store_true", help="leave out the 270-head scan")
    args = ap.parse_args()
    if args.blas_threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=args.blas_threads, user_api="blas")
    print(f"{MODEL}, BLAS threads {args.blas_threads or 'default'}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    figures = keystrokes(args) if not args.skip_typing else []
    figures += one_ablation(args)
    if not args.skip_scan:
        figures += scan(args)
    record.write("predict", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
