"""A Generate hurries the window's warm-up of the kernels (ui/machinery/loading.py warm_the_rest,
WarmUp.hurry: its steps not begun taken at the generation's priority) only where that warm-up is
of the model the generation runs: one of the model before, still under way after the model
changed, stays below the main thread, and the new model's warm-up starts beside it."""

import threading
from types import SimpleNamespace

import pytest

from attnviz.ui.machinery import loading as L
from gguf_files import Q
from warm_state import as_fresh

pytest.importorskip("numba")
SETTLE = 2  # seconds given a hurried warm-up's thread to begin its work: far more than it takes


def _model() -> SimpleNamespace:  # a GGUF model as warm_the_rest sees it: packed types, no layers
    weights = SimpleNamespace(packed_types=frozenset({Q.Q4_K}), layers=SimpleNamespace())
    return SimpleNamespace(weights=weights, unchecked_weights=weights, config=SimpleNamespace(n_layer=0))


class _Worker:  # the app's runner as warm_the_rest uses it: the warm-up job under way, the jobs submitted
    def __init__(self, running):
        self.job, self.submitted = SimpleNamespace(request=running), []

    def running(self, kind):
        return self.job if kind == L.WARM_KIND else None

    def submit(self, kind, fn, on_done, request, lane):
        self.submitted.append((kind, request))


def _under_way(model) -> tuple[L.WarmUp, threading.Event]:
    """A warm-up of `model` begun on a thread below the main thread (its own, now ended), and the
    Event its work sets when a hurry runs it at the caller's priority."""
    ran = threading.Event()
    warm_up = L.WarmUp(model, False, ran.set)
    t = threading.Thread(target=warm_up.begin)
    t.start()
    t.join()
    return warm_up, ran


@pytest.mark.parametrize("same", [True, False])
def test_a_generation_hurries_the_warm_up_of_its_own_model_alone(monkeypatch, same):
    as_fresh(monkeypatch)  # (the kernels not warm: a new model's warm-up is to start)
    before = _model()
    warm_up, ran = _under_way(before)
    worker = _Worker(warm_up)
    model = before if same else _model()
    L.warm_the_rest(worker, model, steps=True)
    assert ran.wait(timeout=SETTLE) is same  # hurried: its steps taken on a thread at this priority
    if same:
        assert worker.submitted == []
    else:
        assert [(kind, job.model) for kind, job in worker.submitted] == [(L.WARM_KIND, model)]
