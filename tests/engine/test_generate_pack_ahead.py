"""A generation on a GGUF file whose unembedding is packed for the kernels packs that table on a
thread of its own while the prefill runs (generate.pack_head_ahead): the table is packed once, the
generation gives the same tokens and log-probabilities, bit for bit, as one whose first step packs
it, and no thread is left when it returns."""

import threading

import numpy as np
import pytest

from attnviz.engine.computing import generate as G
from attnviz.engine.computing import logits as L
from gguf_files import Q, gguf_tensors, load_packed, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")
PROMPT = [3, 1, 4, 1, 5, 9, 2]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path_factory.mktemp("pack_ahead") / "q8.gguf", cfg, tensors, Q.Q8_0)


def _packers() -> list:
    return [t for t in threading.enumerate() if t.name == "attnviz-pack-head"]


def _run(path, monkeypatch, ahead: bool):
    """(the generation, how many times the table was packed) on a fresh load of `path`."""
    model = load_packed(path)
    head = model.lm_head()
    assert head.pack is not None and not head.pack.made  # packed for the kernels, not yet packed
    packed = []
    real = L._packed_table

    def counting(table):
        packed.append(threading.current_thread().name)
        return real(table)
    monkeypatch.setattr(L, "_packed_table", counting)
    if not ahead:
        monkeypatch.setattr(G, "pack_head_ahead", lambda head: None)
    gen = G.generate(model, ids=np.asarray(PROMPT), max_new=4, ignore_eos=True)
    monkeypatch.undo()
    assert head.pack.made and head.packed is not None
    return gen, packed


def test_the_head_packed_ahead_gives_the_same_generation_and_is_packed_once(path, monkeypatch):
    ahead, packed_ahead = _run(path, monkeypatch, ahead=True)
    assert _packers() == []  # joined before generate returned
    first, packed_first = _run(path, monkeypatch, ahead=False)
    assert len(packed_ahead) == 1 and packed_first == [threading.current_thread().name]
    assert ahead.new_ids == first.new_ids and len(ahead.steps) == 4
    for a, b in zip(ahead.steps, first.steps):
        assert np.array_equal(a.top_ids, b.top_ids)
        assert np.array_equal(a.top_logprobs, b.top_logprobs)  # bit for bit


def test_the_thread_packs_the_table_the_steps_then_read(path, monkeypatch):
    model = load_packed(path)
    head = model.lm_head()
    by = []
    real = L._packed_table
    monkeypatch.setattr(L, "_packed_table", lambda t: by.append(threading.current_thread().name) or real(t))
    thread = G.pack_head_ahead(head)
    thread.join()
    assert by == ["attnviz-pack-head"] and head.pack.made
    pm = head.packed
    assert pm is not None and head.packed_for(1) is pm and by == ["attnviz-pack-head"]  # not again


def test_nothing_is_packed_ahead_where_the_head_is_packed_already_or_has_no_kernel_copy(path):
    model = load_packed(path)
    head = model.lm_head()
    head.pack.get()
    assert G.pack_head_ahead(head) is None
    unpacked = L.LMHead(head.norm, head.centred, head.eps, head.w_u)
    assert G.pack_head_ahead(unpacked) is None and _packers() == []


def test_a_packing_that_fails_ahead_is_raised_by_the_generation_itself(path, monkeypatch):
    model = load_packed(path)

    def broken(table):
        raise MemoryError("no room to pack the table")
    monkeypatch.setattr(L, "_packed_table", broken)
    with pytest.raises(MemoryError, match="no room"):
        G.generate(model, ids=np.asarray(PROMPT), max_new=2, ignore_eos=True)
    assert _packers() == []
