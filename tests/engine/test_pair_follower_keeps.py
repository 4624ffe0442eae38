"""What Compare's B keeps whatever A's noted runs kept (pair.Follower), on every way B follows (a
replay of A's runs, a run afresh of both, a B that is A's own Model, B first after a text it
refused): B's trace of a run keeps A's records and never less than its own comparison reads (the
residual stream), and B runs under the dense limit A's run was made under (the window's, raised)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.effects import window_run
from attnviz.engine.analysing.pair import MAX_BEHIND, Follower
from attnviz.engine.computing import longdoc
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import Trace
from attnviz.engine.errors import ModelLoadError
from tiny import tiny_llama

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """One tiny Llama loaded twice: A and B (the same weights, so B's patterns are A's)."""
    path = tiny_llama(tmp_path_factory.mktemp("twins") / "m", seed=1, n_layer=2)
    return load_model(path), load_model(path)


def noted_without_resid(follower, a, ids) -> Trace:
    """A's cached run of `ids` into a trace keeping the patterns and z, not the residual stream,
    noted for B's cache -> that trace."""
    trace = Trace(z=True)
    result = a.run(ids=ids, trace=trace)
    follower.note(trace, result.cache_used)
    return trace


def keeps_the_stream(a, trace) -> bool:
    """Whether `trace` kept the residual stream the comparison reads, every layer's and the last."""
    return len(trace.resid) == a.config.n_layer + 1 and all(r is not None for r in trace.resid)


@pytest.mark.parametrize("b_is_a", [False, True], ids=["another-model", "a-s-own-model"])
def test_b_keeps_the_residual_stream_where_a_s_noted_run_kept_none(twins, b_is_a):
    """B's trace keeps the stream though A's runs kept none. Another model's cache then holds B's
    runs with the stream, and B's rows are A's bit for bit. A's own Model: A's cache, holding A's
    runs without it, gives B no rows, and B's run computes every row in one chunk where A's typed
    them a key at a time (the last bits may differ)."""
    a, b = twins
    b = a if b_is_a else b
    follower = Follower(a, b)
    for k in (5, 6, 7):  # the first run, then keys B follows with its cache
        a_trace = noted_without_resid(follower, a, IDS[:k])
        a_again, trace = follower.follow(a_trace, C.compare_trace)
        assert a_again is a_trace and not a_trace.want["resid"]
        assert keeps_the_stream(a, trace), k
        assert trace.want["z"]  # (and what A's run kept: B's cache holds what A's holds)
        if b_is_a:
            np.testing.assert_allclose(trace.attentions, a_trace.attentions, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(trace.attentions, a_trace.attentions)


def refused_once(follower, a, b, ids, monkeypatch) -> None:
    """B refuses A's run of `ids` (a text it cannot run), then runs again as before."""
    real = b.run
    monkeypatch.setattr(b, "run", lambda *args, **kw: (_ for _ in ()).throw(
        ModelLoadError("m gives non-finite attention patterns in layer 0")))
    with pytest.raises(ModelLoadError):
        follower.follow(noted_without_resid(follower, a, ids), C.compare_trace)
    monkeypatch.setattr(b, "run", real)


def test_b_run_first_after_a_refusal_keeps_the_residual_stream(twins, monkeypatch):
    a, b = twins
    follower = Follower(a, b)
    refused_once(follower, a, b, IDS[:5], monkeypatch)
    a_trace = noted_without_resid(follower, a, IDS[:6])
    fresh, trace = follower.follow(a_trace, C.compare_trace)  # B first, then A afresh
    assert fresh is not a_trace and keeps_the_stream(a, trace)
    np.testing.assert_array_equal(trace.attentions, fresh.attentions)


@pytest.mark.parametrize("way", ["followed", "afresh", "b-first", "a-s-own-model"])
def test_b_runs_a_text_under_the_dense_limit_a_ran_it_under(twins, monkeypatch, way):
    """The window's dense limit raised over longdoc's (here: longdoc's lowered to 4 tokens): A's
    texts of 5 to 8 tokens run dense, and so do B's runs of them, however B follows."""
    a, b = twins
    b = a if way == "a-s-own-model" else b
    cfg = a.config
    monkeypatch.setattr(longdoc, "DENSE_LIMIT", longdoc.dense_bytes(cfg.n_layer, cfg.n_head, 4))
    raised = RunRequest(truncate=True, dense_limit=longdoc.dense_bytes(cfg.n_layer, cfg.n_head, 64))
    follower = Follower(a, b)
    if way == "b-first":  # B refused the text before: it runs first, then A afresh
        refused_once(follower, a, b, IDS[:2], monkeypatch)
    keys = range(5, 9) if way != "afresh" else range(1, MAX_BEHIND + 3)  # (afresh: too far behind)
    for k in keys:
        run = window_run(a, "", ids=IDS[:k], request=raised)
        follower.note(run.clean, run.result.cache_used, run.dense_limit)
        if way == "afresh" and k < len(keys):
            continue  # (no comparison of these came)
        a_trace, trace = follower.follow(run.clean, C.compare_trace, cached=run.result.cache_used,
                                         dense_limit=run.dense_limit)
        ran_afresh = way == "afresh" or (way == "b-first" and k == keys[0])
        assert (a_trace is not run.clean) == ran_afresh
        assert trace.attentions.shape == a_trace.attentions.shape == (cfg.n_layer, cfg.n_head, k, k)
        np.testing.assert_allclose(trace.attentions, a_trace.attentions, rtol=1e-5, atol=1e-6)
