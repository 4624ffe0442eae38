"""A pass over a quantised unembedding (engine/computing/logits.py) as the window's first analysis
makes it: the next block dequantised on a thread of its own while this one multiplies, into two
reused arrays, gives the bits of a pass that reads each block in turn; a damaged row it reads ahead
is named when the pass reaches it; a pass stopped or failed leaves no thread behind. And the
table's copy packed for the kernels is made the first time a few rows ask for it, not when the
head is built, and gives the logits a head packed at once gives."""

import threading

import numpy as np
import pytest

from attnviz.engine.computing import logits as L
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.errors import Cancelled, NoPrediction
from attnviz.engine.reading import qpack
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

BLOCK = 7  # rows per block here: the tiny vocabulary in several blocks, the last one shorter


def tiny(tmp_path, qtype, damage=None):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    if damage is not None:
        tensors["output.weight"][damage] = np.nan
    return load_gguf(write_gguf(tmp_path / f"{qtype.name}.gguf", cfg, tensors, qtype))


def rows_of(model, n, seed=0):  # final-norm inputs [n, d_model]
    return np.random.default_rng(seed).standard_normal((n, model.config.d_model)).astype(np.float32)


def readers() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("attnviz-unembed")]


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_1])
def test_a_pass_reading_ahead_gives_the_bits_of_a_pass_reading_each_block_in_turn(tmp_path, monkeypatch, qtype):
    monkeypatch.setattr(L, "VOCAB_BLOCK", BLOCK)
    model = tiny(tmp_path, qtype)
    head = model.lm_head()
    assert isinstance(head.w_u, L.Unembedding) and head.w_u.shape[0] % BLOCK
    xs = [rows_of(model, 19), rows_of(model, 1, 1)]
    monkeypatch.setattr(L, "cores", lambda: 2)  # (a thread reads ahead, whatever this machine has)
    ahead = L.vocab_logits_of(head, xs)
    monkeypatch.setattr(L, "cores", lambda: 1)  # each block read when the pass reaches it
    in_turn = L.vocab_logits_of(head, xs)
    whole = np.asarray(head.w_u.table, np.float32)  # the table dequantised at once, block by block
    for a, b, x in zip(ahead, in_turn, xs):
        assert np.array_equal(a, b)
        xn = head.normed(x)
        want = np.concatenate([xn @ whole[v0:v0 + BLOCK].T for v0 in range(0, len(whole), BLOCK)], axis=-1)
        assert np.array_equal(a, want)
    assert head.w_u.rows_held == 0 and readers() == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf.quants quantising a NaN row
def test_a_damaged_row_read_ahead_is_named_when_the_pass_reaches_its_block(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "VOCAB_BLOCK", BLOCK)
    monkeypatch.setattr(L, "cores", lambda: 2)
    model = tiny(tmp_path, Q.Q8_0, damage=2 * BLOCK + 3)  # the third block: read ahead of the second
    head = model.lm_head()
    with pytest.raises(NoPrediction, match=rf"the unembedding cannot be used for prediction: tensor "
                                           rf"output.weight row {2 * BLOCK + 3} \(token id {2 * BLOCK + 3}\) "
                                           r"holds non-finite"):
        L.vocab_logits(head, rows_of(model, 3))
    assert readers() == []
    asked = []

    def stop():  # stops before the third block: its damage is never reported
        asked.append(1)
        return len(asked) > 2
    with pytest.raises(Cancelled):
        L.vocab_logits(head, rows_of(model, 3), stop)
    assert len(asked) == 3 and readers() == []


@pytest.fixture
def kernels():
    pytest.importorskip("numba")
    qpack.ask_for_kernels()  # as the window asks (conftest puts it back)
    yield


def test_the_packed_copy_is_made_when_a_few_rows_first_ask_and_gives_the_logits_of_one_packed_at_once(
        tmp_path, kernels):
    from attnviz.engine.computing import qmatvec as qm

    model = tiny(tmp_path, Q.Q8_0)
    head = model.lm_head()
    assert head.pack is not None and not head.pack.made  # not packed with the head
    many = rows_of(model, qm.ROWS_PASS)
    float32 = L.vocab_logits(L.LMHead(head.norm, head.centred, head.eps, head.w_u), many)
    assert np.array_equal(L.vocab_logits(head, many), float32)  # the blocks' product: bit for bit
    L.vocab_logits(head, rows_of(model, qm.ROWS[Q.Q8_0]))  # (a block packed at a time)
    assert not head.pack.made  # too many rows to pack the whole table for: still not packed
    one = rows_of(model, 1, 2)
    got = L.vocab_logits(head, one)
    assert head.pack.made and head.packed is head.pack.get()  # packed now, once
    at_once = L.PackedUnembedding(head.w_u.table).get()  # a copy packed at once, apart
    assert qm.takes(at_once, 1)
    assert np.array_equal(got, qm.qlinear(head.normed(one).astype(np.float32), at_once))
    assert head.packed_for(len(many)) is None and head.packed_for(1) is head.packed


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0])
def test_rows_between_the_few_and_the_float32_passes_take_the_kernels_a_block_packed_at_a_time(
        tmp_path, kernels, monkeypatch, qtype):
    """A pass of more rows than the kernels take on the whole table's copy, and fewer than
    ROWS_PASS (the window's analysis: a row per layer), multiplies on a block packed at a time,
    read ahead or not, and packs no copy of the table: the bits of one product on the copy
    packed whole (made later, then used), within the kernels' bound of the float32 pass."""
    from attnviz.engine.computing import qmatvec as qm

    monkeypatch.setattr(L, "VOCAB_BLOCK", 20)  # blocks of a whole group of 16 rows and part of one
    model = tiny(tmp_path, qtype)
    head = model.lm_head()
    xs = [rows_of(model, qm.ROWS[qtype]), rows_of(model, qm.ROWS_PASS - 1, 1)]
    assert all(head.pack.by_blocks(len(x)) for x in xs) and not head.pack.by_blocks(qm.ROWS_PASS)
    got = {}
    for n in (1, 2):
        monkeypatch.setattr(L, "cores", lambda n=n: n)
        got[n] = L.vocab_logits_of(head, xs)
        assert not head.pack.made and readers() == []
    whole = L.PackedUnembedding(head.w_u.table).get()
    float32 = L.vocab_logits_of(L.LMHead(head.norm, head.centred, head.eps, head.w_u), xs)
    packed = L.vocab_logits_of(head, xs) if head.packed is not None else None  # (the copy made now)
    for i, x in enumerate(xs):
        want = qm.qlinear(head.normed(x).astype(np.float32), whole)
        assert np.array_equal(got[1][i], want) and np.array_equal(got[2][i], want)
        assert np.array_equal(packed[i], want)
        bound = 1e-5 * (np.abs(head.normed(x)) @ np.abs(np.asarray(head.w_u.table)).T)
        assert (np.abs(want - float32[i]) <= bound).all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf.quants quantising a NaN row
