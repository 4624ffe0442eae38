"""What a keystroke costs the window, checked by what it shows and what it runs (never by time): a
new result's head scores come back as the titles' badges without the mosaic being drawn again, a
quick model's scores follow each result at once while a long text's wait until typing pauses, and
the objects made at start-up stay out of the garbage collector's way until the window closes."""

import gc

from attnviz.engine.computing.patterns import head_title

from windows import WAIT
from attnviz.engine.computing.request import RunRequest
from attnviz.ui.machinery.score_timing import SCORE_AT_ONCE_S


def _fresh(st):
    return st.text_scores is not None and st.scores_result is st.result and not st.scores_stale


def test_a_new_results_badges_come_back_in_the_titles_alone(window, qtbot):
    st, g = window.state, window.grid
    qtbot.waitUntil(lambda: _fresh(st), timeout=WAIT)
    new = "The keys to the cabinet are on the kitchen table."
    with qtbot.waitSignal(st.sigResultChanged, timeout=WAIT,
                          check_params_cb=lambda r: r is not None and r.text == new):
        window.set_text(new)
    drawn = g.update_count
    shown = [(l, h) for l, h in g.layout_.heads]
    titles = g.titles()
    # the old text's badges are gone with its heatmaps
    assert titles == [head_title(l, h) for l, h in shown]
    qtbot.waitUntil(lambda: _fresh(st), timeout=WAIT)
    badges = [st.badge(l, h) for l, h in shown]
    assert any(badges)
    assert g.titles() == [
        head_title(l, h) + (f"  {b}" if b else "") for (l, h), b in zip(shown, badges)]
    assert g.update_count == drawn  # the scores changed the titles, not the mosaic


def test_quick_scores_follow_each_result_and_a_long_texts_wait(window, qtbot, minilm):
    st, timing = window.state, window.worker.score_jobs.score_timing
    qtbot.waitUntil(lambda: _fresh(st), timeout=WAIT)
    model, seconds, T = timing.last  # the scores just shown were timed, for this model and text
    assert model is st.model and T == st.result.n_tokens and seconds >= 0
    # the rule on chosen costs: the measured one is whatever the machine's load made it
    timing.note(st.model, SCORE_AT_ONCE_S, T)
    assert timing.at_once(st.model, st.result.n_tokens)  # at the threshold: at once
    # about 500 tokens against about 12: the same work scales by T², far past a keystroke's share
    long = minilm.run("the cat sat on the mat " * 80, request=RunRequest(truncate=True))
    assert long.n_tokens > 30 * T
    assert not timing.at_once(st.model, long.n_tokens)
    scale = (long.n_tokens / T) ** 2
    timing.note(st.model, SCORE_AT_ONCE_S / scale / 2, T)  # a text that quick follows at once
    assert timing.at_once(st.model, long.n_tokens)
    timing.note(st.model, SCORE_AT_ONCE_S * 2, T)  # slower than the threshold: waits
    assert not timing.at_once(st.model, st.result.n_tokens)
    timing.note(object(), SCORE_AT_ONCE_S * 100, T)  # another model's cost: measure at once
    assert timing.at_once(st.model, st.result.n_tokens)


def test_start_up_objects_are_frozen_until_the_window_closes(window, qtbot):
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=WAIT)
    window.close()
    assert gc.get_freeze_count() == 0


def test_a_window_run_has_blas_on_every_core_and_the_rest_keeps_one(qapp):
    import pytest
    from threadpoolctl import threadpool_info

    from attnviz.engine.parallel import cores
    from attnviz.ui.machinery.tuning import BLAS_THREADS, limit_blas_threads, wide_blas

    if cores() <= BLAS_THREADS:  # (the cores this process may run on, as wide_blas counts them)
        pytest.skip("one core: nothing to widen")
    limit_blas_threads()

    def threads():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    assert threads() == {BLAS_THREADS}
    with wide_blas(False):
        assert threads() == {BLAS_THREADS}
    with wide_blas(True):
        assert threads() == {cores()}
    assert threads() == {BLAS_THREADS}


