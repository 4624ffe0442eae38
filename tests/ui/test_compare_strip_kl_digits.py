"""The Compare strip's hover writes a token's KL(A‖B) with significant digits, as the summary does:
the toy decoder against itself in BF16 has a KL of a few millionths of a nat after its first
token, which the hover wrote as "0.00000 nats"; a KL that is exactly 0 (a model against itself)
reads "0"."""

import pytest

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, drain_events, hover, tip_shown, toy_compared_with_itself

TEXT = "def add(a, b): return a + b"


def _strip_tip(qtbot, w, t: int) -> str:
    """The tooltip the strip shows with the pointer on token t's cell."""
    panel = w.compare_panel
    w.compare_dock.show()
    w.compare_dock.raise_()
    qtbot.waitUntil(lambda: len(panel.strip_cells) > t, timeout=WAIT)
    drain_events()
    hover(panel.strip, panel.strip_cells[t].center())
    return tip_shown(panel.strip.toolTip())


def test_a_tiny_kl_is_written_with_its_digits(qtbot, toy_compare_window):
    w = toy_compare_window(TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "BF16"))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    kld = jobs.comparison.doc["kld"]
    assert 0 < kld[0] < 5e-6  # (a KL that five decimals write as 0)
    tip = _strip_tip(qtbot, w, 0)
    assert f"KL(A\u2016B) {kld[0]:.4g} nats;" in tip, tip
    assert "0.00000" not in tip
    # the same digits as the summary's statistics
    s = jobs.comparison.doc["kld_stats"]
    assert f"max {s['max']:.4g} nats" in w.compare_panel.summary.text()


@pytest.fixture
def itself(qtbot, tmp_path):
    yield from toy_compared_with_itself(qtbot, tmp_path / "s.ini", TEXT)


def test_a_kl_of_exactly_zero_reads_0(qtbot, itself):
    w = itself
    jobs = w.worker.compare_jobs
    qtbot.waitUntil(lambda: jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    assert list(jobs.comparison.doc["kld"]) == [0.0] * jobs.comparison.result.n_tokens
    assert "KL(A\u2016B) 0 nats;" in _strip_tip(qtbot, w, 3)
