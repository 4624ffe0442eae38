"""pair.Follower made with A's run on screen (`last`, pair.noted as the run ended) keeps A's cache
and replays that run on B where A's cache holds it whole (pair.whole_in_cache): a model compared
with itself then shows 0 on that run and on the keystrokes after it, A never running the text
again. Where A's rows were typed a key at a time, or A's cache was cleared since, it takes none:
both caches are cleared, as before (A runs the text afresh)."""

import numpy as np
import pytest

from attnviz.engine.analysing.effects import window_run
from attnviz.engine.analysing.pair import Follower, noted, whole_in_cache
from test_compare_follower import IDS, differs, followed, same_model, typed  # noqa: F401

pytest.importorskip("numba")


def test_a_whole_run_is_followed_as_it_is_and_shows_zero(same_model):  # noqa: F811 (the fixture)
    a, b, _ = same_model
    for m in same_model:
        m.clear_cache()
    run = typed(a, len(IDS) - 2)  # A's text in one run: every row in one chunk
    last = noted(a, run.clean, run.result.cache_used)
    assert run.result.cache_reused == 0 and whole_in_cache(a, last)
    clears = a.cache_clears
    follower = Follower(a, b, last)
    assert follower.took_last and a.cache_clears == clears  # (A's cache kept)
    assert not differs(run.clean, followed(follower, run.clean))
    for k in (len(IDS) - 1, len(IDS)):  # the keystrokes after it take A's rows from its cache
        run = typed(a, k)
        assert run.result.cache_reused > 0
        follower.note(run.clean, run.result.cache_used)
        assert not differs(run.clean, followed(follower, run.clean))


def test_a_typed_run_or_a_cleared_cache_is_not_taken(same_model):  # noqa: F811 (the fixture)
    a, b, _ = same_model
    for m in same_model:
        m.clear_cache()
    typed(a, 4)
    run = typed(a, 5)  # a key typed: its rows partly from the cache
    assert run.result.cache_reused > 0
    assert not whole_in_cache(a, noted(a, run.clean, run.result.cache_used))
    a.clear_cache()
    run = typed(a, 6)
    last = noted(a, run.clean, run.result.cache_used)
    a.clear_cache()  # (A's cache no longer holds it)
    follower = Follower(a, b, last)
    assert not follower.took_last and follower.behind == 0
    ids = np.asarray(IDS[:6])
    assert typed(a, 6).result.cache_reused == 0 and np.array_equal(run.clean.ids, ids)


def test_a_cache_that_made_an_earlier_run_current_is_taken_as_it_is(same_model):  # noqa: F811
    """A's cache made an earlier run current before (a text typed back to one it ran): a new text's
    whole run is still compared as it is, showing 0, and so are the keystrokes after it."""
    a, b, _ = same_model
    for m in same_model:
        m.clear_cache()
    typed(a, 6)
    window_run(a, "", ids=np.asarray([7, 7, 7]))
    typed(a, 6)  # the first text again: its run made current from A's cache's earlier runs
    assert a.cache_promotions == 1
    run = window_run(a, "", ids=np.asarray([8, 2, 8, 2, 8, 2, 8]))  # a new text, in one run
    last = noted(a, run.clean, run.result.cache_used)
    assert run.result.cache_reused == 0 and whole_in_cache(a, last)
    follower = Follower(a, b, last)
    assert follower.took_last
    assert not differs(run.clean, followed(follower, run.clean))  # (A not run again)
    for tail in ([8, 2, 8, 2, 8, 2, 8, 2], [8, 2, 8, 2, 8, 2, 8, 2, 8]):
        run = window_run(a, "", ids=np.asarray(tail))
        assert run.result.cache_reused > 0
        follower.note(run.clean, run.result.cache_used)
        assert not differs(run.clean, followed(follower, run.clean))


def test_an_encoder_s_run_is_followed_as_it_is_and_shows_zero():
    """An encoder keeps no KV cache: every run of it computes every row at once, so A's run on
    screen is compared as it is (no cache to be in step with), exactly 0 against itself, and so
    are the runs after it."""
    from tiny import FIXTURES

    from attnviz.engine import load_model

    a, b = (load_model(FIXTURES / "bert") for _ in range(2))
    assert not a.config.causal
    run = window_run(a, "", ids=np.asarray([2, 5, 7, 5, 3]))
    last = noted(a, run.clean, run.result.cache_used)
    assert not run.result.cache_used and whole_in_cache(a, last)
    follower = Follower(a, b, last)
    assert follower.took_last
    assert not differs(run.clean, followed(follower, run.clean))  # (A not run again)
    for ids in ([2, 5, 7, 5, 3, 9], [4, 4, 1]):
        run = window_run(a, "", ids=np.asarray(ids))
        follower.note(run.clean, run.result.cache_used)
        assert not differs(run.clean, followed(follower, run.clean))
