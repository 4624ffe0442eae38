"""Token counts read as numbers do elsewhere: one token is '1 token' (the status bar, the focus
view's title), and a count past a thousand has its separator (the notice of a text cut to the
model's positions)."""

import re

from windows import TOY, WAIT, open_window, widget


def test_one_token_is_not_1_tokens(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="a")
    w.state.set_text("")  # the toy decoder's BOS alone
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == "", timeout=WAIT)
    assert len(w.state.result.tokens) == 1
    assert widget(w, "tokens_label").text() == "1 token"
    w.state.set_focus(0, 0)
    qtbot.waitUntil(lambda: "L0 H0" in w.focus_view.title.text(), timeout=WAIT)
    assert " · 1 token · " in w.focus_view.title.text()


def test_a_cut_text_counts_with_separators(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini")  # MiniLM: 512 positions
    w.state.set_text("word " * 1200)
    notice = widget(w, "text_notice")
    qtbot.waitUntil(lambda: notice.isVisible() and notice.text().startswith("Text is"), timeout=WAIT)
    assert re.match(r"Text is 1,\d{3} tokens; all-MiniLM-L6-v2 reads at most 512 positions, so only "
                    r"the first 512 are shown\.", notice.text()), notice.text()
