"""A long text's progress in the status bar ("Long text: computing layer 3 of 30…") goes once a
short text replaces it: the grid then shows the short text, and no long run is under way."""

from attnviz.engine.computing.longdoc import dense_bytes
from windows import PARAGRAPH, PROMPT, WAIT, drain_events, open_window


def test_a_short_text_clears_the_long_runs_progress(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    cfg = smollm2.config
    w.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    bar = w.statusBar()
    with qtbot.waitSignal(w.state.sigStatus, timeout=WAIT,
                          check_params_cb=lambda m: "computing layer" in m):
        w.set_text(PARAGRAPH * 12)
    assert "computing layer" in bar.currentMessage()
    short_text_shown(w, qtbot)
    assert "computing layer" not in bar.currentMessage()


def test_a_short_text_clears_the_finished_long_runs_line(qtbot, tmp_path):
    """'Long text: 179 tokens, every layer computed.' goes too once a short text replaces the long
    one (it does not stay while the grid shows the short text's tokens)."""
    from windows import long_view_shown

    w = open_window(qtbot, tmp_path / "s.ini")
    bar = w.statusBar()
    lg = long_view_shown(w, qtbot, PARAGRAPH * 3)
    drain_events()
    assert bar.currentMessage() == f"Long text: {lg.T:,} tokens, every layer computed."
    short_text_shown(w, qtbot)
    assert "Long text" not in bar.currentMessage()


def short_text_shown(w, qtbot):
    """The short prompt typed over the long text, its result shown and every job and event done."""
    w.set_text(PROMPT)
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == PROMPT
                    and w.worker.running("compute") is None, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