def test_a_damaged_row_in_a_block_packed_for_the_kernels_is_named(tmp_path, kernels, monkeypatch):
    from attnviz.engine.computing import qmatvec as qm

    monkeypatch.setattr(L, "VOCAB_BLOCK", 20)
    monkeypatch.setattr(L, "cores", lambda: 2)
    model = tiny(tmp_path, Q.Q8_0, damage=20 + 3)  # the second block: read ahead of the first
    head = model.lm_head()
    with pytest.raises(NoPrediction, match=rf"the unembedding cannot be used for prediction: tensor "
                                           rf"output.weight row {20 + 3} \(token id {20 + 3}\) "
                                           r"holds non-finite"):
        L.vocab_logits(head, rows_of(model, qm.ROWS[Q.Q8_0]))
    assert readers() == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf.quants quantising a NaN row
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1], ids=lambda q: q.name)
def test_a_table_with_a_damaged_scale_gets_no_packed_copy_and_a_few_rows_name_the_row(
        tmp_path, kernels, qtype):
    from attnviz.engine.computing import qmatvec as qm

    model = tiny(tmp_path, qtype, damage=5)
    head = model.lm_head()
    for n in (1, qm.ROWS[qtype] - 1):  # the few rows that ask for the packed copy
        with pytest.raises(NoPrediction, match=r"tensor output.weight row 5 \(token id 5\) holds non-finite"):
            L.vocab_logits(head, rows_of(model, n))
    assert head.pack.made and head.pack.get() is None and head.packed_for(1) is None
    (tmp_path / "whole").mkdir()
    assert L.PackedUnembedding(tiny(tmp_path / "whole", qtype).lm_head().w_u.table).get() is not None


@pytest.mark.parametrize("n_rows", [1, 16, 37])
def test_the_compiled_regroup_gives_qpacks_arrays_byte_for_byte(n_rows):
    pytest.importorskip("numba")
    from attnviz.engine.computing.qregroup import pack_rows

    rows = np.random.default_rng(n_rows).integers(0, 256, (n_rows, 3 * 34), dtype=np.uint8)
    rows[:, 0::34] = rows[:, 1::34] = 0x3C  # (d finite: float16 bits 0x3C3C)
    got, want = pack_rows(rows, Q.Q8_0), qpack.pack(rows, Q.Q8_0)
    assert (got.qtype, got.n_out, got.n_in, got.sub, got.nibbles, got.signed) == (
        want.qtype, want.n_out, want.n_in, want.sub, want.nibbles, want.signed)
    assert got.offset is None and want.offset is None
    for a, b in ((got.q, want.q), (got.scale, want.scale)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    for a, b in zip(got.args, want.args):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_pass_on_the_packed_copy_asks_whether_to_stop_before_each_block(tmp_path, kernels, monkeypatch):
    """Once the whole copy is made, a pass of the analysis's rows still goes a block at a time: a
    newer keystroke waits for one block, and the blocks give the whole copy's product bit for bit."""
    from attnviz.engine.computing import qmatvec as qm

    monkeypatch.setattr(L, "VOCAB_BLOCK", 20)  # (steps of one group of 16 rows)
    model = tiny(tmp_path, Q.Q8_0)
    head = model.lm_head()
    L.vocab_logits(head, rows_of(model, 1))  # (a few rows: the copy is made)
    assert head.pack.made
    x, asked = rows_of(model, qm.ROWS[Q.Q8_0], 4), []
    got = L.vocab_logits(head, x, lambda: asked.append(1) and False)
    V = head.w_u.table.shape[0]
    assert len(asked) >= -(-V // 16) > 1  # (and perhaps once before the pass)
    assert np.array_equal(got, qm.qlinear(head.normed(x).astype(np.float32), head.pack.get()))
    calls = []
    with pytest.raises(Cancelled):  # a newer request comes while the second block is computed
        L.vocab_logits(head, x, lambda: len(calls.append(1) or calls) > len(asked) - 2)
