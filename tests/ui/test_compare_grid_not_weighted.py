"""With Value-weighted ticked, the grid's B and A − B show both models' weights as they are (the
sides are never value-weighted): a line under the A | B | A − B selector says so whenever one of
them is shown, and neither the colour bar's title nor a head's title reads as value-weighted there.
In A the grid is value-weighted and the line is gone. (B and A − B silently showed raw weights
beside a ticked Value-weighted.)"""

import json

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel

from attnviz.ui.views.grid_compare import NOT_WEIGHTED
from windows import WAIT, drain_events, in_sight, toy_compared_with_checkpoint

TEXT = "the cat sat on the mat and the cat"


@pytest.fixture
def compared(qtbot, tmp_path):
    yield from toy_compared_with_checkpoint(qtbot, tmp_path / "s.ini", TEXT)


def _shown(qtbot, g, st, jobs, mode):
    g.mode_selector.buttons[mode].click()
    qtbot.waitUntil(lambda: g.shown_mode == mode and g.drawn is st.result and jobs.comparison is not None
                    and jobs.comparison.result is st.result, timeout=WAIT)
    drain_events()
    return _note(g), g.cbar.getAxis("right").labelText, g.titles()


def _note(g):
    """The grid's line in sight that speaks of value weighting, if any."""
    said = [lab.text() for lab in g.findChildren(QLabel) if in_sight(lab) and "value-weighted" in lab.text()]
    assert len(said) <= 1, said
    return said[0] if said else None


def test_b_and_a_minus_b_say_they_are_not_value_weighted(compared, qtbot):
    w = compared
    st, g, jobs = w.state, w.grid, w.worker.compare_jobs
    w.resize(1400, 900)
    for mode in ("A", "B", "A-B"):  # Value-weighted off: no line
        assert _shown(qtbot, g, st, jobs, mode)[0] is None
    st.set_value_weighted(True)
    qtbot.waitUntil(lambda: st.result.value_norms is not None and st.shown().weighted, timeout=WAIT)
    note, bar, titles = _shown(qtbot, g, st, jobs, "A")
    assert note is None and bar == "value-weighted attention", bar
    for mode, title in (("B", "attention weight"), ("A-B", "A \u2212 B (weight)")):
        note, bar, titles = _shown(qtbot, g, st, jobs, mode)
        assert note == NOT_WEIGHTED, (mode, note)
        assert bar == title and "value" not in bar, bar
        assert not any("% out" in t or "value" in t for t in titles), titles
    st.set_value_weighted(False)
    qtbot.waitUntil(lambda: _note(g) is None, timeout=WAIT)


def test_the_compare_panels_tiles_say_they_are_not_value_weighted(compared, qtbot, tmp_path):
    """The panel's A | B | A − B tiles (and the focused head's) show the weights as they are, A's
    too: with Value-weighted ticked a line under them says so, as their A then differs from the
    grid's value-weighted A; unticked, no such line. (The panel said nothing.) An export says it
    too: the picture holds the line as painted, the numbers (.json, the sidecar) hold it as
    compare.tiles_note with value_weighted true. (The numbers did not say it.)"""
    from attnviz.ui.views.grid_compare import TILES_NOT_WEIGHTED

    w = compared
    st, panel = w.state, w.compare_panel
    w.resize(1400, 900)
    qtbot.waitUntil(lambda: panel.doc() is not None, timeout=WAIT)

    def said():
        return [lab.text() for lab in panel.findChildren(QLabel) if in_sight(lab) and "value-weighted" in lab.text()]
    drain_events()
    assert said() == []
    assert "tiles_note" not in _exported(panel, tmp_path)["compare"]
    st.set_value_weighted(True)
    qtbot.waitUntil(lambda: said() == [TILES_NOT_WEIGHTED], timeout=WAIT)
    doc = _exported(panel, tmp_path)
    assert doc["compare"]["tiles_note"] == TILES_NOT_WEIGHTED and doc["value_weighted"] is True
    drain_events()  # (the panel lays the line out once the event loop runs)
    label = next(lab for lab in panel.findChildren(QLabel) if lab.text() == TILES_NOT_WEIGHTED)
    panel.export(tmp_path / "compare.png")
    image, dpr = QImage(str(tmp_path / "compare.png")), panel.devicePixelRatio()
    origin = label.mapTo(panel, QPoint(0, 0))
    shown = label.grab().toImage().convertToFormat(image.format())
    assert image.copy(int(origin.x() * dpr), int(origin.y() * dpr), shown.width(), shown.height()) == shown
    st.set_value_weighted(False)
    qtbot.waitUntil(lambda: said() == [], timeout=WAIT)
    doc = _exported(panel, tmp_path)
    assert "tiles_note" not in doc["compare"] and doc["value_weighted"] is False


def _exported(panel, tmp_path) -> dict:
    """The Compare panel's numbers as its export writes them (.json)."""
    panel.export(tmp_path / "compare.json")
    return json.loads((tmp_path / "compare.json").read_text())
