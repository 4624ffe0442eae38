"""Generations that take turns on one model (a model compared with itself, two generations) in
onerow_stack's one call: each cache's steps write into its own buffer in place, as one cache
alone does, and give the same bits as that generation alone."""

import numpy as np
import pytest

from attnviz.engine.computing.generate import _StepTrace
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache

pytest.importorskip("numba")

TEXT = "The quick brown fox jumps over the lazy dog and runs far away."


def _step(model, ids, cache):  # a generation's step on its cache -> the final-norm input
    trace = _StepTrace(False, cache)
    model.run(ids=np.asarray(ids), trace=trace, request=RunRequest(labels=False))
    return trace.final.copy()


def test_two_generations_in_turns_keep_their_own_buffers_and_bits(smollm2_packed, cap_kernels):
    model = smollm2_packed
    cap_kernels(1)  # (the one call: one kernel thread)
    ids = list(model.tokenizer.encode(TEXT).ids)
    a, b, alone = KVCache(), KVCache(), KVCache()
    finals, bases = {"a": [], "b": [], "alone": []}, []
    for t in range(5, 12):
        finals["a"].append(_step(model, ids[:t], a))
        finals["b"].append(_step(model, ids[:t], b))
        bases.append((a.k[0].base, b.k[0].base))
    for t in range(5, 12):
        finals["alone"].append(_step(model, ids[:t], alone))
    for x, y, z in zip(finals["a"], finals["b"], finals["alone"], strict=True):
        np.testing.assert_array_equal(x, z)
        np.testing.assert_array_equal(y, z)
    # from the second step on, each cache's keys are views of one buffer written in place
    assert all(ka is bases[1][0] and kb is bases[1][1] for ka, kb in bases[1:])
    assert bases[1][0] is not bases[1][1]
