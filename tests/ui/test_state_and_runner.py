"""Unit tests of the window's two pillars, without the window: AppState, the one
source of truth, and Worker, the one latest-wins job runner."""

import contextlib
import dataclasses
import json
import threading

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.reading import textbook
from attnviz.ui.machinery.state import AppState
from attnviz.ui.machinery.runner import POOL, THREAD
from attnviz.ui.machinery.worker import Worker
from windows import drain_events

WAIT = 20000
HOLD_S = 120  # a job the test holds waits at most this long (released long before)


@pytest.fixture(scope="module")
def book():
    return load_model(textbook.TEXTBOOK_NAME)


def record(signal):
    heard = []
    signal.connect(lambda *a: heard.append(a))
    return heard


def landed(state):
    """(request, result) of each run whose result the runner set in `state`, as reported there."""
    heard = []
    state.sigComputeReported.connect(lambda req, message: message or heard.append((req, state.result)))
    return heard


def test_setters_emit_once_and_only_on_change(qapp, book):
    st = AppState()
    layers, focus, query = record(st.sigLayerChanged), record(st.sigFocusChanged), record(st.sigQueryChanged)
    st.set_model(book)
    st.set_layer(1)
    st.set_layer(1)
    st.set_layer(99)  # clamped to the model's last layer: no change, no signal
    assert st.layer == book.config.n_layer - 1 and layers == [(1,)]
    st.set_focus(1, 2)
    st.set_focus(1, 2)
    st.set_query(3)
    st.set_query(3)
    assert focus == [((1, 2),)] and query == [(3,)]


def test_a_new_model_clears_what_belonged_to_the_old_one(qapp, book, minilm):
    st = AppState()
    st.set_model(minilm)
    st.set_layer(5)
    st.set_result(minilm.run("the cat sat"))
    st.set_focus(5, 11)
    st.set_query(2)
    st.set_head_labels([["mixed"] * 12] * 6)
    st.set_text("the cat sat")
    st.set_model(book)  # 2 layers: layer 5 does not exist there
    assert st.result is None and st.focus is None and st.query_pos is None
    assert st.head_labels is None and st.layer == book.config.n_layer - 1
    assert st.text == "the cat sat"  # the user's sentence is kept


def test_what_is_shown_is_shared_and_follows_result_and_hide_first(qapp, book):
    st = AppState()
    st.set_model(book)
    st.set_result(book.run("the cat sat on the mat"))
    d1 = st.shown()
    assert st.shown() is d1  # one computation shared by the grid, the focus view and the read-outs
    np.testing.assert_allclose(d1.region().values.sum(-1), 1, atol=1e-5)
    st.set_hide_first(True)
    d2 = st.shown()
    assert d2 is not d1 and list(d2.key_pos) == list(range(1, st.result.n_tokens))  # the first key dropped
    np.testing.assert_allclose(d2.region().values[..., 1:, :].sum(-1), 1, atol=1e-5)
    st.set_result(book.run("the cat sat on the mat"))  # equal numbers, a new result: recomputed
    assert st.shown() is not d2


def test_a_run_in_flight_for_the_old_model_never_arrives(qtbot, book, minilm):
    st = AppState()
    st.set_model(minilm)
    st.set_text("the keys to the cabinet")
    w = Worker(st)
    computed = landed(st)
    gate = threading.Event()
    real_run = minilm.run

    class Slow:  # the old model's run blocks until the model has changed
        name, config = minilm.name, minilm.config

        def run(self, *a, **k):
            gate.wait(HOLD_S)
            return real_run(*a, **k)
    slow = Slow()
    st.model = slow  # (as if set_model(slow): the request snapshots state.model)
    req = w.request_compute(immediate=True)
    assert req.model is slow
    st.set_model(book)  # the user opens another model while the run is in flight
    gate.set()
    assert w.wait_idle(WAIT)
    drain_events()
    assert computed == []  # dropped: it was computed for a model no longer shown
    req2 = w.request_compute(immediate=True)
    qtbot.waitUntil(lambda: len(computed) == 1, timeout=WAIT)
    assert computed[0][0] is req2 and computed[0][1].text == "the keys to the cabinet"


@contextlib.contextmanager
def run_replaced(model, run):
    """model.run replaced by `run` (an attribute of the instance) for the block."""
    model.run = run
    try:
        yield
    finally:
        del model.run


def release_and_land_one(qtbot, w, gate, computed) -> None:
    """Let the held job go, then wait for exactly one result to land and the runner to be idle."""
    gate.set()
    qtbot.waitUntil(lambda: len(computed) == 1, timeout=WAIT)
    assert w.wait_idle(WAIT)


