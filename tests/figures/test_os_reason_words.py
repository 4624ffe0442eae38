"""An OSError reads in the same words wherever the app names it: a model file it cannot read, an
export it cannot write, a GGUF it cannot write ("cannot read x: permission denied", "cannot write
y: permission denied"). (The export writer had its own words: "Permission denied", "a folder has
that name", where reading a model said "permission denied", "it is a folder, not a file".)"""

import errno
import os
from pathlib import Path

import pytest

from attnviz.engine.reading.validate import cannot_read
from attnviz.figures import data as export_data
from attnviz.figures.data import ExportError

ERRORS = [PermissionError(errno.EACCES, "Permission denied"), IsADirectoryError(errno.EISDIR, "Is a directory"),
          OSError(errno.ENOSPC, "No space left on device")]


@pytest.mark.parametrize("exc", ERRORS, ids=["permission", "folder", "full"])
def test_an_export_names_an_os_error_as_reading_a_model_does(qapp, tmp_path, monkeypatch, exc):
    from attnviz.figures.write import export_result
    from test_export import fake_result

    reading = str(cannot_read(Path("model.safetensors"), exc)).split(": ", 1)[1]
    assert reading == reading.lower() and "errno" not in reading.lower()

    def fail(*_a, **_k):
        raise exc
    monkeypatch.setattr(export_data.os, "replace", fail)
    out = tmp_path / "fig.png"
    with pytest.raises(ExportError) as err:
        export_result(fake_result(), out, model="m", scope="head", layer=0, head=0)
    assert f"cannot write {out}: {reading}" in str(err.value), (str(err.value), reading)
    assert os.listdir(tmp_path) == []


def test_only_the_systems_words_are_lowered_never_a_message_or_a_path():
    from attnviz.engine.reading.validate import os_reason

    assert os_reason(OSError(errno.ENOSPC, "No space left on device")) == "no space left on device"
    assert os_reason(OSError("Cannot open /Data/Model.GGUF: truncated")) == \
        "Cannot open /Data/Model.GGUF: truncated"
    assert os_reason(OSError()) == "OSError"
    assert os_reason(BlockingIOError()) == "BlockingIOError"
