"""Opening model B in Compare compares A's run on screen as it is where A's cache holds it whole
(the window's first run of its text: every row in one chunk): A is not run again, only B, and the
A − B shown is still exact (0 for a model against itself, and the engine's numbers for another B).
After typing, A's rows were made a key at a time, and A's text runs again once (as B's first run
does) for a model compared with itself to show 0. An encoder (no KV cache) computes every row of
every run at once: its first run on screen is compared as it is too."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import models_pair
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.machinery.loading import WARM_KIND
from attnviz.ui.panels.compare_menu import open_compare
from windows import TOY, open_window

WAIT = 30000
MINILM = "all-MiniLM-L6-v2"
TEXT = "When Mary and John went to the store"


def runs_of(model, monkeypatch) -> list:
    """The ids of each run of `model` from now on (the engine's forward pass, Model.run)."""
    seen, real = [], model.run

    def run(*a, **kw):
        seen.append(kw.get("ids"))
        return real(*a, **kw)
    monkeypatch.setattr(model, "run", run)
    return seen


def compared(w, qtbot, source, text):
    jobs = w.worker.compare_jobs
    open_compare(w, source)
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text,
                    timeout=WAIT)
    w.worker.wait_idle()
    return jobs


@pytest.fixture(params=["toy"])
def window(request, qtbot, tmp_path):
    """The window on the toy decoder (float32 layers), SmolLM2 on its Q4_1 blocks or the MiniLM
    encoder, its text's first run in and the one-row steps' warm-up ended."""
    model = {"toy": TOY, "minilm": MINILM}.get(request.param) or str(request.getfixturevalue("smollm2").path)
    w = open_window(qtbot, tmp_path / "s.ini", model=model, text=TEXT)
    w.worker.wait_idle()
    for t in threading.enumerate():
        if t.name.startswith(("qmatvec-warm", f"attnviz-{WARM_KIND}")):
            t.join(timeout=600)
    yield w
    w.worker.compare_jobs.close()
    w.worker.wait_idle()


@pytest.mark.parametrize("window", ["toy", "smollm2", "minilm"], indirect=True)
def test_b_opening_on_the_text_shown_runs_b_alone_and_shows_zero_against_itself(window, qtbot, monkeypatch):
    w = window
    a, shown = w.state.model, w.state.result
    a_runs = runs_of(a, monkeypatch)
    jobs = compared(w, qtbot, BSource("model", str(a.path) if a.name != TOY else TOY), TEXT)
    assert a_runs == [], f"A ran {len(a_runs)} time(s) as B opened on the text it shows"
    assert w.state.result is shown and jobs.comparison.result is shown
    assert all(not jobs.difference(layer).any() for layer in range(a.config.n_layer))
    text = TEXT
    for ch in " gave":  # the keystrokes after it: one run of A each, still exactly 0
        text += ch
        w.set_text(text)
        qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
        w.worker.wait_idle()
        assert all(not jobs.difference(layer).any() for layer in range(a.config.n_layer))
    assert len(a_runs) == len(" gave")


def test_a_checkpoint_as_b_is_compared_with_a_s_run_as_shown(window, qtbot, monkeypatch):
    w = window
    a = w.state.model
    a_runs = runs_of(a, monkeypatch)
    jobs = compared(w, qtbot, BSource("checkpoint", 0), TEXT)
    assert a_runs == []
    c = jobs.comparison
    want = C.compare(models_pair(a, jobs.b, c.result.input_ids, C.compare_trace))
    np.testing.assert_allclose(c.doc["heads_jsd"], want["heads_jsd"], atol=1e-6)
    np.testing.assert_allclose(c.doc["resid_cos"], want["resid_cos"], atol=1e-6)
    np.testing.assert_allclose(jobs.difference(2 % a.config.n_layer),
                               want_diff(a, jobs.b, c.result.input_ids, 2 % a.config.n_layer), atol=1e-6)


def want_diff(a, b, ids, layer):  # -> [n_head, T, T] A − B from runs apart from the window's
    pair = models_pair(a, b, ids, C.compare_trace)
    return pair.a.attentions[layer] - pair.b.attentions[layer]


def typed_then_compared(w, qtbot, monkeypatch, keys: str, b: str):
    """TEXT and `keys` typed a key at a time (A's rows made so), then B opened: -> (A's runs
    as B opened, the comparison's jobs), B's difference from A checked to be 0 in every layer."""
    text = TEXT
    for ch in keys:
        text += ch
        w.set_text(text)
        qtbot.waitUntil(lambda: w.state.result.text == text, timeout=WAIT)
        w.worker.wait_idle()
    a = w.state.model
    a_runs = runs_of(a, monkeypatch)
    jobs = compared(w, qtbot, BSource("model", b), text)
    assert all(not jobs.difference(layer).any() for layer in range(a.config.n_layer))
    return a_runs, jobs


def test_after_typing_a_runs_its_text_again_once(window, qtbot, monkeypatch):
    a_runs, _ = typed_then_compared(window, qtbot, monkeypatch, " John", TOY)
    assert len(a_runs) == 1


@pytest.mark.parametrize("window", ["smollm2"], indirect=True)
def test_after_a_text_typed_back_a_new_text_is_still_compared_as_shown(window, qtbot, monkeypatch):
    """A's cache made an earlier run current (the first text typed back): a new text's run on
    screen, whole in A's cache, is still compared as it is, exactly 0 against itself. (SmolLM2
    starts a text with no BOS, so a new text takes nothing from the cache: its run is whole.)"""
    w = window
    w.state.effects.set_wanted(True)  # What heads do shown: A's runs kept as they ran
    for text in ("Birds fly south", TEXT, "Yesterday it rained hard"):
        w.set_text(text)
        qtbot.waitUntil(lambda: w.state.result.text == text, timeout=WAIT)
        w.worker.wait_idle()
    a = w.state.model
    a_runs = runs_of(a, monkeypatch)
    jobs = compared(w, qtbot, BSource("model", str(a.path) if a.name != TOY else TOY), text)
    assert a_runs == [], f"A ran {len(a_runs)} time(s) as B opened on the text it shows"
    assert all(not jobs.difference(layer).any() for layer in range(a.config.n_layer))


@pytest.mark.parametrize("window", ["minilm"], indirect=True)
def test_after_typing_an_encoder_runs_its_text_again_once(window, qtbot, monkeypatch):
    """An encoder's typed runs keep only the patterns (the residual stream would cost each its
    last layer's rest): B opening after typing has A run the text once more, showing 0."""
    a_runs, jobs = typed_then_compared(window, qtbot, monkeypatch, " gave", MINILM)
    assert len(a_runs) == 1
    assert np.all(np.asarray(jobs.comparison.doc["resid_cos"]) == 1.0)
