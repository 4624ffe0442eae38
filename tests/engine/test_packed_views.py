"""A GGUF model with the quantised kernels on holds its layers' packed blocks and no float32 copy of
a packed matrix (engine/reading/budget.py, LayerStore.packed_view): runs of few rows multiply on
the blocks; a long run and an analysis that reads whole matrices expand the layers within the
memory budget, with the same numbers, bit for bit, as the float32-only model."""

import numpy as np
import pytest

from attnviz.engine.analysing.circuits import composition_scores
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.layers import layer_vectors
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading import qpack
from attnviz.engine.reading.byte_sizes import format_bytes
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]
LONG = 12  # the crossover these tests use (ROWS_UNEXPANDED): the tiny model's runs pass it


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """A tiny Llama (GQA) in Q8_0: every matrix packed but ffn_down, whose 48 inputs are not
    whole blocks (kept F32 in the file, as llama.cpp keeps it)."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path_factory.mktemp("views") / "q8.gguf", cfg, tensors, Q.Q8_0)


@pytest.fixture
def kernels(monkeypatch):
    """The kernels as the window asks for them (packing at load), warm; the crossover of a layer
    without its float32 copy at LONG rows."""
    qpack.ask_for_kernels()
    qm.warm([Q.Q8_0])
    monkeypatch.setattr(qm, "ROWS_UNEXPANDED", LONG)
    yield
    qpack.ask_for_kernels(False)


def float32_model(path, budget=None):
    qpack.ask_for_kernels(False)
    try:
        return load_gguf(path, budget=budget)
    finally:
        qpack.ask_for_kernels()


def test_no_float32_copy_after_load_nor_after_few_row_runs(path, kernels):
    model = load_gguf(path)
    store = model.weights.layers
    assert store.held_bytes() == 0 and store.view_bytes() > 0
    assert "0 expanded to float32" in model.memory
    view = store.packed_view(0)
    assert view.w_qkv is None and view.w_o is None and view.w_in is None
    assert view.w_out is not None  # F32 in the file: no kernel, kept float32
    model.run(ids=IDS[:LONG - 1])  # a short prefill
    for t in range(LONG, len(IDS) + 1):  # then one token a run
        assert model.run(ids=IDS[:t]).cache_computed == 1
    assert store.held_bytes() == 0 and store.expansions == 0
    assert layer_vectors(store, 1).norm2 is store.packed_view(1).norm2  # a gain: nothing expanded
    assert store.expansions == 0


def test_a_long_prefill_expands_and_equals_the_float32_model_bit_for_bit(path, kernels):
    model, ref = load_gguf(path), float32_model(path)
    request = RunRequest(use_cache=False, values=True)
    got = model.run(ids=IDS, request=request)
    assert model.weights.layers.held_bytes() == sum(model.weights.layers.sizes)
    want = ref.run(ids=IDS, request=request)
    np.testing.assert_array_equal(got.attentions, want.attentions)
    np.testing.assert_array_equal(got.value_norms, want.value_norms)


def test_the_few_row_runs_equal_the_float32_model_within_the_kernels_bound(path, kernels):
    model, ref = load_gguf(path), float32_model(path)
    got = model.run(ids=IDS[:LONG - 1]).attentions
    want = ref.run(ids=IDS[:LONG - 1]).attentions
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert model.weights.layers.held_bytes() == 0


def test_whole_matrix_analyses_read_the_expanded_layers_bit_for_bit(path, kernels):
    model, ref = load_gguf(path), float32_model(path)
    for i in range(model.config.n_layer):
        for name in ("w_qkv", "w_o", "w_in", "w_out"):
            a, b = getattr(model.weights.layers[i], name), getattr(ref.weights.layers[i], name)
            np.testing.assert_array_equal(a, b)
            assert a.flags.f_contiguous == b.flags.f_contiguous
    got, want = composition_scores(model), composition_scores(ref)
    for mode in want:
        np.testing.assert_array_equal(got[mode], want[mode])


def test_expansions_keep_the_memory_budget(path, kernels):
    sizes = float32_model(path).weights.layers.sizes
    model = load_gguf(path, budget=max(sizes))  # room for one float32 layer
    store = model.weights.layers
    ref = float32_model(path, budget=max(sizes))
    request = RunRequest(use_cache=False)
    for _ in range(2):
        got = model.run(ids=IDS, request=request)
        assert store.held_bytes() <= store.budget
    composition_scores(model)
    assert store.held_bytes() <= store.budget
    np.testing.assert_array_equal(got.attentions, ref.run(ids=IDS, request=request).attentions)
    assert store.view_bytes() > 0  # the packed views stay, beside the budget


def test_a_non_finite_scale_is_refused_at_load_as_an_expansion_refuses_it(tmp_path, kernels):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    tensors = dict(tensors)
    tensors["blk.1.attn_v.weight"] = tensors["blk.1.attn_v.weight"].copy()
    tensors["blk.1.attn_v.weight"][2, 3] = np.inf
    with np.errstate(invalid="ignore"):  # (gguf's quantiser meets the inf)
        path = write_gguf(tmp_path / "inf.gguf", cfg, tensors, Q.Q8_0)
    with pytest.raises(ModelLoadError, match="blk.1.attn_v.weight holds .* non-finite"), \
            np.errstate(invalid="ignore"):
        load_gguf(path)


def test_a_few_rows_logits_come_from_the_packed_unembedding_within_the_kernels_bound(path, kernels):
    """The window's prediction of one row reads the unembedding's blocks: no float32 copy of it is
    made however many times it is asked (the memory line names the packed copy alone); a row per
    layer (the analysis) too, within the same bound; ROWS_PASS rows or more keep the float32
    blocks' product."""
    from attnviz.engine.computing.logits import HOLD_AFTER

    model, ref = load_gguf(path), float32_model(path)
    head, want_head = model.lm_head(), ref.lm_head()
    assert head.packed is not None and want_head.packed is None
    x = np.random.default_rng(3).standard_normal((1, model.config.d_model)).astype(np.float32)
    for _ in range(HOLD_AFTER + 2):
        got = head.logits(x)
    want = want_head.logits(x)
    w_u = np.asarray(want_head.w_u[:])
    bound = 1e-5 * (np.abs(want_head.normed(x)) @ np.abs(w_u).T)
    assert np.all(np.abs(got - want) <= bound) and not np.array_equal(got, want)
    assert head.w_u.rows_held == 0  # no pass over the float32 blocks: nothing kept
    assert model.memory == (f"{model.weights.layers.describe()}; also kept: unembedding packed for "
                            f"the kernels ({format_bytes(head.packed.nbytes)})")
    layers = np.repeat(x, qm.ROWS[Q.Q8_0], axis=0)
    got_layers = head.logits(layers)  # (not the float32 pass's bits: the kernels')
    assert np.all(np.abs(got_layers - want) <= bound) and head.w_u.rows_held == 0
    assert not np.array_equal(got_layers, want_head.logits(layers))
    many = np.repeat(x, qm.ROWS_PASS, axis=0)
    np.testing.assert_array_equal(head.logits(many), want_head.logits(many))


