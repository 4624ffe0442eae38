"""Compare runs B under the window's dense limit, the one A's runs are made under: with that limit
raised over longdoc's (here: longdoc's lowered to a few tokens, the window's kept over the text), a
text A runs dense is compared, B's runs dense too, not refused as too large for B."""

from attnviz.engine.computing import longdoc
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, WAIT, open_window

TEXT = "When Mary and John went to the store"


def test_a_text_under_the_window_s_raised_limit_is_compared(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    jobs, cfg = w.worker.compare_jobs, w.state.model.config
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                    timeout=WAIT)
    w.worker.wait_idle()
    try:
        monkeypatch.setattr(longdoc, "DENSE_LIMIT", longdoc.dense_bytes(cfg.n_layer, cfg.n_head, 4))
        w.worker.long_jobs.dense_limit = longdoc.dense_bytes(cfg.n_layer, cfg.n_head, 256)
        text = TEXT + ", John gave"
        w.set_text(text)
        qtbot.waitUntil(lambda: bool(jobs.note) or (jobs.comparison is not None
                                                    and jobs.comparison.result.text == text), timeout=WAIT)
        assert jobs.note == ""
        T = jobs.comparison.result.n_tokens
        assert T > 4 and jobs.comparison.b_attentions.shape == (cfg.n_layer, cfg.n_head, T, T)
        assert w.state.long.run is None  # (A's run dense: the grid shows it)
    finally:
        jobs.close()
        w.worker.wait_idle()
