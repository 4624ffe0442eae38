"""The files a model's arrays map (its weights, memory-mapped), held open from load with the size
and modification time they had then, so that a run checks first that each is still as it was.

A file truncated in place after attnviz mapped it would end the process at the first read past its
new end (SIGBUS: no message, nothing saved), and one rewritten in place would give numbers from a
mix of its old and new bytes. One fstat of each held file before a run tells both from a file left
alone. A file replaced whole (a new file renamed onto its path, as most downloaders and converters
write one) is no change: the map still reads the file that was opened, which stays as it was.
"""

from __future__ import annotations

import os
import time
import weakref
from pathlib import Path

import numpy as np

from attnviz.engine.errors import ModelFileChanged
from attnviz.engine.reading.byte_sizes import format_bytes


class MappedFile:
    """A file held open (closed when this is freed) with its size and modification time at open:
    map it through `open_file` so that the map and the checks read the same file."""

    def __init__(self, path):
        self.path = Path(path)
        fh = open(self.path, "rb")  # (OSError: the caller says which file and why)
        # (not at exit: a job still running as Python exits reads through it; the OS closes it)
        weakref.finalize(self, fh.close).atexit = False
        self._fh = fh
        st = os.fstat(fh.fileno())
        self.size, self.mtime_ns = st.st_size, st.st_mtime_ns

    def open_file(self):
        """The held file, positioned at its start: for np.memmap or a reader to map."""
        self._fh.seek(0)
        return self._fh

    def memmap(self) -> np.memmap:
        """The whole file as read-only bytes, mapped from the held file."""
        return np.memmap(self.open_file(), dtype=np.uint8, mode="r")

    def check(self, model_path=None) -> None:
        """ModelFileChanged where the held file's size or modification time is not what it was at
        open (it was truncated, or written to, in place). The file is named from the folder that
        holds the model at `model_path` (a model's folder, or its GGUF file) where given, so that
        two models' files of one name (Compare's A and B, two training steps) read apart:
        "gpt2/model.safetensors", "tiny.gguf"."""
        st = os.fstat(self._fh.fileno())
        if st.st_size != self.size or st.st_mtime_ns != self.mtime_ns:
            raise ModelFileChanged(changed_message(self.named_from(model_path), self.size, st.st_size,
                                                   st.st_mtime_ns))

    def named_from(self, model_path=None) -> str:
        """The file's path from the folder that holds `model_path`; its name where it is not under it."""
        if model_path is not None:
            top = Path(model_path).resolve().parent
            mine = self.path.resolve()
            if mine.is_relative_to(top):
                return mine.relative_to(top).as_posix()
        return self.path.name


def check_files(files, model_path=None) -> None:
    """Check each of `files`, of the model at `model_path` (MappedFile.check): one fstat each."""
    for f in files:
        f.check(model_path)


def changed_message(name: str, was: int, now: int, mtime_ns: int) -> str:
    """The refusal for file `name` of `was` bytes at open, `now` bytes and modified at `mtime_ns`
    now: its sizes where they differ (to the byte where the rounded ones read the same), else its
    new modification time."""
    if now != was:
        a, b = format_bytes(was), format_bytes(now)
        if a == b:
            a, b = f"{was:,} bytes", f"{now:,} bytes"
        how = f"it was {a}, it is {b} now"
    else:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime_ns // 1_000_000_000))
        how = f"its size is the same, {format_bytes(was)}, but its modification time changed to {when}"
    return (f"{name} changed on disk after attnviz opened it ({how}): open the model again to read "
            "the new file")
