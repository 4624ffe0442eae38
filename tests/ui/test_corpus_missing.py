"""The Corpus panel's layer x head map paints a head whose statistic no text gave a value (the
induction and duplicate scores of texts mostly unknown to the model) grey and says so in its title,
not as a mean of 0 on the colour scale, as the scan-report figure does."""

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor

from windows import WAIT

MISSING = "#9a9a9a"  # the grey of a head with no value (corpus_panel.MISSING)
TEXTS = ["quantum flux capacitor overheats rapidly again", "zebras juggle purple lanterns quietly tonight"]


@pytest.fixture(scope="module")
def scan_dir(tmp_path_factory):
    """A scan by the textbook model, which knows 40 words: each text is mostly <|unk|>, so its
    duplicate and induction scores are null."""
    from attnviz.corpus.scan import scan

    root = tmp_path_factory.mktemp("scan")
    (root / "c.txt").write_text("\n".join(TEXTS) + "\n")
    scan(root / "out", "attnviz-textbook", root / "c.txt", batch=2, examples=2, in_process=True,
         progress_stream=open("/dev/null", "w"))
    return root / "out"


def _pixel(panel, layer, head) -> QColor:
    image = panel.heat_w.grab().toImage()
    p = panel.heat_w.mapFromScene(panel.heat_vb.mapViewToScene(QPointF(head + 0.5, layer + 0.5)))
    return image.pixelColor(p.x(), p.y())


def test_a_statistic_no_text_gave_is_grey_and_named(window, qtbot, scan_dir):
    window.open_scan(str(scan_dir))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None, timeout=WAIT)
    window.corpus_dock.show()
    window.corpus_dock.raise_()
    assert np.isnan(panel.scan.means["induction"]).all() and np.isfinite(panel.scan.means["previous"]).all()
    panel.set_stat("induction")
    qtbot.wait(50)
    assert panel.heat_plot.titleLabel.text == "mean induction per head: no text gave a value"
    assert _pixel(panel, 1, 2).name() == QColor(MISSING).name()
    panel.set_stat("previous")
    qtbot.wait(50)
    assert panel.heat_plot.titleLabel.text == "mean previous per head"
    assert _pixel(panel, 1, 2).name() != QColor(MISSING).name()
