"""A long text that grows (a longer paste): a view of the whole pattern follows it to the new end,
and the status bar counts the new text's tokens; a zoomed region that fits the new text stays."""

import pytest

from attnviz.engine.computing.longdoc import dense_bytes
from windows import PARAGRAPH, PROMPT, WAIT, open_window, widget


@pytest.fixture
def win(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    yield w
    w.worker.wait_idle()


def _long(qtbot, w, text):
    lg = w.state.long
    w.set_text(text)
    qtbot.waitUntil(lambda: lg.run is not None and lg.run.result.text == text and lg.pane is not None
                    and lg.pane.region == lg.region, timeout=WAIT)
    w.worker.wait_idle()
    return lg.T


def test_a_longer_paste_shows_the_whole_new_pattern_and_counts_its_tokens(win, qtbot):
    w, lg = win, win.state.long
    first = _long(qtbot, w, PARAGRAPH * 3)
    assert lg.region == (0, first, 0, first) and widget(w, "tokens_label").text() == f"{first:,} tokens"
    T = _long(qtbot, w, PARAGRAPH * 5)  # a longer paste
    assert T > first
    assert lg.region == (0, T, 0, T)
    assert widget(w, "tokens_label").text() == f"{T:,} tokens"
    assert f"{T:,} tokens" in widget(w, "long_view").info.text() and f"0..{T - 1:,}" in widget(w, "long_view").info.text()


def test_a_zoomed_region_stays_while_the_text_grows(win, qtbot):
    w, lg = win, win.state.long
    first = _long(qtbot, w, PARAGRAPH * 3)
    lg.set_region((10, 30, 5, 25))
    T = _long(qtbot, w, PARAGRAPH * 4)
    assert T > first and lg.region == (10, 30, 5, 25)
    assert widget(w, "tokens_label").text() == f"{T:,} tokens"
