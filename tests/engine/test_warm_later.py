"""The kernels' warm-up in two parts (engine/computing/qmatvec.py, qpack.ask_for_kernels with
rest_later, as the window asks): a load warms only the kernels a run of a few rows takes, and a run
waits for what it takes and no more: a run of several rows on a freshly loaded model equals the
same run once everything is warm, bit for bit, without waiting for the one-row steps. A one-row
run in a process that leaves nothing for later waits for them and takes them, expanded layer or
packed, so its numbers never depend on when a warm-up finished; in one that warms them later (the
window), it does not wait for them: until they are warm it takes the layer loop on the few-row
kernels, within the kernels' bound of the one-row steps' numbers."""

import threading

import numpy as np
import pytest

from attnviz.engine import parallel
from attnviz.engine.computing import families, layers, load
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import Trace
from attnviz.engine.reading import gguf_model, qpack
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES
from warm_state import as_fresh, settled

pytest.importorskip("numba")

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


@pytest.fixture
def cold(monkeypatch):
    """The warm-up's state as a fresh process has it, the kernels asked for with the rest later
    (the compiled code stays in this process: warming again only calls it); the load's own warm-up
    threads, listed, for the test to join."""
    as_fresh(monkeypatch)
    was = qpack.kernels_on(), qpack.rest_later()  # (asked for again after the test as they were)
    qpack.ask_for_kernels(rest_later=True)
    threads, real = [], qm.warm_in_background

    def listed(qtypes, extras=True, **kw):
        threads.append((real(qtypes, extras, **kw), extras))
        return threads[-1][0]
    monkeypatch.setattr(qm, "warm_in_background", listed)
    yield threads
    qpack.ask_for_kernels(*was)


@pytest.fixture
def steps_taken(monkeypatch):
    """What families.forward's layers took for their steps (one_row_steps: the compiled module or
    None), per layer in order."""
    taken, real = [], layers.one_row_steps

    def seen(layer, n_rows, trace=None):
        taken.append((n_rows, real(layer, n_rows, trace)))
        return taken[-1][1]
    monkeypatch.setattr(families, "one_row_steps", seen)
    return taken


