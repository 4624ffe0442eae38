"""A fresh window on a GGUF model whose layers multiply on the file's blocks: its load warms only
the kernels a run of a few rows takes, so the first result and What heads do's first analysis do
not wait for the one-row steps; those are warmed after the first analysis, on a thread of its own
(ui/machinery/loading.py warm_the_rest), and a keystroke's one-row run then takes them; a key typed
before they are warm waits for them no more than the first result did. The first analysis's
numbers are a fully warmed run's, bit for bit."""

import importlib.util
import threading
import time

import numpy as np
import pytest

from attnviz.engine.analysing.effects import analyse, window_run
from attnviz.engine.computing import families, layers
from attnviz.ui.machinery import effects_jobs as EJ
from attnviz.ui.machinery import loading as L
from attnviz.ui.machinery.worker import Worker
from warm_state import as_fresh, settled
from windows import WAIT, open_window, wait_for_text

pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="the kernels need numba")

TEXT = "The keys to the cabinet are on the"
TYPED = TEXT + " table"


@pytest.fixture
def cold(monkeypatch):
    """The kernels' warm-up state as a fresh process has it (the code compiled in this process
    stays: warming again only calls it); the threads that warmed the one-row steps, listed."""
    qm = as_fresh(monkeypatch)
    one_row, real = [], qm._warm_one_row

    def listed(half):
        one_row.append(threading.current_thread().name)
        real(half)
    monkeypatch.setattr(qm, "_warm_one_row", listed)
    return qm, one_row