def test_newest_compute_wins_and_a_stale_queued_one_is_skipped(qtbot, book):
    st = AppState()
    st.set_model(book)
    w = Worker(st)
    computed = landed(st)
    gate = threading.Event()
    w.submit("block", lambda: gate.wait(HOLD_S), lambda *a: None, None, POOL)  # holds the one thread
    ran = []
    real_run = book.run
    with run_replaced(book, lambda text, **k: (ran.append(text), real_run(text, **k))[1]):
        for text in ("the", "the cat", "the cat sat"):
            st.set_text(text)
            w.request_compute(immediate=True)
        release_and_land_one(qtbot, w, gate, computed)
    assert [r.text for _, r in computed] == ["the cat sat"]
    assert ran == ["the cat sat"]  # the two older requests were stale when the thread got to them


def test_a_run_replaced_by_a_newer_text_stops_at_its_next_layer(qtbot, book):
    """A keystroke's run asks, before each layer, whether it is still the newest: once a newer text
    is asked for it stops there (Cancelled, never shown) instead of computing its other layers,
    and the newer text's result lands."""
    book.clear_cache()  # (a causal model: a cached text would compute no layer at all)
    st = AppState()
    st.set_model(book)
    w = Worker(st)
    computed = landed(st)
    gate, waiting = threading.Event(), threading.Event()
    asked = {}  # text -> answers its stop() gave, one per layer reached
    real_run = book.run

    def run(text, *, request, **k):
        stop = request.stop

        def gated():  # the first text waits before its layer 1 until the newer text is asked for
            if text == "the cat" and len(asked.setdefault(text, [])) == 1:
                waiting.set()
                gate.wait(HOLD_S)
            answer = stop()
            asked.setdefault(text, []).append(answer)
            return answer
        return real_run(text, request=dataclasses.replace(request, stop=gated), **k)
    with run_replaced(book, run):
        st.set_text("the cat")
        w.request_compute(immediate=True)
        assert waiting.wait(HOLD_S)  # layer 0 of "the cat" is done, layer 1 not begun
        st.set_text("the cat sat")
        w.request_compute(immediate=True)
        release_and_land_one(qtbot, w, gate, computed)
    assert asked["the cat"] == [False, True]  # stopped before its layer 1 of 2
    assert asked["the cat sat"] == [False] * book.config.n_layer
    assert [r.text for _, r in computed] == ["the cat sat"] and st.result.text == "the cat sat"


def test_an_error_reaches_only_the_newest_jobs_owner(qtbot, book):
    w = Worker(AppState())
    heard = []
    w.submit("job", lambda: 1 / 0, lambda r, v, e: heard.append(("old", e)), None, POOL)
    w.submit("job", lambda: 2, lambda r, v, e: heard.append(("new", v, e)), None, POOL)
    assert w.wait_idle(WAIT)
    drain_events()
    assert heard == [("new", 2, None)]


def test_garbage_is_collected_only_on_the_main_thread(qtbot):
    """A cyclic collection on a job thread can free Qt objects there and deadlock against the main
    thread (seen: a load thread in gc_collect_main -> QObject::~QObject): the runner switches
    automatic collection off and collects on a main-thread timer instead."""
    import gc
    import weakref

    Worker(AppState())
    assert not gc.isenabled()  # (the main thread's timer collects: below)

    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only the collector can free
    gone = weakref.ref(a)
    del a, b
    seen_on = []
    done = threading.Event()

    def job():  # allocations on a job thread never trigger a collection there
        kept.extend(Node() for _ in range(5 * gc.get_threshold()[0]))  # past generation 0's limit
        seen_on.append(gone() is not None)
        done.set()
    kept = []
    t = threading.Thread(target=job)
    t.start()
    t.join(HOLD_S)
    assert seen_on == [True]
    qtbot.waitUntil(lambda: gone() is None, timeout=WAIT)  # the main thread's timer freed it


def test_badge_is_the_one_lookup_of_a_heads_role(qapp, book):
    st = AppState()
    st.set_model(book)
    assert st.badge(0, 0) == ""
    st.set_head_labels([["previous", "duplicate", "self"], ["induction", "sink", "mixed"]])
    assert st.badge(1, 0) == "induction" and st.badge(0, 2) == "self"
    assert st.badge(2, 0) == st.badge(0, 3) == st.badge(-1, 0) == ""  # never another head's


