"""A generation's steps (generate.run_step, every layer in one compiled call) on a cache that also
keeps earlier runs (a window's keystrokes: KVCache.earlier) give the bits of the same steps on a
fresh cache (K and V, the final-norm input, the chosen tokens), and leave the earlier runs as they
were."""

import numpy as np
import pytest

from attnviz.engine.computing import qmatvec as qm  # noqa: F401  (first: numba's plain error text)
from attnviz.engine.computing.generate import _StepTrace, run_step
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache

pytest.importorskip("numba")


def _generation(model, cache, prompt, n):
    """Greedy steps after `prompt` on `cache` -> per step (token, final-norm input, K and V)."""
    trace = model.run(ids=np.asarray(prompt), trace=_StepTrace(False, cache),
                      request=RunRequest(labels=False)).trace
    head, seq, out = model.lm_head(), list(prompt), []
    for _ in range(n):
        token = int(np.argmax(head.logits(trace.final)[0]))
        seq.append(token)
        trace = run_step(model, np.asarray(seq, np.int64), False, cache)
        out.append((token, trace.final.copy(), [a.copy() for a in (*cache.k, *cache.v)]))
        assert list(cache.ids) == seq
    return out


def _kept(cache):
    return [(r.ids.copy(), [a.copy() for a in (*r.k, *r.v)]) for r in cache.earlier]


def test_steps_beside_earlier_runs_equal_those_of_a_fresh_cache(smollm2_packed, cap_kernels):
    cap_kernels(1)
    model = smollm2_packed
    rng = np.random.default_rng(11)
    prompt = rng.integers(100, 40000, 20).tolist()
    crowded = KVCache()
    for ids in (rng.integers(100, 40000, 9).tolist(), rng.integers(100, 40000, 12).tolist()):
        model.run(ids=np.asarray(ids), trace=_StepTrace(False, crowded), request=RunRequest(labels=False))
    before = _kept(crowded)
    assert len(before) == 1
    a = _generation(model, crowded, prompt, 8)
    b = _generation(model, KVCache(), prompt, 8)
    for (t, f, kv), (t1, f1, kv1) in zip(a, b, strict=True):
        assert t == t1
        np.testing.assert_array_equal(f, f1)
        for x, y in zip(kv, kv1, strict=True):
            np.testing.assert_array_equal(x, y)
    kept = _kept(crowded)  # the prompt's run replaced the second, kept beside the first
    assert len(kept) == 2 and [list(i) for i, _ in kept[1:]] == [list(i) for i, _ in before]
    for (i, kv), (i1, kv1) in zip(kept[1:], before, strict=True):
        for x, y in zip(kv, kv1, strict=True):
            np.testing.assert_array_equal(x, y)
