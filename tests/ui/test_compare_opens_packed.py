"""Compare where B reads A's unembedding (SmolLM2 against its own file): A's copy packed for the
kernels, which a keystroke's next-token numbers read (compare_tokens.kernel_logits), is made while B opens
(compare_b.ready_heads, on B's load thread), not by the first keystroke's job on the pool."""

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.machinery.effects_jobs import EffectsJobs
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, open_window

TEXT = "The keys to the cabinet are on the table"


def test_a_s_packed_unembedding_is_made_as_b_opens(qtbot, tmp_path, smollm2, monkeypatch):
    monkeypatch.setattr(EffectsJobs, "_pack_head", lambda self, model: None)  # (What heads do's own)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT)
    jobs = w.worker.compare_jobs
    made_at_open = []
    jobs.sigChanged.connect(lambda: made_at_open.append(w.state.model.lm_head().pack.made)
                            if jobs.b is not None and not made_at_open else None)
    try:
        assert not w.state.model.lm_head().pack.made
        open_compare(w, BSource("model", str(smollm2.path)))
        qtbot.waitUntil(lambda: bool(made_at_open), timeout=WAIT * 4)
        assert made_at_open == [True]
    finally:
        w.worker.wait_idle()
