"""attnviz imports its own modules plainly: an ImportError in one of them is a bug to see, never
swallowed as "not built yet" (issue 11: the importlib scaffolding is gone)."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attnviz"


def test_no_module_loads_attnviz_modules_through_importlib():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        # only third-party packages that may be missing are imported by name (a string literal)
        for arg in re.findall(r"import_module\(\s*([^)]*)\)", text):
            if not re.fullmatch(r"[\"'][\w.]+[\"']", arg.strip()) or "attnviz" in arg:
                found.append(f"{path.relative_to(PACKAGE)}: import_module({arg})")
    assert found == []


def test_cli_registers_every_command():
    from attnviz.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) >= {"models", "attention", "calc", "heads", "find", "export"}
