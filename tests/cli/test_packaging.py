"""What `pip install .` / `pipx install .` installs: every module of the package (pyproject lists
the packages one by one) and the resources the app reads (presets, the desktop icon)."""

import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_built_wheel_holds_every_module_and_the_icon(built_wheel):
    names = set(zipfile.ZipFile(built_wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnviz").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert {"attnviz/resources/attnviz.svg", "attnviz/resources/presets.json"} <= names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(built_wheel).read(entry_points).decode()
    assert "attnviz = attnviz.cli:main" in text
