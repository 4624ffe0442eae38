"""Where numba keeps the compiled kernels: a folder keyed by a hash of every file their machine code
is built from, so a change to any one of them compiles them all again.

numba renews a cached function only when the function's own file changes, yet the kernels call
functions of other files (onerow_block calls rowmath's and qdot's) and compile in constants of
others (qpack's LANES): after a pull that changed rowmath.py alone, onerow_block's cached code would
still be built on the old rowmath. So every kernel module imports this one before it decorates a
function, and numba's cache (`numba.config.CACHE_DIR`, read when a function is decorated) points at

    <base>/attnviz-<key>,   key = sha256 of SOURCES' bytes (16 hex digits)

base: $NUMBA_CACHE_DIR where the user set it, else the user's cache folder's `kernels`
(engine/reading/user_cache.py: $ATTNVIZ_CACHE, else $XDG_CACHE_HOME/attnviz, else
~/.cache/attnviz). The KEPT most recently used folders stay, older ones unused for an hour go.
Where base cannot be written, a folder in the temporary directory; where neither can, numba's own
choice (the log says so). Deleting the folders loses nothing but the time to compile again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from attnviz.engine.reading.user_cache import cache_root

log = logging.getLogger(__name__)

_ENGINE = Path(__file__).resolve().parents[1]
# the files the kernels' machine code is built from: every module with numba-compiled functions,
# and the modules whose constants they compile in (tests/engine/test_kernel_cache.py checks it)
SOURCES = tuple(_ENGINE / p for p in (
    "computing/qdot.py", "computing/qbytes.py", "computing/qmadd.py", "computing/qx.py",
    "computing/rowmath.py", "computing/lanes.py", "computing/onerow.py", "computing/onerow_block.py", "computing/onerow_stack.py",
    "computing/onerow_pair.py",
    "computing/qregroup.py", "reading/qpack.py"))
PREFIX = "attnviz-"
KEPT = 3  # folders kept beside the one in use: the most recently used
IDLE_S = 3600  # a folder used this recently is never removed (another process may be compiling into it)
_NAME = re.compile(re.escape(PREFIX) + r"[0-9a-f]{16}")

FOLDER: Path | None = None  # the folder numba caches in, once use() has run (None: numba's own)
_done = False


def sources_key(sources=SOURCES) -> str:
    """16 hex digits of sha256 over each file's name and bytes (a missing file: its name alone)."""
    h = hashlib.sha256()
    for path in sources:
        h.update(Path(path).name.encode() + b"\0")
        try:
            h.update(Path(path).read_bytes())
        except OSError:
            h.update(b"(missing)")
        h.update(b"\0")
    return h.hexdigest()[:16]


def base_folder() -> Path:
    """$NUMBA_CACHE_DIR where the user set it, else the user's cache folder's `kernels`."""
    user = os.environ.get("NUMBA_CACHE_DIR")
    return Path(user) if user else cache_root() / "kernels"


def folder_for(key: str) -> Path:
    """Where the kernels built from sources with `key` are cached. A NUMBA_CACHE_DIR that already
    names that folder (a child process of one that set it) is taken as it is."""
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user and Path(user).name == PREFIX + key:
        return Path(user)
    return base_folder() / (PREFIX + key)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        os.utime(folder)  # (its time is when it was last used: prune keeps the recent ones)
        return True
    except OSError:
        return False


def prune(base: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove base's kernel folders beyond the KEPT most recently used besides `keep`, except any
    used within IDLE_S; the removed ones."""
    now = time.time() if now is None else now
    try:
        others = [p for p in base.iterdir() if p.is_dir() and _NAME.fullmatch(p.name) and p != keep]
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    removed = []
    for old in others[KEPT:]:
        try:
            if now - old.stat().st_mtime > IDLE_S:
                shutil.rmtree(old)
                removed.append(old)
        except OSError:
            pass
    return removed


def choose(key: str) -> Path | None:
    """The first folder for `key` that can be written: folder_for(key), else one in the temporary
    directory; None where neither can."""
    uid = getattr(os, "getuid", lambda: "user")()
    for folder in (folder_for(key), Path(tempfile.gettempdir()) / f"attnviz-kernels-{uid}" / (PREFIX + key)):
        if _writable(folder):
            return folder
    return None


def use() -> Path | None:
    """Point numba's cache at the folder of these sources (first call only; numba must be
    importable); the folder, or None where no folder can be written (numba's own choice then)."""
    global FOLDER, _done
    if _done:
        return FOLDER
    _done = True
    import numba

    key = sources_key()
    folder = choose(key)
    if folder is None:
        log.warning("no folder for the compiled kernels can be written (%s): numba's own cache is "
                    "used, which a change to a kernel's other files does not renew", folder_for(key))
        return None
    # the environment too: numba reads it again at each compile where a NUMBA_ variable changed
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    numba.config.CACHE_DIR = str(folder)
    FOLDER = folder
    prune(folder.parent, folder)
    return folder
