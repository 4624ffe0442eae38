"""Text the program puts in front of the user as it is. Boxes it fills (a proposed corrupted text,
a target that follows the prediction, a token Find picked) are shown from their start:
QLineEdit.setText leaves the cursor at the end, and a box shows the text around its cursor, so a
text longer than the box would read from mid-word. Labels and tooltips that quote token labels are
plain text: Qt reads a label's or a tooltip's text as rich text when its first line holds an HTML
tag, and a token such as '<s>' (Llama's and Mistral's first) is one, so it vanished and struck
out the rest of the line."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QLineEdit


def fill(edit: QLineEdit, text: str) -> None:
    """Put `text` in `edit`, its start in sight (a user's own typing never passes through here)."""
    edit.setText(text)
    edit.setCursorPosition(0)


def plain_label(label: QLabel) -> QLabel:
    """`label`, its text shown as plain text whatever it holds (module docstring)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_tip(text: str) -> str:
    """A tooltip's text that Qt shows as written: escaped in rich text of its own, its line breaks
    kept (module docstring); empty stays empty (no tooltip)."""
    if not text:
        return text
    return "<p style='white-space:pre-wrap'>" + html.escape(text, quote=False) + "</p>"

