"""What heads do's analysis is of the run it was computed for, told by that run object: another
run of the same result (a rerun, its own traces) has none, and asking does not compare the runs'
traces array by array (which raised "the truth value of an array ... is ambiguous" when What heads
do was raised in the default-size window with Compare open: tests/ui/test_default_size.py)."""

import numpy as np

from attnviz.engine.analysing.effects import WindowRun
from attnviz.ui.machinery.state import AppState


class Recorded:
    """A stand-in Trace: its == compares arrays, as a dataclass of arrays does."""

    def __init__(self, resid):
        self.resid = resid

    def __eq__(self, other):
        return bool(self.resid == other.resid)  # (raises for arrays of more than one element)


def test_an_analysis_is_of_its_own_run_object_only():
    st = AppState()
    fx = st.effects
    result = object()  # the RunResult the state shows
    first = WindowRun(result, Recorded(np.zeros((2, 3))), None, fx.ablation)
    fx.set_run(first)
    fx.set_analysis("analysis", of=(first, st.query_pos, fx.target, fx.alt))
    assert fx.analysis_of(result) == "analysis"
    again = WindowRun(result, Recorded(np.zeros((2, 3))), None, fx.ablation)  # a rerun of that result
    fx.set_run(again)
    assert fx.analysis_of(result) is None
    fx.set_run(first)
    fx.set_analysis("analysis", of=(first, st.query_pos, "other", fx.alt))
    assert fx.analysis_of(result) is None  # computed for another typed target
