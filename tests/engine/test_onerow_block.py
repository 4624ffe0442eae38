"""The one-row block (engine/computing/onerow_block.py's pre_norm_block: a pre-norm layer of one new row
in three compiled calls) against the one-row steps it replaces (the same bits) and the NumPy steps (within
float32 rounding), on a tiny Llama whose matrices are blocks of each type gguf writes (Q4_1 as
SmolLM2 ships, Q8_0 as its twin, Q4_0, Q5_0, Q5_1) and on layers of K-type blocks (Q4_K, Q5_K,
Q6_K, and Q4_K beside Q6_K as Q4_K_M mixes them): keystrokes with patterns and records,
generation steps appended in place, the trace's edits at their points, and layers the block does
not cover (they take the family's block)."""

from dataclasses import replace

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.generate import _StepTrace
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, Patch, ReplaceHead, Trace
from gguf_files import gguf_tensors, load_packed, write_gguf
from kernel_checks import spy_on_block_compiles
from tiny import FIXTURES

pytest.importorskip("numba")

WAYS = ("block", "steps", "numpy")


@pytest.fixture(scope="module", params=[Q.Q4_1, Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q5_1], ids=lambda q: q.name)
def models(tmp_path_factory, request):
    """Tiny grouped-query Llamas in the type (4 query heads over 2 KV heads): `covered`, every
    matrix in blocks (an MLP of 64, so its down projection's rows divide into the type's 32), and
    `uncovered`, the fixture's MLP of 48, whose down projection stays float32 (the block does not
    take it)."""
    qtype = request.param
    qm.warm([qtype])
    assert qm.ONE_ROW is not None
    folder = tmp_path_factory.mktemp("onerow_block")
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    out = {"uncovered": load_packed(write_gguf(folder / "uncovered.gguf", cfg, tensors, qtype))}
    rng = np.random.default_rng(7)
    d = cfg["hidden_size"]
    wide = dict(tensors)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            wide[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, d)) * 0.2).astype(np.float32)
    out["covered"] = load_packed(write_gguf(folder / "covered.gguf", dict(cfg, intermediate_size=64),
                                      wide, qtype))
    covered = out["covered"]
    for i in range(covered.config.n_layer):  # (every matrix one part of the type)
        pl = covered.weights.layers.packed_view(i).packed
        assert [[p.qtype for _, p in m.parts] for m in (pl.w_qkv, pl.w_o, pl.w_in, pl.w_out)] == [[qtype]] * 4
    return out


@pytest.fixture
def way(monkeypatch, cap_kernels):
    """set(name): the block, the one-row steps one by one, or the NumPy steps; calls counts the
    block's compiled calls. One kernel thread, as the window gives a small matrix (the block runs
    the serial kernels only)."""
    from attnviz.engine.computing import onerow, onerow_block, onerow_stack
    cap_kernels(1)
    monkeypatch.setattr(onerow_stack, "ENABLED", False)  # (its layer by layer: test_onerow_stack.py)
    calls = []  # 1: a layer's _attention_in; a generation step's _step_in: 2 appended, 3 no room
    real_calls = onerow_block._calls

    def counted(plan):  # the compiled calls of the plan's scale type, its first call counted
        real = real_calls(plan)

        def step_in(*a):
            appended = real.step_in(*a)
            calls.append(2 if appended else 3)
            return appended
        return real._replace(attention_in=lambda *a: (calls.append(1), real.attention_in(*a))[1],
                             step_in=step_in)
    monkeypatch.setattr(onerow_block, "_calls", counted)
    steps = qm.ONE_ROW

    def set_way(name):
        monkeypatch.setattr(qm, "ONE_ROW", None if name == "numpy" else steps)
        monkeypatch.setattr(onerow, "USE_BLOCK", name == "block")
    set_way.calls = calls
    return set_way