def test_the_first_analysis_waits_for_no_one_row_step_and_a_keystroke_takes_them_after(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    qm, one_row = cold
    submitted, at_analysis, steps = [], [], []
    real_submit, real_steps, real_analyse = Worker.submit, layers.one_row_steps, EJ.analyse_typed
    real_stack = layers.one_row_stack

    def submit(self, kind, fn, on_done, request=None, lane="pool", job_id=None):
        submitted.append((kind, lane))
        return real_submit(self, kind, fn, on_done, request, lane, job_id)

    def taken(layer, n_rows, trace=None):
        steps.append((n_rows, real_steps(layer, n_rows, trace)))
        return steps[-1][1]
    def stacked(n_rows, trace=None, store=None):  # (every layer in one call: it too asks for the one-row steps)
        stack = real_stack(n_rows, trace, store)
        if stack is not None:
            steps.append((n_rows, qm.ONE_ROW))
        return stack

    def analysed(*a, **k):  # (what was warm as each analysis ended)
        out = real_analyse(*a, **k)
        at_analysis.append(qm.ONE_ROW)
        return out
    monkeypatch.setattr(Worker, "submit", submit)
    monkeypatch.setattr(EJ, "analyse_typed", analysed)
    monkeypatch.setattr(families, "one_row_steps", taken)
    monkeypatch.setattr(families, "one_row_stack", stacked)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
    st, eff = w.state, w.state.effects
    qtbot.waitUntil(lambda: eff.analysis is not None, timeout=WAIT)
    assert at_analysis[0] is None  # the first analysis made before any one-row step was warm
    model = st.model
    types = model.weights.packed_types
    assert types and model.weights.layers[0].packed is not None
    qtbot.waitUntil(lambda: qm.warmed(types), timeout=WAIT)  # after the analysis, on its own thread
    w.worker.wait_idle()
    assert (L.WARM_KIND, EJ.THREAD) in submitted
    assert len(one_row) == 1 and one_row[0].startswith(f"attnviz-{L.WARM_KIND}")
    assert all(n > 1 for n, _ in steps)  # no one-row run before it
    a, ref = eff.analysis, analyse(model, window_run(model, TEXT))  # a warm run's numbers
    assert eff.analysis_of(st.result) is a
    assert np.array_equal(a.clean.logprobs, ref.clean.logprobs) and np.array_equal(a.clean.top_ids, ref.clean.top_ids)
    assert np.array_equal(a.lens.target_logprobs, ref.lens.target_logprobs)
    assert np.array_equal(a.dla.heads, ref.dla.heads)
    del steps[:]
    w.set_text(TYPED)
    wait_for_text(qtbot, w, TYPED)
    w.worker.wait_idle()
    assert st.result.cache_computed == 1
    assert steps and all(n == 1 and s is qm.ONE_ROW is not None for n, s in steps if n == 1)
    assert any(n == 1 for n, _ in steps) and len(one_row) == 1  # warm already: warmed once


def test_the_start_up_collection_waits_for_the_first_analysis(qtbot, tmp_path, smollm2, monkeypatch):
    """gc's start-up collection (tuning.freeze_start_up_objects) holds the GIL for a while: it
    follows the first analysis, not the side panels' build, which comes while that analysis runs."""
    from attnviz.ui.machinery import tuning

    gate, frozen = threading.Event(), []
    real_analyse, real_freeze = EJ.analyse_typed, tuning.freeze_start_up_objects

    def held(*a, **k):
        assert gate.wait(WAIT / 1000)
        return real_analyse(*a, **k)

    def freeze():
        frozen.append(w.state.effects.analysis is not None)
        real_freeze()
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(tuning, "freeze_start_up_objects", freeze)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        assert w.worker.running(EJ.ANALYSIS_KIND) is not None  # (held)
        assert frozen == []  # the panels are built, and the analysis keeps the collection waiting
    finally:
        gate.set()
    qtbot.waitUntil(lambda: bool(frozen), timeout=WAIT)
    assert frozen == [True]
    from attnviz.engine.computing import qmatvec as qm
    qtbot.waitUntil(lambda: qm.warmed(w.state.model.weights.packed_types), timeout=WAIT)  # (after-work)
    w.worker.wait_idle()
    settled()


KEYED = TEXT + "."  # one key typed at the end: one new token, a one-row run on the KV cache
AFTER = KEYED + " It"  # the next token, once the one-row steps are warm
# patterns of a run on the kernels against the float32 pass of the same dequantised weights (the
# bound tests/engine/test_qkernels_path.py holds SmolLM2's cached steps on its blocks to)
BOUND = 1e-4


def test_a_key_typed_while_the_one_row_steps_warm_is_painted_without_waiting_for_them(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    """A key typed while the warm-up after the first analysis is still loading the one-row steps
    (held here until the key's result is painted): the key's one-row run waits for nothing the
    first result did not, taking the layer loop's NumPy steps on the few-row kernels, and its
    patterns are the float32 pass's within the kernels' bound, as every keystroke's. Its rows stay
    in the KV cache as they were computed: the next keystroke, on the one-row steps once they are
    warm, shows them bit for bit with its own new row, also within the bound; the text typed back
    shows the first key's numbers again (from the cache)."""
    from PySide6.QtGui import QTextCursor

    from attnviz.engine.computing import onerow
    from attnviz.engine.computing.request import RunRequest

    qm, one_row = cold
    loading, gate = threading.Event(), threading.Event()
    steps, load, real_stack = [], onerow.warm, layers.one_row_stack

    def held(*a):  # the warm-up's load of the one-row steps (its lock taken), held back past the
        loading.set()  # key's paint (a run that waited for it would time out the test first)
        gate.wait(3 * WAIT / 1000)
        load(*a)

    def taken(layer, n_rows, trace=None):
        steps.append((n_rows, layers.one_row_steps(layer, n_rows, trace)))
        return steps[-1][1]

    def stacked(n_rows, trace=None, store=None):  # (every layer in one call)
        steps.append((n_rows, real_stack(n_rows, trace, store)))
        return steps[-1][1]
    monkeypatch.setattr(onerow, "warm", held)
    monkeypatch.setattr(families, "one_row_steps", taken)
    monkeypatch.setattr(families, "one_row_stack", stacked)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        st = w.state
        qtbot.waitUntil(loading.is_set, timeout=WAIT)  # the first analysis is in: the warm-up has begun
        assert qm.ONE_ROW is None and w.worker.running(L.WARM_KIND) is not None
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        del steps[:]
        qtbot.keyClick(w.text_box, ".")
        qtbot.waitUntil(lambda: st.result is not None and st.result.text == KEYED and w.grid.drawn is st.result,
                        timeout=WAIT)
        keyed, keyed_steps = st.result, list(steps)
        assert not gate.is_set() and w.worker.running(L.WARM_KIND) is not None  # painted; still held
    finally:
        gate.set()
    assert keyed.cache_computed == 1 and keyed_steps and all(n == 1 and s is None for n, s in keyed_steps)
    want = smollm2.run(KEYED, request=RunRequest(use_cache=False))  # the float32 pass
    np.testing.assert_allclose(keyed.attentions, want.attentions, rtol=0, atol=BOUND)
    model = st.model
    qtbot.waitUntil(lambda: qm.warmed(model.weights.packed_types), timeout=WAIT)
    w.worker.wait_idle()
    assert len(one_row) == 1 and one_row[0].startswith(f"attnviz-{L.WARM_KIND}")  # warmed once, there
    del steps[:]
    w.set_text(AFTER)
    wait_for_text(qtbot, w, AFTER)
    after = st.result
    T = len(keyed.tokens)
    one = [s for n, s in steps if n == 1]
    assert after.cache_computed == 1 and one and all(s is not None for s in one)  # the one-row steps now
    assert np.array_equal(after.attentions[:, :, :T, :T], keyed.attentions)  # the cached rows
    want = smollm2.run(AFTER, request=RunRequest(use_cache=False))
    np.testing.assert_allclose(after.attentions, want.attentions, rtol=0, atol=BOUND)
    w.set_text(KEYED)
    wait_for_text(qtbot, w, KEYED)
    assert st.result.cache_computed == 0 and np.array_equal(st.result.attentions, keyed.attentions)
    w.worker.wait_idle()
    settled()


def test_a_key_that_drops_the_first_analysis_still_gets_the_one_row_steps(qtbot, tmp_path, smollm2, cold,
                                                                          monkeypatch):
    """A key typed while the first analysis still runs (What heads do hidden) drops that analysis,
    whose end would have started the warm-up, and no later run asks for one: the key's one-row run
    starts the warm-up itself (without waiting for it), and the keys after it take the steps."""
    qm, one_row = cold
    gate, steps = threading.Event(), []
    real_analyse, real_steps, real_stack = EJ.analyse_typed, layers.one_row_steps, layers.one_row_stack

    def held(*a, **k):  # (the first analysis, still running when the key comes)
        assert gate.wait(WAIT / 1000)
        return real_analyse(*a, **k)

    def taken(layer, n_rows, trace=None):
        steps.append((n_rows, real_steps(layer, n_rows, trace)))
        return steps[-1][1]

    def stacked(n_rows, trace=None, store=None):  # (every layer in one call: it too takes the one-row steps)
        stack = real_stack(n_rows, trace, store)
        if stack is not None:
            steps.append((n_rows, qm.ONE_ROW))
        return stack
    monkeypatch.setattr(EJ, "analyse_typed", held)
    monkeypatch.setattr(families, "one_row_steps", taken)
    monkeypatch.setattr(families, "one_row_stack", stacked)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("roles",))
        assert w.worker.running(EJ.ANALYSIS_KIND) is not None
        w.set_text(TYPED)
        wait_for_text(qtbot, w, TYPED)
    finally:
        gate.set()
    types = w.state.model.weights.packed_types
    qtbot.waitUntil(lambda: qm.warmed(types), timeout=WAIT)
    w.worker.wait_idle()
    assert one_row and one_row[0].startswith("qmatvec-warm")  # started by the key's run
    del steps[:]
    w.set_text(TYPED + ".")
    wait_for_text(qtbot, w, TYPED + ".")
    w.worker.wait_idle()
    assert w.state.result.cache_computed == 1
    assert steps and all(s is qm.ONE_ROW is not None for n, s in steps if n == 1)


def test_compare_of_a_model_with_itself_shows_no_difference_when_the_warm_up_ends_between_its_runs(
        qtbot, tmp_path, smollm2, cold, monkeypatch):
    """Compare of SmolLM2 with itself (B loaded from the same file), a key typed while the one-row
    steps still warm (held), the warm-up let go and waited for to its end as A's run of the key
    ends, before B's run of it starts: B's run takes the steps A's took (the layer loop's NumPy
    steps; a run on the one-row steps equals them only within float32 rounding), so the A − B tiles
    shown are the colour of 0 and every head's JSD is exactly 0, a run against itself."""
    from PySide6.QtGui import QTextCursor

    from attnviz.engine.computing import onerow
    from attnviz.figures import compare as F
    from attnviz.ui.machinery import compare_jobs as CJ
    from attnviz.ui.panels.compare_menu import open_compare

    qm, one_row = cold
    loading, gate, armed, between = threading.Event(), threading.Event(), threading.Event(), []
    load, real_keep = onerow.warm, CJ.Handoff.keep

    def held(*a):  # the warm-up's load of the one-row steps, held until A's run of the key ends
        loading.set()
        gate.wait(3 * WAIT / 1000)
        load(*a)

    def keep(self, run):  # A's job hands its run to B's, on the pool's thread, as it ends
        if armed.is_set() and not gate.is_set():
            gate.set()
            types, tick = w.state.model.weights.packed_types, threading.Event()
            end = time.monotonic() + 3 * WAIT / 1000  # (a niced warm-up on a loaded machine)
            while not qm.warmed(types) and time.monotonic() < end:  # the warm-up's end, before B's run
                tick.wait(0.01)
            between.append(qm.ONE_ROW is not None)
        return real_keep(self, run)
    monkeypatch.setattr(onerow, "warm", held)
    monkeypatch.setattr(CJ.Handoff, "keep", keep)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=TEXT, panels=("predict",))
        qtbot.waitUntil(loading.is_set, timeout=WAIT)  # the first analysis is in: the warm-up has begun
        jobs = w.worker.compare_jobs
        open_compare(w, CJ.BSource("model", str(smollm2.path)))
        qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT,
                        timeout=WAIT * 4)
        assert qm.ONE_ROW is None and not gate.is_set()
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        armed.set()
        qtbot.keyClick(w.text_box, ".")
        qtbot.waitUntil(lambda: jobs.comparison.result.text == KEYED, timeout=WAIT * 6)
    finally:
        gate.set()
    assert between == [True]  # the one-row steps were warm before B's run of the key began
    c = jobs.comparison
    assert c.result.cache_computed == 1  # A's run of the key: one row on the KV cache
    assert c.pair.a.trace.one_row is False and c.pair.b.trace.one_row is False  # the NumPy steps, both
    assert c.doc["heads_jsd"] is not None and np.all(np.asarray(c.doc["heads_jsd"]) == 0)
    panel = w.compare_panel
    for layer in range(c.b_attentions.shape[0]):
        assert not np.any(jobs.difference(layer)), layer
        rgbs, lim = panel.layer_pictures(layer)  # the A − B tiles as painted
        zero = F.signed_rgb(np.zeros((1, 1), np.float32), lim)[0, 0]
        assert all(np.all(rgb == zero) for rgb in rgbs), layer
    jobs.close()
    w.worker.wait_idle()
    settled()
