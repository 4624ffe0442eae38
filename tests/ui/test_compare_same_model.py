"""A model compared with itself in the window shows A − B exactly 0 on every layer: where B opens
after A has typed (A's rows built a key at a time), and after a keystroke whose comparison a newer
key stopped (B's cache a key behind A's until B runs the key it missed). The toy decoder (float32
layers) and SmolLM2 on its Q4_1 blocks (the one-row steps once they are warm)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from attnviz.engine.errors import ModelLoadError
from attnviz.ui.machinery.compare_jobs import BSource
from attnviz.ui.panels.compare_menu import open_compare
from attnviz.ui.machinery.loading import WARM_KIND
from windows import TOY, open_window

WAIT = 30000
HOLD_S = 20
TEXT = "When Mary and John went to the store"


@pytest.fixture(params=["toy", "smollm2"])
def window(request, qtbot, tmp_path):
    """(the window on the model, what B opens from: the same model again)."""
    model = TOY if request.param == "toy" else str(request.getfixturevalue("smollm2").path)
    w = open_window(qtbot, tmp_path / "s.ini", model=model, text=TEXT)
    yield w, BSource("model", model)
    w.worker.compare_jobs.close()
    w.worker.wait_idle()


def warmed():
    """The window's warm-up of the one-row steps ended (its keystrokes take them from then on)."""
    for t in threading.enumerate():
        if t.name.startswith(("qmatvec-warm", f"attnviz-{WARM_KIND}")):
            t.join(timeout=600)


def type_text(w, qtbot, text):
    w.set_text(text)
    qtbot.waitUntil(lambda: w.state.result is not None and w.state.result.text == text, timeout=WAIT)
    w.worker.wait_idle()


def shows_zero(jobs, text) -> bool:
    c = jobs.comparison
    assert c is not None and c.result.text == text
    return all(not jobs.difference(layer).any() for layer in range(c.a_attentions.shape[0]))


def test_the_same_model_shows_zero_after_typing_and_after_a_stopped_comparison(window, qtbot, monkeypatch):
    w, same = window
    jobs = w.worker.compare_jobs
    w.worker.wait_idle()
    warmed()
    text = TEXT
    for word in (" John", " gave", " a"):  # A's rows a key at a time, before B opens
        for ch in word:
            text += ch
            type_text(w, qtbot, text)
    open_compare(w, same)
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text,
                    timeout=WAIT)
    w.worker.wait_idle()
    assert shows_zero(jobs, text)

    b, gate, held = jobs.b, threading.Event(), []
    real_run = b.run

    def run(*a, request=None, **kw):  # B's first run of the next key waits for the key after it
        if not held:
            held.append(request.stop)
            gate.wait(HOLD_S)
        return real_run(*a, request=request, **kw)
    monkeypatch.setattr(b, "run", run)
    try:
        w.set_text(text + " d")
        qtbot.waitUntil(lambda: bool(held), timeout=WAIT)
        w.set_text(text + " dr")  # the next keystroke stops B's run of " d"
        assert held[0]()
    finally:
        gate.set()
    text += " dr"
    qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
    w.worker.wait_idle()
    assert shows_zero(jobs, text)
    for ch in "ink":
        text += ch
        type_text(w, qtbot, text)
        qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
        assert shows_zero(jobs, text)


def test_the_same_model_shows_zero_after_the_anatomy_panel_is_shown(qtbot, tmp_path):
    """Showing the Anatomy panel mid-session makes A's runs keep every layer's input: A's next run
    computes every row afresh, and so does B's (the toy decoder, float32 layers)."""
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    jobs = w.worker.compare_jobs
    w.worker.wait_idle()
    text = TEXT
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == text,
                    timeout=WAIT)
    try:
        for step in (" John", "anatomy", " gave"):
            if step == "anatomy":
                shown = w.state.result
                w.state.set_inputs_wanted(True)  # (what showing the Anatomy panel does)
                qtbot.waitUntil(lambda: w.state.result is not shown, timeout=WAIT)
                assert w.state.result.layer_inputs is not None
                w.worker.wait_idle()
                qtbot.waitUntil(lambda: jobs.comparison.result is w.state.result, timeout=WAIT)
                assert shows_zero(jobs, text)
                continue
            for ch in step:
                text += ch
                type_text(w, qtbot, text)
                qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
                assert shows_zero(jobs, text)
    finally:
        jobs.close()
        w.worker.wait_idle()


