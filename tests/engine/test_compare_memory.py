"""What a comparison holds in memory beside model A: a quantized copy's table is never held twice
while it is checked against A's, the passes over the unembedding leave none of the table's pages
resident, and the next-token numbers hold one position's float64 rows at a time (the same numbers,
whichever rows are computed beside a position)."""

import mmap
import tracemalloc

import blas_rows
import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing import compare_tokens as NT
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.computing import quantized as QZ
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.quantized import quantized_model, requantized_table
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.gguf_tensors import QuantRows

TEXT = "Dr Zorblax met Mrs Okkadine in Plumbrook, and then they walked to the old mill together."


def table_entry(model):
    t = next(t for t in open_gguf(model.path).tensors if t.name == "token_embd.weight")  # (gguf's reader, the tokens read in one pass)
    return t, (model.config.vocab_size, model.config.d_model)


def peak_of(fn):  # -> (fn(), the bytes Python allocated at most during it, above where it began)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def resident_bytes(region: np.ndarray) -> int:
    """Bytes of the pages `region` (a view of a memory-mapped file) covers that are mapped in this
    process now (/proc/self/pagemap's present bit): that region's own pages, whatever other
    mappings of the same file (other models of it) hold."""
    page = mmap.PAGESIZE
    first = region.ctypes.data // page
    last = (region.ctypes.data + region.nbytes - 1) // page
    with open("/proc/self/pagemap", "rb") as fh:
        fh.seek(first * 8)
        entries = np.frombuffer(fh.read((last - first + 1) * 8), np.uint64)
    return int(((entries >> np.uint64(63)) & np.uint64(1)).sum()) * page


def test_a_shared_table_is_checked_without_a_second_copy(smollm2):
    source = smollm2.weights.tok_emb  # Q8_0 as shipped: Q8_0 gives its bytes back
    t, shape = table_entry(smollm2)
    (got, used), peak = peak_of(lambda: requantized_table(t, shape, Q.Q8_0, source))
    assert got is source and used == Q.Q8_0
    assert peak < source.nbytes / 2  # blocks of rows, never a table's worth


def test_a_table_differing_after_its_first_blocks_is_the_whole_requantization(smollm2, monkeypatch):
    monkeypatch.setattr(QZ, "TABLE_ROWS", 4096)
    t, shape = table_entry(smollm2)
    whole, used = requantized_table(t, shape, Q.Q4_0)
    assert used == Q.Q4_0 and whole.shape[0] == shape[0]
    np.testing.assert_array_equal(whole[:4096], gguf.quants.quantize(
        gguf.quants.dequantize(t.data[:4096], t.tensor_type).reshape(4096, -1), Q.Q4_0))
    other = whole.copy()
    other[3 * 4096 + 7, 5] ^= 1  # equal to the copy's bytes in its first three blocks only
    got, used = requantized_table(t, shape, Q.Q4_0, QuantRows("token_embd.weight", other, Q.Q4_0, shape))
    assert isinstance(got, np.ndarray) and used == Q.Q4_0
    np.testing.assert_array_equal(got, whole)


def test_the_next_token_pass_leaves_none_of_the_files_table_resident(smollm2):
    b = quantized_model(smollm2, "Q8_0")  # sharing A's table: its head is built (and checked) here
    ids = smollm2.run(TEXT).input_ids
    pair = models_pair(smollm2, b, ids, C.compare_trace)
    ha, hb = NT.pair_heads(smollm2, b)
    tables = {id(h.w_u): h.w_u for h in (ha, hb)}.values()  # the file's tables the pass reads
    nbytes = sum(t.data.nbytes for t in tables)
    for t in tables:  # the measure sees a table's pages once they are read
        np.asarray(t.data[:NT.PAIR_BLOCK]).sum()
        assert resident_bytes(t.data) > 0
        NT.let_go(t, 0, t.shape[0])  # (and whatever earlier tests left resident)
    # the tables' own pages in the mappings the pass reads, not every mapping of the file in the
    # process (other tests' models of the same file keep theirs)
    before = sum(resident_bytes(t.data) for t in tables)
    nt = NT.next_tokens(pair)
    assert sum(resident_bytes(t.data) for t in tables) - before < nbytes / 4
    assert np.isfinite(nt.kld).all()