def loaded(tmp_path, threads, name="q8.gguf"):
    """The tiny Llama (grouped-query) in Q8_0 blocks, its layers packed, its load's warm-up ended."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_gguf(write_gguf(tmp_path / name, cfg, tensors, Q.Q8_0))
    for t, _ in threads:
        t.join(timeout=600)
        assert not t.is_alive()
    settled()  # (the few-rows kernels the read started: load.warm_few_rows_meanwhile)
    return model


@pytest.mark.parametrize("one_thread", [True, False], ids=["one-thread", "every-core"])
def test_a_load_warms_the_kernels_alone_and_a_run_of_rows_takes_them_bit_for_bit(
        tmp_path, cold, steps_taken, one_thread):
    parallel.limit_kernel_threads(1 if one_thread else None, wide=None)
    model = loaded(tmp_path, cold)
    assert cold == []  # the load's warm-up: the kernels alone, which its read started
    assert model.weights.layers[0].packed is not None
    key = qm._key(Q.Q8_0)  # in the form a call takes: one thread, the serial twin
    assert (key in qm._serial_ready, key in qm._warmed) == ((True, False) if one_thread or parallel.cores() == 1
                                                            else (False, True))
    first = model.run(ids=IDS, request=RunRequest(use_cache=False, inputs=True))
    assert qm.ONE_ROW is None and not qm.warmed(model.weights.packed_types)  # not waited for
    assert steps_taken and all(steps is None for _, steps in steps_taken)
    qm.warm(model.weights.packed_types)
    assert qm.ONE_ROW is not None and qm.warmed(model.weights.packed_types)
    again = model.run(ids=IDS, request=RunRequest(use_cache=False, inputs=True))
    assert np.array_equal(first.attentions, again.attentions)
    assert all(np.array_equal(a, b) for a, b in zip(first.layer_inputs, again.layer_inputs, strict=True))


@pytest.mark.parametrize("expanded", [False, True], ids=["packed", "expanded"])
def test_a_one_row_run_waits_for_the_one_row_steps_and_equals_a_warm_ones(tmp_path, cold, steps_taken,
                                                                          monkeypatch, expanded):
    """A process that leaves nothing for later (qpack.ask_for_kernels without rest_later: a
    one-shot command, generate)."""
    if expanded:  # the prefill expands every layer (ROWS_UNEXPANDED rows or more)
        monkeypatch.setattr(qm, "ROWS_UNEXPANDED", len(IDS) - 1)
    model = loaded(tmp_path, cold)
    qpack.ask_for_kernels(rest_later=False)
    model.run(ids=IDS[:-1])
    assert qm.ONE_ROW is None
    assert model.weights.layers.holds(0) == expanded
    del steps_taken[:]
    step = model.run(ids=IDS)
    assert step.cache_computed == 1
    assert qm.ONE_ROW is not None and qm.warmed(model.weights.packed_types)
    assert steps_taken and all(n == 1 and steps is qm.ONE_ROW for n, steps in steps_taken)
    warm = loaded(tmp_path, [], "again.gguf")  # everything warm now: the one-row run as it always is
    warm.run(ids=IDS[:-1])
    want = warm.run(ids=IDS)
    assert want.cache_computed == 1
    assert np.array_equal(step.attentions, want.attentions)


@pytest.mark.parametrize("expanded", [False, True], ids=["packed", "expanded"])
def test_where_the_rest_is_warmed_later_a_one_row_run_waits_for_nothing_more_than_a_run_of_rows(
        tmp_path, cold, steps_taken, monkeypatch, expanded):
    """The window's process (rest_later): a one-row run before the warm-up takes the layer loop's
    NumPy steps on the few-row kernels, within the kernels' bound of a warm one-row run (both of
    the float32 pass), and waits for nothing: it starts the one-row steps' warm-up on a thread of
    its own (held here until the run is done), once; its row stays in the KV cache as it was
    computed, and the next one-row run, once the warm-up is done, takes the one-row steps after it."""
    if expanded:
        monkeypatch.setattr(qm, "ROWS_UNEXPANDED", len(IDS) - 1)
    model = loaded(tmp_path, cold)
    gate, real = threading.Event(), qm._warm_one_row

    def held(half):
        assert gate.wait(timeout=600)
        real(half)
    monkeypatch.setattr(qm, "_warm_one_row", held)
    model.run(ids=IDS[:-1])
    del steps_taken[:], cold[:]
    step = model.run(ids=IDS)
    assert step.cache_computed == 1 and model.weights.layers.holds(0) == expanded
    assert qm.ONE_ROW is None and not qm.warmed(model.weights.packed_types)  # nothing waited for
    assert steps_taken and all(n == 1 and steps is None for n, steps in steps_taken)
    assert [extras for _, extras in cold] == [True]  # one warm-up of the one-row steps, started
    model.run(ids=IDS[:-1] + [5])  # (another one-row run meanwhile starts no second one)
    assert len(cold) == 1
    gate.set()
    cold[0][0].join(timeout=600)
    assert qm.ONE_ROW is not None and qm.warmed(model.weights.packed_types, layers=load.packed_views(model))
    assert model.run(ids=IDS).cache_computed == 0  # (the kept run of the keyed text, as computed)
    del steps_taken[:]
    after = model.run(ids=IDS + [7])
    assert after.cache_computed == 1 and steps_taken and all(steps is qm.ONE_ROW for _, steps in steps_taken)
    assert np.array_equal(after.attentions[:, :, :len(IDS), :len(IDS)], step.attentions)  # the cached rows
    warm = loaded(tmp_path, [], "again.gguf")  # everything warm: the one-row runs as they are then
    warm.run(ids=IDS[:-1])
    want = warm.run(ids=IDS)
    np.testing.assert_allclose(step.attentions, want.attentions, rtol=0, atol=1e-5)
    np.testing.assert_allclose(after.attentions, warm.run(ids=IDS + [7]).attentions, rtol=0, atol=1e-5)


def test_a_run_given_another_runs_steps_takes_them_though_the_warm_up_ended_between(tmp_path, cold,
                                                                                   steps_taken, monkeypatch):
    """Two models from one file (Compare of a model with itself), the window's way (the rest
    later): A's one-row run before the one-row steps are warm takes the NumPy steps and its trace
    keeps that choice (Trace.one_row); the warm-up that run started then ends, and B's run of the
    same ids given A's choice takes the NumPy steps too, every layer, and gives A's patterns bit
    for bit. A run that chooses for itself then takes the one-row steps."""
    a = loaded(tmp_path, cold)
    b = loaded(tmp_path, [], "b.gguf")
    gate, real = threading.Event(), qm._warm_one_row

    def held(half):  # (the warm-up A's run starts, held until that run is done)
        assert gate.wait(timeout=600)
        real(half)
    monkeypatch.setattr(qm, "_warm_one_row", held)
    for model in (a, b):
        model.run(ids=IDS[:-1])
    del steps_taken[:], cold[:]
    first = Trace()
    ran_a = a.run(ids=IDS, trace=first)
    assert ran_a.cache_computed == 1 and first.one_row is False
    gate.set()
    for t, _ in cold:
        t.join(timeout=600)
    assert qm.ONE_ROW is not None and qm.warmed(a.weights.packed_types, layers=load.packed_views(a))
    second = Trace()
    second.one_row = first.one_row
    ran_b = b.run(ids=IDS, trace=second)
    assert ran_b.cache_computed == 1 and second.one_row is False
    assert steps_taken and all(n == 1 and steps is None for n, steps in steps_taken)
    assert np.array_equal(ran_a.attentions, ran_b.attentions)
    del steps_taken[:]
    own = Trace()
    assert b.run(ids=IDS[:-1] + [7], trace=own).cache_computed == 1
    assert own.one_row is True and all(steps is qm.ONE_ROW for _, steps in steps_taken)


def test_a_load_starts_the_few_rows_kernels_before_its_tokenizer_and_layers(tmp_path, cold, monkeypatch):
    """The kernels of the file's packed block types start on a thread of their own once the file's
    tensor table is read, so numba's import and the kernels' load overlap the tokenizer's build and
    the layers' packing; the load's own warm-up after them then finds them warm."""
    events = []
    real_start, real_tokenizer = load.warm_few_rows_meanwhile, gguf_model.gguf_tokenizer

    def start(qtypes):
        events.append(("kernels", frozenset(qtypes)))
        t = real_start(qtypes)
        events.append(("thread", t))
        return t

    def tokenizer(*args, **kwargs):
        events.append(("tokenizer",))
        return real_tokenizer(*args, **kwargs)
    monkeypatch.setattr(load, "warm_few_rows_meanwhile", start)
    monkeypatch.setattr(gguf_model, "gguf_tokenizer", tokenizer)
    model = loaded(tmp_path, cold)
    assert [e[0] for e in events] == ["kernels", "thread", "tokenizer"]
    assert events[0][1] == model.weights.packed_types == {Q.Q8_0}
    events[1][1].join(timeout=600)
    assert qm.takes(model.weights.layers[0].packed.w_qkv, 2)  # warm: a run of a few rows takes them
    first = model.run(ids=IDS, request=RunRequest(use_cache=False))
    qm.warm(model.weights.packed_types)
    again = model.run(ids=IDS, request=RunRequest(use_cache=False))
    assert np.array_equal(first.attentions, again.attentions)


def test_a_file_without_packed_layers_starts_no_kernels():
    """Nothing to pack (a float32 file, or a process that did not ask for the kernels): no thread."""
    assert load.warm_few_rows_meanwhile(frozenset()) is None


def test_a_one_shot_load_packs_before_its_warm_up(tmp_path, cold, monkeypatch):
    """A process that warms everything at load (no rest later: `generate`) starts no thread before
    its packing, whose numba imports would slow it: its warm-up follows the load."""
    started = []
    monkeypatch.setattr(load, "warm_few_rows_meanwhile", lambda qtypes: started.append(qtypes))
    qpack.ask_for_kernels(rest_later=False)
    model = loaded(tmp_path, cold)
    assert started == [] and model.weights.packed_types == {Q.Q8_0}