def toy_against_itself(qtbot, tmp_path):
    """A window on the toy model, its text compared with the toy model as B, the first comparison
    in and every job done -> (window, its compare jobs)."""
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    jobs = w.worker.compare_jobs
    w.worker.wait_idle()
    open_compare(w, BSource("model", TOY))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                    timeout=WAIT)
    w.worker.wait_idle()
    return w, jobs


def test_keys_typed_faster_than_b_follows_cost_one_run_of_b(qtbot, tmp_path, monkeypatch):
    """Each key comes while A's run of the key before it is ending (past its last check of a newer
    key: its comparison is dropped, B runs nothing): once B is more than MAX_BEHIND of A's runs
    behind, the comparison after the last key runs the text once on each model, not once per key,
    and shows 0."""
    from attnviz.engine.analysing.pair import MAX_BEHIND

    w, jobs = toy_against_itself(qtbot, tmp_path)
    a, b = w.state.model, jobs.b
    real_a, real_b = a.run, b.run
    ended, typing, b_runs = threading.Event(), threading.Event(), []

    claims, real_claim = [], w.worker.claim

    def claim(kind):  # (the window's compute jobs claimed, in order)
        job_id = real_claim(kind)
        if kind == "compute":
            claims.append(job_id)
        return job_id
    monkeypatch.setattr(w.worker, "claim", claim)

    def run_a(*args, **kw):  # A's keystroke run ends, then waits for the next key's job to be claimed
        n = len(claims)
        out = real_a(*args, **kw)
        if typing.is_set() and "text" in kw:  # (a keystroke's run: not Compare's probe's, by ids)
            ended.set()
            # (not until the text changes: the next key's job is claimed a moment after, and this
            # run, still the newest in between, would be compared)
            while typing.is_set() and len(claims) == n:
                time.sleep(0.002)
        return out

    from attnviz.engine.analysing.compare import induction_probe
    probe = np.asarray(induction_probe(a))

    def run_b(*args, **kw):
        if not np.array_equal(np.asarray(kw["ids"]), probe):  # (Compare's probe runs B too)
            b_runs.append(kw["ids"])
        return real_b(*args, **kw)
    monkeypatch.setattr(a, "run", run_a)
    monkeypatch.setattr(b, "run", run_b)
    text, keys = TEXT, " gave a drink"
    assert len(keys) > MAX_BEHIND + 1
    typing.set()
    try:
        for ch in keys:
            text += ch
            w.set_text(text)
            qtbot.waitUntil(ended.is_set, timeout=WAIT)
            ended.clear()
    finally:
        typing.clear()
    qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
    w.worker.wait_idle()
    try:
        assert len(b_runs) <= MAX_BEHIND, len(b_runs)
        assert shows_zero(jobs, text)
    finally:
        jobs.close()
        w.worker.wait_idle()


def test_a_text_b_refuses_shows_its_error_and_the_next_key_compares_again(qtbot, tmp_path, monkeypatch):
    """B refuses one text (non-finite values, as a quantized B may give): the panel says so for that
    text; the next key is compared again, and shows 0."""
    w, jobs = toy_against_itself(qtbot, tmp_path)
    b, refused = jobs.b, TEXT + " J"
    real_b = b.run
    bad = b.encode(refused)[0]

    def run_b(*args, **kw):
        if len(kw["ids"]) == len(bad) and (kw["ids"] == bad).all():
            b.clear_cache()
            raise ModelLoadError(f"{b.name} gives non-finite attention patterns in layer 0")
        return real_b(*args, **kw)
    monkeypatch.setattr(b, "run", run_b)
    try:
        type_text(w, qtbot, refused)
        qtbot.waitUntil(lambda: "non-finite" in jobs.note, timeout=WAIT)
        text = refused
        for ch in "oh":
            text += ch
            type_text(w, qtbot, text)
            qtbot.waitUntil(lambda: jobs.comparison.result.text == text, timeout=WAIT)
            assert jobs.note == "" and shows_zero(jobs, text)
    finally:
        jobs.close()
        w.worker.wait_idle()
