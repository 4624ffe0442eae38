"""A GGUF model quantized in memory in a process that asked for the quantised kernels (as the window
does): the copy holds its layers as packed blocks of the type, like a file of that type, with no
float32 copy of a packed matrix, and gives the numbers of that file loaded in the same process."""

import numpy as np
import pytest

from attnviz.engine.analysing.pair_memory import budget_left
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.quantized import QuantizedGGUFTensors, quantized_model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.gguf_write import write_gguf as attnviz_quantize
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3])
TYPES = ["Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1"]  # every type attnviz writes that has a kernel


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny Llama (GQA) GGUF in F32: the model A that Compare quantizes."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path_factory.mktemp("src") / "f32.gguf", cfg, tensors)


def _matrices_packed(store, i):  # the layer's matrices held in blocks (no float32 field)
    view = store.packed_view(i)
    return [n for n in ("w_qkv", "w_o", "w_in", "w_out") if getattr(view, n) is None]


@pytest.mark.parametrize("qtype", TYPES)
def test_the_copy_holds_packed_blocks_and_equals_the_written_file(source, tmp_path, kernels, qtype):
    a = load_gguf(source)
    b = quantized_model(a, qtype)
    store = b.weights.layers
    assert b.weights.packed_types == frozenset({Q[qtype]})
    assert store.held_bytes() == 0 and store.view_bytes() > 0  # no float32 copy after load
    assert "0 expanded to float32" in b.memory
    # ffn_down's 48 inputs are not whole blocks: kept at F16, float32 beside the packed matrices
    assert all(_matrices_packed(store, i) == ["w_qkv", "w_o", "w_in"] for i in range(len(store)))
    assert store.view_bytes() < sum(store.sizes)
    written = load_gguf(attnviz_quantize(source, qtype, tmp_path / f"{qtype}.gguf").path)
    assert written.weights.packed_types == b.weights.packed_types
    for i in range(len(store)):  # the same blocks, packed the same way
        got, want = store.packed_view(i).packed, written.weights.layers.packed_view(i).packed
        for name in ("w_qkv", "w_o", "w_in"):
            for (at, x), (at_y, y) in zip(getattr(got, name).parts, getattr(want, name).parts, strict=True):
                assert at == at_y
                np.testing.assert_array_equal(x.q, y.q)
                np.testing.assert_array_equal(x.scale, y.scale)
    few = b.run(ids=IDS[:4]).attentions  # few rows: on the blocks
    np.testing.assert_array_equal(few, written.run(ids=IDS[:4]).attentions)
    assert store.held_bytes() == 0
    long = b.run(ids=IDS, request=RunRequest(use_cache=False)).attentions  # expanded in the budget
    np.testing.assert_array_equal(long, written.run(ids=IDS, request=RunRequest(use_cache=False)).attentions)


def test_packing_quantizes_each_matrix_once(source, kernels, monkeypatch):
    import attnviz.engine.computing.quantized as quantized

    calls = []
    real = quantized.quantize_rows
    monkeypatch.setattr(quantized, "quantize_rows", lambda w, t: calls.append(w.shape) or real(w, t))
    a = load_gguf(source)
    b = quantized_model(a, "Q8_0")
    shapes = [tuple(int(n) for n in reversed(t.shape.tolist())) for t in open_gguf(source).tensors
              if len(t.shape) == 2]
    assert len(shapes) == 2 * 7 + 2  # two layers' 7 matrices, the embedding and the output head
    in_blocks = [s for s in shapes if s[1] % 32 == 0]  # (ffn_down's 48 inputs: F16, a cast)
    assert sorted(s for s in calls if s[1] % 32 == 0) == sorted(in_blocks)  # each quantized once
    assert b.weights.layers.held_bytes() == 0 and not b.weights.layers.expansions


def test_a_copy_without_kernels_keeps_the_float32_path(source):
    b = quantized_model(load_gguf(source), "Q8_0")
    assert b.weights.packed_types == frozenset()
    assert b.weights.layers.view_bytes() == 0 and b.weights.layers.held_bytes() == sum(b.weights.layers.sizes)


