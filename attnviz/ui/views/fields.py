"""Text the program puts in front of the user as it is. Boxes it fills (a proposed corrupted text,
a target that follows the prediction, a token Find picked) are shown from their start:
QLineEdit.setText leaves the cursor at the end, and a box shows the text around its cursor, so a
text longer than the box would read from mid-word. Every label says how its text is read, once, as
it is made: plain_label (most) or rich_label (text built as HTML, every value put into it through
html.escape); left to Qt, a label's or a tooltip's text is rich text when its first line holds an
HTML tag, and a token such as '<s>' (Llama's and Mistral's first) is one, so it vanished and struck
out the rest of the line. Tooltips (and message boxes) that quote a token, a text, a model's name
or a path pass through plain_tip, and menu entries and buttons naming one through menu_text
(tests/ui/test_plain_text.py walks the window for a label or a tooltip that does not)."""

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


def rich_label(label: QLabel) -> QLabel:
    """`label`, its text read as HTML: the code that fills it escapes what it quotes (html.escape)."""
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


def plain_tip(text: str) -> str:
    """A tooltip's (or a message box's) text that Qt shows as written: escaped in rich text of its
    own, its line breaks kept (module docstring); empty stays empty (no tooltip)."""
    if not text:
        return text
    return "<p style='white-space:pre-wrap'>" + html.escape(text, quote=False) + "</p>"


def menu_text(text: str) -> str:
    """A menu entry's or a button's text naming a model or a file as written: Qt reads one '&' in
    it as the mark of the key that follows ("Q&A" showed "QA", the A underlined)."""
    return text.replace("&", "&&")
