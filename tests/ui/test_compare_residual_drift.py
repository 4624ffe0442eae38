"""The Compare panel's summary says how far the residual stream drifted, in the words and numbers
`attnviz compare` prints ("residual stream cosine: lowest … after L…, after the last block …":
tests/cli/test_compare_resid_words.py holds the command line to the same words), and its hover
says what that is. (The panel computed resid_cos and wrote it into its exports, but showed it
nowhere.)"""

import numpy as np

from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from windows import WAIT, tip_shown

TEXT = "def add(a, b): return a + b"


def test_the_summary_states_the_residual_cosine_as_the_command_line_does(qtbot, toy_compare_window):
    w = toy_compare_window(TEXT)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("quantized", "Q4_0"))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    panel = w.compare_panel
    cos = np.asarray(jobs.comparison.doc["resid_cos"])
    assert cos.min() < 0.9999995  # (Q4_0 moves the residual stream: not 1.000000)
    line = (f"residual stream cosine: lowest {cos.min():.6f} after L{int(cos.argmin())}, "
            f"after the last block {cos[-1]:.6f}")  # (as compare_cmd.print_report writes it)
    qtbot.waitUntil(lambda: line in panel.summary.text(), timeout=WAIT)
    assert panel.summary.isVisible()
    tip = tip_shown(panel.summary.toolTip())
    assert "Residual stream cosine: after each block, the cosine of A's and B's residual streams" in tip
