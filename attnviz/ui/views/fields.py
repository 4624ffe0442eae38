"""Text boxes the program fills (a proposed corrupted text, a target that follows the prediction, a
token Find picked): shown from their start. QLineEdit.setText leaves the cursor at the end, and a
box shows the text around its cursor, so a text longer than the box would read from mid-word."""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit


def fill(edit: QLineEdit, text: str) -> None:
    """Put `text` in `edit`, its start in sight (a user's own typing never passes through here)."""
    edit.setText(text)
    edit.setCursorPosition(0)
