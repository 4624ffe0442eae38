"""Every layer of a one-row run in one compiled call (engine/computing/onerow_stack.py) against the
layer loop it replaces (onerow_block's calls a layer): the same bits, on SmolLM2's real Q4_1
weights and on tiny Llamas of other block types, for generation steps (rows kept or not, the
cache's K and V, the final-norm input, the chosen tokens and their log-probabilities) and
keystrokes (patterns, K and V, the residual stream and z a window's run keeps, an early hand-over,
a stop); and the runs it does not cover (inputs or MLP outputs recorded, a layer it cannot take,
edits) take the loop and give its answer."""

import gc
import weakref

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm  # (first: it asks numba for plain error text)
from attnviz.engine.computing import onerow_stack
from attnviz.engine.computing.generate import _StepTrace, generate
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, Patch, ReplaceHead, Trace
from attnviz.engine.errors import Cancelled
from attnviz.engine.reading import qpack
from gguf_files import gguf_tensors, load_packed, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")


@pytest.fixture
def stacked(monkeypatch, cap_kernels):
    """set(on): the one call (on) or the layer loop; calls: (first, end) layers of each call. One
    kernel thread, as the window and generate give a one-row run (the block's serial kernels)."""
    cap_kernels(1)
    calls = []
    real = onerow_stack._layers

    def layers(x, a, b, *rest):
        calls.append((a, b))
        return real(x, a, b, *rest)
    monkeypatch.setattr(onerow_stack, "_layers", layers)

    def set_on(on):
        monkeypatch.setattr(onerow_stack, "ENABLED", on)
    set_on.calls = calls
    return set_on


def _steps(model, ids, first, rows):
    """A generation's runs: ids[:first], then one token a step on its own cache -> per step
    (final-norm input, last rows or None, every layer's K and V)."""
    cache, out = KVCache(), []
    for t in range(first, len(ids) + 1):
        trace = _StepTrace(rows, cache)
        model.run(ids=np.asarray(ids[:t]), trace=trace, request=RunRequest(labels=False))
        out.append((trace.final.copy(), np.stack(trace.last_rows) if rows else None,
                    [a.copy() for a in (*cache.k, *cache.v)]))
    return out


def _same_steps(a, b):
    for (f, r, kv), (f1, r1, kv1) in zip(a, b, strict=True):
        np.testing.assert_array_equal(f, f1)
        if r is not None or r1 is not None:
            np.testing.assert_array_equal(r, r1)
        for x, y in zip(kv, kv1, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "no-rows"])
def test_generation_steps_in_one_call_equal_the_layer_loop_bit_for_bit(smollm2_packed, stacked, rows,
                                                                       monkeypatch):
    ids = np.random.default_rng(5).integers(100, 40000, 80).tolist()
    made, fresh = [], onerow_stack._fresh
    monkeypatch.setattr(onerow_stack, "_fresh", lambda *a: (made.append(a), fresh(*a))[1])
    runs = {}
    for on in (True, False):
        stacked(on)
        before = len(stacked.calls)
        runs[on] = _steps(smollm2_packed, ids, 12, rows)
        # every step after the prefill one call of all 30 layers (the first copies the prefill's
        # K and V into buffers with room for KV_ROOM more; the next write after them in place,
        # until step 66 finds no room left and copies them into new buffers)
        assert stacked.calls[before:] == ([(0, 30)] * 68 if on else [])
    assert len(made) == 2  # (the buffer of every layer's K and V: at the first step and at step 66)
    _same_steps(runs[True], runs[False])


def test_steps_without_a_mask_equal_those_given_the_all_zero_one_bit_for_bit(smollm2_packed, stacked,
                                                                             monkeypatch):
    """A step's row sees every key: its constants carry no mask and the one call is given none
    (rowmath.NO_BIAS: the scores' path that fetches the values as it reads the keys); its steps,
    in one call and layer by layer, equal those given the all-zero mask [1, T] instead."""
    from dataclasses import replace

    from attnviz.engine.computing import families
    from attnviz.engine.computing.rowmath import NO_BIAS
    ids = np.random.default_rng(7).integers(100, 40000, 30).tolist()
    given, real = [], onerow_stack._layers

    def layers(x, a, b, *rest):  # (the mask the call is given, among its arguments)
        given.append(any(r is NO_BIAS for r in rest))
        return real(x, a, b, *rest)
    monkeypatch.setattr(onerow_stack, "_layers", layers)
    real_consts = families.layer_consts

    def zero_mask(cfg, T, p=0, *a, **k):  # the mask a last row was given before: all zeros
        consts, zeros, made = real_consts(cfg, T, p, *a, **k), np.zeros((1, T), np.float32), {}
        return [made.setdefault(id(c), replace(c, bias=zeros)) if c.bias is None else c for c in consts]
    runs = {}
    for on, zeros in ((True, False), (True, True), (False, False), (False, True)):
        stacked(on)
        if zeros:
            monkeypatch.setattr(families, "layer_consts", zero_mask)
        given.clear()
        runs[on, zeros] = _steps(smollm2_packed, ids, 12, True)
        monkeypatch.setattr(families, "layer_consts", real_consts)
        assert given == ([not zeros] * 18 if on else [])
    for way in runs:
        _same_steps(runs[True, False], runs[way])


