"""The benchmarks' temporary folders (benchmarks/scratch.py: their windows' settings files, their
exports) are gone once the benchmark's process ends, a settings change still pending included."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
from benchmarks.scratch import scratch_folder, scratch_settings
folder = scratch_folder()
(folder / "a.png").write_bytes(b"x")
synced = scratch_settings()
synced.setValue("k", 1)
synced.sync()
pending = scratch_settings("settings.ini")
pending.setValue("k", 2)  # (written as the object goes, at the interpreter's end)
print(folder)
print(synced.fileName())
print(pending.fileName())
"""


def test_a_benchmarks_scratch_folders_are_removed_when_it_ends(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    made = [Path(line) for line in proc.stdout.split()]
    assert len(made) == 3 and all(str(p).startswith(str(tmp_path)) for p in made)
    assert not any(p.exists() for p in made)
    assert list(tmp_path.iterdir()) == [], "nothing is left in the temporary folder"
