"""The compiled one-row steps (engine/computing/onerow.py) against the NumPy steps they replace on a
run of one new row on the kernels, and the kernels' serial twins (engine/computing/qmatvec.py)
against their parallel form: the norm, RoPE, attention over the cached keys of every head (grouped
query: head h reads KV head h // n_group), the trace's edits at their points, and whole keystrokes
on packed models of several families."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import families, layers, rowmath
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.trace import Knockout, Patch, Trace, append_positions
from attnviz.engine.reading import qpack
from attnviz.engine.reading.layout import Layer
from gguf_files import family_gguf, gguf_tensors, load_packed, write_gguf
from kernel_checks import spy_on_block_compiles
from tiny import FIXTURES

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def onerow():
    qm.warm([Q.Q8_0])
    assert qm.ONE_ROW is not None
    return qm.ONE_ROW


SCALES_AT = {Q.Q4_1: (0, 2), Q.Q5_1: (0, 2), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


@pytest.mark.parametrize("qtype", qpack.PACKED, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 3])
def test_a_serial_twin_gives_its_parallel_kernels_bits(qtype, m, onerow, kernels_on_every_core):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng([int(qtype), m])
    raw = rng.integers(0, 256, (37, 2 * size), dtype=np.uint8)  # 37 rows: a padded last group
    for at in SCALES_AT.get(qtype, (0,)):  # finite float16 scales (and offsets)
        f16 = (rng.standard_normal(raw.shape[0] * 2) * 0.01).astype(np.float16).reshape(-1, 2, 1)
        raw.reshape(37, 2, size)[:, :, at:at + 2] = f16.view(np.uint8)
    p = qpack.pack(raw, qtype)
    x = rng.standard_normal((m, 2 * block)).astype(np.float32)
    kernel = qm._kernel_of(p)
    y, y1 = (np.empty((m, p.q.shape[0] * qpack.LANES), np.float32) for _ in range(2))
    kernel(*p.args, x, y)
    qm.SERIAL[kernel](*p.args, x, y1)
    assert np.isfinite(y).all() and np.abs(y).max() > 0
    np.testing.assert_array_equal(y1, y)


def test_rms_norm_and_rope_equal_the_numpy_steps(onerow):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 576)).astype(np.float32) * 3
    gain = rng.standard_normal(576).astype(np.float32)
    np.testing.assert_allclose(onerow.rms_norm(x, gain, 1e-5), layers.rms_norm(x, gain, 1e-5),
                               rtol=2e-7, atol=1e-7)
    qkv = rng.standard_normal((1, 960)).astype(np.float32)
    q, k = layers.split_heads(qkv[:, :576], 9), layers.split_heads(qkv[:, 576:768], 3)
    cos, sin = rng.standard_normal((2, 1, 64)).astype(np.float32)
    want = layers.rope_qk(q, k, cos, sin)
    got = onerow.rotate(q.copy(), k.copy(), cos, sin)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)  # the same float32 operations in the same order


def _consts(T, window=None, n_head=9, n_kv_head=3):
    bias = layers.mask_bias(layers.causal_mask(T, window, start=T - 1))  # [1, T]
    c = families.Consts(n_head=n_head, n_kv_head=n_kv_head, d_head=64, scale=0.125, rope=None,
                        bias=bias, norm=None, act=None, gated_mlp=True, window=window, causal=True)
    return c


def _cached(rng, T, room=True):
    """Keys or values [3, T, 64] as a keystroke meets them: a cached run's T - 1 positions with
    room after them and the new one appended in place, or (room False) a plain strided view."""
    if not room:
        return rng.standard_normal((T, 3, 64)).astype(np.float32).transpose(1, 0, 2)
    first = append_positions(np.zeros((3, 0, 64), np.float32), 0,
                             rng.standard_normal((3, T - 1, 64)).astype(np.float32))
    return append_positions(first, T - 1, rng.standard_normal((3, 1, 64)).astype(np.float32))


@pytest.mark.parametrize("T, window, room", [(1, None, True), (24, None, True), (24, None, False),
                                             (300, None, True), (24, 5, True)])
def test_one_row_attention_equals_the_numpy_attention(T, window, room, onerow):
    rng = np.random.default_rng(T)
    q = rng.standard_normal((1, 9, 64)).astype(np.float32).transpose(1, 0, 2)  # [9, 1, 64] strided
    k, v = _cached(rng, T, room), _cached(rng, T, room)
    assert rowmath.prefix(k, rowmath.whole(k)) == room  # read in place of their array with room
    c = _consts(T, window)
    want = families.dense_attention(q, k, v, c)
    got = onerow.dense_attention(q, k, v, c)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("n_group", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("T", [5, 16, 37, 64])
@pytest.mark.parametrize("d", [64, 128, 48])
def test_scores_read_with_the_values_ahead_are_the_plain_scores_bits(n_group, T, d, onerow):
    """A step's scores (the values fetched beside the keys, up to 3 query heads a key read),
    written into a row of a layer's patterns as a step writes them, are the bits of the scores read
    head by head, and q k^T scaled less each row's max."""
    rng = np.random.default_rng(n_group * T)
    n_kv = 2
    q = rng.standard_normal((n_kv * n_group, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((n_kv, T + 5, d)).astype(np.float32) for _ in range(2))
    scale = np.float32(0.125)
    plain = np.empty((n_kv * n_group, 1, T), np.float32)
    ahead = np.full((n_kv * n_group, 3, T + 2), np.nan, np.float32)[:, 1:2, :T]  # (rows apart)
    rowmath.scores_of(q, k, T, rowmath.NO_BIAS, scale, n_group, True, plain)
    rowmath.scores_ahead_of(q, k, T, rowmath.NO_BIAS, scale, n_group, True, ahead, v)
    np.testing.assert_array_equal(ahead.view(np.int32), plain.view(np.int32))
    want = np.einsum("hd,htd->ht", q[:, 0] * scale, np.repeat(k[:, :T], n_group, axis=0))
    np.testing.assert_allclose(ahead[:, 0], want - want.max(axis=1, keepdims=True), atol=1e-5)


@pytest.mark.parametrize("edits", [(), (Knockout(layer=5, q=0, k=0),)], ids=["fused", "stepwise"])
def test_each_head_reads_its_own_kv_head_and_positions(edits, onerow):
    """One key stands out per KV head, at a position of its own: every query head finds its own KV
    head's key (h // 3) and its value; a view that starts one position into an array with room is
    read from that position, not from the array's first. Both paths: the scores' max subtracted in
    their call (a trace without edits), and the scores' hook between (a trace with edits, here of
    another layer)."""
    T, d = 12, 64
    base = np.zeros((3, T + 5, d), np.float32)
    k = base[:, 1:T + 1]  # same strides as the array, another start
    v = np.zeros((3, T, d), np.float32)
    for g, t in enumerate((2, 7, 10)):
        k[g, t, g] = 400.0  # key t of KV head g meets query dimension g
        v[g, t, 0] = 100.0 + 10 * g + t  # and its value says which it is
    q = np.zeros((9, 1, d), np.float32)
    for h in range(9):
        q[h, 0, h // 3] = 1.0
    c = _consts(T)
    rows = np.zeros((9, 1, T), np.float32)

    class Rows:  # a trace slot that gives the pattern rows to write into
        def __init__(self):
            self.rows = rows
            self.trace = Trace(edits=edits)

        def scores(self, s):
            return s

        def pattern(self, a):
            pass
    z = onerow.dense_attention(q, k, v, c, Rows())
    for h in range(9):
        g, t = h // 3, (2, 7, 10)[h // 3]
        assert rows[h, 0].argmax() == t and rows[h, 0, t] > 0.99
        assert abs(z[h, 0, 0] - (100.0 + 10 * g + t)) < 1.0
    np.testing.assert_allclose(z, families.dense_attention(q, k, v, c), rtol=0, atol=1e-4)


def test_the_trace_edits_and_records_at_their_points(onerow):
    """A knockout at the scores and a patched pattern row reach the one-row attention as they reach
    the NumPy one: the same edited pattern rows and head outputs."""
    rng = np.random.default_rng(5)
    T = 10
    q = rng.standard_normal((9, 1, 64)).astype(np.float32)
    k, v = _cached(rng, T), _cached(rng, T)
    patched = np.full((1, T), 1.0 / T, np.float32)
    edits = [Knockout(layer=0, q=T - 1, k=3),
             Patch("pattern", 0, np.array([0]), patched, head=4)]  # the block's row 0
    out = []
    for attention in (families.dense_attention, onerow.dense_attention):
        trace = Trace(edits=edits)
        trace.begin(2, np.arange(T), T - 1)
        rows = np.zeros((9, 1, T), np.float32)
        z = attention(q, k, v, _consts(T), trace.slot(0, None, rows))
        assert np.all(rows[np.arange(9) != 4, 0, 3] == 0)  # knocked out in every other head
        np.testing.assert_array_equal(rows[4], patched)
        out.append((rows, z))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("T", [1, 7, 300])
def test_a_trace_without_edits_records_the_numpy_pattern_rows(T, onerow):
    """A slot whose trace has no edits (a keystroke's, its pattern rows recorded): the scores' max
    is subtracted in their call, the scores' hook left out; the same rows and outputs as the NumPy
    attention's, and as the one-row path that calls the hook (a trace with edits elsewhere)."""
    rng = np.random.default_rng(T + 1)
    q = rng.standard_normal((9, 1, 64)).astype(np.float32) * 3
    k, v = _cached(rng, T), _cached(rng, T)
    out, slots = [], []
    for attention, edits in ((families.dense_attention, ()), (onerow.dense_attention, ()),
                             (onerow.dense_attention, (Knockout(layer=1, q=T - 1, k=0),))):
        trace = Trace(edits=edits)
        trace.begin(2, np.arange(T), T - 1)
        rows = np.full((9, 1, T), np.nan, np.float32)
        slots.append(trace.slot(0, None, rows))
        out.append((rows, attention(q, k, v, _consts(T), slots[-1])))
    assert [onerow._edits_scores(s) for s in slots[1:]] == [False, True]
    for rows, z in out[1:]:
        np.testing.assert_allclose(rows, out[0][0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(z, out[0][1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[1][0], out[2][0])  # the max subtracted alike either way


@pytest.fixture(scope="module")
def packed_models(tmp_path_factory, onerow):
    """Tiny GGUF models in Q8_0 (their layers packed as the window packs them): a Llama with
    grouped-query attention, Qwen3 (a head norm on q and k) and Gemma 3 (sandwich norms, a
    sliding window)."""
    folder = tmp_path_factory.mktemp("onerow")
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    paths = {"llama": write_gguf(folder / "llama.gguf", cfg, tensors, Q.Q8_0)}
    for name in ("qwen3", "gemma3"):
        paths[name] = family_gguf(FIXTURES / name, folder / f"{name}.gguf", Q.Q8_0)
    return {name: load_packed(p) for name, p in paths.items()}


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3"])
def test_keystrokes_on_the_one_row_steps_equal_the_numpy_steps(name, packed_models, monkeypatch):
    """Each token one run with the KV cache, patterns, z and the residual stream recorded: the
    compiled steps (taken on every layer) against the NumPy steps, in the same process."""
    model = packed_models[name]
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7][:min(14, model.config.max_positions)]
    taken = []
    real = families.one_row_consts
    monkeypatch.setattr(families, "one_row_consts", lambda *a: (taken.append(1), real(*a))[1])
    runs = {}
    for steps in (qm.ONE_ROW, None):
        monkeypatch.setattr(qm, "ONE_ROW", steps)
        model.clear_cache()
        model.run(ids=ids[:4], trace=Trace(z=True, resid=True))
        for t in range(5, len(ids) + 1):
            trace = Trace(z=True, resid=True)
            result = model.run(ids=ids[:t], trace=trace)
            assert result.cache_computed == 1
        runs[steps is not None] = (result.attentions, trace)
    assert len(taken) == model.config.n_layer * (len(ids) - 4)  # every layer of every keystroke
    (a, ta), (b, tb) = runs[True], runs[False]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    for i in range(model.config.n_layer):
        np.testing.assert_allclose(ta.z[i], tb.z[i], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ta.resid[-1], tb.resid[-1], rtol=1e-4, atol=1e-4)
    model.clear_cache()


def test_a_run_that_finds_its_kernels_cold_waits_for_the_one_row_steps_too(monkeypatch):
    """A run that finds its kernels cold (takes_layer) warms them with their serial twins and the
    one-row steps before it goes on: every one-row run of a model then takes the same steps, so its
    numbers never depend on when a background warm-up finished."""
    monkeypatch.setattr(qm, "_warmed", {})
    monkeypatch.setattr(qm, "_serial_ready", set())
    monkeypatch.setattr(qm, "_ready_types", set())
    monkeypatch.setattr(qm, "_started", set())
    monkeypatch.setattr(qm, "ONE_ROW", None)
    rows = gguf.quants.quantize(np.ones((16, 32), np.float32), Q.Q8_0)
    pl = qpack.PackedLayer(qpack.pack_parts([(Q.Q8_0, rows, 0)]), None, None, None)
    view = Layer(w_qkv=None, b_qkv=None, w_o=None, b_o=None, norm1=(), norm2=(), w_in=None, b_in=None,
                 w_out=None, b_out=None, packed=pl)
    assert qm.takes_layer(view, 1, expanded=False)
    assert qm._key(Q.Q8_0) in qm._warmed
    assert qm._serial_ready == {qm._key(Q.Q8_0)} and qm.ONE_ROW is not None


def test_warming_a_block_type_loads_the_one_row_block_of_its_scale_type_alone(monkeypatch):
    """The one-row block and stack are compiled (or loaded) for the scale type of the block types
    warmed (float16 bits: qpack.HALF; float32: the K types), once each, and the other type's only
    when a model of it is warmed."""
    asked = spy_on_block_compiles(monkeypatch)
    qm.warm([Q.Q8_0, Q.Q4_1])
    assert asked == [("compile_block", "uint16"), ("compile_stack", "uint16")]
    assert qm.warmed([Q.Q8_0, Q.Q4_1]) and not qm.warmed([Q.Q6_K])
    qm.warm([Q.Q4_1])
    assert len(asked) == 2  # (warm already)
    qm.warm([Q.Q6_K])
    assert asked[2:] == [("compile_block", "float32"), ("compile_stack", "float32")]
    assert qm.warmed([Q.Q8_0, Q.Q6_K])


def _ulps(a, b):  # float32 arrays -> distance in units in the last place, per element
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_the_vector_exp_is_within_2_ulp_of_numpys_and_exp_of_minus_inf_is_0(onerow):
    """Softmax's and SwiGLU's exp (rowmath.exp_into) over float32's range of normal results, as
    NumPy's; -inf (a knocked-out key) and anything below -88 give 0, and no argument gives inf."""
    x = np.concatenate([np.linspace(-87.0, 88.0, 200_001, dtype=np.float32),
                        np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 10])
    got = np.empty_like(x)
    rowmath.exp_into(x, got)
    assert _ulps(got, np.exp(x)).max() <= 2
    edge = np.array([-np.inf, -1e30, -89.0, 100.0, np.inf], np.float32)
    rowmath.exp_into(edge, edge)
    assert list(edge[:3]) == [0.0, 0.0, 0.0] and np.all(np.isfinite(edge))


def test_softmax_and_silu_equal_numpys_to_rounding(onerow):
    rng = np.random.default_rng(4)
    s = rng.standard_normal((9, 1, 70)).astype(np.float32) * 4
    s -= s.max(axis=-1, keepdims=True)
    s[2, 0, 5] = -np.inf  # a knocked-out key: no weight at all
    want = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
    got = s.copy()
    onerow._softmax(got)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-9)
    assert got[2, 0, 5] == 0.0
    strided = np.zeros((9, 2, 70), np.float32)[:, :1]  # rows of a larger array (a trace's patterns)
    strided[...] = s
    onerow._softmax(strided)
    np.testing.assert_array_equal(strided, got)  # the same bits whatever the layout
    g = rng.standard_normal((1, 1536)).astype(np.float32) * 6
    np.testing.assert_allclose(onerow.silu(g), layers.silu(g), rtol=2e-6, atol=1e-12)
