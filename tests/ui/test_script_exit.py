"""A script that opens a window, compares two models in it and lets Python exit with the window
still open ends quietly: the window's teardown reports no error (its Compare dock hides as the
window goes, which is not the user leaving Compare)."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = r"""
import os, sys, tempfile
from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.ui.app import create_window, make_app
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare

app = make_app()
w = create_window(model=TOY_MODEL, text="the cat sat on the mat",
                  settings=QSettings(os.path.join(tempfile.mkdtemp(), "s.ini"), QSettings.Format.IniFormat))
w.show()

def until(done, ms=120000):
    clock = QElapsedTimer()
    clock.start()
    while not done():
        if clock.elapsed() > ms:
            sys.exit("timed out")
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)

until(lambda: w.state.result is not None and w.state.checkpoints is not None and w.panels_ready)
open_compare(w, BSource("checkpoint", 0))
jobs = w.worker.compare_jobs
until(lambda: jobs.comparison is not None and jobs.comparison.doc is not None)
print("compared", jobs.comparison.result.text)
"""


def test_python_exiting_with_a_comparing_window_open_reports_no_error(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compared the cat sat on the mat"  # (the window did compare)
    noisy = [line for line in done.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert noisy == [], done.stderr