def test_steps_from_a_cache_cut_back_equal_the_layer_loop(smollm2_packed, stacked, monkeypatch):
    """The cache cut back to its first T - 1 tokens before each step (fresh views of the buffer,
    as benchmarks/qsteps.py's back_to makes): each step writes its row in place at T - 1."""
    ids = np.random.default_rng(6).integers(100, 40000, 40).tolist()
    made, fresh = [], onerow_stack._fresh
    monkeypatch.setattr(onerow_stack, "_fresh", lambda *a: (made.append(a), fresh(*a))[1])
    runs = {}
    for on in (True, False):
        stacked(on)
        cache, out = KVCache(), []
        model = smollm2_packed
        model.run(ids=np.asarray(ids[:31]), trace=_StepTrace(False, cache), request=RunRequest(labels=False))
        for token in ids[31:]:
            cache.ids = cache.ids[:31].copy()
            cache.k, cache.v = [a[:, :31] for a in cache.k], [a[:, :31] for a in cache.v]
            trace = _StepTrace(True, cache)
            model.run(ids=np.asarray(ids[:31] + [token]), trace=trace, request=RunRequest(labels=False))
            out.append((trace.final.copy(), np.stack(trace.last_rows), [a.copy() for a in (*cache.k, *cache.v)]))
        runs[on] = out
    assert stacked.calls == [(0, 30)] * 9
    assert len(made) == 1  # (the first step's: the prefill's arrays have no room; then in place)
    _same_steps(runs[True], runs[False])


def test_a_generation_in_one_call_chooses_the_same_tokens(smollm2_packed, stacked):
    gens = {}
    for on in (True, False):
        stacked(on)
        gens[on] = generate(smollm2_packed, "The capital of France is", max_new=6, rows=True,
                            ignore_eos=True)
    assert stacked.calls == [(0, 30)] * 5  # (the first token comes from the prefill)
    a, b = gens[True], gens[False]
    assert a.new_ids == b.new_ids
    for s, t in zip(a.steps, b.steps, strict=True):
        np.testing.assert_array_equal(s.top_logprobs, t.top_logprobs)
        np.testing.assert_array_equal(s.rows, t.rows)
        assert s.kv_bytes == t.kv_bytes


def _keystrokes(model, texts, request=RunRequest()):
    """Each text one run with the model's KV cache -> per run (patterns, K and V, rows computed)."""
    model.clear_cache()
    out = []
    for text in texts:
        trace = Trace()
        r = model.run(text, trace=trace, request=request)
        out.append((r.attentions.copy(), [a.copy() for a in (*trace.k, *trace.v)], r.cache_computed))
    model.clear_cache()
    return out


TEXTS = ["The cat sat on", "The cat sat on the", "The cat sat on the m", "The cat sat on the ma",
         "The cat sat on the mat"]


def _same_runs(a, b):
    for (p, kv, n), (p1, kv1, n1) in zip(a, b, strict=True):
        assert n == n1
        np.testing.assert_array_equal(p, p1)
        for x, y in zip(kv, kv1, strict=True):
            np.testing.assert_array_equal(x, y)


def test_keystrokes_in_one_call_equal_the_layer_loop_bit_for_bit(smollm2_packed, stacked):
    runs = {}
    for on in (True, False):
        stacked(on)
        runs[on] = _keystrokes(smollm2_packed, TEXTS, RunRequest(values=True))
    one_row = sum(n == 1 for _, _, n in runs[True])
    assert one_row >= 2 and stacked.calls == [(0, 30)] * one_row
    _same_runs(runs[True], runs[False])


@pytest.mark.parametrize("want", [{"z": True, "resid": True}, {"resid": True}, {"z": True}],
                         ids=["z+resid", "resid", "z"])