WIDE_IN_A_JOB = """
import threading
from threadpoolctl import threadpool_info
from attnviz.ui.machinery.tuning import limit_blas_threads, wide_blas
limit_blas_threads()  # as the app does at start-up, before any BLAS call
seen = []
def job():  # a pool job's thread, as the worker's paste run
    with wide_blas(True):
        seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
t = threading.Thread(target=job)
t.start()
t.join()
print(sorted(seen[0]))
"""


def test_a_long_run_on_a_background_thread_gets_every_core():
    """wide_blas on the worker's thread (where a pasted paragraph runs) raises BLAS to every core,
    in a fresh process where the app capped BLAS at start-up (OpenBLAS took no raise made off the
    main thread unless the main thread had raised it once)."""
    import os
    import subprocess
    import sys

    import pytest

    from attnviz.engine.parallel import cores
    from attnviz.ui.machinery.tuning import BLAS_THREADS

    if cores() <= BLAS_THREADS:  # (the child inherits this process's cores)
        pytest.skip("one core: nothing to widen")
    out = subprocess.run([sys.executable, "-c", WIDE_IN_A_JOB], capture_output=True, text=True,
                         check=True, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}).stdout
    assert out.strip() == str([cores()])


def test_the_pools_jobs_run_below_the_main_thread(window, qtbot):
    """A decoder's run keeps both cores busy; the pool's thread runs nicer than the main thread, so
    the main thread gets a core at once to paint (read from the job's own thread)."""
    import os
    import threading

    from attnviz.ui.machinery.runner import POOL
    from attnviz.ui.machinery.tuning import POOL_NICE

    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []
    window.worker.submit("nice-check", lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                         lambda _req, value, error: seen.append((value, error)), None, POOL)
    qtbot.waitUntil(lambda: len(seen) == 1, timeout=WAIT)
    assert seen == [(min(19, main + POOL_NICE), None)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main  # the main thread's own


def _count_encodes(monkeypatch, tokenizer) -> list:
    """The texts `tokenizer.encode` is asked for from now on off the main thread, where the runs
    are (a wrapper around the method; a panel's own labels on the main thread are not counted)."""
    import threading

    calls = []
    encode = tokenizer.encode

    def counted(text, *a, **k):
        if threading.current_thread() is not threading.main_thread():
            calls.append(text)
        return encode(text, *a, **k)
    monkeypatch.setattr(tokenizer, "encode", counted)
    return calls


def test_a_keystrokes_run_tokenises_its_text_once(window, qtbot, monkeypatch):
    """A keystroke's run tokenises its text once (the engine decides there whether it is long),
    for a dense text and for a text over the dense limit, which the long view shows."""
    from attnviz.engine.computing.longdoc import dense_bytes

    st, model = window.state, window.state.model
    cfg = model.config
    calls = _count_encodes(monkeypatch, model.tokenizer)
    short = "The keys to the cabinet."
    with qtbot.waitSignal(st.sigResultChanged, timeout=WAIT,
                          check_params_cb=lambda r: r is not None and r.text == short):
        window.set_text(short)
    assert calls.count(short) == 1
    window.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    long_text = "The cat sat on the mat. " * 12
    window.set_text(long_text)
    qtbot.waitUntil(lambda: st.long.run is not None, timeout=WAIT)
    assert st.result is None and st.long.run.patterns.T > 40
    assert calls.count(long_text) == 1


def test_a_lone_surrogate_in_a_long_text_is_read_as_the_run_reads_it(window, qtbot, monkeypatch):
    """A text over the dense limit with a lone surrogate runs as a long text, its surrogate made
    U+FFFD as in a dense run (the raw text once made the tokenizer raise TypeError), tokenised once."""
    from attnviz.engine.computing.longdoc import dense_bytes

    st, model = window.state, window.state.model
    cfg = model.config
    calls = _count_encodes(monkeypatch, model.tokenizer)
    window.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)
    text = "The cat \ud83d sat " + "word " * 60
    window.set_text(text)
    qtbot.waitUntil(lambda: st.long.run is not None, timeout=WAIT)
    assert st.long.run.result.text == text.replace("\ud83d", "\ufffd")
    assert calls.count(text.replace("\ud83d", "\ufffd")) == 1 and text not in calls


