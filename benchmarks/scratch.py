"""Temporary folders of a benchmark run (its window's settings file, its exports), removed when
the benchmark's process ends: a run leaves nothing in the temporary folder."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

PREFIX = "attnviz-bench-"


def scratch_folder(prefix: str = PREFIX) -> Path:
    """A new empty folder, removed with what it holds when this process ends."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def scratch_settings(name: str = "s.ini", prefix: str = PREFIX):
    """A QSettings INI file in a scratch folder (never the user's settings). At exit its changes
    are written first, then the folder removed: a change still pending would otherwise be written
    as the object goes, after the removal, and make the folder again."""
    from PySide6.QtCore import QSettings

    settings = QSettings(str(scratch_folder(prefix) / name), QSettings.Format.IniFormat)
    atexit.register(settings.sync)  # (atexit runs last-registered first: before the removal)
    return settings
