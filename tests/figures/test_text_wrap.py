"""One word-wrapping rule for every figure (figures/text_wrap.wrap): lines that fit, a number kept
with the word after it, a note that fits on a line of its own not split, a word wider than a line
(in the anatomy figure's text as in a heading) cut with an ellipsis rather than drawn past its
box, and a line limit that ends in one."""

import dataclasses

import numpy as np
from PySide6.QtGui import QFontMetricsF

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy
from attnviz.figures.render import figure_font
from attnviz.figures.text_wrap import NOTE_SEPARATOR, wrap
from tiny import tiny_llama

FONT = figure_font(10)


def advance(text: str) -> float:
    return QFontMetricsF(FONT).horizontalAdvance(text)


def test_lines_fit_and_hold_the_text_whole(qapp):
    text = "the quick brown fox jumps over the lazy dog " * 4
    lines, whole = wrap(text, FONT, advance("the quick brown fox"))
    assert whole and len(lines) > 4 and all(advance(x) <= advance("the quick brown fox") for x in lines)
    assert " ".join(lines) == text.strip()
    assert wrap("", FONT, 100) == ([], True) and wrap("   ", FONT, 100) == ([], True)


def test_a_number_keeps_the_word_after_it(qapp):
    lines, _ = wrap("scores 3.123 nats at L1 H0", FONT, advance("scores 3.123 nats"))
    assert lines == ["scores 3.123 nats", "at L1 H0"], lines
    lines, _ = wrap("up to 3.123 nats", FONT, advance("up to 3.123"))
    assert lines == ["up to", "3.123 nats"], lines  # (never "3.123" at a line's end, its unit below)


def test_a_note_that_fits_a_line_of_its_own_starts_one(qapp):
    notes = ["first note here", "a second note that is longer"]
    lines, whole = wrap(notes, FONT, advance(notes[1]) + 1)
    assert lines == notes and whole
    lines, _ = wrap(["a", "b"], FONT, 1000)
    assert lines == ["a" + NOTE_SEPARATOR + "b"]
    long = "a third note far too long to fit on any one line of this width at all"
    lines, whole = wrap(["x", long], FONT, advance("a third note far"))
    assert lines[0].startswith("x" + NOTE_SEPARATOR) and whole  # (split where it would be anyway)
    assert " ".join(lines).replace(NOTE_SEPARATOR.strip(), "").split() == ["x", *long.split()]


def test_a_word_wider_than_a_line_and_lines_past_the_limit_end_in_an_ellipsis(qapp):
    lines, whole = wrap("a Supercalifragilisticexpialidocious word", FONT, advance("Supercali"))
    assert not whole and lines[0] == "a" and lines[1].endswith("\u2026") and lines[2] == "word"
    assert all(advance(x) <= advance("Supercali") for x in lines)
    lines, whole = wrap("one two three four five six", FONT, advance("one two"), most=2)
    assert not whole and len(lines) == 2 and lines[0] == "one two" and lines[1].endswith("\u2026")


def test_the_anatomy_figure_draws_no_text_past_its_box(qapp, tmp_path):
    model = load_model(tiny_llama(tmp_path / "m"))
    run = model.run(ids=np.array([3, 1, 4, 1, 5]), request=RunRequest(inputs=True, use_cache=False))
    view = anatomy.make_anatomy_view(model, run, 0)
    word = "an_unbreakable_key_name_" * 8  # wider than the figure: cut, not drawn past the edge
    view = dataclasses.replace(view, notes=[*view.notes, f"see {word} here"])
    lay = anatomy.layout(view, 400)
    over = [(t.text, QFontMetricsF(t.font).horizontalAdvance(t.text), t.rect.width()) for t in lay.texts
            if QFontMetricsF(t.font).horizontalAdvance(t.text) > t.rect.width() + 0.5]
    assert not over, over
    assert any(t.text.startswith("an_unbreakable") and t.text.endswith("\u2026") for t in lay.texts)
