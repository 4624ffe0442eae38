"""Launch to a window: seconds from starting a command to the attnviz window being mapped on an X
display (Xvfb), polled with xwininfo every 20 ms.

    .venv/bin/python -m benchmarks.launch [--runs 3]

Three ways to start, each `--runs` times, in this checkout:
- run-app.sh, set-up pass: the stamp in .venv removed first, so scripts/setup.sh installs again
  (pip into the existing .venv, packages cached: what every launch cost before the stamp);
- run-app.sh, relaunch: .venv complete and up to date, set-up skipped;
- .venv/bin/python main.py: no script at all.
Settings go to a temporary XDG_CONFIG_HOME, so the window opens on its first-start model (SmolLM2).
A first launch on a clean clone also creates .venv and downloads packages: not measured here.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import record

ROOT = Path(__file__).resolve().parents[1]


WINDOW = re.compile(r'"attnviz[^"]*":\s+\(.*?\)\s+(\d+)x(\d+)\+')


def window_mapped(display: str) -> bool:
    """An attnviz top-level window of a real size is on the display (Qt also maps a 1x1 helper
    window named after the app before the main window)."""
    out = subprocess.run(["xwininfo", "-root", "-tree"], env={**os.environ, "DISPLAY": display},
                         capture_output=True, text=True).stdout
    return any(int(m.group(1)) >= 300 and int(m.group(2)) >= 200
               for m in map(WINDOW.search, out.splitlines()) if m)


def time_to_window(cmd: list[str], display: str, timeout: float = 120.0) -> float:
    env = {**os.environ, "DISPLAY": display, "XDG_CONFIG_HOME": tempfile.mkdtemp(prefix="attnviz-cfg-")}
    env.pop("QT_QPA_PLATFORM", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.perf_counter() - t0 < timeout:
            if window_mapped(display):
                return time.perf_counter() - t0
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited with {proc.returncode} before a window showed")
            time.sleep(0.02)
        raise RuntimeError(f"no window after {timeout} s: {cmd}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        while window_mapped(display):
            time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--display", default=":97")
    ap.add_argument("--ways", default="setup,relaunch,main",
                    help="which starts to time (comma list): setup (run-app.sh's set-up pass), "
                         "relaunch (run-app.sh, set-up skipped), main (.venv/bin/python main.py)")
    args = ap.parse_args()
    if not shutil.which("Xvfb") or not shutil.which("xwininfo"):
        print("needs Xvfb and xwininfo (x11-utils)", file=sys.stderr)
        return 2
    xvfb = subprocess.Popen(["Xvfb", args.display, "-screen", "0", "1920x1080x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        stamps = list((ROOT / ".venv").glob(".setup-*"))
        saved = {p: p.read_text() for p in stamps}
        results = {}
        ways = {
            "run-app.sh, set-up pass": (["bash", "scripts/run-app.sh"], True),
            "run-app.sh, relaunch": (["bash", "scripts/run-app.sh"], False),
            ".venv/bin/python main.py": ([str(ROOT / ".venv" / "bin" / "python"), "main.py"], False),
        }
        keys = dict(zip(("setup", "relaunch", "main"), ways))
        ways = {keys[k]: ways[keys[k]] for k in args.ways.split(",") if k}
        for name, (cmd, setup) in ways.items():
            times = []
            for _ in range(args.runs):
                if setup:
                    for p in (ROOT / ".venv").glob(".setup-*"):
                        p.unlink()
                times.append(time_to_window(cmd, args.display))
            results[name] = times
        for p, text in saved.items():  # leave the stamps as they were (a set-up pass rewrote one)
            p.write_text(text)
        for name, times in results.items():
            print(f"{name:28s} median {statistics.median(times):5.2f} s   runs: "
                  + ", ".join(f"{t:.2f}" for t in times))
        record.write("launch", [record.figure(
            f"{name} to a mapped window", statistics.median(times), "s", runs=times,
            goal=None if ways[name][1] else 2.0,
            headline=name == "run-app.sh, relaunch", note=f"median of {len(times)} runs on Xvfb")
            for name, times in results.items()])
    finally:
        xvfb.terminate()
        xvfb.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
