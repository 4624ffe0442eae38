"""Token counts read as numbers do elsewhere: one token is '1 token' (the status bar, the focus
view's title, Why here's note, Patching's lines), and a count past a thousand has its separator
(the notice of a text cut to the model's positions)."""

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
    # what is shown is [CLS], the text's first 510 tokens and its closing [SEP]: the notice says so
    assert re.fullmatch(r"Text is 1,\d{3} tokens; all-MiniLM-L6-v2 reads at most 512 positions, so what "
                        r"is shown is its first 511 tokens and its closing \[SEP\]\.", notice.text()), notice.text()
    assert w.state.result.labels[-1] == "[SEP]" and len(w.state.result.labels) == 512


def test_one_token_in_why_here(qtbot, tmp_path):
    """Why here's note on a cell gone with the text reads '1 token', never '1 tokens'."""
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="a b c", panels=("why",))
    w.why_jobs.set_cell(0, 0, 2, 1)
    w.state.set_text("")  # the toy decoder's BOS alone
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == "", timeout=WAIT)
    qtbot.waitUntil(lambda: w.why_jobs.cell is None, timeout=WAIT)
    assert w.why_jobs.note.startswith("The cell (query 2, key 1) is gone: the text has 1 token. "), w.why_jobs.note


def test_one_token_in_patching(qtbot, tmp_path, smollm2):
    """Patching's line for a position past a one-token text and its line on two lengths read
    '1 token', never '1 tokens'; SmolLM2 reads "Hello" as one token, with no BOS."""
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text="Hello", panels=("patching",))
    w.patching_dock.show()
    w.patching_dock.raise_()
    p = w.patching_panel
    p.corrupt_box.setText("Hello there")
    qtbot.waitUntil(lambda: p.note.text().startswith("the clean text is"), timeout=WAIT)
    assert p.note.text() == ("the clean text is 1 token and the corrupted text 2: patching needs texts "
                             "of one length"), p.note.text()
    p.position_box.setValue(1)
    qtbot.waitUntil(lambda: p.position_label.text().startswith("outside"), timeout=WAIT)
    assert p.position_label.text() == "outside the 1 token (0..0)", p.position_label.text()
    w.worker.wait_idle()
