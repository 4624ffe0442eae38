"""The user's cache folder for what attnviz derives from a model and can make again (the textbook
model's files, a GGUF vocabulary's merge order): $ATTNVIZ_CACHE, else $XDG_CACHE_HOME/attnviz, else
~/.cache/attnviz. Deleting it loses nothing but the time to make its files again."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("ATTNVIZ_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attnviz"
