"""The scripts the window commonly shows are drawn with real glyphs, not the missing-glyph box:
token labels and the text box use the application's font, and Qt falls back through fontconfig to
whatever font covers a character (scripts/setup.sh installs the Noto families for that).

A missing glyph is drawn as one box whatever the character, so letters of a script that draw
identically, or like a codepoint no font has, are boxes."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication

LETTERS = {
    "Latin": "Wor",
    "Greek": "λγω",
    "Cyrillic": "слж",
    "Hebrew": "שלם",
    "Arabic": "سلم",
    "Devanagari": "नमस",
    "Bengali": "নমস",
    "Tamil": "வணக",
    "Thai": "สวด",
    "Chinese": "漢字",
    "Japanese": "ひらカ",
    "Korean": "한국",
    "emoji": "🙂🙃",
}
MISSING = "\U0010FFFD"  # a private-use codepoint in the last plane: no font draws it


def _drawn(text: str) -> QImage:
    font = QApplication.font()
    font.setPixelSize(24)
    image = QImage(48, 40, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.white)
    painter = QPainter(image)
    painter.setFont(font)
    painter.setPen(Qt.GlobalColor.black)
    painter.drawText(6, 30, text)
    painter.end()
    return image


@pytest.mark.parametrize("script", sorted(LETTERS))
def test_each_script_is_drawn_with_real_glyphs(qapp, script):
    letters = LETTERS[script]
    box = _drawn(MISSING)
    drawn = [_drawn(ch) for ch in letters]
    for ch, image in zip(letters, drawn):
        assert image != box, f"{script} {ch!r} is drawn as the missing-glyph box"
    for i in range(len(letters)):
        for j in range(i + 1, len(letters)):
            assert drawn[i] != drawn[j], (
                f"{script} {letters[i]!r} and {letters[j]!r} draw alike: both are boxes")


def test_a_letter_draws_unlike_the_missing_box(qapp):
    # the reference the tests above compare against is itself a visible mark
    assert _drawn(MISSING) != _drawn(" ")
