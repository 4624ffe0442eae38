"""The token strip lays a result out once when every token fits its lines (a keystroke's slots),
and the boxes it shows are the tail layout's either way: the newest tokens after a "… N" box when
the strip has too few lines. A keystroke repaints the boxes it changed, and leaves on screen what a
repaint of the whole strip paints."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QPoint  # noqa: E402
from PySide6.QtGui import QRegion  # noqa: E402

from attnviz.ui.views.tokens import TokenStrip  # noqa: E402

WIDTH = 300


def shown_strip(qtbot, lines: int) -> TokenStrip:
    strip = TokenStrip()
    qtbot.addWidget(strip)
    strip.show()
    strip.resize(WIDTH, lines * strip._line_step() + 3)  # exactly `lines` lines tall
    qtbot.waitUntil(lambda: strip.isVisible() and strip.width() == WIDTH
                    and (strip.height() - 3) // strip._line_step() == lines, timeout=5000)
    return strip


def shown_layout(strip: TokenStrip):
    return ([(r.x(), r.y(), r.width(), r.height()) for r in strip._rects], strip._first,
            strip._head_rect, strip.more)


@pytest.mark.parametrize("lines", [1, 2, 4])
def test_strip_shows_the_tail_layout_for_every_length(qtbot, lines):
    strip = shown_strip(qtbot, lines)
    words = [f"·w{i % 7}{'x' * (i % 5)}" for i in range(80)]
    for n in range(0, 80, 3):
        labels = words[:n]
        strip.set_tokens(labels, [False] * n, None)
        height, rects, first, head, more = strip._wrap(strip.width(), lines, tail=True)
        assert shown_layout(strip) == ([(r.x(), r.y(), r.width(), r.height()) for r in rects],
                                       first, head, more), n
    if lines < TokenStrip.MAX_LINES:  # the longest overflowed: the newest tokens after a "… N" box
        assert strip._head_rect is not None and strip._first > 0
    else:  # at full height: the first tokens, then "… N more"
        assert strip._head_rect is None and strip.more > 0


def test_a_strip_asking_for_more_lines_shows_the_newest_tokens_until_it_gets_them(qtbot):
    # the pause's resize only asks the layout for a height; until it comes, the strip's own lines
    # keep the tail (a strip outside any layout never gets it)
    strip = shown_strip(qtbot, 1)
    one_line = strip.sizeHint().height()
    labels = [f"·word{i}" for i in range(40)]
    strip.set_tokens(labels, [False] * 40, None)
    qtbot.waitUntil(lambda: strip.sizeHint().height() > one_line, timeout=5000)
    assert (strip.height() - 3) // strip._line_step() == 1
    shown = {strip.index_at(QPoint(x, y)) for x in range(0, strip.width(), 3)
             for y in range(0, strip.height(), 3)}
    assert 0 not in shown and 39 in shown
    strip.resize(WIDTH, strip.sizeHint().height())  # the layout's resize: now from the first token
    qtbot.waitUntil(lambda: strip.index_at(strip.token_rect(0).center()) == 0, timeout=5000)


def test_fitting_tokens_are_wrapped_once_and_overflowing_ones_twice(qtbot, monkeypatch):
    strip = shown_strip(qtbot, 1)
    calls = []
    wrap = strip._wrap
    monkeypatch.setattr(strip, "_wrap", lambda *a, **k: calls.append(a) or wrap(*a, **k))
    strip.set_tokens(["The", "·cat"], [False, False], 1)
    assert len(calls) == 1 and strip._head_rect is None and strip.more == 0
    assert [r.x() for r in strip._rects][0] == 2 and len(strip._rects) == 2
    calls.clear()
    many = [f"·token{i}" for i in range(40)]  # far more than one line holds
    strip.set_tokens(many, [False] * 40, None)
    assert len(calls) == 2  # the strip's full height, then the newest tokens' tail layout
    assert strip._head_rect is not None and strip._first + len(strip._rects) == 40


class _Paints(QObject):
    """The region of each paint of the widget it watches."""

    def __init__(self):
        super().__init__()
        self.regions = []

    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint:
            self.regions.append(QRegion(ev.region()))
        return False


def test_a_keystroke_repaints_the_boxes_it_changed_as_a_whole_repaint_paints_them(qtbot):
    """After each new token list (a keystroke's) the strip on screen (the window's backing store)
    is what a repaint of all of it paints; a changed last word repaints its box, not the first."""
    strip = shown_strip(qtbot, 2)
    paints = _Paints()
    strip.installEventFilter(paints)
    words = "the keys to the cabinet that my grandmother left us are on the kitchen table".split()
    steps = [(["[CLS]", "the", "cat", "[SEP]"], None), (["[CLS]", "the", "cats", "[SEP]"], None),
             (["[CLS]", "the", "cats", "sat", "[SEP]"], 2), (["[CLS]", "the", "cats", "sit", "[SEP]"], 3),
             (["[CLS]", *words, "[SEP]"], None), (["[CLS]", *words, "s", "[SEP]"], 4),
             (["[CLS]", "the", "[SEP]"], None), ([], None)]
    for k, (labels, query) in enumerate(steps):
        paints.regions.clear()
        strip.set_tokens(labels, [w.startswith("[") for w in labels], query)
        qtbot.waitUntil(lambda: bool(paints.regions), timeout=5000)
        QCoreApplication.processEvents()
        if k == 1:  # "cat" -> "cats": that box, not the first
            region = paints.regions[0]
            assert region.contains(strip.token_rect(2).center())
            assert not region.contains(strip.token_rect(0).center())
        shown = strip.screen().grabWindow(strip.winId()).toImage()
        strip.repaint()
        assert strip.screen().grabWindow(strip.winId()).toImage() == shown, labels