def test_the_next_token_numbers_hold_one_positions_float64_rows_at_a_time(smollm2, monkeypatch):
    from attnviz.engine.parallel import in_threads

    monkeypatch.setattr(NT, "in_threads", lambda n, task: in_threads(n, task, threads=1))  # one scratch
    b = quantized_model(smollm2, "Q4_0")
    ids = smollm2.run(TEXT).input_ids
    assert len(ids) > NT.KLD_ROWS  # (two blocks of positions)
    pair = models_pair(smollm2, b, ids, C.compare_trace)
    NT.next_tokens(pair)  # (the heads built and checked once)
    got, peak = peak_of(lambda: NT.next_tokens(pair))
    ha, hb = NT.pair_heads(smollm2, b)  # the block's log-probabilities at once, as a direct computation
    za, zb = NT.pair_logits(ha, hb, pair.a.trace.resid[-1][:NT.KLD_ROWS], pair.b.trace.resid[-1][:NT.KLD_ROWS])
    la, lb = log_softmax(za), log_softmax(zb)
    np.testing.assert_allclose(got.kld[:NT.KLD_ROWS], (np.exp(la) * (la - lb)).sum(axis=1), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(got.top_a[:NT.KLD_ROWS], la.argmax(axis=1))
    np.testing.assert_array_equal(got.top_b[:NT.KLD_ROWS], lb.argmax(axis=1))
    V, d = smollm2.config.vocab_size, smollm2.config.d_model
    # the block's float32 logits of both sides, the thread's scratch for both tables' rows and one
    # position's float64 rows; never the block's float64 log-probabilities [KLD_ROWS, vocab]
    assert peak < 2 * NT.KLD_ROWS * V * 4 + 2 * NT.PAIR_BLOCK * d * 4 + 4 * V * 8


def test_a_stopped_pass_lets_go_of_its_logits_while_its_exception_is_kept(smollm2):
    import gc

    from attnviz.engine.errors import Cancelled

    ha, hb = NT.pair_heads(smollm2, smollm2)
    x = np.random.default_rng(0).standard_normal((NT.KLD_ROWS, smollm2.config.d_model)).astype(np.float32)
    asked = []

    def stop():  # stale from the third block on
        asked.append(1)
        return len(asked) > 2
    was = gc.isenabled()
    gc.disable()  # (a window collects on a timer: the exception's cycles wait for it)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        try:
            NT.pair_logits(ha, hb, x, x, stop)
        except Cancelled as exc:
            kept = exc  # as a runner holds a failed job's error
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
        if was:
            gc.enable()
    assert isinstance(kept, Cancelled)
    assert held < NT.KLD_ROWS * smollm2.config.vocab_size * 4 / 4  # not the [n, vocab] logits


def test_the_comparisons_head_of_a_packed_model_holds_no_kernel_copy(tmp_path):
    """The window's model A packs its quantised unembedding for a keystroke's few rows; the
    comparison's passes read the table itself, so its head makes no packed copy of it."""
    import pytest

    pytest.importorskip("numba")
    from gguf_files import gguf_tensors, write_gguf
    from tiny import FIXTURES

    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    qpack.ask_for_kernels()  # (as a window asks; conftest puts it back)
    model = load_gguf(path)
    assert model.lm_head().packed is not None
    head = NT.table_head(model)
    assert head.packed is None and isinstance(head.w_u, QuantRows)


def test_a_keystrokes_new_positions_take_the_kernels_on_a_shared_packed_table(tmp_path, monkeypatch):
    """In a window (kernels asked, A on its blocks) B quantized to A's own type reads A's table:
    a keystroke's new positions get their logits from A's packed unembedding (one kernel product
    per side, no pass dequantizing the table), the reused prefix none; KL and top-1 within the
    kernels' bound of the exact pass."""
    from gguf_files import gguf_tensors, write_gguf
    from tiny import FIXTURES

    from attnviz.engine.computing import qmatvec
    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack

    pytest.importorskip("numba")
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    qpack.ask_for_kernels()  # (as a window asks; conftest puts it back)
    a = load_gguf(path)
    b = quantized_model(a, "Q8_0")
    qmatvec.warm()
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], dtype=np.int64)
    _, seen = NT.next_token_numbers(models_pair(a, b, ids[:8], C.compare_trace))
    pair = models_pair(a, b, ids, C.compare_trace)
    rows, passes = [], []
    real_q, real_p = qmatvec.qlinear, NT.pair_logits
    monkeypatch.setattr(qmatvec, "qlinear", lambda x, pm: rows.append(len(x)) or real_q(x, pm))
    monkeypatch.setattr(NT, "pair_logits", lambda *a, **k: passes.append(1) or real_p(*a, **k))
    got, _ = NT.next_token_numbers(pair, known=seen)
    if not blas_rows.exact():  # (the prefix's rows then differ by rounding: none is reused)
        pytest.skip("this BLAS rounds a row by the rows around it: no prefix is bit for bit the same")
    assert NT.reusable(seen, pair.a.ids, pair.a.trace.resid[-1], pair.b.trace.resid[-1]) == 8
    assert rows == [2, 2] and passes == []  # the two new positions, one product per side
    monkeypatch.setattr(qmatvec, "qlinear", real_q)
    want, _ = NT.next_token_numbers(pair)  # every position in one dequantizing pass
    np.testing.assert_allclose(got["kld"], want["kld"], rtol=1e-3, atol=1e-10)  # (KL ~ 1e-8 here)
    assert got["flips"] == want["flips"]
