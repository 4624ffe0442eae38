"""Files written whole: each is written under a hidden temporary name in its target's folder, then
renamed into place (os.replace), so a reader sees the old file or the new one and a failure leaves
nothing. The temporary file gets a normal file's permissions (0666 less the umask), not mkstemp's
0600, since the rename keeps them. Used by `attnviz quantize` and by every export."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask (reading it means setting it: it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_beside(path: Path, suffix: str) -> tuple[int, Path]:
    """A new hidden temporary file in `path`'s folder, open (its descriptor) and with a normal
    file's permissions; the caller closes it and renames it onto `path` or removes it. OSError
    when the folder takes no new file; nothing is left then."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, Path(tmp)