ASSEMBLE = """
import json
import numpy
from threadpoolctl import threadpool_info
from PySide6.QtWidgets import QApplication
def blas():
    return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})
app, before = QApplication([]), blas()
from attnviz.ui.app import assemble
assemble()
print(json.dumps([before, blas()]))
"""
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "BLIS_NUM_THREADS")  # (one would set BLAS's default)


def test_the_assembly_caps_blas_at_one_thread():
    """In a fresh process, BLAS on its own default (every core), as the app starts: this process's
    BLAS may be capped already (a window opened before, an xdist worker's share of the cores)."""
    import os
    import subprocess
    import sys

    from attnviz.engine.parallel import cores

    if cores() < 2:
        pytest.skip("one core: BLAS starts on one thread")
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARIABLES} | {"QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", ASSEMBLE], capture_output=True, text=True, check=True,
                         env=env).stdout.strip().splitlines()[-1]
    before, after = json.loads(out)
    assert min(before) > 1 and after == [1], out


def test_the_runner_feeds_the_state_itself(qtbot, book):
    """No window relays results or requests: a load sets the state's model and a
    run its result, and a new text, or a view wanting what the result lacks, starts a run, with
    only the state and the runner in play (wired by app.assemble)."""
    from attnviz.ui.app import assemble

    st, w = assemble(debounce_ms=2)
    w.load(textbook.TEXTBOOK_NAME)
    qtbot.waitUntil(lambda: st.model is not None, timeout=WAIT)
    assert st.model.name == textbook.TEXTBOOK_NAME and st.loading == ""
    st.set_text("the cat sat")  # the runner follows the text (debounced)
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == "the cat sat", timeout=WAIT)
    assert st.result.value_norms is None and st.result.layer_inputs is None
    st.set_value_weighted(True)  # the view wants value norms: run again at once
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    st.set_inputs_wanted(True)  # the Anatomy tab is shown: its layer inputs
    qtbot.waitUntil(lambda: st.result.layer_inputs is not None, timeout=WAIT)
    st.set_text("")  # the textbook has a BOS, so even the empty text has a result
    qtbot.waitUntil(lambda: st.result is not None and st.result.text == "", timeout=WAIT)
    assert w.wait_idle(WAIT)


def test_a_model_change_alone_starts_a_run_on_the_kept_text(qtbot, book, minilm):
    from attnviz.ui.app import assemble

    st, w = assemble()
    st.set_text("the cat sat")
    st.set_model(book)
    qtbot.waitUntil(lambda: st.result is not None, timeout=WAIT)
    assert st.result.text == "the cat sat" and st.model is book
    st.set_model(minilm)  # the result is cleared at once and the new model's arrives
    assert st.result is None
    qtbot.waitUntil(lambda: st.result is not None, timeout=WAIT)
    assert st.result.tokens[0] == "[CLS]"
    assert w.wait_idle(WAIT)


def test_cancel_drops_the_running_jobs_result(qtbot):
    """Worker.cancel: the window stops waiting; the job's result, when it comes, reaches nobody."""
    w = Worker(AppState())
    gate = threading.Event()
    heard = []
    job = w.submit("load", lambda: gate.wait(HOLD_S) and "late", lambda r, v, e: heard.append(v), None, THREAD)
    assert w.running("load") is job
    assert w.cancel("load") is job and w.running("load") is None and w.cancel("load") is None
    gate.set()
    job.thread.join(HOLD_S)
    drain_events()
    assert heard == []
    w.submit("load", lambda: "next", lambda r, v, e: heard.append(v), None, THREAD)  # the kind still works
    qtbot.waitUntil(lambda: heard == ["next"], timeout=WAIT)
    assert w.wait_idle(WAIT)


# --- head scores: held by the state, computed by the runner -----------------------------------------

