"""The side tabs after the Training step slider moves: what each shows is computed on the step
shown, or says in visible text which step it was computed on (a tab that kept an earlier step's
numbers unmarked mixed two steps: Circuits' copying map, Patching's map and predictions)."""

from __future__ import annotations

import pytest

from attnviz.engine.analysing import circuits as C
from attnviz.figures.numbers import signed
from windows import WAIT, toy_window

TEXT = "def add(a, b): return a + b"
CORRUPT = "def add(a, c): return a + c"


@pytest.fixture
def window(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    yield w
    w.worker.wait_idle()


def _copying_line(model, layer, head):
    c = C.circuits(model).copying
    return f"L{layer} H{head}: OV copying {signed(float(c[layer, head]), 3)}, rank"


def test_circuits_shows_the_scores_of_the_step_the_slider_is_at(window, qtbot):
    st, panel = window.state, window.circuits_panel
    window.circuits_dock.show()
    window.circuits_dock.raise_()
    st.show_head(1, 0)
    last = _copying_line(st.model, 1, 0)
    qtbot.waitUntil(lambda: panel.partners.text().startswith(last), timeout=WAIT)
    first = _copying_line(st.checkpoints.model(0), 1, 0)
    assert first != last
    window.training_panel.slider.setValue(0)
    qtbot.waitUntil(lambda: panel.partners.text().startswith(first), timeout=WAIT)
    window.training_panel.slider.setValue(st.checkpoints.last)  # back: the last step's, kept
    qtbot.waitUntil(lambda: panel.partners.text().startswith(last), timeout=WAIT)