def _keystrokes(model, ids):
    """Each token one run with the KV cache (one new row), patterns and every record kept."""
    model.clear_cache()
    model.run(ids=ids[:4], trace=Trace(inputs=True, z=True, resid=True, mlp_out=True, kv=True))
    for t in range(5, len(ids) + 1):
        trace = Trace(inputs=True, z=True, resid=True, mlp_out=True, kv=True)
        result = model.run(ids=ids[:t], trace=trace)
        assert result.cache_computed == 1
    model.clear_cache()
    return result.attentions, trace


def _close(a, b, rel=1e-5):
    """Within `rel` of the array's largest value (float32 sums in another order)."""
    assert np.abs(a - b).max() <= rel * np.abs(b).max(), (np.abs(a - b).max(), np.abs(b).max())


IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]


def test_keystrokes_on_the_block_equal_the_steps_bit_for_bit(models, way):
    model = models["covered"]
    runs = {}
    for name in WAYS:
        way(name)
        before = len(way.calls)
        runs[name] = _keystrokes(model, IDS)
        taken = len(way.calls) - before
        assert taken == (model.config.n_layer * (len(IDS) - 4) if name == "block" else 0)
    (a, ta), (b, tb), (c, tc) = (runs[n] for n in WAYS)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=0, atol=5e-6)
    for i in range(model.config.n_layer):
        for name in ("inputs", "k", "v", "z", "mlp_out", "resid"):
            np.testing.assert_array_equal(getattr(ta, name)[i], getattr(tb, name)[i])
            _close(getattr(ta, name)[i], getattr(tc, name)[i])
    np.testing.assert_array_equal(ta.resid[-1], tb.resid[-1])


def test_generation_steps_on_the_block_equal_the_numpy_steps(models, way):
    """A generation's steps: its own cache, no dense patterns, each row appended in place (the
    step's two calls: onerow_block._step_in, _step_mid), the last rows of the patterns kept."""
    model = models["covered"]
    finals = {}
    for name in WAYS:
        way(name)
        cache, rows = KVCache(), []
        for t in range(6, len(IDS) + 1):
            trace = _StepTrace(True, cache)
            model.run(ids=np.asarray(IDS[:t]), trace=trace, request=RunRequest(labels=False))
            rows.append((trace.final.copy(), np.stack(trace.last_rows)))
        finals[name] = rows
    # the first run: 6 rows; every later layer a step's two calls, but the first step's: its
    # _step_in finds no room after the prefill's keys and the layer goes on as the block's
    n_layer = model.config.n_layer
    assert way.calls == [3] * n_layer + [2] * (n_layer * (len(IDS) - 7))
    for (f, r), (f1, r1), (f2, r2) in zip(*(finals[n] for n in WAYS)):
        np.testing.assert_array_equal(f, f1)
        np.testing.assert_array_equal(r, r1)
        _close(f, f2)
        np.testing.assert_allclose(r, r2, rtol=0, atol=5e-6)


def test_the_trace_edits_apply_on_the_block_as_on_the_steps(models, way):
    """A one-row run with edits (a text of one token: an edited run computes every row) at the
    head outputs, the MLP's output and the residual: each reaches the block's layer at its point,
    and the run equals the NumPy steps' edited run, not the unedited one."""
    model = models["covered"]
    n_head, d = model.config.n_head, model.config.d_model
    rng = np.random.default_rng(3)
    edits = (ReplaceHead(layer=0, head=1, value=rng.standard_normal((1, 8)).astype(np.float32)),
             Patch("mlp_out", 1, np.array([0]), rng.standard_normal((1, d)).astype(np.float32)),
             Patch("z", 1, np.array([0]), rng.standard_normal((1, 8)).astype(np.float32), head=3))
    out = {}
    for name in WAYS:
        way(name)
        for edited in (False, True):
            trace = Trace(z=True, resid=True, mlp_out=True, edits=edits if edited else ())
            model.run(ids=[5], trace=trace, request=RunRequest(use_cache=False))
            out[name, edited] = trace
    assert len(way.calls) == 2 * model.config.n_layer
    for edited in (False, True):
        a, b, c = (out[n, edited] for n in WAYS)
        np.testing.assert_array_equal(a.resid[-1], b.resid[-1])
        _close(a.resid[-1], c.resid[-1])
    e = out["block", True]
    np.testing.assert_array_equal(e.z[0][1], edits[0].value)
    np.testing.assert_array_equal(e.z[1][3], edits[2].value)
    np.testing.assert_array_equal(e.mlp_out[1], edits[1].value)
    assert not np.allclose(e.resid[-1], out["block", False].resid[-1], atol=1e-3)
    assert n_head == 8


