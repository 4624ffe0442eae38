"""No object in attnviz/ sets another object's private attribute (issue 43, item 5): an assignment
to `x._name` is made by x's own methods (`self._name`, or `cls._name` in a class method), never from
outside. Checked on the syntax tree of every module, so a string or a comment does not count."""

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
