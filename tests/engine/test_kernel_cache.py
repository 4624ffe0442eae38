"""numba's cache of the kernels lives in a folder keyed by every file their machine code is built from
(engine/computing/kernel_cache.py): a change to any one of them (a pull that changed rowmath.py
alone) compiles them again instead of loading code built on the old file."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from attnviz.engine.computing import kernel_cache as kc

PACKAGE = Path(kc.__file__).resolve().parents[2]
ROOT = PACKAGE.parent
# modules the kernel modules import from whose names are used by Python code only (never compiled in)
PYTHON_SIDE = {"attnviz.engine.computing.trace", "attnviz.engine.parallel",
               "attnviz.engine.computing.kernel_cache", "attnviz.engine.errors",
               "attnviz.engine.computing.pair_fallback"}  # (onerow_pair's one-or-two-threads choice)
NUMBA_DECORATORS = {"njit", "jit", "intrinsic", "vectorize", "guvectorize", "overload", "cfunc"}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _compiles(path: Path) -> bool:  # whether a function of the file is decorated for numba
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        for dec in getattr(node, "decorator_list", ()):
            dec = dec.func if isinstance(dec, ast.Call) else dec
            if getattr(dec, "id", getattr(dec, "attr", None)) in NUMBA_DECORATORS:
                return True
    return False


def test_sources_are_every_compiled_module_and_what_they_compile_in():
    """Every attnviz file with numba-compiled functions is hashed, and so is every attnviz module
    they import from, unless its names serve Python code only (PYTHON_SIDE)."""
    sources = {Path(p).resolve() for p in kc.SOURCES}
    compiled = {p.resolve() for p in PACKAGE.rglob("*.py") if _compiles(p)}
    assert compiled and compiled <= sources
    imported = set()
    for path in compiled:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnviz"):
                names = [f"{node.module}.{a.name}" for a in node.names]
                imported |= {n for n in names if (ROOT / (n.replace(".", "/") + ".py")).exists()}
                imported.add(node.module)
    imported = {m for m in imported if (ROOT / (m.replace(".", "/") + ".py")).exists()}
    assert imported - PYTHON_SIDE <= {_module(p) for p in sources}


def test_the_key_changes_with_any_source_byte_and_only_then(tmp_path):
    copies = []
    for src in kc.SOURCES:
        dst = tmp_path / Path(src).parent.name / Path(src).name
        dst.parent.mkdir(exist_ok=True)
        shutil.copyfile(src, dst)
        copies.append(dst)
    key = kc.sources_key(copies)
    assert key == kc.sources_key(kc.SOURCES) and len(key) == 16
    for path in copies:
        os.utime(path, (1, 1))  # a new time alone is no change
    assert kc.sources_key(copies) == key
    seen = {key}
    for path in copies:
        data = path.read_bytes()
        path.write_bytes(data + b"\n")
        changed = kc.sources_key(copies)
        assert changed not in seen, path.name
        seen.add(changed)
        path.write_bytes(data)
        assert kc.sources_key(copies) == key


def test_the_folder_is_under_the_users_numba_cache_dir_or_attnvizs_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert kc.folder_for("0123456789abcdef") == tmp_path / "numba" / "attnviz-0123456789abcdef"
    # a child of a process that pointed numba there keeps the folder as it is
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba" / "attnviz-0123456789abcdef"))
    assert kc.folder_for("0123456789abcdef") == tmp_path / "numba" / "attnviz-0123456789abcdef"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "mine"))
    assert kc.folder_for("0123456789abcdef") == tmp_path / "mine" / "kernels" / "attnviz-0123456789abcdef"


def test_an_unwritable_folder_falls_back_to_the_temporary_directory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(blocker / "numba"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    folder = kc.choose("0123456789abcdef")
    assert folder is not None and folder.is_dir() and folder.name == "attnviz-0123456789abcdef"
    assert folder.is_relative_to(tmp_path / "tmp")
    monkeypatch.setattr("tempfile.tempdir", str(blocker / "tmp"))
    assert kc.choose("0123456789abcdef") is None


def test_prune_keeps_the_recent_folders_and_leaves_others_alone(tmp_path):
    now = 10_000_000.0
    folders = []
    for i in range(kc.KEPT + 3):  # i = 0 the most recently used
        folder = tmp_path / f"attnviz-{i:016x}"
        folder.mkdir()
        age = 60 if i == kc.KEPT + 2 else 2 * kc.IDLE_S + i  # the last one: used a minute ago
        os.utime(folder, (now - age, now - age))
        folders.append(folder)
    keep = tmp_path / "attnviz-ffffffffffffffff"
    keep.mkdir()
    foreign = tmp_path / "attnviz-not-a-key"
    foreign.mkdir()
    os.utime(foreign, (1, 1))
    assert kc.prune(tmp_path, keep, now=now - 2 * kc.IDLE_S) == []  # all used within the hour
    removed = kc.prune(tmp_path, keep, now=now)
    # by time: the last (a minute ago) and the KEPT after it stay; the rest, unused for hours, go
    assert sorted(removed) == sorted(folders[kc.KEPT - 1:kc.KEPT + 2])
    assert all(f.exists() for f in folders[:kc.KEPT - 1] + [folders[-1], keep, foreign])


def test_numba_writes_its_index_into_the_keyed_folder(tmp_path):
    """In a fresh process with an empty NUMBA_CACHE_DIR, a compiled function's index and code go
    to <NUMBA_CACHE_DIR>/attnviz-<key of the sources>."""
    code = ("import numpy as np\n"
            "from attnviz.engine.computing import rowmath, kernel_cache\n"
            "out = np.empty((1, 4), np.float32)\n"
            "rowmath.rms_norm_of(np.ones((1, 4), np.float32), np.ones(4, np.float32), np.float32(1e-6), out)\n"
            "print(kernel_cache.FOLDER)\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    folder = tmp_path / f"attnviz-{kc.sources_key()}"
    assert Path(done.stdout.strip()) == folder
    names = [p.name for p in folder.rglob("*")]
    assert any(n.startswith("rowmath.rms_norm_of") and n.endswith(".nbi") for n in names), names
    assert any(n.startswith("rowmath.rms_norm_of") and n.endswith(".nbc") for n in names), names
