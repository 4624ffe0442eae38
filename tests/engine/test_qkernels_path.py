"""The quantised kernels in the forward pass: a GGUF model's few-row runs (a keystroke's, a
generation step's, the KV cache's) multiply on the file's blocks (engine/computing/qmatvec.py),
prefill keeps the float32 product, and the patterns still match transformers and the float32 path.
A block type without a kernel keeps the float32 path and says so once."""

import logging

import gguf
import numpy as np
import pytest

from attnviz.engine.computing import onerow_block, onerow_stack, qmatvec as qm
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading import qpack
from attnviz.engine.reading.qpack import pack_parts
from tiny import FIXTURES
from gguf_files import Q, gguf_tensors, write_gguf

pytest.importorskip("numba")


@pytest.fixture(autouse=True, scope="module")
def kernels_asked():
    """The kernels as the window has them: asked for (packing at load) and warm."""
    qpack.ask_for_kernels()
    qm.warm()
    yield
    qpack.ask_for_kernels(False)


@pytest.fixture(scope="module")
def smollm2(kernels_asked):
    """SmolLM2 loaded with its layers packed (the session's copy may have been loaded without)."""
    from attnviz.engine.computing.load import load_model
    return load_model("SmolLM2-135M-Instruct")


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the rows linear() multiplies on packed blocks, by rows a call; a one-row layer run as
    onerow_block's compiled block or onerow_stack's call of every layer, on one thread or two (the
    kernels' cap an earlier test may have left set chooses), counts as its 4 one-row products."""
    calls = []
    real, real_takes = qm.qlinear, onerow_block._takes

    def counted(x, pm):
        calls.append(x.shape[0])
        return real(x, pm)

    def takes(plan):  # the block runs its layer's 4 products on one row
        taken = real_takes(plan)
        calls.extend([1] * 4 * taken)
        return taken
    real_layers, real_pair = onerow_stack._layers, onerow_stack._pair

    def layers(x, a, b, *rest):  # every layer of a one-row run in one call: 4 products a layer
        calls.extend([1] * 4 * (b - a))
        return real_layers(x, a, b, *rest)

    def pair(x, a, b, *rest):  # the same call on two threads (kernels uncapped on 2 cores)
        calls.extend([1] * 4 * (b - a))
        return real_pair(x, a, b, *rest)
    monkeypatch.setattr(qm, "qlinear", counted)
    monkeypatch.setattr(onerow_block, "_takes", takes)
    monkeypatch.setattr(onerow_stack, "_layers", layers)
    monkeypatch.setattr(onerow_stack, "_pair", pair)
    return calls


def _step_by_step(model, ids, first):
    """Run ids[:first], then one more token a run with the KV cache: the last run's result."""
    model.clear_cache()
    model.run(ids=ids[:first])
    for t in range(first + 1, len(ids) + 1):
        result = model.run(ids=ids[:t])
        assert result.cache_computed == 1
    return result


def test_smollm2_cached_steps_on_its_q4_1_blocks_match_transformers(smollm2, kernel_calls):
    """Every reference text's last four tokens computed one at a time from the Q4_1 blocks: every
    layer's patterns as transformers' (<= 1e-4, the parity bound), rows before and after."""
    ref = np.load(FIXTURES / "smollm2" / "expected.npz")
    layers = ref["layers"].tolist()
    n = 0
    while f"text_{n}" in ref:
        ids = ref[f"ids_{n}"].tolist()
        result = _step_by_step(smollm2, ids, len(ids) - 4)
        np.testing.assert_allclose(result.attentions[layers], ref[f"attn_{n}"], atol=1e-4, rtol=0)
        n += 1
    assert n >= 4
    # 4 packed matrices a layer for each one-row step (the last layer may stop after its pattern);
    # the prefills too: shorter than the crossover of a layer without its float32 copy
    assert kernel_calls.count(1) >= n * 4 * 4 * (smollm2.config.n_layer - 1)
    assert max(kernel_calls) < qm.ROWS_UNEXPANDED
    smollm2.clear_cache()


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_0, Q.Q5_1, Q.Q4_0, Q.Q4_1], ids=lambda q: q.name)
def test_a_tiny_ggufs_cached_steps_equal_its_float32_run(tmp_path, qtype, kernel_calls, monkeypatch):
    """Kernels on for the one-row steps, off for the reference: the same patterns to float32
    rounding (the file's values are the same either way)."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_gguf(write_gguf(tmp_path / f"{qtype.name}.gguf", cfg, tensors, qtype))
    assert model.weights.layers[0].packed is not None
    assert model.weights.packed_types == {qtype}  # the kernels warmed at load: this type's alone
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    got = _step_by_step(model, ids, 6).attentions
    assert kernel_calls
    monkeypatch.setattr(qm, "ENABLED", False)
    want = model.run(ids=ids, request=RunRequest(use_cache=False)).attentions  # the float32 product
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_a_long_prefill_keeps_the_float32_product(tmp_path, kernel_calls, monkeypatch):
    """ROWS_UNEXPANDED rows or more expand the layers (none held yet); once they are held, ROWS
    rows or more take their float32 product."""
    monkeypatch.setattr(qm, "ROWS_UNEXPANDED", 12)
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_gguf(write_gguf(tmp_path / "q4.gguf", cfg, tensors, Q.Q4_0))
    model.run(ids=list(range(3, 3 + 12)), request=RunRequest(use_cache=False))
    assert kernel_calls == []
    model.run(ids=list(range(3, 3 + min(qm.ROWS.values()))), request=RunRequest(use_cache=False))
    assert kernel_calls == []


def test_a_fused_matrix_of_mixed_types_multiplies_part_by_part():
    """Q | K | V with V in another type (as Q4_K_M files store attn_v): one packed part each run
    of a type, written at its own outputs."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((96, 64)).astype(np.float32)
    kinds = [(Q.Q4_0, 0, 32), (Q.Q4_0, 32, 48), (Q.Q8_0, 48, 96)]
    parts = [(t, gguf.quants.quantize(w[a:b], t), a) for t, a, b in kinds]
    pm = pack_parts(parts)
    assert [(at, p.qtype, p.n_out) for at, p in pm.parts] == [(0, Q.Q4_0, 48), (48, Q.Q8_0, 48)]
    ref_w = np.concatenate([gguf.quants.dequantize(r, t) for t, r, _ in parts]).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = qm.qlinear(x, pm)
    assert np.all(np.abs(y - x @ ref_w.T) <= 1e-5 * (np.abs(x) @ np.abs(ref_w).T))


