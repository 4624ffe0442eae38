"""A token made of one invisible character (the U+FE0F after the ❤ of ❤️) paints something in its
chip of the token strip: its bytes, never an empty box."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from attnviz.ui.views.tokens import TokenStrip  # noqa: E402


def dark_pixels(image, rect) -> int:
    return sum(1 for x in range(rect.left() + 2, rect.right() - 1) for y in range(rect.top() + 2, rect.bottom() - 1)
               if max(image.pixelColor(x, y).red(), image.pixelColor(x, y).green(),
                      image.pixelColor(x, y).blue()) < 110)


def test_a_variation_selector_token_paints_its_bytes(qtbot, smollm2):
    r = smollm2.run("I \u2764\ufe0f \u6771\u4eac")
    i = next(j for j, (a, b) in enumerate(r.offsets) if r.text[a:b] == "\ufe0f")
    strip = TokenStrip()
    qtbot.addWidget(strip)
    strip.show()
    strip.resize(600, 60)
    qtbot.waitUntil(lambda: strip.isVisible() and strip.width() == 600, timeout=5000)
    strip.set_tokens(r.labels, [False] * len(r.labels), None)
    image = strip.grab().toImage()
    assert dark_pixels(image, strip.token_rect(i)) > 10, ascii(strip.labels[i])
    assert strip.labels[i] == "<EF B8 8F>"
