"""benchmarks/burst.py: the Model.run it puts in the window passes the run's request on (its stop
with the stop, none for the reference) and counts the runs and those stopped early."""

import pytest

from attnviz.engine.computing.model import Model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import Cancelled
from benchmarks.burst import counting_run

STALE = RunRequest(use_cache=False, stop=lambda: True)  # a keystroke's run a newer one replaced


def test_with_the_stop_a_stale_run_stops_and_is_counted(toy):
    counts, errors = {"runs": 0, "stopped": 0}, []
    run = counting_run(Model.run, counts, True, errors)
    with pytest.raises(Cancelled):
        run(toy, "def f(x):", request=STALE)
    assert counts == {"runs": 1, "stopped": 1} and errors == []


def test_the_reference_runs_a_stale_run_through_every_layer(toy):
    counts, errors = {"runs": 0, "stopped": 0}, []
    run = counting_run(Model.run, counts, False, errors)
    result = run(toy, "def f(x):", request=STALE)
    assert result.attentions.shape[0] == toy.config.n_layer
    assert counts == {"runs": 1, "stopped": 0} and errors == []


def test_a_run_that_fails_otherwise_is_kept(toy):
    counts, errors = {"runs": 0, "stopped": 0}, []
    run = counting_run(Model.run, counts, True, errors)
    with pytest.raises(Exception) as failed:
        run(toy, "def f(x):", ids=[1, 2], request=STALE)  # a text and ids: refused
    assert errors == [failed.value] and counts == {"runs": 1, "stopped": 0}