def test_a_type_without_a_kernel_keeps_float32_and_says_so_once(caplog, monkeypatch):
    monkeypatch.setattr(qpack, "said_once", set())  # whatever earlier tests logged
    rows = np.zeros((4, 84), np.uint8)  # one Q2_K block a row
    with caplog.at_level(logging.INFO, logger="attnviz.engine.reading.qpack"):
        assert pack_parts([(Q.Q2_K, rows, 0)]) is None
        assert pack_parts([(Q.Q4_0, np.zeros((4, 18), np.uint8), 0), (Q.Q2_K, rows, 4)]) is None
    said = [r.getMessage() for r in caplog.records]
    assert said == ["no quantised kernel for Q2_K: its matrices keep the float32 path"]


def test_the_kernels_follow_the_thread_cap(monkeypatch):
    """The window caps the kernels' threads as it caps BLAS's (ui/machinery/tuning.py): capped at
    one, a call runs its kernel's serial twin (no parallel region)."""
    from attnviz.engine import parallel
    serial = []
    monkeypatch.setattr(qm, "SERIAL", {k: (lambda f: lambda *a: (serial.append(f), f(*a)))(f)
                                       for k, f in qm.SERIAL.items()})
    before = parallel.kernel_threads()
    try:
        parallel.limit_kernel_threads(None)
        assert parallel.kernel_threads() == parallel.cores()
        parallel.limit_kernel_threads(1)
        p = qpack.pack(gguf.quants.quantize(np.ones((16, 32), np.float32), Q.Q8_0), Q.Q8_0)
        np.testing.assert_allclose(qm.qmatvec(p, np.ones(32, np.float32)),
                                   qpack.dequantized(p).sum(axis=1), rtol=1e-6)
        assert len(serial) == 1
    finally:
        parallel.limit_kernel_threads(None if before == parallel.cores() else before)


@pytest.mark.parametrize("qtype", qpack.PACKED, ids=lambda q: q.name)
def test_the_budget_counts_the_packed_bytes_pack_gives(qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    for n_out in (16, 37):
        rows = np.zeros((n_out, 2 * size), np.uint8)
        assert qpack.pack(rows, qtype).nbytes == qpack.packed_nbytes(qtype, n_out, 2 * block)
    assert qpack.packed_nbytes(Q.Q2_K, 16, 256) == 0


def test_a_layer_expanded_anew_each_run_keeps_its_one_packing(tmp_path, kernel_calls):
    """Under a budget that keeps some layers only, the others are expanded for each run; their
    packed matrices are made once and held, so every budget gives the same numbers."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    whole = load_gguf(path).weights.layers
    small = load_gguf(path, budget=max(whole.sizes)).weights.layers
    assert small.kept < len(small)
    first = small[0].packed
    for i in range(len(small)):  # layer 0's float32 copy leaves the room and comes back
        small[i]
    again = small[0].packed
    assert small.expansions > len(small) and again is first


def test_a_copy_quantized_in_memory_packs_its_blocks_as_a_file_of_its_type(tmp_path):
    """Compare's "this model quantized to…" of a GGUF model is quantized once at load and packed,
    as the file of that type would be (tests/engine/test_quantized_packed.py: the same numbers)."""
    from attnviz.engine.computing.quantized import quantized_model

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_gguf(write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0))
    assert model.weights.layers[0].packed is not None
    copy = quantized_model(model, "Q4_0")
    assert copy.weights.packed_types == frozenset({Q.Q4_0})
    assert all(copy.weights.layers.packed_view(i).packed.w_qkv.qtypes == {Q.Q4_0}
               for i in range(copy.config.n_layer))
    assert copy.weights.layers.held_bytes() == 0
