"""The Compare panel's summary says how far the residual stream drifted, in the words and numbers
`attnviz compare` prints ("residual stream cosine: lowest … after L…, after the last block …"),
and its hover says what that is. (The panel computed resid_cos and wrote it into its exports,
but showed it nowhere.)"""

from attnviz.cli import main
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, WAIT, tip_shown

TEXT = "def add(a, b): return a + b"


def test_the_summary_states_the_residual_cosine_as_the_command_line_does(qtbot, toy_compare_window, capsys):
    w = toy_compare_window(TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "Q4_0"))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    panel = w.compare_panel
    capsys.readouterr()
    assert main(["compare", "--model", TOY, "--quantize", "Q4_0", "--text", TEXT]) == 0
    (line,) = [s for s in capsys.readouterr().out.splitlines() if s.startswith("residual stream cosine:")]
    assert "lowest 1.000000" not in line  # (Q4_0 moves the residual stream)
    qtbot.waitUntil(lambda: line in panel.summary.text(), timeout=WAIT)
    assert panel.summary.isVisible()
    tip = tip_shown(panel.summary.toolTip())
    assert "Residual stream cosine: after each block, the cosine of A's and B's residual streams" in tip
