"""What `pip install .` / `pipx install .` installs: every module of the package (pyproject lists
the packages one by one) and the resources the app reads (presets, the desktop icon)."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_built_wheel_holds_every_module_and_the_icon(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set(zipfile.ZipFile(next(tmp_path.glob("attnviz-*.whl"))).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnviz").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert {"attnviz/resources/attnviz.svg", "attnviz/resources/presets.json"} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(next(tmp_path.glob("attnviz-*.whl"))).read(entry_points).decode()
    assert "attnviz = attnviz.cli:main" in text
