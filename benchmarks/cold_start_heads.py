"""The window case of benchmarks/cold_start.py: a fresh process (HEADS_CHILD) opens the window on a
model and ends when What heads do's first prediction is painted; its milestones on the way, and
the CPU seconds it has used at the paint (cold_start.py's docstring, "heads")."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import record
from benchmarks.children import ROOT, child_env

# The window's process for the heads case: argv[1] the model, argv[2] a timeout in seconds. It
# prints one JSON line {milestone: time.time() when reached} and exits 0 once the prediction is
# painted, or exits 1 with the milestones reached when the timeout passes first; at the paint, the
# line holds CPU_KEY too: the process's CPU seconds then.
CPU_KEY = "CPU seconds at the paint (user + system)"
HEADS_CHILD = r"""
import json, os, resource, sys, tempfile, time
T = {}
def mark(name):
    T.setdefault(name, time.time())
from PySide6.QtCore import QEvent, QObject, QSettings, QTimer
from attnviz.ui.app import create_window, make_app
mark("imports (Qt, attnviz.ui.app)")
app = make_app()
settings = QSettings(os.path.join(tempfile.mkdtemp(prefix="attnviz-cold-"), "s.ini"),
                     QSettings.Format.IniFormat)
w = create_window(model=sys.argv[1], settings=settings)
st = w.state
mark("window built (the model loading meanwhile)")
def on_model(m):
    if m is not None:
        mark("model loaded")
def on_result(r):
    if r is not None:
        mark("first grid result")
def on_analysis():
    if st.effects.analysis is not None:
        mark("prediction computed")
st.sigModelChanged.connect(on_model)
st.sigResultChanged.connect(on_result)
st.effects.sigAnalysisChanged.connect(on_analysis)
on_model(st.model)
on_result(st.result)
w.show()
def done(code):
    print(json.dumps(T), flush=True)
    app.exit(code)
class Painted(QObject):
    def eventFilter(self, obj, ev):
        if (ev.type() == QEvent.Type.Paint and st.effects.analysis is not None
                and w.predict_panel.top_table.rowCount() > 0 and "prediction painted" not in T):
            mark("prediction painted")
            use = resource.getrusage(resource.RUSAGE_SELF)
            T["CPU seconds at the paint (user + system)"] = use.ru_utime + use.ru_stime
            QTimer.singleShot(0, lambda: done(0))
        return False
painted = Painted()
def poll():
    if w.predict_dock is None:
        return
    if "panels built" not in T:
        mark("panels built")
        w.predict_panel.top_table.viewport().installEventFilter(painted)
        w.predict_panel.tabs.setCurrentIndex(0)
        w.predict_dock.show()
    if w.predict_panel.visibleRegion().isEmpty():
        w.predict_dock.raise_()  # (a dock raised while the window lays out its docks can lose)
timer = QTimer()
timer.timeout.connect(poll)
timer.start(5)
QTimer.singleShot(int(float(sys.argv[2]) * 1000), lambda: done(1))
sys.exit(app.exec())
"""


def heads_process(model: str, timeout: float = 120.0, root: str = str(ROOT)) -> tuple[float, dict]:
    """Seconds from spawning HEADS_CHILD on `model` (the code in `root`) to What heads do's first
    prediction painted, and {milestone: seconds since the spawn} (and CPU_KEY: the process's CPU
    seconds at the paint). A process that fails after the
    paint (while it exits) keeps its figure; what it said is printed and kept in EXIT_PROBLEMS."""
    env = {**child_env(root), "QT_QPA_PLATFORM": "offscreen"}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", HEADS_CHILD, model, str(timeout)],
                          capture_output=True, text=True, env=env, cwd=root)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    marks = {k: v if k == CPU_KEY else v - t0 for k, v in json.loads(lines[-1]).items()} if lines else {}
    said = "\n".join(l for l in proc.stderr.splitlines() if "propagateSizeHints" not in l).strip()[-2000:]
    if "prediction painted" not in marks:
        raise SystemExit(f"What heads do on {model}: exit status {proc.returncode}, reached "
                         f"{', '.join(marks) or 'nothing'} (timeout {timeout:.0f} s): {said}")
    if proc.returncode != 0:
        whose = "this commit's code" if root == str(ROOT) else f"the code in {root}"
        problem = (f"{os.path.basename(model)}, {whose}: exit status {proc.returncode} after the "
                   f"paint: {said}")
        EXIT_PROBLEMS.append(problem)
        print(f"  note: {problem}", file=sys.stderr, flush=True)
    return marks["prediction painted"], marks


EXIT_PROBLEMS: list[str] = []  # heads_process's: a window process that failed while exiting


def median_milestones(runs: list) -> dict:
    """Each milestone's median over heads_process's runs [(seconds, marks)], in order."""
    reached = set.intersection(*(set(m) for _, m in runs)) - {CPU_KEY}
    return dict(sorted(((k, round(statistics.median(m[k] for _, m in runs), 3)) for k in reached),
                       key=lambda kv: kv[1]))


def heads_cpu(figures: list, who: str, runs: list, n) -> None:
    """The CPU seconds the window's process used up to the paint (median of the runs that say),
    as a figure and a line."""
    cpu = [m[CPU_KEY] for _, m in runs if CPU_KEY in m]
    if not cpu:
        return
    figures.append(record.figure(
        f"What heads do, first result in the window, {who}: CPU seconds to the paint",
        statistics.median(cpu), "s", runs=[round(c, 3) for c in cpu],
        note="user + system seconds of the window's process (every thread) when it paints the "
             "first prediction: less sensitive than the wall time to other processes' load"))
    print(f"  CPU seconds to the paint ({who}): median {statistics.median(cpu):.2f}  runs "
          f"{', '.join(f'{c:.2f}' for c in cpu)}", flush=True)
