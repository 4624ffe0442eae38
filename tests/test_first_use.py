"""Defects a new user hit outside the window (issue 11 item 6), each pinned by a test."""

import os

import pytest

from attnviz.cli import main

TB = ["--model", "attnviz-textbook", "--text", "the cat sat on the mat"]


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
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "typing.py"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
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
