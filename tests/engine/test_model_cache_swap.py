"""Model.clear_cache and Model.adopt_cache swap the KV cache, and count it, never while a cached run
reads and extends it: asked while a cached run is on (from another thread, as Compare's B opening
clears A's cache on the main thread while A's run may still be on the pool), the swap comes as
that run ends, so the run sees one cache and one count from its start to its end; and the asking
thread does not wait for it (the main thread would freeze for the rest of the run)."""

import threading

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, Trace
from tiny import tiny_llama

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)
WAITED_S = 0.5  # how long the held run gives the other thread's swap to happen


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_model(tiny_llama(tmp_path_factory.mktemp("swap") / "m", seed=3, n_layer=3))


def filled_apart(model, ids) -> KVCache:
    """A cache of its own holding the run of `ids` (as Compare's run afresh fills one)."""
    trace = Trace()
    trace.past = KVCache()
    model.run(ids=ids, trace=trace)
    return trace.past


@pytest.mark.parametrize("swap", ["clear", "adopt"])
def test_a_swap_asked_during_a_cached_run_comes_after_it(model, swap):
    model.clear_cache()
    model.run(ids=IDS[:4])  # the cache holds a run of 4 tokens
    fresh = filled_apart(model, IDS[:3])
    before = model.cache_clears
    other = threading.Thread(target=model.clear_cache if swap == "clear" else lambda: model.adopt_cache(fresh))
    seen, waited = [], []  # the model's count of clears before each layer of the cached run

    def at_each_layer():  # (RunRequest.stop: asked before each layer, on the run's thread)
        if not seen:
            other.start()
            other.join(WAITED_S)
            waited.append(other.is_alive())
        seen.append(model.cache_clears)
        return False
    result = model.run(ids=IDS[:6], request=RunRequest(stop=at_each_layer))
    other.join()
    assert waited == [False]  # the swap asked returned while the run was on
    assert result.cache_used and result.cache_reused == 4
    assert seen == [before] * model.config.n_layer  # one count while the run is on
    assert model.cache_clears == before + 1  # the swap, after it
    # the cache the swap left: empty, or the one adopted (its 3 tokens), never the run's 6
    again = model.run(ids=IDS[:7])
    assert again.cache_used and again.cache_reused == (0 if swap == "clear" else 3)


def test_swaps_asked_during_a_cached_run_are_each_counted(model):
    """A clear and then an adoption asked during one cached run: the adopted cache is the model's
    after it, and both are counted."""
    model.clear_cache()
    model.run(ids=IDS[:4])
    fresh = filled_apart(model, IDS[:3])
    before = model.cache_clears

    asked = []  # (what each ask answered, the count while the run is on)

    def at_first_layer():
        if not asked:
            asked.append((model.clear_cache(), model.adopt_cache(fresh), model.cache_clears))
        return False
    model.run(ids=IDS[:6], request=RunRequest(stop=at_first_layer))
    assert asked == [(before + 1, before + 2, before)]  # each ask: the count once it is made
    assert model.cache_clears == before + 2
    again = model.run(ids=IDS[:7])
    assert again.cache_used and again.cache_reused == 3


def test_a_follower_made_during_a_cached_run_of_a_clears_b_once(tmp_path):
    """Compare's B opening while a cached run of A is on (A's clear made as that run ends): the
    Follower counts that clear as followed already, so B's cache is not cleared again at A's next
    run, and B follows A's runs as they come."""
    from attnviz.engine.analysing.pair import Follower
    a, b = (load_model(tiny_llama(tmp_path / n, seed=3, n_layer=3)) for n in ("a", "b"))
    a.run(ids=IDS[:4])
    made = []

    def at_first_layer():
        if not made:
            made.append(Follower(a, b))
        return False
    a.run(ids=IDS[:5], request=RunRequest(stop=at_first_layer))
    follower, b_clears = made[0], b.cache_clears
    for k in (6, 7, 8):
        trace = Trace()
        a.run(ids=IDS[:k], trace=trace)
        follower.follow(trace, Trace)
    assert b.cache_clears == b_clears
