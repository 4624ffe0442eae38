"""Tooltips that quote token labels (the token strip's, Compare's readouts) show them as written: a
label such as '<s>' or one holding '&' is neither read as a tag nor dropped, line breaks kept."""

from attnviz.ui.views.fields import plain_tip
from windows import tip_shown

TEXT = "#0: '<s>', piece '<0x0A>', id 1 (click: show this query row in every head)\nA & B"


def test_a_tooltip_quoting_markup_like_tokens_shows_them_whole(qapp):
    assert tip_shown(TEXT) != TEXT  # (what the bare text would show: the tags gone)
    assert tip_shown(plain_tip(TEXT)) == TEXT
    assert plain_tip("") == ""  # (no tooltip stays none)


def test_the_token_strips_tooltip_shows_a_markup_like_token(qtbot, monkeypatch):
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent

    from attnviz.ui.views import tokens
    said = []
    monkeypatch.setattr(tokens.QToolTip, "showText", lambda pos, text, *a: said.append(text))
    strip = tokens.TokenStrip()
    qtbot.addWidget(strip)
    strip.resize(600, 200)
    strip.set_tokens(["<s>", "A", "&"], [True, False, False], None)
    at = strip.token_rect(0).center()
    strip.event(QHelpEvent(QEvent.Type.ToolTip, at, strip.mapToGlobal(at)))
    assert said and tip_shown(said[-1]).startswith("#0: '<s>'"), said


def test_the_query_label_shows_a_markup_like_token(qtbot):
    """The status bar's "Query: …" names a token such as '<s>' as it is, in its text and its hover."""
    from attnviz.ui.views.compute_figures import QueryLabel
    from windows import shown_label

    label = QueryLabel()
    qtbot.addWidget(label)
    label.set_query("<s>", 0, "<s>")
    assert shown_label(label) == "Query: <s> (#0)"
    assert tip_shown(label.toolTip()).startswith("Query: <s> (#0): ")
