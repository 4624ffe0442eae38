"""Slow spots (not a test): three things a user waits for, each timed several times with its parts,
so it says where the time goes before anything is cut.

    .venv/bin/python -m benchmarks.slow_spots [--runs 3] [--only paragraph,probe,export] [--json]

- paragraph: a 400-word paragraph pasted into the window on SmolLM2 (offscreen, the window already
  showing a short sentence): from the paste to the grid painted with its heatmaps (goal <= 1.2 s).
  Parts: the engine's run (RunResult.compute_s), the wait for the pool and the main thread's share.
- probe: the agreement probe (60 template sentences) on SmolLM2, the engine call the roles panel's
  job makes (probes.score_probe; goal <= 5 s). Parts: the model (its items run together,
  Model.iter_many), the rest.
- export: `attnviz export --view anatomy` on SmolLM2 as a fresh process, as a user runs it (goal
  <= 1.5 s). Parts (the same steps in this process, the second time): open the model, run the
  sentence through layers 0..3 with their inputs (expanding those layers from the file), draw and
  write the PNG; and the command's own Python start-up
  and imports (`-X importtime` is the tool for those).

Run it under the shared lock (flock /tmp/heavy.lock ...) and report `uptime` with the figures: on
a loaded machine these are not the app's times."""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import record
from benchmarks.scratch import scratch_folder, scratch_settings

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

MODEL = "SmolLM2-135M-Instruct"
GOALS = {"paragraph": 1.2, "probe": 5.0, "export": 1.5}
WORDS = ("the river that runs past our town rises every spring when snow melts in the hills and "
         "farmers along its banks move their animals to higher fields while children watch boats "
         "carry timber down to the old mill where the miller has worked for forty years").split()


def paragraph(n_words: int = 400) -> str:
    """A 400-word paragraph of plain sentences (about 410 SmolLM2 tokens), the same every run."""
    words = [WORDS[i % len(WORDS)] for i in range(n_words)]
    sentences = [" ".join(words[i:i + 20]) for i in range(0, n_words, 20)]
    return " ".join(s[0].upper() + s[1:] + "." for s in sentences)


def _spin(app, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.002)


def time_paragraph(runs: int, layer: int | None = None) -> list[dict]:
    """Paste the paragraph into a window showing a short sentence; the time to its painted grid."""
    from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer

    from attnviz.ui.app import create_window, make_app

    app = make_app()
    settings = scratch_settings()
    w = create_window(model=MODEL, text="A short sentence.", settings=settings)
    w.resize(1400, 860)
    w.show()
    while not (w.state.result is not None and w.panels_ready):
        _spin(app, 0.01)
    _spin(app, 1.0)  # the side panels' first round
    if layer is not None:
        w.state.set_layer(layer)
        _spin(app, 0.5)
    text = paragraph()
    out = []
    for i in range(runs):
        st = w.state
        marks = {}
        waiting = QEventLoop()

        class Paint(QObject):
            """Each paint of the grid: the first of the paragraph (a preview of its run's first
            layers, or its result) and the first of its result, timed when the paint is done."""

            def eventFilter(self, obj, ev):
                drawn = w.grid.drawn
                if ev.type() == QEvent.Type.Paint and drawn is not None and drawn.text == text:
                    whole = drawn is st.result
                    QTimer.singleShot(0, lambda: (
                        marks.setdefault("first", time.perf_counter()),
                        whole and (marks.setdefault("painted", time.perf_counter()), waiting.quit())))
                return False

        watch = Paint()
        w.grid.gw.viewport().installEventFilter(watch)

        def on_result(r):
            if r is not None and r.text == text:
                marks["result"] = time.perf_counter()

        st.sigResultChanged.connect(on_result)
        # each run pastes the paragraph into a short text (the KV cache holds only that text)
        t0 = time.perf_counter()
        w.set_text(text)
        QTimer.singleShot(60000, waiting.quit)
        waiting.exec()
        r = st.result
        st.sigResultChanged.disconnect(on_result)
        w.grid.gw.viewport().removeEventFilter(watch)
        total = marks["painted"] - t0
        out.append({"T": r.n_tokens, "first_heatmaps": marks["first"] - t0, "total": total,
                    "engine": r.compute_s, "layer": st.layer,
                    "to_result": marks["result"] - t0, "result_to_paint": marks["painted"] - marks["result"]})
        w.set_text(f"A short sentence, run {i}.")
        _spin(app, 2.0)  # its scores and side panels settle before the next paste
    w.close()
    return out