def test_head_scores_arrive_in_the_state_and_follow_the_options(qtbot, book, monkeypatch):
    """Only AppState and the runner: the typed text's scores (with the roles options) arrive in the
    state after a result, go stale at once with the next one, follow the options; a probe source's
    scores sit beside the text's (the guide's), its run cached per model and seed; a model change
    clears them all. The badges follow the scores in the state."""
    from attnviz.engine.analysing import heads as H
    from attnviz.ui.app import assemble

    st, worker = assemble()
    unknown = H.unknown_token_ids(book)
    text = "the cat sat on the mat . the cat sat on the mat"
    st.set_model(book)
    st.set_text(text)
    fresh = lambda: (st.result is not None and st.scores_result is st.result  # noqa: E731
                     and st.text_scores is not None and not st.scores_stale)
    qtbot.waitUntil(fresh, timeout=WAIT)
    assert st.result.text == text and st.head_scores is st.text_scores
    want = H.score_result(st.result, unknown_ids=unknown)
    assert st.text_scores.labels == want.labels and st.head_labels == want.labels
    assert st.badge(1, 0) == want.labels[1][0]
    # the options
    st.set_role_options(exclude_bos=True)
    qtbot.waitUntil(lambda: st.text_scores.exclude_bos, timeout=WAIT)
    np.testing.assert_allclose(st.text_scores.scores["previous"],
                               H.score_result(st.result, exclude_bos=True, unknown_ids=unknown).scores["previous"])
    # a new result: the old text's scores are stale at once (no badges), the new ones follow
    r = book.run("the mat sat on the cat")
    st.set_result(r)
    assert st.scores_stale and st.head_labels is None
    qtbot.waitUntil(fresh, timeout=WAIT)
    assert st.scores_result is r and st.text_scores.exclude_bos
    # the random probe: scored beside the text's, its run cached per model and seed
    runs = []
    from attnviz.engine.analysing import probes

    real = probes.run_probe
    monkeypatch.setattr(probes, "run_probe", lambda m, *a, **k: (runs.append(m), real(m, *a, **k))[1])
    st.set_role_options(source="probe")
    assert st.head_scores is None and st.text_scores is not None  # the text's stay for the guide
    qtbot.waitUntil(lambda: st.probe_scores is not None, timeout=WAIT)
    assert st.head_scores is st.probe_scores and st.probe_scores.exclude_bos
    assert st.head_labels == [[f"{x} (probe)" for x in row] for row in st.probe_scores.labels]
    assert "repeated twice" in st.scores_note
    st.set_role_options(exclude_current=True)
    qtbot.waitUntil(lambda: st.probe_scores is not None and st.probe_scores.exclude_current_token, timeout=WAIT)
    assert runs == [book]  # rescored, not run again
    # a new model clears every score and badge at once
    st.set_model(None)
    assert (st.head_scores, st.text_scores, st.probe_scores, st.head_labels) == (None, None, None, None)
    assert worker.wait_idle()


def test_show_head_and_toggle_query_are_the_states_rules(qapp, book):
    """One rule for a click on a head (its layer on screen, the focus on it; a head the model has
    not is ignored) and one for a click on a token (pick it, or clear it when it is the one)."""
    st = AppState()
    st.set_model(book)
    st.show_head(1, 2)
    assert (st.layer, st.focus) == (1, (1, 2))
    st.show_head(5, 0)  # no such layer: nothing changes
    st.show_head(0, 9)
    assert (st.layer, st.focus) == (1, (1, 2))
    st.set_layer(0)  # the focus follows the one layer on screen
    assert st.focus == (0, 2)
    st.toggle_query(3)
    assert st.query_pos == 3
    st.toggle_query(3)
    assert st.query_pos is None


def test_a_view_asking_for_more_while_a_run_is_on_its_way_gets_it(qtbot, book):
    """Value-weighted turned on while a run without value norms is queued (the result on screen
    has them): the runner runs again when that result lands, so the view is never left plain."""
    from attnviz.ui.app import assemble

    st, w = assemble()
    st.set_model(book)
    st.set_value_weighted(True)
    st.set_text("the cat sat")
    qtbot.waitUntil(lambda: st.result is not None and st.result.value_norms is not None, timeout=WAIT)
    st.set_value_weighted(False)  # the result keeps its norms: nothing to run
    st.set_text("the cat sat on the mat")  # queued without norms ...
    st.set_value_weighted(True)  # ... and the view wants them again before it lands
    qtbot.waitUntil(lambda: st.result.text == "the cat sat on the mat" and st.shown().weighted,
                    timeout=WAIT)
    assert w.wait_idle(WAIT)


def test_changing_the_roles_source_while_the_text_is_scored_keeps_its_scores(qtbot, book, monkeypatch):
    """The typed text's scores depend on the exclusion flags only: switching the source while they
    are being computed must not drop them (nothing would ask again until the next edit)."""
    from attnviz.engine.analysing import heads as H
    from attnviz.ui.app import assemble

    real = H.score_result
    started, go_on = threading.Event(), threading.Event()

    def slow(*a, **k):
        started.set()
        go_on.wait(HOLD_S)  # held until the source has changed
        return real(*a, **k)

    monkeypatch.setattr(H, "score_result", slow)
    st, w = assemble()
    st.set_model(book)
    st.set_text("the cat sat on the mat the cat sat")
    qtbot.waitUntil(started.is_set, timeout=WAIT)  # the text is being scored now
    st.set_role_options(source="probe")
    go_on.set()
    qtbot.waitUntil(lambda: st.text_scores is not None and st.scores_result is st.result, timeout=WAIT)
    assert w.wait_idle(WAIT)