def test_keystrokes_keeping_z_and_the_residual_stream_in_one_call_equal_the_layer_loop(
        smollm2_packed, stacked, want):
    """A window's run kept for Compare and What heads do: the same records as the layer loop's
    (the cached rows before the new one included), bit for bit."""
    runs = {}
    for on in (True, False):
        stacked(on)
        smollm2_packed.clear_cache()
        runs[on] = [(smollm2_packed.run(text, trace=Trace(**want)).trace) for text in TEXTS]
    assert len(stacked.calls) >= 2 and set(stacked.calls) == {(0, 30)}
    for t, t1 in zip(runs[True], runs[False], strict=True):
        assert t.reused == t1.reused and t.attentions.tobytes() == t1.attentions.tobytes()
        for x, y in zip([*t.z, *t.resid, *t.k, *t.v], [*t1.z, *t1.resid, *t1.k, *t1.v], strict=True):
            assert (x is None and y is None) or x.tobytes() == y.tobytes()
    smollm2_packed.clear_cache()


def test_an_early_hand_over_splits_the_call_and_shows_the_same_layers(smollm2_packed, stacked):
    """RunRequest(early=(k, fn)) (the window's layer on screen): layers 0..k-1 in one call, fn
    given their patterns, then the rest."""
    parts = {True: [], False: []}
    runs = {}
    for on in (True, False):
        stacked(on)
        early = (12, lambda part, on=on: parts[on].append(part.attentions.copy()))
        runs[on] = _keystrokes(smollm2_packed, TEXTS, RunRequest(early=early))
    one_row = sum(n == 1 for _, _, n in runs[True])
    assert one_row >= 2 and stacked.calls == [(0, 12), (12, 30)] * one_row
    _same_runs(runs[True], runs[False])
    assert len(parts[True]) == len(parts[False]) == len(TEXTS)
    for a, b in zip(parts[True], parts[False]):
        assert a.shape[0] == 12
        np.testing.assert_array_equal(a, b)


def test_a_stopped_keystroke_leaves_the_cache_as_it_was(smollm2_packed, stacked):
    stacked(True)
    model = smollm2_packed
    model.clear_cache()
    before = model.run(TEXTS[0]).attentions.copy()
    with pytest.raises(Cancelled, match="before layer 0"):
        model.run(TEXTS[0] + " x", request=RunRequest(stop=lambda: True))
    again = model.run(TEXTS[0])
    assert again.cache_computed == 0
    np.testing.assert_array_equal(again.attentions, before)
    model.clear_cache()


@pytest.mark.parametrize("request_", [RunRequest(inputs=True)], ids=["inputs"])
def test_a_run_recording_between_the_layers_takes_the_layer_loop(smollm2_packed, stacked, request_):
    runs = {}
    for on in (True, False):
        stacked(on)
        runs[on] = _keystrokes(smollm2_packed, TEXTS[:3], request_)
    assert stacked.calls == []
    _same_runs(runs[True], runs[False])


@pytest.mark.parametrize("trace", [
    Trace(mlp_out=True), Trace(inputs=True), Trace(z=True, inputs=True),
    Trace(edits=[ReplaceHead(3, 1)]), Trace(edits=[Patch("resid", 2, np.array([0]), np.zeros((1, 576)))]),
], ids=["mlp_out", "inputs", "z+inputs", "ablation", "patch"])
def test_a_trace_that_records_or_edits_between_the_layers_is_not_taken(trace):
    trace.want_kv = True  # (as a cached run sets it)
    assert onerow_stack._kind(trace) is None
    assert onerow_stack._kind(_kv(Trace())) == "patterns"
    assert onerow_stack._kind(_kv(Trace(z=True, resid=True))) == "patterns"
    assert onerow_stack._kind(_kv(_StepTrace(False, KVCache()))) == "step"


def test_a_trace_class_that_does_not_say_how_is_not_taken():
    class Recording(Trace):  # (another class's points may do more than Trace's)
        pass
    assert onerow_stack._kind(_kv(Recording())) is None


def _kv(trace):
    trace.want_kv = True
    return trace


@pytest.fixture(scope="module", params=[Q.Q8_0, Q.Q4_0, Q.Q5_1], ids=lambda q: q.name)
def tiny(tmp_path_factory, request):
    """Tiny grouped-query Llamas in the type (4 query heads over 2 KV heads): `covered`, every
    matrix in blocks (an MLP of 64), and `uncovered`, whose MLP of 48 leaves its down projection
    float32 (no layer the block takes)."""
    qtype = request.param
    qm.warm([qtype])
    folder = tmp_path_factory.mktemp("onerow_stack")
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return {"uncovered": load_packed(write_gguf(folder / "uncovered.gguf", cfg, tensors, qtype)),
            "covered": _covered(folder, qtype)}


