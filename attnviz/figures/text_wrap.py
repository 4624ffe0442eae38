"""Text broken into lines that fit a width in a font: the one word-wrapping rule every figure uses
(headings and captions, the export header's notes, the anatomy figure's text and table cells)."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetricsF

NOTE_SEPARATOR = "  \u00b7  "  # between notes on one line


def wrap(text: str | list[str], font: QFont, width: float, most: int | None = None,
         sep: str = NOTE_SEPARATOR) -> tuple[list[str], bool]:
    """`text` broken between its words into lines no wider than `width` pixels in `font` ->
    (the lines, whether they hold it whole). A list is notes joined by `sep`: a note that fits on
    a line of its own starts one rather than being split. A number keeps the word after it on its
    line ("3.123 nats", "L1 H0"); the spaces where a line breaks are dropped. A word wider than a
    line, and with `most` lines at most the last of them (holding the rest), end in an ellipsis.
    An empty text has no lines."""
    fm = QFontMetricsF(font)
    width = max(1.0, width)

    def fits(line: str) -> bool:
        return fm.horizontalAdvance(line) <= width

    lines: list[str] = []
    line = ""
    for n, note in enumerate([text] if isinstance(text, str) else text):
        if line and n:  # a note after another: on the same line, else on a line of its own if it fits
            if fits(line + sep + note):
                line += sep + note
                continue
            if fits(note):
                lines.append(line)
                line = note
                continue
        for k, (gap, word) in enumerate(_words(note)):
            gap = sep if k == 0 and line else gap
            if not line:
                line = word
            elif fits(line + gap + word):
                line += gap + word
            else:
                lines.append(line)
                line = word
    if line:
        lines.append(line)
    whole = (most is None or len(lines) <= most) and all(fits(x) for x in lines)
    if most is not None and len(lines) > most:
        lines[most - 1:] = [" ".join(lines[most - 1:])]
    return [fm.elidedText(x, Qt.TextElideMode.ElideRight, width) for x in lines], whole


def _words(text: str) -> list[tuple[str, str]]:
    """(the space before it, the word) for each word of `text`, a number and the word after it
    being one word; a run of spaces is kept as written, any other white space reads as one space,
    and a no-break space joins the words beside it."""
    parts = re.split(r"([^\S\u00a0]+)", text.strip())
    out: list[tuple[str, str]] = []
    for gap, word in zip([""] + parts[1::2], parts[::2]):
        gap = gap if set(gap) <= {" "} else " "
        if out and out[-1][1][-1:].isdigit() and word[:1].isalpha():
            out[-1] = (out[-1][0], out[-1][1] + gap + word)
        elif word:
            out.append((gap, word))
    return out
