"""What a causal model's KV cache holds: the current run's keys and values with room for the next
positions (appended in place), the earlier runs' without that room."""

import gc
import tracemalloc

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.computing import trace
from attnviz.engine.computing.request import RunRequest
from tiny import tiny_llama


def test_the_earlier_runs_are_held_without_room_for_more_positions(tmp_path):
    model = load_model(tiny_llama(tmp_path / "m", seed=3, n_head=4, n_kv_head=2, d_model=512, d_ff=64))
    fresh = load_model(tmp_path / "m")
    c = model.config
    runs = [[1, 2, 3, 10 + j] for j in range(trace.EARLIER_RUNS + 1)]  # each shares [1, 2, 3] only
    tracemalloc.start()
    try:
        for ids in runs:
            last = model.run(ids=ids)
        kv = last.cache_bytes + last.cache_earlier[1]  # K and V of the current run and the earlier
        assert last.cache_earlier[0] == trace.EARLIER_RUNS
        del last
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    room = c.n_layer * 2 * c.n_kv_head * trace.KV_ROOM * c.d_head * 4  # one run's room, float32
    assert held < kv + room * 3 // 2  # the current run's room alone (not one per earlier run)
    for ids in (runs[1], runs[1] + [20, 21], runs[-1] + [22]):  # earlier runs reused, appended to
        got = model.run(ids=ids)
        assert got.cache_reused >= len(ids) - 2
        np.testing.assert_allclose(got.attentions, fresh.run(ids=ids, request=RunRequest(use_cache=False))
                                   .attentions, atol=1e-5)