def test_a_rerun_of_the_same_patterns_keeps_the_badges(qtbot, book):
    """Value-weighted on reruns the same text for its value norms: the patterns, and so the head
    scores and the grid's badges, are the same, so they stay up (no flicker, no rescoring)."""
    from attnviz.ui.app import assemble

    st, w = assemble()
    st.set_model(book)
    st.set_text("the cat sat on the mat the cat sat")
    qtbot.waitUntil(lambda: st.text_scores is not None and not st.scores_stale
                    and st.scores_result is st.result, timeout=WAIT)
    badges, scores = st.head_labels, st.text_scores
    assert badges is not None
    heard = record(st.sigHeadLabelsChanged)
    st.set_value_weighted(True)
    qtbot.waitUntil(lambda: st.result.value_norms is not None, timeout=WAIT)
    assert st.scores_result is st.result and not st.scores_stale and st.text_scores is scores
    assert heard == [] and st.head_labels == badges
    st.set_text("the cat sat on the mat")  # another text: stale until rescored
    qtbot.waitUntil(lambda: st.result.text == "the cat sat on the mat", timeout=WAIT)
    assert st.scores_stale or st.scores_result is st.result
    assert w.wait_idle(WAIT)


def test_a_job_that_ends_after_its_relay_is_gone_ends_quietly(qapp):
    """Python closing down deletes the runner's relay (the QObject that carries outcomes to the main
    thread) while a pool job may still run: its end is dropped without an error (nothing such as
    "Signal source has been deleted" printed from QRunnable::run on the way out); an emit that fails on a
    relay that still exists is not hidden."""
    import shiboken6

    from attnviz.ui.machinery import job as J

    ran = []
    job = J.Job(1, "compute", None, lambda: ran.append(1) or 7, lambda *a: None, POOL, None)
    relay = J.Relay()
    shiboken6.delete(relay)
    J.run_job(job, relay, lambda: False)  # no error
    assert ran == [1]

    class Broken:
        class done:
            @staticmethod
            def emit(*_):
                raise RuntimeError("not about a deleted relay")
    with pytest.raises(RuntimeError, match="not about a deleted relay"):
        J.run_job(job, Broken, lambda: False)


def test_the_relay_runs_a_function_on_the_main_thread_after_the_caller_returns(qtbot):
    """Relay.call_soon: the function runs on the main thread, asked from another thread or from the
    main thread itself, and never inside the call (a finalizer asks it before its object's arrays
    are freed); a deleted relay (Python closing down) runs nothing and raises nothing."""
    import shiboken6

    from attnviz.ui.machinery import job as J

    relay, ran = J.Relay(), []

    def note():
        ran.append(threading.current_thread() is threading.main_thread())
    relay.call_soon(note)
    assert ran == []  # not inside the call
    t = threading.Thread(target=relay.call_soon, args=(note,))
    t.start()
    t.join()
    qtbot.waitUntil(lambda: len(ran) == 2, timeout=5000)
    assert ran == [True, True]
    shiboken6.delete(relay)
    relay.call_soon(note)
    drain_events()
    assert ran == [True, True]


def test_a_failed_jobs_frames_go_with_it_not_with_a_collection(qapp):
    """A job that raises (a run stopped by a newer keystroke: Cancelled) hands the main thread its
    error without the traceback: the job's frames and their arrays are freed as it ends, not by a
    collection later, which runs on the main thread between two paints. Its message stays."""
    import gc
    import weakref

    from attnviz.engine.errors import Cancelled
    from attnviz.ui.machinery import job as J

    class Big:  # stands for a stopped run's partial trace
        pass
    held, heard = [], []

    def fn():
        trace = Big()
        held.append(weakref.ref(trace))
        try:
            raise ValueError("inner")
        except ValueError:
            raise Cancelled("a newer request replaced this one")  # (chained: its context too)

    class Relay:
        class done:
            @staticmethod
            def emit(job, value, error):
                heard.append(error)
    job = J.Job(1, "compare", None, fn, lambda *a: None, POOL, None)
    was = gc.isenabled()
    gc.disable()
    try:
        J.run_job(job, Relay, lambda: False)
        assert held[0]() is None  # freed without a collection
    finally:
        if was:
            gc.enable()
    (error,) = heard
    assert isinstance(error, Cancelled) and str(error) == "a newer request replaced this one"
    assert error.__traceback__ is None and error.__context__.__traceback__ is None
