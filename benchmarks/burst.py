"""Fast typing (not a test): words typed with keys closer together than a run lasts, in the real
window offscreen. Each word is typed key by key `--gap` ms apart without waiting for results, then
the window is left until the word's result is painted; the figure is the time from the word's last
key to that paint. Before each run of a keystroke's text, the runs still going for older keystrokes
are stale: their results would be dropped. With the stop (the app: RunRequest(stop=...) asks before
each layer whether its keystroke is still the newest), such a run stops at its next layer; the
reference, timed in turns in the same process, is the same window with Model.run ignoring `stop`,
so a stale run goes through every layer before the newest keystroke's run can start. Before the
timed windows, one window types the sentence's first words untimed (WARM_UP): the process's first
runs load the kernels, and that would fall on the first word of whichever variant goes first.

    .venv/bin/python -m benchmarks.burst [--model SmolLM2-135M-Instruct] [--layer 29] [--gap 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.scratch import scratch_settings
from benchmarks.typing_latency import quiet_qt

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SENTENCE = ("The keys to the cabinet that my grandmother left us are on the kitchen table, next to "
            "the old radio.")
# typed, untimed, in a window before the timed ones: the process's first runs load the kernels
WARM_UP = " ".join(SENTENCE.split(" ")[:4])


def _spin(app, seconds: float, until=None) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and not (until is not None and until()):
        app.processEvents()
        time.sleep(0.0005)


def counting_run(real_run, counts: dict, with_stop: bool, errors: list):
    """Model.run for the benchmark's window: counts the runs (counts["runs"]) and those stopped
    early (counts["stopped"], Cancelled); with_stop False runs each request without its stop (the
    reference: a stale run goes through every layer). Any other error is kept in `errors` (the
    window only logs it) before it goes on."""
    from dataclasses import replace

    from attnviz.engine.computing.request import PLAIN
    from attnviz.engine.errors import Cancelled

    def run(self, *a, request=PLAIN, **k):
        counts["runs"] += 1
        try:
            return real_run(self, *a, request=request if with_stop else replace(request, stop=None), **k)
        except Cancelled:
            counts["stopped"] += 1
            raise
        except Exception as e:
            errors.append(e)
            raise
    return run


def burst(model: str, layer: int | None, gap_s: float, with_stop: bool, sentence: str = SENTENCE) -> dict:
    """Type `sentence` a word at a time, keys gap_s apart: per word, last key -> its result painted;
    and the runs that started, stopped early (Cancelled) or went through every layer."""
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtTest import QTest

    from attnviz.engine.computing import model as engine_model
    from attnviz.ui.app import create_window, make_app

    app = make_app()
    w = create_window(model=model, text="", settings=scratch_settings("settings.ini"), panels=("calc", "roles"))
    w.resize(1400, 860)
    w.show()
    st = w.state
    _spin(app, 60, until=lambda: w.panels_ready)
    _spin(app, 1.0)
    if layer is not None:
        st.set_layer(layer)
    counts, errors = {"runs": 0, "stopped": 0}, []
    real_run = engine_model.Model.run
    run = counting_run(real_run, counts, with_stop, errors)
    painted = {}

    class Watch(QObject):
        def eventFilter(self, obj, ev):
            drawn = w.grid.drawn
            if ev.type() == QEvent.Type.Paint and drawn is not None and drawn is st.result:
                painted.setdefault(drawn.text, time.perf_counter())
            return False
    watch = Watch()
    w.grid.gw.viewport().installEventFilter(watch)
    latencies = []
    engine_model.Model.run = run
    try:
        w.text_box.setFocus()
        for word in sentence.split(" "):
            keys = (" " if w.text_box.toPlainText() else "") + word
            for ch in keys:
                t_key = time.perf_counter()
                QTest.keyClick(w.text_box, ch)
                _spin(app, gap_s - (time.perf_counter() - t_key))
            text = w.text_box.toPlainText()
            _spin(app, 10, until=lambda: text in painted)
            if text not in painted:  # a run failed (the window only logs it) or took over 10 s
                cause = errors[0] if errors else None
                raise RuntimeError(f"{text!r} not painted within 10 s (a run's error: {cause!r})") from cause
            latencies.append(painted[text] - t_key)
            _spin(app, 0.3)  # a pause between words: every run done
    finally:
        engine_model.Model.run = real_run
        w.close()
    return {"latencies": latencies, **counts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--layer", type=int, default=None, help="the layer on screen (default: the last)")
    ap.add_argument("--gap", type=float, default=20, help="ms between keys within a word")
    ap.add_argument("--rounds", type=int, default=3, help="sentences typed per variant, in turns")
    args = ap.parse_args()
    quiet_qt()
    from attnviz.engine import load_model

    n_layer = load_model(args.model).config.n_layer
    layer = n_layer - 1 if args.layer is None else args.layer
    burst(args.model, layer, args.gap / 1000, True, sentence=WARM_UP)
    out = {True: [], False: []}
    for r in range(args.rounds):
        for with_stop in ((True, False) if r % 2 == 0 else (False, True)):
            out[with_stop].append(burst(args.model, layer, args.gap / 1000, with_stop))
    print(f"{args.model}, layer {layer} of {n_layer} on screen, keys {args.gap:.0f} ms apart within "
          f"a word, {args.rounds} sentences per variant in turns after {WARM_UP!r} untimed")
    rows = {}
    for with_stop, name in ((True, "stale runs stop (the app)"), (False, "stale runs finish (reference)")):
        lat = sorted(x for res in out[with_stop] for x in res["latencies"])
        runs = sum(res["runs"] for res in out[with_stop])
        stopped = sum(res["stopped"] for res in out[with_stop])
        p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
        rows[with_stop] = (statistics.median(lat), p95)
        print(f"  {name:<31} word's last key -> its result painted: p50 {rows[with_stop][0] * 1e3:6.1f} ms, "
              f"p95 {p95 * 1e3:6.1f} ms ({len(lat)} words); runs {runs}, stopped early {stopped}")
    print(f"  ratio p50 {rows[True][0] / rows[False][0]:.2f}x, p95 {rows[True][1] / rows[False][1]:.2f}x "
          "the reference (below 1: sooner)")
    from benchmarks import record

    note = (f"layer {layer} on screen, keys {args.gap:.0f} ms apart, {args.rounds} sentences per variant in turns "
            "after a warm-up")
    record.write("burst", [
        record.figure(f"fast typing, {args.model}: a word's last key to its result painted, p95",
                      rows[True][1] * 1e3, "ms", note=note),
        record.figure("fast typing: p95 with stale runs stopping / finishing", rows[True][1] / rows[False][1],
                      "x", headline=True, note=note)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