def test_f16_has_no_kernel_and_stays_float32(source, kernels):
    b = quantized_model(load_gguf(source), "F16")
    assert b.weights.packed_types == frozenset() and b.weights.layers.view_bytes() == 0


def test_the_budget_left_for_b_leaves_out_packed_views(source, kernels):
    """A chosen budget holds float32 layers, with two models as with one: the packed views come on
    top of it (docs/models.md), so what it leaves beside a model is the budget less its float32
    layers alone, at least its largest layer (which it keeps to run at all)."""
    a = load_gguf(source)
    b8 = quantized_model(a, "Q8_0")
    assert b8.weights.layers.view_bytes() > 0
    MB.set_memory_budget(10 * max(a.weights.layers.sizes))
    try:
        for m in (b8, a):
            layers = m.weights.layers
            assert budget_left(m) == MB.chosen_budget() - max(layers.held_bytes(), max(layers.sizes))
    finally:
        MB.set_memory_budget(None)


def test_the_tensors_give_the_packer_blocks_of_the_type(source):
    ts = QuantizedGGUFTensors(open_gguf(source), source, Q.Q4_0)
    t = ts.stored("blk.0.attn_q.weight", ts.shape("blk.0.attn_q.weight"))
    assert t.tensor_type == Q.Q4_0 and t.data.dtype == np.uint8
    assert t.data.shape[-1] == ts.shape("blk.0.attn_q.weight")[1] // 32 * 18  # Q4_0: 18 bytes a 32
    assert ts.stored("blk.0.ffn_down.weight", ts.shape("blk.0.ffn_down.weight")).tensor_type == Q.F16


def test_b_gets_what_a_packed_a_leaves_of_the_budget(source, tmp_path, kernels):
    from attnviz.engine.analysing.pair_memory import load_second

    a = load_gguf(attnviz_quantize(source, "Q8_0", tmp_path / "a.gguf").path)
    views = a.weights.layers.view_bytes()
    assert views > 0 and a.weights.layers.held_bytes() == 0
    largest = max(a.weights.layers.sizes)
    chosen = 3 * largest  # A's blocks beside it, and one float32 layer for it to run: the rest is B's
    MB.set_memory_budget(chosen)
    try:
        asked = []
        b = load_second(lambda budget: asked.append(budget) or quantized_model(a, "Q4_0"), a, "B")
        assert asked == [chosen - largest] and b.weights.layers.budget == chosen - largest
        assert a.weights.layers.budget == largest
    finally:
        MB.set_memory_budget(None)


@pytest.mark.parametrize("n_out", [1, 16, 37, 4096 + 5])
def test_rows_are_regrouped_in_pieces_as_one_copy_would(n_out, monkeypatch):
    """qpack._groups copies a table's rows into groups of 16 a piece at a time: the bytes equal
    one copy of the whole (rows padded with zeros to whole groups), for bytes and float32, a
    strided view as input, pieces of one group and of many."""
    from attnviz.engine.reading import qpack

    def whole(a, n_groups):  # the regrouping in one copy
        pad = n_groups * qpack.LANES - a.shape[0]
        a = np.concatenate([a, np.zeros((pad,) + a.shape[1:], a.dtype)])
        return np.ascontiguousarray(np.moveaxis(a.reshape((n_groups, qpack.LANES) + a.shape[1:]), 1, -1))

    rng = np.random.default_rng(n_out)
    q = rng.integers(0, 256, (n_out, 3, 34), dtype=np.uint8)[:, :, 2:]  # (a strided view)
    scale = rng.standard_normal((n_out, 3)).astype(np.float32)
    n_groups = -(-n_out // qpack.LANES)
    for piece in (1, 1 << 20):
        monkeypatch.setattr(qpack, "GROUP_BYTES", piece)
        for a in (q, scale):
            got = qpack._groups(a, n_groups)
            assert got.flags.c_contiguous and got.dtype == a.dtype
            np.testing.assert_array_equal(got, whole(a, n_groups))
