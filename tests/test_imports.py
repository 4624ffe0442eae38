"""attnviz imports its own modules plainly (an ImportError in one of them is a bug to see, never
swallowed as "not built yet"), one way between the layers, and with no import circle."""

import ast
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

    assert set(build_parser().commands) >= {"models", "attention", "calc", "heads", "find", "export"}


LAYERS = {  # package -> the attnviz packages it may import (engine <- figures <- ui; commands)
    "engine": {"engine"},
    "figures": {"engine", "figures"},
    "corpus": {"engine", "corpus"},  # a corpus scan's files and tasks: no Qt, no figures
    "commands": {"engine", "figures", "corpus", "commands"},
    "ui": {"engine", "figures", "corpus", "ui"},
}


def test_layers_import_one_way_only():
    """engine <- figures <- ui, and the commands use the engine and the figures, never the widgets:
    every `import attnviz.X` / `from attnviz.X` in a package's files, lazy ones included."""
    found = []
    for pkg, allowed in LAYERS.items():
        for path in sorted((PACKAGE / pkg).rglob("*.py")):
            for m in re.finditer(r"^\s*(?:from|import)\s+attnviz\.(\w+)", path.read_text("utf-8"), re.M):
                if m.group(1) not in allowed:
                    found.append(f"{path.relative_to(PACKAGE)} imports attnviz.{m.group(1)}")
            for m in re.finditer(r"^\s*from\s+attnviz\s+import\s+(\w+)", path.read_text("utf-8"), re.M):
                if m.group(1) in LAYERS and m.group(1) not in allowed:
                    found.append(f"{path.relative_to(PACKAGE)} imports attnviz.{m.group(1)}")
    assert found == []


def test_an_image_export_from_the_command_line_loads_no_widget_module(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from attnviz.cli import main; "
            f"rc = main(['export', '--model', 'attnviz-textbook', '--text', 'the cat sat', "
            f"'--layer', '1', '--out', {str(tmp_path / 'a.png')!r}]); "
            f"rc2 = main(['export', '--model', 'attnviz-textbook', '--view', 'anatomy', '--text', "
            f"'the cat', '--out', {str(tmp_path / 'b.svg')!r}]); "
            "bad = [m for m in sys.modules if m.startswith('attnviz.ui')]; "
            "print(rc, rc2, bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.stdout.strip().splitlines()[-1] == "0 0 []", out.stderr[-2000:]
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0


CLI = re.compile(r"attnviz\.(?:cli|__main__)\b"
                 r"|^\s*from\s+attnviz\s+import\s+(?:\([^)]*|[^\n]*)\bcli\b"
                 r"|[\"']-m[\"'],\s*[\"']attnviz[\"']", re.M)
def cli_uses(path: Path) -> list[str]:
    """The top-level statements of a test file that use the command line, as "folder/file::name"
    (a function or class, its decorators included) or "folder/file" (anything else)."""
    text = path.read_text("utf-8")
    lines = text.splitlines()
    found = []
    for node in ast.parse(text).body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if CLI.search("\n".join(lines[first - 1:node.end_lineno])):
            name = f"{path.parent.name}/{path.name}"
            found.append(f"{name}::{node.name}" if hasattr(node, "name") else name)
    return found


def test_the_tests_mirror_the_layers():
    """tests/engine never touches Qt, as the engine does not; the window's tests live in tests/ui,
    the figures' in tests/figures, the command line's in tests/cli; only whole-project checks
    stay at the top."""
    tests = Path(__file__).resolve().parent
    qt = re.compile(r"\bqtbot\b|^\s*(?:from|import)\s+(?:PySide6|pyqtgraph|attnviz\.(?:ui|figures))",
                    re.M)
    assert [p.name for p in sorted((tests / "engine").glob("test_*.py"))
            if qt.search(p.read_text("utf-8"))] == []
    # the command line is tests/cli's: no other layer's tests import attnviz.cli (or __main__) or
    # start `python -m attnviz`
    assert [use for folder in ("engine", "figures", "ui")
            for p in sorted((tests / folder).glob("*.py")) for use in cli_uses(p)] == []
    window = re.compile(r"^\s*(?:from|import)\s+attnviz\.ui\b", re.M)  # the figures' tests draw without it
    assert [p.name for p in sorted((tests / "figures").glob("test_*.py"))
            if window.search(p.read_text("utf-8"))] == []
    assert sorted(p.name for p in tests.glob("test_*.py")) == [
        "test_benchmark_budget.py", "test_benchmark_burst.py", "test_benchmark_cold_start.py", "test_benchmark_gen_length.py", "test_benchmark_llamacpp.py",
        "test_benchmark_qsteps_processes.py", "test_benchmark_report.py",
        "test_benchmark_scratch.py", "test_benchmark_scripts.py", "test_benchmark_streaming.py",
        "test_docs.py",
        "test_imports.py",
        "test_private_fields.py", "test_sizes.py", "test_vocabulary.py",
        "test_why_here_numbers.py"]  # benchmarks' tests, house rules, a page's numbers against its results


def runtime_nodes(tree):
    """Every node of `tree` except those under `if TYPE_CHECKING:` (never imported when run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def module_imports(path: Path) -> set[str]:
    """The attnviz modules a file imports when it runs, at the top or inside a function."""
    found = set()
    for node in runtime_nodes(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("attnviz")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attnviz"):
            for a in node.names:  # `from attnviz.ui import settings` imports the module attnviz.ui.machinery.settings
                sub = f"{node.module}.{a.name}"
                found.add(sub if module_file(sub) is not None else node.module)
    return found


def module_file(name: str) -> Path | None:
    base = PACKAGE.parent / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def import_cycles() -> list[list[str]]:
    """Every import circle among the package's modules (a package's __init__ importing its own
    modules is not one: they import the package first)."""
    names = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    graph = {n: {m for m in module_imports(p) if m in names and m != n and not n.startswith(m + ".")}
             for n, p in names.items()}
    cycles, state = [], {}

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    return cycles


def test_no_import_cycle_among_the_packages_modules():
    assert import_cycles() == []


def test_the_cycle_check_sees_a_circle_through_a_lazy_import(tmp_path):
    pkg = tmp_path / "attnviz"
    (pkg / "ui").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ui" / "__init__.py").write_text("")
    (pkg / "ui" / "app.py").write_text("def f():\n    from attnviz.ui.window import W\n")
    (pkg / "ui" / "window.py").write_text("from attnviz.ui import app\nW = 1\n")
    globals()["PACKAGE"], old = pkg, PACKAGE
    try:
        assert import_cycles() == [["attnviz.ui.app", "attnviz.ui.window", "attnviz.ui.app"]]
    finally:
        globals()["PACKAGE"] = old


def test_no_module_imports_another_modules_private_names():
    """A name with a leading underscore stays in its module: what two modules share has a public
    name in one home (figures/render.py holds what the figures draw with)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz"):
                found += [f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


def test_every_test_file_has_its_own_name():
    """pytest imports test files by their base name (tests/ has no packages): two files of one name
    in different folders stop the whole run at collection."""
    names: dict = {}
    for path in sorted(Path(__file__).resolve().parent.rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}
