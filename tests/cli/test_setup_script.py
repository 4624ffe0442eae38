"""scripts/setup.sh leaves a complete, up-to-date .venv alone and silent (the relaunch path of
run-app.sh), and sets up again when pyproject.toml or the script change or the .venv is incomplete.
Run in a copy of the repository's two files with stand-in python, pip and dpkg-query that only log
their calls: no network, no packages."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _exe(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def checkout(tmp_path):
    """A checkout with pyproject.toml and scripts/setup.sh, a .venv whose python logs its calls."""
    if shutil.which("bash") is None or shutil.which("sha256sum") is None:
        pytest.skip("needs bash and sha256sum")
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    _engine(tmp_path)
    log = tmp_path / "calls.log"
    _exe(tmp_path / ".venv" / "bin" / "python", f'echo "python $*" >> "{log}"\n')
    _exe(tmp_path / ".venv" / "bin" / "attnviz", "exit 0\n")
    # every system library reads as installed: the test never reaches apt-get
    _exe(tmp_path / "fakebin" / "dpkg-query", "echo 'install ok installed'\n")
    return tmp_path, log


def _engine(root: Path) -> None:  # a stand-in engine: the kernels' stamp reads its sources
    (root / "attnviz" / "engine" / "computing").mkdir(parents=True)
    (root / "attnviz" / "engine" / "computing" / "qdot.py").write_text("K = 1\n")


def _setup(root: Path, mode: str):
    env = {**os.environ, "PATH": f"{root / 'fakebin'}:{os.environ['PATH']}", "PYTHON": "false"}
    return subprocess.run(["bash", str(root / "scripts" / "setup.sh"), mode], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_completed_setup_is_skipped_silently_until_pyproject_changes(checkout):
    root, log = checkout
    first = _setup(root, "app")
    assert first.returncode == 0, first.stderr
    assert any("pip install" in c and "-e ." in c for c in _calls(log))
    assert "setting up .venv" in first.stderr
    log.unlink()
    again = _setup(root, "app")  # the relaunch
    assert again.returncode == 0 and again.stdout == "" and again.stderr == ""
    assert _calls(log) == []
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    changed = _setup(root, "app")
    assert changed.returncode == 0 and any("pip install" in c for c in _calls(log))


def test_a_changed_engine_compiles_the_kernels_again_and_nothing_else(checkout):
    """numba's kernel cache is keyed by the engine's sources: after a pull that changed them, the
    relaunch compiles the kernels into the new folder (not the window's first run, nor a test)."""
    root, log = checkout
    assert _setup(root, "app").returncode == 0
    assert any("qmatvec.warm()" in c for c in _calls(log))
    log.unlink()
    assert _setup(root, "app").returncode == 0 and _calls(log) == []
    (root / "attnviz" / "engine" / "computing" / "qdot.py").write_text("K = 2\n")
    changed = _setup(root, "app")
    assert changed.returncode == 0 and "compiling the quantised kernels" in changed.stderr
    assert [c for c in _calls(log) if "pip" in c] == []
    assert any("qmatvec.warm()" in c for c in _calls(log))
    log.unlink()
    again = _setup(root, "app")
    assert again.returncode == 0 and again.stderr == "" and _calls(log) == []


def test_a_test_setup_covers_the_app_but_not_the_reverse(checkout):
    root, log = checkout
    assert _setup(root, "app").returncode == 0
    log.unlink()
    assert _setup(root, "test").returncode == 0
    assert any('-e .[test]' in c for c in _calls(log))  # the app set-up lacks pytest
    log.unlink()
    assert _setup(root, "app").returncode == 0 and _calls(log) == []
    assert _setup(root, "test").returncode == 0 and _calls(log) == []


def test_an_incomplete_venv_is_set_up_again(checkout):
    root, log = checkout
    assert _setup(root, "app").returncode == 0
    (root / ".venv" / "bin" / "attnviz").unlink()  # e.g. an install that was interrupted
    log.unlink()
    assert _setup(root, "app").returncode == 0
    assert any("pip install" in c for c in _calls(log))


def _installed_by(tmp_path: Path, mode: str) -> set[str]:
    """The system packages `setup.sh MODE` installs on a machine that has none of them, as root."""
    root = tmp_path / mode
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    _engine(root)
    log = root / "apt.log"
    _exe(root / ".venv" / "bin" / "python", "exit 0\n")
    _exe(root / ".venv" / "bin" / "attnviz", "exit 0\n")
    _exe(root / "fakebin" / "dpkg-query", "exit 1\n")  # nothing is installed
    _exe(root / "fakebin" / "id", "echo 0\n")  # root: the script installs instead of asking
    _exe(root / "fakebin" / "apt-get", f'echo "$*" >> "{log}"\n')
    result = _setup(root, mode)
    assert result.returncode == 0, result.stderr
    installs = [line.split() for line in log.read_text().splitlines() if line.startswith("install")]
    return {word for line in installs for word in line if not word.startswith("-") and word != "install"}


def test_whichever_set_up_runs_first_installs_what_the_window_needs(tmp_path):
    """run-app.sh accepts a finished test set-up, so the test set-up installs the X libraries and
    fonts as well: running the tests first must not leave a window that cannot start."""
    app = _installed_by(tmp_path, "app")
    test = _installed_by(tmp_path, "test")
    assert {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "fonts-noto-cjk"} <= app
    assert app <= test, f"the test set-up lacks {sorted(app - test)}"


def test_the_set_up_installs_fonts_for_the_scripts_the_window_shows(tmp_path):
    # Devanagari, Arabic, Hebrew, Thai, Bengali, Tamil... are in fonts-noto-core (Debian 12)
    assert "fonts-noto-core" in _installed_by(tmp_path, "app")