def time_probe(runs: int) -> list[dict]:
    from attnviz.engine import load_model
    from attnviz.engine.analysing import probes
    from attnviz.ui.machinery.tuning import limit_blas_threads

    limit_blas_threads()  # as the window's jobs run
    model = load_model(MODEL)
    real = model.iter_many  # the items go through the model together, a few passes
    spent = []

    def iter_many(*a, **k):
        t = time.perf_counter()
        for item in real(*a, **k):
            spent.append(time.perf_counter() - t)  # the model's time up to this item
            yield item
            t = time.perf_counter()

    model.iter_many = iter_many
    out = []
    for _ in range(runs):
        spent.clear()
        t0 = time.perf_counter()
        scores, _ = probes.score_probe(model, "agreement")
        total = time.perf_counter() - t0
        out.append({"total": total, "texts": len(spent), "model_runs": sum(spent),
                    "items": scores.n_items})
    return out


def time_export(runs: int) -> list[dict]:
    out_dir = scratch_folder()
    cmd = [sys.executable, "-m", "attnviz", "export", "--view", "anatomy", "--model", MODEL,
           "--text", "The keys to the cabinet are on the table.", "--layer", "3",
           "--out", str(out_dir / "a.png")]
    # the bytecode of the tree as it is now, as an installed app has it after its first start (or
    # scripts/setup.sh): where PYTHONDONTWRITEBYTECODE=1 is set, each run would compile attnviz's
    # modules again (0.2 s), a cost no user's second export pays
    compileall.compile_dir(str(ROOT / "attnviz"), quiet=1)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        total = time.perf_counter() - t0
        if proc.returncode:
            raise RuntimeError(f"export failed: {proc.stderr[-2000:]}")
        out.append({"total": total, **export_parts(out_dir)})
    return out


def export_parts(out_dir: Path) -> dict:
    """The export's steps timed in a fresh interpreter: imports, load, run, draw + write."""
    code = f"""
import time, json
t0 = time.perf_counter()
from attnviz.commands import export_cmd  # noqa: F401  (what the command imports)
from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.figures.anatomy import make_anatomy_view, png_bytes
from PySide6.QtGui import QGuiApplication
t1 = time.perf_counter()
app = QGuiApplication([])
m = load_model({MODEL!r}, eager=False)  # as the command: layers expanded as the run reaches them
t2 = time.perf_counter()
r = m.run("The keys to the cabinet are on the table.", request=RunRequest(inputs=True, layers=4))
t3 = time.perf_counter()
data, lay = png_bytes(make_anatomy_view(m, r, 3, None), 1200)
open({str(out_dir / 'b.png')!r}, "wb").write(data)
t4 = time.perf_counter()
print(json.dumps({{"imports": t1 - t0, "load": t2 - t1, "run": t3 - t2, "draw_write": t4 - t3}}))
"""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    parts = json.loads(proc.stdout.strip().splitlines()[-1])
    parts["python_start"] = wall - sum(parts.values())
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="paragraph,probe,export")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--layer", type=int, default=None,
                    help="paragraph: the layer on screen (default: the window's, layer 0)")
    args = ap.parse_args()
    which = [w for w in args.only.split(",") if w]
    timers = {"paragraph": time_paragraph, "probe": time_probe, "export": time_export}
    results = {w: (timers[w](args.runs, args.layer) if w == "paragraph" else timers[w](args.runs))
               for w in which}
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, model {MODEL}")
    for name, rows in results.items():
        totals = [r["total"] for r in rows]
        print(f"\n{name}: median {statistics.median(totals):.2f} s, runs "
              + ", ".join(f"{t:.2f}" for t in totals) + f" (goal <= {GOALS[name]})")
        for key in rows[0]:
            if key != "total" and isinstance(rows[0][key], float):
                print(f"  {key:16s} " + ", ".join(f"{r[key]:.3f}" for r in rows) + " s")
            elif key != "total":
                print(f"  {key:16s} " + ", ".join(str(r[key]) for r in rows))
        if name == "paragraph":  # the goal is the first heatmaps: the layer on screen, painted
            first = statistics.median(r["first_heatmaps"] for r in rows)
            print(f"  goal: first heatmaps (layer {rows[0]['layer']} on screen) <= {GOALS[name]} s: median "
                  f"{first:.2f} s {'met' if first <= GOALS[name] else 'NOT met'} (the first paint of the "
                  "paragraph: a preview of its run's first layers, the layer on screen and those before "
                  f"it); the whole result painted: median {statistics.median(totals):.2f} s")
    if args.json:
        print(json.dumps(results))
    record.write("slow_spots", figures(results))
    return 0


NAMES = {"paragraph": "a pasted 400-word paragraph to its first heatmaps, SmolLM2",
         "probe": "the agreement probe, SmolLM2",
         "export": "`attnviz export --view anatomy`, a fresh process"}


def figures(results: dict) -> list[dict]:
    """The medians the goals are read against (the paragraph's: its first heatmaps)."""
    out = []
    for name, rows in results.items():
        key = "first_heatmaps" if name == "paragraph" else "total"
        runs = [r[key] for r in rows]
        note = f"median of {len(runs)} runs"
        if name == "paragraph":
            note += f", layer {rows[0]['layer']} on screen"
        out.append(record.figure(NAMES[name], statistics.median(runs), "s", runs=runs,
                                 goal=GOALS[name], headline=True, note=note))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
