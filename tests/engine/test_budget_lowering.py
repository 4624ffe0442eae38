"""A lowered memory budget and the load's one buffer of the kept layers (engine/reading/budget.py,
layer_memory.py): lowering MiniLM's budget a little copies the layers it keeps out of the buffer,
and gives the buffer's pages back layer by layer meanwhile, so memory never holds the whole buffer
and the copies together: the peak stays within the new budget (and the old); pages a run or an
analysis may still read (a layer it holds, a slice of a matrix) are not given back; and a store
sharing the buffer's layers (LayerStore.shared) keeps it anyway, so the other copies nothing."""

import ctypes
import dataclasses
import sys
import tracemalloc
import weakref

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.reading import pages

TEXT = "The keys to the cabinet are on the table."

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and mincore: Linux")


def _resident(a: np.ndarray) -> int:
    """Bytes of array `a`'s pages in memory now (mincore(2))."""
    lo = a.ctypes.data // pages.PAGE * pages.PAGE
    n = -(-(a.ctypes.data + a.nbytes - lo) // pages.PAGE)
    vec = (ctypes.c_ubyte * n)()
    assert ctypes.CDLL(None).mincore(ctypes.c_void_p(lo), ctypes.c_size_t(n * pages.PAGE), vec) == 0
    return sum(v & 1 for v in vec) * pages.PAGE


def _lowered(model, budget, monkeypatch) -> tuple[int, bool]:
    """Lower `model`'s budget to `budget` -> (the most memory the buffer's pages and the arrays
    made meanwhile held at once, as each kept layer's copy took its place; whether the buffer is
    still alive after)."""
    store = model.weights.layers
    buffer = weakref.ref(pages.owner(store[len(store) - 1].w_qkv))
    real, peak = dataclasses.replace, [0]

    def replace(*args, **kw):  # (each kept layer's copy, as it is made)
        out = real(*args, **kw)
        held = buffer()
        peak[0] = max(peak[0], tracemalloc.get_traced_memory()[0] - base
                      + (0 if held is None else _resident(held)))
        held = None
        return out
    monkeypatch.setattr(dataclasses, "replace", replace)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        model.set_memory_budget(budget)
    finally:
        tracemalloc.stop()
        monkeypatch.undo()
    return peak[0], buffer() is not None


def test_lowering_a_little_gives_the_buffer_back_layer_by_layer(monkeypatch):
    """MiniLM's six layers in one buffer, the budget lowered by a byte: four kept, copied out one at
    a time, the two leaving and each copied layer's part of the buffer given back as it goes, so
    memory holds the four kept layers and one layer more at most, within the new budget, never
    the whole buffer and the copies together; the buffer is gone after, and the patterns are the
    same, bit for bit."""
    model = load_model("all-MiniLM-L6-v2")
    store = model.weights.layers
    before = model.run(TEXT).attentions
    total, one = sum(store.sizes), max(store.sizes)
    peak, alive = _lowered(model, total - 1, monkeypatch)
    assert store.kept == 4 and not alive
    # (2 MiB: the buffer's pages past its layers; 1 MiB: what other threads of this process
    # allocate meanwhile, which tracemalloc counts too)
    assert 0 < peak <= 4 * one + one + (3 << 20) <= total - 1
    np.testing.assert_array_equal(model.run(TEXT).attentions, before)


@pytest.mark.parametrize("held", ["layer", "matrix", "slice"])
def test_the_pages_a_run_or_an_analysis_holds_are_not_given_back(held):
    """A layer leaving the set that a run still holds, or one of its matrices (the layer let go),
    or a slice of a kept layer's matrix an analysis still holds, reads what it held after the
    budget is lowered: its pages stay (the buffer with them), whatever else is given back."""
    model = load_model("all-MiniLM-L6-v2")
    store = model.weights.layers
    before = model.run(TEXT).attentions
    buffer = weakref.ref(pages.owner(store[0].w_qkv))
    if held == "layer":
        layer = store[0]
        arrays = lambda: (layer.w_qkv, layer.w_out)  # noqa: E731
    elif held == "matrix":
        matrix = store[0].w_qkv
        arrays = lambda: (matrix,)  # noqa: E731
    else:
        part = store[3].w_o[:, :5]
        arrays = lambda: (part,)  # noqa: E731
    want = [a.copy() for a in arrays()]
    model.set_memory_budget(sum(store.sizes) - 1)
    assert store.kept == 4 and buffer() is not None
    for got, value in zip(arrays(), want):
        np.testing.assert_array_equal(got, value)
    np.testing.assert_array_equal(model.run(TEXT).attentions, before)


def test_a_store_sharing_the_buffer_keeps_it_so_a_lowered_budget_copies_nothing(monkeypatch):
    """Two stores over one load's layers (LayerStore.shared: a second model of the file): lowering
    one's budget leaves its kept layers where they are, in the buffer the other keeps anyway
    (copying them would only add their bytes), and gives none of its pages back: the other reads
    every layer as before."""
    model = load_model("all-MiniLM-L6-v2")
    store = model.weights.layers
    other = store.shared()
    want = [other[i].w_qkv.copy() for i in range(len(other))]
    peak, alive = _lowered(model, sum(store.sizes) - 1, monkeypatch)
    assert store.kept == 4 and alive and peak == 0  # (no copy made: replace never called)
    assert all(pages.owner(store[i].w_qkv) is pages.owner(other[i].w_qkv) for i in range(2, 6))
    for i, value in enumerate(want):
        np.testing.assert_array_equal(other[i].w_qkv, value)
