"""Fixtures of the window tests: a per-test settings file and the window opened on MiniLM."""

import pytest

from windows import open_window


@pytest.fixture
def settings_path(tmp_path):
    return str(tmp_path / "settings.ini")


@pytest.fixture
def window(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    yield w
    w.worker.wait_idle()
