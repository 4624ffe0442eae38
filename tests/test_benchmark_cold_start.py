"""benchmarks/cold_start.py's window case: its process ends on What heads do's first prediction
painted, after the milestones that lead to it, and --cases refuses what it does not know."""

import subprocess
import sys
from pathlib import Path

from benchmarks.cold_start import heads_process

ROOT = Path(__file__).resolve().parents[1]


def test_the_heads_case_ends_when_the_first_prediction_is_painted():
    seconds, marks = heads_process("attnviz-toy-stdlib", timeout=120)
    assert seconds == marks["prediction painted"] > 0
    order = ["imports (Qt, attnviz.ui.app)", "window built (the model loading meanwhile)",
             "first grid result", "panels built", "prediction painted"]
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    assert marks["model loaded"] <= marks["first grid result"]
    assert marks["prediction computed"] <= marks["prediction painted"]


def test_cases_lists_what_it_measures_and_refuses_an_unknown_one():
    run = [sys.executable, "-m", "benchmarks.cold_start"]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "--cases" in shown.stdout and "heads" in shown.stdout
    refused = subprocess.run([*run, "--cases", "heads,launch"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2
    assert "--cases: launch; choose from predict, generate, heads" in refused.stderr
