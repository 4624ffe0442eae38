"""No object in attnviz/ sets another object's private attribute (issue 43, item 5): an assignment
to `x._name` is made by x's own methods (`self._name`, or `cls._name` in a class method), never from
outside. Checked on the syntax tree of every module, so a string or a comment does not count. And
no test sets a module's private global that a public function of the module sets (parallel's
limit_kernel_threads, limit_cores): it calls that function. (A test may still stand in for a
private function or a field nothing public sets: a spy, a fake machine's cores.)"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attnviz"


def private_sets(source: str) -> list[tuple[int, str]]:
    """(line, target) of every assignment to `<expr>._name` whose <expr> is not self or cls."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and str(name.value).startswith("_") \
                    and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")):
                found.append((node.lineno, f"setattr(..., {name.value!r})"))
            continue
        else:
            continue
        stack = list(targets)
        while stack:
            t = stack.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                stack.extend(t.elts)
            elif isinstance(t, ast.Attribute) and t.attr.startswith("_") and not t.attr.startswith("__"):
                if not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls")):
                    found.append((t.lineno, ast.unparse(t)))
    return found


def test_the_check_finds_a_set_from_outside_and_allows_an_objects_own():
    assert private_sets("model._head = None\n") == [(1, "model._head")]
    assert private_sets("a, w.x._y = 1, 2\nsetattr(w, '_z', 3)\n") == [(1, "w.x._y"), (2, "setattr(..., '_z')")]
    assert private_sets("class A:\n    def f(self):\n        self._x = 1\n") == []


def test_no_module_sets_another_objects_private_attribute():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: {target}"
           for path in sorted(PACKAGE.rglob("*.py"))
           for line, target in private_sets(path.read_text(encoding="utf-8"))]
    assert bad == []


TESTS = PACKAGE.parent / "tests"


def public_setters(package: Path = PACKAGE) -> dict[str, set[str]]:
    """{module: the private globals a public function of it sets (`global _x` in a def whose name
    has no leading underscore)}: parallel's _KERNEL_THREADS (limit_kernel_threads), _LIMIT
    (limit_cores)."""
    found = {}
    for path in package.rglob("*.py"):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        names = {name for node in ast.parse(path.read_text(encoding="utf-8")).body
                 if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
                 for sub in ast.walk(node) if isinstance(sub, ast.Global)
                 for name in sub.names if name.startswith("_")}
        if names:
            found[module] = names
    return found


def _dotted(node) -> str | None:  # `a.b.c` of a chain of names, else None
    parts = []
    while isinstance(node, ast.Attribute):
        parts, node = [node.attr, *parts], node.value
    return ".".join([node.id, *parts]) if isinstance(node, ast.Name) else None


def sets_past_a_setter(source: str, setters: dict[str, set[str]]) -> list[tuple[int, str]]:
    """(line, module._name) of each assignment, setattr or monkeypatch.setattr in `source` (a test)
    to a private global that its module's own public function sets (`setters`), the module named
    through the source's imports: a test sets it through that function. A name held in a loop
    variable over string constants (`for name in ("_a", "_b"): setattr(m, name, ...)`) is seen,
    and monkeypatch's dotted-string form (monkeypatch.setattr("pkg.mod._a", ...)); a name held in
    any other variable is not."""
    tree, imported, found = ast.parse(source), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            imported |= {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                         for a in node.names}

    def check(obj, name, line):
        dotted = _dotted(obj)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            module = ".".join(filter(None, [imported.get(head, head), rest]))
            if name in setters.get(module, ()):
                found.append((line, f"{module}.{name}"))

    def setattr_call(node):
        return isinstance(node, ast.Call) and node.args \
            and "setattr" in (getattr(node.func, "id", None), getattr(node.func, "attr", None))

    looped = {}  # id of a setattr(obj, name, ...) in a loop of `name` over string constants -> them
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)) \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts):
            for call in (c for part in node.body for c in ast.walk(part)):
                if setattr_call(call) and len(call.args) >= 2 and getattr(call.args[1], "id", None) == node.target.id:
                    looped[id(call)] = [e.value for e in node.iter.elts]
    for node in ast.walk(tree):
        if setattr_call(node):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):  # setattr("pkg.mod._a", v)
                module, _, name = first.value.rpartition(".")
                if name in setters.get(module, ()):
                    found.append((node.lineno, f"{module}.{name}"))
            elif len(node.args) >= 2:
                name = node.args[1]
                for name in [name.value] if isinstance(name, ast.Constant) else looped.get(id(node), []):
                    check(first, name, node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            stack = list(node.targets if isinstance(node, ast.Assign) else [node.target])
            while stack:
                t = stack.pop()
                if isinstance(t, (ast.Tuple, ast.List)):
                    stack.extend(t.elts)
                elif isinstance(t, ast.Attribute):
                    check(t.value, t.attr, t.lineno)
    return sorted(found)


def test_the_check_finds_a_test_setting_what_a_public_function_sets():
    setters = public_setters()
    assert {"_KERNEL_THREADS", "_LIMIT"} <= setters["attnviz.engine.parallel"]
    assert "_AFFINITY" not in setters["attnviz.engine.parallel"]  # (no public setter: a fake machine)
    source = ("from attnviz.engine import parallel as P\nimport attnviz.engine.parallel\n"
              "P._LIMIT, x = 1, 2\nmonkeypatch.setattr(P, '_KERNEL_THREADS', 1)\n"
              "attnviz.engine.parallel._WIDE = None\nsetattr(P, '_SPARE', 0)\n"
              "monkeypatch.setattr(P, '_AFFINITY', 8)\nP.limit_cores(1)\nparallel._LIMIT = 1\n")
    assert sets_past_a_setter(source, setters) == [
        (3, "attnviz.engine.parallel._LIMIT"), (4, "attnviz.engine.parallel._KERNEL_THREADS"),
        (5, "attnviz.engine.parallel._WIDE"), (6, "attnviz.engine.parallel._SPARE")]


def test_the_check_finds_a_name_in_a_loop_over_constants_and_monkeypatchs_dotted_form():
    setters = {"attnviz.engine.reading.qpack": {"_asked", "_rest_later"}}
    source = ("from attnviz.engine.reading import qpack\n"
              "for name in ('_asked', '_rest_later', '_other'):\n"
              "    monkeypatch.setattr(qpack, name, getattr(qpack, name))\n"
              "monkeypatch.setattr('attnviz.engine.reading.qpack._asked', True)\n"
              "monkeypatch.setattr('attnviz.engine.reading.qpack._other', True)\n"
              "for name in names():\n    setattr(qpack, name, 1)\n")
    assert sets_past_a_setter(source, setters) == [
        (3, "attnviz.engine.reading.qpack._asked"), (3, "attnviz.engine.reading.qpack._rest_later"),
        (4, "attnviz.engine.reading.qpack._asked")]


def test_no_test_sets_a_private_field_its_module_has_a_public_setter_for():
    setters = public_setters()
    bad = [f"{path.relative_to(TESTS.parent)}:{line}: {target}"
           for path in sorted(TESTS.rglob("*.py"))
           for line, target in sets_past_a_setter(path.read_text(encoding="utf-8"), setters)]
    assert bad == []