def test_a_layer_the_block_does_not_cover_takes_the_familys_block(models, way, cap_kernels, monkeypatch):
    """A down projection that stayed float32 (its rows do not divide into Q4_1's blocks), and a
    covered layer whose kernels would run on two threads: no compiled call of the block, and the
    same numbers as the one-row steps."""
    from attnviz.engine import parallel

    def block_not_called_and_same_as_steps(model):
        runs = {}
        for name in WAYS[:2]:
            way(name)
            runs[name] = _keystrokes(model, IDS)
        assert way.calls == []
        np.testing.assert_array_equal(runs["block"][0], runs["steps"][0])
        np.testing.assert_array_equal(runs["block"][1].resid[-1], runs["steps"][1].resid[-1])

    block_not_called_and_same_as_steps(models["uncovered"])
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        return  # (numba runs one thread here: every kernel call is serial)
    cap_kernels(2)
    monkeypatch.setattr(parallel, "_AFFINITY", 2)  # (two cores, whatever this machine has)
    parallel.limit_cores(None)
    block_not_called_and_same_as_steps(models["covered"])


def _k_rows(qtype, n_out, n_in, rng):
    """Random rows of a K type [n_out, n_in / 256 blocks] with sane float16 scales (gguf cannot
    quantise K types: d and dmin first in Q4_K and Q5_K, d last in Q6_K) and their dequantised
    float32 [n_out, n_in]."""
    import gguf
    if qtype == Q.Q8_0:  # (gguf writes it)
        raw = gguf.quants.quantize((rng.standard_normal((n_out, n_in)) * 0.05).astype(np.float32), qtype)
        return raw, gguf.quants.dequantize(raw, qtype).astype(np.float32)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (n_out, n_in // block * size), dtype=np.uint8)
    per = raw.reshape(n_out, -1, size)
    f16 = (rng.standard_normal((2, *per.shape[:2])) * 0.001).astype(np.float16)
    if qtype == Q.Q6_K:
        per[:, :, size - 2:] = f16[0][..., None].view(np.uint8)
    else:
        per[:, :, 0:2], per[:, :, 2:4] = f16[0][..., None].view(np.uint8), f16[1][..., None].view(np.uint8)
    return raw, gguf.quants.dequantize(raw, qtype).astype(np.float32)


K_LAYERS = {"Q4_K": (Q.Q4_K,) * 4, "Q5_K": (Q.Q5_K,) * 4, "Q6_K": (Q.Q6_K,) * 4,
            "Q4_K_M": (Q.Q4_K, Q.Q4_K, Q.Q4_K, Q.Q6_K),  # w_qkv, w_o, w_in, w_out
            "mixed_scales": (Q.Q4_K, Q.Q4_K, Q.Q4_K, Q.Q8_0)}  # (float32 and float16: not taken)


@pytest.fixture(scope="module")
def k_kernels():  # warm (the block compiled) before `way` wraps its calls
    qm.warm([Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_0])


@pytest.mark.parametrize("types", K_LAYERS.values(), ids=K_LAYERS.keys())
def test_a_layer_in_k_blocks_float32_scales_equals_the_steps(k_kernels, way, types):
    """The block's calls compiled for float32 scales (the K types), each matrix on its own type's
    kernel: one layer of one row on a packed view (no float32 matrix held) against the one-row
    steps (the same bits) and the float32 layer of the dequantised weights. A layer whose scales
    are float32 in some matrices and float16 in another takes the family's block."""
    from attnviz.engine.computing import families, layers, onerow, onerow_block
    from attnviz.engine.reading.layout import Layer
    from attnviz.engine.reading.qpack import PackedLayer, pack_parts
    rng = np.random.default_rng(11)
    d, n_head, n_kv, d_head, d_ff, eps = 256, 4, 2, 64, 256, 1e-5
    shapes = {"w_qkv": ((n_head + 2 * n_kv) * d_head, d), "w_o": (d, n_head * d_head),
              "w_in": (2 * d_ff, d), "w_out": (d, d_ff)}
    raw = {name: _k_rows(qtype, *shape, rng) for qtype, (name, shape) in zip(types, shapes.items())}
    gains = [(1 + 0.1 * rng.standard_normal(d)).astype(np.float32) for _ in range(2)]
    packed = PackedLayer(**{name: pack_parts([(qtype, r, 0)]) for qtype, (name, (r, _))
                            in zip(types, raw.items())})
    none = dict(b_qkv=None, b_o=None, b_in=None, b_out=None, norm1=(gains[0],), norm2=(gains[1],))
    view = Layer(w_qkv=None, w_o=None, w_in=None, w_out=None, packed=packed, **none)
    dense = Layer(**{name: w.T.copy() for name, (_, w) in raw.items()}, **none)
    cos, sin = np.cos(np.arange(d_head) * 0.3)[None], np.sin(np.arange(d_head) * 0.3)[None]
    c = families.Consts(n_head=n_head, n_kv_head=n_kv, d_head=d_head, scale=d_head ** -0.5,
                        rope=(cos.astype(np.float32), sin.astype(np.float32)), bias=None,
                        norm=lambda x, gb: layers.rms_norm(x, gb[0], eps), act=layers.silu,
                        gated_mlp=True, causal=True)
    steps = onerow.fused(c, eps, True)
    x = rng.standard_normal((1, d)).astype(np.float32)
    calls = len(way.calls)
    got = onerow_block.pre_norm_block(x, view, steps, None, eps, families.pre_norm_block)
    assert len(way.calls) == calls + (Q.Q8_0 not in types) and np.isfinite(got).all()
    np.testing.assert_array_equal(got, families.pre_norm_block(x, view, steps, None))
    _close(got, families.pre_norm_block(x, dense, c, None))


def test_a_step_takes_the_two_calls_only_where_its_points_record_and_edit_nothing():
    """onerow_block._plain: a generation step's slot, yes; a trace that records z or the MLP's
    output, has edits, or a slot class with a point of its own (here z), no."""
    from types import SimpleNamespace

    from attnviz.engine.computing import onerow, onerow_block
    from attnviz.engine.computing.trace import LayerCache
    c = SimpleNamespace(attention=onerow.dense_attention)
    past = KVCache()
    past.k = [np.zeros((2, 5, 8), np.float32)] * 2

    def slot(trace, kind=LayerCache):
        trace.want_kv = True  # (as forward sets it for a cached run)
        trace.begin(2, np.arange(6), p=5)
        return kind(trace, 0, past, None)

    class OwnZ(LayerCache):
        def z(self, z):
            return z * 2

    def plain(s, consts=c):
        return onerow_block._plain(s, consts, onerow.dense_attention)

    assert plain(slot(_StepTrace(False, past)))
    assert plain(slot(_StepTrace(True, past)))  # (its pattern point is called)
    assert not plain(slot(Trace(patterns=False, z=True)))
    assert not plain(slot(Trace(patterns=False, mlp_out=True)))
    patch = Patch("mlp_out", 0, np.array([5]), np.zeros((1, 64), np.float32))
    assert not plain(slot(Trace(patterns=False, edits=[patch])))
    assert not plain(slot(Trace(patterns=False), OwnZ))
    assert plain(slot(Trace(patterns=False)))
    assert not plain(slot(Trace(patterns=False)), SimpleNamespace(attention=None))  # another attention


def _k_view(types, **extra):  # a one-row run's packed view of a layer whose four matrices are `types`
    from attnviz.engine.reading.layout import Layer
    from attnviz.engine.reading.qpack import PackedLayer, pack_parts
    rng = np.random.default_rng(5)
    d, d_ff = 256, 256
    shapes = {"w_qkv": (512, d), "w_o": (d, 256), "w_in": (2 * d_ff, d), "w_out": (d, d_ff)}
    packed = PackedLayer(**{name: pack_parts([(qtype, _k_rows(qtype, *shape, rng)[0], 0)])
                            for qtype, (name, shape) in zip(types, shapes.items())})
    gain = np.ones(d, np.float32)
    return Layer(w_qkv=None, w_o=None, w_in=None, w_out=None, packed=packed, b_qkv=None, b_o=None,
                 b_in=None, b_out=None, norm1=(gain,), norm2=(gain,), **extra)


def test_block_scales_names_the_scale_types_of_the_layers_the_block_covers():
    """A layer's scale type counts where the block runs it: every matrix's scales of one type
    (float32 in K blocks, Q4_K_M's Q4_K beside Q6_K too; float16 bits in Q8_0's); a layer mixing
    the two, or with Gemma 3's other norms, runs without the block and names none."""
    f32, f16 = np.dtype(np.float32), np.dtype(np.uint16)
    q4_k_m, q8_0 = _k_view(K_LAYERS["Q4_K_M"]), _k_view((Q.Q8_0,) * 4)
    mixed = _k_view(K_LAYERS["mixed_scales"])
    gemma = _k_view((Q.Q4_K,) * 4, q_norm=np.ones(64, np.float32), k_norm=np.ones(64, np.float32),
                    post_attn_norm=(np.ones(256, np.float32),), post_mlp_norm=(np.ones(256, np.float32),))
    assert qm.block_scales([q4_k_m]) == {f32} and qm.block_scales([q8_0]) == {f16}
    assert qm.block_scales([mixed, gemma, None]) == frozenset()
    assert qm.block_scales(iter([mixed, q8_0, q4_k_m])) == {f16, f32}
    expanded = replace(q8_0, w_qkv=np.zeros((256, 512), np.float32))  # (its view's plan known)
    assert qm.block_scales([expanded]) == frozenset()  # a float32 copy runs without the block


def test_warm_compiles_the_block_for_the_scale_types_its_layers_run_it_with(monkeypatch):
    """warm(types, layers=...) compiles (or loads) the one-row block and stack for the scale types
    block_scales names alone: none for layers that mix float16 and float32 scales, though their
    block types have both; the float32 ones once a layer runs the block with them."""
    asked = spy_on_block_compiles(monkeypatch)
    types, mixed = K_LAYERS["mixed_scales"], [_k_view(K_LAYERS["mixed_scales"])] * 2
    qm.warm(types, layers=mixed)
    assert asked == [] and qm.ONE_ROW is not None and qm.warmed(types, layers=mixed)
    q4_k_m = [_k_view(K_LAYERS["Q4_K_M"])]
    assert not qm.warmed(K_LAYERS["Q4_K_M"], layers=q4_k_m)
    qm.warm(K_LAYERS["Q4_K_M"], layers=q4_k_m)
    assert asked == [("compile_block", "float32"), ("compile_stack", "float32")]
    assert qm.warmed(K_LAYERS["Q4_K_M"], layers=q4_k_m)


def test_a_models_packed_views_name_the_scale_types_of_the_layers_the_block_covers(tmp_path):
    """On a loaded model (load.packed_views): a tiny Llama in Q8_0 blocks throughout runs the block
    with float16 bits; the same with its MLP's down projection kept float32 names none."""
    from attnviz.engine.computing.load import packed_views
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    uncovered = load_packed(write_gguf(tmp_path / "uncovered.gguf", cfg, tensors, Q.Q8_0))
    assert qm.block_scales(packed_views(uncovered)) == frozenset()
    rng = np.random.default_rng(7)
    wide = dict(tensors)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            wide[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, cfg["hidden_size"])) * 0.2).astype(np.float32)
    covered = load_packed(write_gguf(tmp_path / "covered.gguf", dict(cfg, intermediate_size=64), wide, Q.Q8_0))
    assert qm.block_scales(packed_views(covered)) == {np.dtype(np.uint16)}
