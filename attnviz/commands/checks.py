"""Argument checks shared by the commands: numbers in range, output paths that can be written.

Each check fails before any model is loaded, with one line that names the flag and the value."""

from __future__ import annotations

import argparse
import re
import stat
import sys
from pathlib import Path

from attnviz.engine.errors import InputError

_ID = re.compile(r"[+-]?[0-9]+")  # ASCII digits: int() also takes "٣"


def at_least(minimum: int):
    """An argparse `type`: an integer >= minimum (usage error otherwise)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value
    return parse


positive = at_least(1)
non_negative = at_least(0)


def parse_ids(text: str, flag: str = "--ids") -> list[int]:
    """`"5, 17,3"` -> [5, 17, 3]. Empty input, empty items and non-integers are refused."""
    example = f"give comma-separated token ids, e.g. {flag} 5,17,3"
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise InputError(f"{flag} {text!r} holds no token ids: {example}")
    for i, p in enumerate(parts):  # positions count from 0, like token positions
        if not p:
            raise InputError(f"{flag} {text!r} has an empty item at position {i}: {example}")
        if not _ID.fullmatch(p):
            raise InputError(f"{flag} {text!r}: {p!r} at position {i} is not an integer: {example}")
        if len(p) > 20:  # int() refuses thousands of digits; no vocabulary is this big
            raise InputError(f"{flag}: {p[:20]}... at position {i} is too large to be a token id")
    return [int(p) for p in parts]


def check_out(path: str, suffixes: tuple[str, ...], flag: str = "--out") -> Path:
    """An output file that can be created: a known suffix, an existing folder, not a folder itself."""
    out = Path(path)
    if not out.name or out.suffix.lower() not in suffixes:
        raise InputError(f"{flag} must end in {', '.join(suffixes)}, got {out.name or path!r}")
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(f"{flag} {path}: the folder {folder} {what}")
    if out.is_dir():
        raise InputError(f"{flag} {path} is a folder, not a file")
    if out.exists() and not stat.S_ISREG(out.stat().st_mode):
        raise InputError(f"{flag} {path} exists and is not a regular file (a FIFO, device or socket)")
    return out


def refuse_options(options, where: str, sep: str = ", ") -> None:
    """InputError naming the options given where they do not apply: `options` is (flag, given)
    pairs, `where` ends the sentence ("--width, --scale apply only to .png and .svg images")."""
    given = [flag for flag, on in options if on]
    if given:
        raise InputError(f"{sep.join(given)} appl{'y' if len(given) > 1 else 'ies'} {where}")


def show_notice(command: str, result) -> None:
    """What a run changed in the input (e.g. lone surrogates replaced), as one line on stderr."""
    if getattr(result, "notice", None):
        print(f"attnviz {command}: note: {result.notice}", file=sys.stderr)
