"""Fixtures of the window tests: a per-test settings file, the window opened on MiniLM, and the
window with its Patching tab on the toy decoder."""

import pytest

from windows import IOI, TOY, open_window


@pytest.fixture
def settings_path(tmp_path):
    return str(tmp_path / "settings.ini")


@pytest.fixture
def window(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    yield w
    w.worker.wait_idle()


@pytest.fixture
def patching_window(qtbot, tmp_path):
    """The window on the toy decoder with the Patching tab shown (both Patching test files)."""
    w = open_window(qtbot, tmp_path / "p.ini", model=TOY, text=IOI, panels=("patching",))
    w.patching_dock.show()
    w.patching_dock.raise_()
    w.resize(1400, 1000)
    yield w
    w.patch_jobs.cancel()
    w.worker.wait_idle()