def test_the_views_fill_the_buffer_prepared_beside_the_tokenizer(path, kernels, monkeypatch):
    """With the kernels on, read_gguf prepares a buffer for the views' packed blocks and scales
    (their pages faulted in on a thread of their own while the tokenizer is built): every packed
    array lies in it, the thread is joined after the load, and the runs equal, bit for bit, those
    of a load that prepares nothing."""
    import threading

    from attnviz.engine.reading import budget as B

    monkeypatch.setattr(B, "ARENA_MIN", 1 << 62)
    plain = load_gguf(path)
    made = []
    real = B._Arena

    def spy(n_bytes, populate=False):
        made.append(real(n_bytes, populate))
        return made[-1]
    monkeypatch.setattr(B, "ARENA_MIN", 1)
    monkeypatch.setattr(B, "_Arena", spy)
    model = load_gguf(path)
    store = model.weights.layers
    assert len(made) == 1 and made[0]._populating is None
    assert not [t for t in threading.enumerate() if t.name == "attnviz-arena-pages"]
    arena = made[0]
    matrices = [getattr(store.packed_view(i).packed, name) for i in range(len(store))
                for name in ("w_qkv", "w_o", "w_in", "w_out")]
    arrays = [a for m in matrices if m is not None for _, p in m.parts
              for a in (p.q, p.scale, p.offset) if a is not None]
    assert arrays and all(arena.holds(a) for a in arrays)
    assert arena._pos * 4 <= store.packed_bytes + B.VIEW_SLACK * len(store)
    request = RunRequest(use_cache=False, values=True)
    for ids in (IDS[:4], IDS):  # few rows (the kernels) and a long prefill (expanded)
        got, want = model.run(ids=ids, request=request), plain.run(ids=ids, request=request)
        np.testing.assert_array_equal(got.attentions, want.attentions)
        np.testing.assert_array_equal(got.value_norms, want.value_norms)


def test_the_memory_line_counts_what_a_copy_shares_with_its_view_once(path, kernels):
    """A layer's float32 copy shares its view's vectors and its ffn_down (F32 in the file, no
    kernel): the memory line names the views' bytes and, for the copies, only what they add."""
    model = load_gguf(path)
    store = model.weights.layers
    model.run(ids=IDS, request=RunRequest(use_cache=False))  # a long run: every layer expanded
    assert all(store.holds(i) for i in range(len(store)))

    def arrays(layer):
        return [a for v in vars(layer).values() for a in (v if isinstance(v, tuple) else (v,))
                if isinstance(a, np.ndarray)]
    in_views = {id(a) for i in range(len(store)) for a in arrays(store.packed_view(i))}
    added = {id(a): a.nbytes for layer in store for a in arrays(layer) if id(a) not in in_views}
    assert store.copy_bytes() == (sum(added.values()), sum(added.values()))
    assert store.copy_bytes()[0] < store.held_bytes()
    assert f"({format_bytes(sum(added.values()))} of {format_bytes(sum(added.values()))}, " in model.memory