def _covered(folder, qtype):
    """The tiny Llama with an MLP of 64 (every matrix in blocks of the type), loaded packed."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    wide = dict(tensors)
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            wide[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, cfg["hidden_size"])) * 0.2).astype(np.float32)
    return load_packed(write_gguf(folder / "covered.gguf", dict(cfg, intermediate_size=64), wide, qtype))


IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]


@pytest.mark.parametrize("name", ["covered", "uncovered"])
def test_tiny_llamas_steps_in_one_call_where_every_layer_is_covered(tiny, stacked, name):
    model = tiny[name]
    n_layer = model.config.n_layer
    runs = {}
    for on in (True, False):
        stacked(on)
        before = len(stacked.calls)
        runs[on] = _steps(model, IDS, 8, True)
        assert stacked.calls[before:] == ([(0, n_layer)] * 8 if on and name == "covered" else [])
    _same_steps(runs[True], runs[False])


def test_the_buffers_kept_for_the_next_step_go_with_their_cache(tiny, stacked):
    """_KeptKV holds the last step's K and V buffers for the next one: while the generation's cache
    lives, not after."""
    stacked(True)
    model = tiny["covered"]
    cache = KVCache()
    for t in range(8, 11):
        model.run(ids=np.asarray(IDS[:t]), trace=_StepTrace(False, cache), request=RunRequest(labels=False))
    kept = onerow_stack._STACKS[model.weights.layers].kept
    buffer = weakref.ref(kept.last[0])
    assert kept.last is not None and buffer() is not None
    other = KVCache()  # (steps of two caches in turns: one token each while it lives)
    for t in range(8, 11):
        for c in (cache, other):
            model.run(ids=np.asarray(IDS[:t]), trace=_StepTrace(False, c), request=RunRequest(labels=False))
    del c
    assert len(kept.tokens) == 2
    buffer = weakref.ref(kept.last[0])
    del cache
    gc.collect()
    assert len(kept.tokens) == 1 and kept.last is not None  # (the other's)
    del other
    gc.collect()
    assert kept.last is None and buffer() is None and kept.tokens == {}


@pytest.fixture
def q8_0_model(tmp_path):
    qm.warm([Q.Q8_0])  # (before `stacked` counts the calls: the warm-up compiles the real one)
    return _covered(tmp_path, Q.Q8_0)


@pytest.fixture
def q8_0_unprepared(tmp_path, monkeypatch):
    """q8_0_model with no stack built by its load's warm-up (onerow_stack.prepare): as a model whose
    kernels are still warming, the first run asks for it."""
    monkeypatch.setattr(onerow_stack, "prepare", lambda *_: None)
    qm.warm([Q.Q8_0])
    return _covered(tmp_path, Q.Q8_0)


def test_a_layer_not_on_its_packed_view_yet_is_asked_again(q8_0_unprepared, stacked, monkeypatch):
    """A run whose layer comes float32 (as while its kernel is still warming) takes the layer loop,
    and the next run, its layers all packed views again, the one call."""
    from attnviz.engine.computing import families
    model = q8_0_unprepared
    real, float32 = families.layer_for, [True]

    def layer_for(layers, i, n_rows):
        return layers[i] if float32[0] and i == 1 and n_rows == 1 else real(layers, i, n_rows)
    monkeypatch.setattr(families, "layer_for", layer_for)
    stacked(True)
    first = _steps(model, IDS, 10, True)
    assert stacked.calls == [] and model.weights.layers not in onerow_stack._STACKS
    float32[0] = False
    again = _steps(model, IDS, 10, True)
    assert stacked.calls == [(0, model.config.n_layer)] * 6
    for (f, r, _), (f1, r1, _) in zip(first, again, strict=True):  # (a float32 layer: rounding apart)
        np.testing.assert_allclose(f, f1, rtol=0, atol=1e-3 * np.abs(f).max())


def test_a_stores_lists_go_with_it(q8_0_model, stacked, tmp_path):
    stacked(True)
    (tmp_path / "own").mkdir()
    model = _covered(tmp_path / "own", Q.Q8_0)  # (not the fixture's: pytest holds that one)
    _steps(model, IDS, 14, False)
    assert stacked.calls
    store = weakref.ref(model.weights.layers)
    stack = weakref.ref(onerow_stack._STACKS[store()])
    del model
    gc.collect()
    assert store() is None and stack() is None


# keystrokes that replace the last token (a re-split word): the current run's K and V move to a
# copy of their own (kept among the earlier runs) and the next run writes into their buffer
RESPLIT = [IDS[:8], IDS[:7] + [11], IDS[:7] + [12], IDS[:7] + [12, 13], IDS[:7] + [12, 14],
           IDS[:7] + [11, 15], IDS[:8] + [2], IDS[:7] + [12, 13, 4], IDS[:7] + [12, 13, 5]]


def _kept_runs_unchanged(cache, seen):
    """Every run the cache holds (current and earlier) has the K and V it had when computed."""
    for run in (cache, *cache.earlier):
        for a, b in zip((*run.k, *run.v), seen[tuple(run.ids.tolist())], strict=True):
            np.testing.assert_array_equal(a, b)


def test_keystrokes_that_replace_the_last_token_reuse_the_buffer_and_keep_earlier_runs(tiny, stacked):
    model = tiny["covered"]
    runs, in_place = {}, []
    for on in (True, False):
        stacked(on)
        model.clear_cache()
        seen, out, previous = {}, [], []
        for ids in RESPLIT:
            stack = onerow_stack._STACKS.get(model.weights.layers)
            last = stack.kept.last if on and stack is not None else None
            before = weakref.ref(last[0]) if last is not None else None
            del last
            trace = Trace()
            r = model.run(ids=ids, trace=trace)
            shared = next((j for j, (a, b) in enumerate(zip(previous, ids)) if a != b), len(previous))
            if before is not None and r.cache_computed == 1 and shared == r.cache_reused:
                in_place.append(stack.kept.last[0] is before())  # (from the last run, not an earlier)
            previous = ids
            seen[tuple(ids)] = [a.copy() for a in (*trace.k, *trace.v)]
            out.append((r.attentions.copy(), seen[tuple(ids)], r.cache_computed))
            _kept_runs_unchanged(model._cache, seen)
        runs[on] = out
        assert len(model._cache.earlier) >= 2
    _same_runs(runs[True], runs[False])
    # every one-row run from the last run wrote into its buffer: this Python counts a buffer's
    # references as onerow_stack._OURS says (else every such keystroke copies into a new one)
    assert len(in_place) == 4 and all(in_place)


def test_a_buffer_a_caller_holds_a_view_of_is_never_written_again(tiny, stacked):
    stacked(True)
    model = tiny["covered"]
    model.clear_cache()
    trace = Trace()
    model.run(ids=IDS[:8], trace=trace)
    model.run(ids=IDS[:7] + [11], trace=(trace := Trace()))
    held = trace.k[1]  # a view of the kept buffer, held by the caller (not by the cache's lists)
    part = trace.v[0][:, 2:]  # and a view of a view
    held_was, part_was = held.copy(), part.copy()
    kept = onerow_stack._STACKS[model.weights.layers].kept
    first = weakref.ref(kept.last[0])
    for last in (12, 13, 14):
        r = model.run(ids=IDS[:7] + [last])
        assert r.cache_computed == 1
        np.testing.assert_array_equal(held, held_was)
        np.testing.assert_array_equal(part, part_was)
    assert first() is not None and kept.last[0] is not first()  # the held one was let be
    del held, part, trace
    gc.collect()
    assert first() is None  # (let go once nobody holds it)


def test_a_fresh_buffer_has_the_room_append_positions_gives_a_layer():
    from attnviz.engine.computing.trace import KV_ROOM, kv_room

    assert onerow_stack._fresh((2, 30, 3), 12, 64).shape == (2, 30, 3, 13 + KV_ROOM, 64)
    assert onerow_stack._fresh((2, 30, 3), 999, 64).shape == (2, 30, 3, 1000 + kv_room(1000), 64)
    assert kv_room(1000) > KV_ROOM


def test_a_prepared_stack_lets_the_first_keystroke_build_nothing(stacked, monkeypatch):
    """onerow_stack.prepare (a warm-up thread's, after the kernels) builds the model's typed Lists:
    the first one-row run takes the one call without building any (their methods compile once a
    process, a wait the first keystroke would otherwise have)."""
    from numba.typed import List

    from attnviz.engine.computing.layers import layer_for
    from attnviz.engine.computing.load import load_model
    qpack.ask_for_kernels()
    qm.warm([Q.Q4_1])
    try:
        model = load_model("SmolLM2-135M-Instruct")
    finally:
        qpack.ask_for_kernels(False)
    stacked(True)
    onerow_stack.prepare(model.weights.layers, model.config.n_layer, layer_for)

    def no_new_list(*_):
        raise AssertionError("a typed List built at a keystroke")
    monkeypatch.setattr(List, "empty_list", no_new_list)
    runs = _keystrokes(model, TEXTS[:2])
    assert [n for _, _, n in runs][1] == 1 and stacked.calls == [(0, 30)]
