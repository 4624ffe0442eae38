"""What a generation's steps reuse from step to step (every layer's Consts of a one-row run, kept
for a block of positions: families.layer_consts; the bytes of K and V as the cache and the run
counted them: generate.held_kv) never goes stale: steps of two models (the same file loaded twice:
configs alike but not the same object) taken in turns, with a window's runs and an ablated run
between them, and a generation long enough that its K and V move to a larger buffer and its
positions cross blocks, give the tokens, last rows, final-norm inputs and K and V of the same
steps made with nothing kept, bit for bit."""

import numpy as np
import pytest

from attnviz.engine.computing import families
from attnviz.engine.computing import qmatvec as qm  # noqa: F401  (first: numba's plain error text)
from attnviz.engine.computing.edits import ReplaceHead
from attnviz.engine.computing.generate import _StepTrace, held_kv, run_step
from attnviz.engine.computing.run_result import allocated_bytes
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, Trace

pytest.importorskip("numba")

STEPS = 70  # (from a prompt of 8: its K and V move once, past kv_room's 64 positions of room)


def _steps(model, prompt):
    """Greedy steps after `prompt` on a cache of their own, one per next() -> (token, last rows,
    final-norm input, K and V), each step's byte counts checked against its arrays."""
    cache = KVCache()
    trace = model.run(ids=np.asarray(prompt), trace=_StepTrace(True, cache),
                      request=RunRequest(labels=False)).trace
    head, seq = model.lm_head(), list(prompt)
    for _ in range(STEPS):
        token = int(np.argmax(head.logits(trace.final)[0]))
        seq.append(token)
        trace = run_step(model, np.asarray(seq, np.int64), True, cache)
        assert trace.kv_held is not None  # (known to the run: every layer in one call)
        kv = [*cache.k, *cache.v]
        assert held_kv(cache, trace, len(seq)) == (sum(a.nbytes for a in kv), allocated_bytes(kv))
        yield token, np.stack(trace.last_rows), trace.final.copy(), [a.copy() for a in kv]


def _alike(a, b):
    for (t, rows, final, kv), (t1, rows1, final1, kv1) in zip(a, b, strict=True):
        assert t == t1
        np.testing.assert_array_equal(rows, rows1)
        np.testing.assert_array_equal(final, final1)
        for x, y in zip(kv, kv1, strict=True):
            np.testing.assert_array_equal(x, y)


def test_steps_in_turns_with_runs_between_equal_steps_with_nothing_kept(smollm2_packed, cap_kernels,
                                                                        monkeypatch):
    from attnviz.engine.computing.load import load_model

    cap_kernels(1)
    a, b = smollm2_packed, load_model("SmolLM2-135M-Instruct")
    assert a.config is not b.config
    rng = np.random.default_rng(5)
    pa, pb = rng.integers(100, 40000, 8).tolist(), rng.integers(100, 40000, 11).tolist()
    text = rng.integers(100, 40000, 30).tolist()
    with monkeypatch.context() as m:  # nothing kept: each run's Consts made anew
        m.setattr(families, "layer_consts", lambda cfg, T, p=0, masks=True, workers=1, positions=None:
                  families._layer_consts(cfg, T, p, masks, workers, positions))
        plain_a, plain_b = list(_steps(a, pa)), list(_steps(b, pb))
    got_a, got_b = [], []
    for s, (x, y) in enumerate(zip(_steps(a, pa), _steps(b, pb), strict=True)):
        got_a.append(x)
        got_b.append(y)
        if s % 7 == 3:  # a window's keystroke on model a's own cache, and an ablated run of b
            a.run(ids=np.asarray(text[:10 + s // 7]))
            b.run(ids=np.asarray(text[:12]), trace=Trace(edits=(ReplaceHead(1, 2, 0.0),)))
    _alike(got_a, plain_a)
    _alike(got_b, plain_b)
    assert [t for t, *_ in plain_a] != [t for t, *_ in plain_b]  # (two generations apart)
