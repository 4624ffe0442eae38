"""The forward pass as picoGPT writes it: tuned kernels equal their one-line references, family
differences are the data in FAMILY, self_attention over a cached prefix equals a full run, and
Model.run takes one path for text, ids and typed ids. No Qt."""

import math

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.reading.config import FAMILIES
from attnviz.engine.computing.families import FAMILY, layer_consts, self_attention
from attnviz.engine.computing.layers import (
    GEMV_ROWS, STORED_ROWS_FIRST, linear,
    apply_rope, causal_mask, gelu_erf, gelu_tanh, layer_norm, rms_norm, rope_cos_sin,
    silu, softmax,
)
from attnviz.engine.computing.trace import KVCache, Trace
from held_run import HeldRun
from tiny import tiny_llama
from attnviz.engine.computing.request import RunRequest

RNG = np.random.default_rng(3)
X = (RNG.standard_normal((7, 300)) * 4).astype(np.float32)


def test_softmax_equals_its_reference():
    e = np.exp(X.astype(np.float64) - X.max(-1, keepdims=True))
    np.testing.assert_allclose(softmax(X.copy()), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_gelus_and_silu_equal_their_references():
    erf = np.vectorize(math.erf)
    x64 = X.astype(np.float64)
    np.testing.assert_allclose(gelu_erf(X), 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))), atol=2e-6)
    tanh_ref = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(gelu_tanh(X), tanh_ref, atol=1e-5)
    np.testing.assert_allclose(silu(X), x64 / (1 + np.exp(-x64)), rtol=1e-5, atol=1e-6)


def test_norms_equal_their_references():
    g, b = RNG.standard_normal(300).astype(np.float32), RNG.standard_normal(300).astype(np.float32)
    x64 = X.astype(np.float64)
    ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(layer_norm(X, g, b, 1e-5), ln, rtol=1e-4, atol=1e-4)
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(rms_norm(X, g, 1e-6), rms, rtol=1e-4, atol=1e-4)
    # the tuned RMSNorm keeps the float32 formula's bits (np.mean's sum, then its division)
    for x in (X, X[:1], X.reshape(7, 3, 100)):
        gain = g[:x.shape[-1]]
        ref = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-6)) * gain
        assert np.array_equal(rms_norm(x, gain, 1e-6), ref)


def test_every_family_is_data_and_the_forward_pass_never_asks_for_one_by_name(tmp_path, monkeypatch):
    """A family under another name runs the same: the forward pass reads the family's data
    (FAMILY), never its name. A check of the name anywhere on the way would change the patterns
    or fail."""
    import dataclasses

    assert set(FAMILY) == set(FAMILIES.values())
    for model in (load_model(tiny_llama(tmp_path / "llama", n_head=4, n_kv_head=2)),
                  load_model("attnviz-textbook")):
        text = "5, 17, 3, 9, 2" if model.tokenizer is None else "the cat sat on the mat"
        want = model.run(text, request=RunRequest(use_cache=False, values=True))
        renamed = "renamed-" + model.config.family
        monkeypatch.setitem(FAMILY, renamed, FAMILY[model.config.family])
        model.config = dataclasses.replace(model.config, family=renamed)
        got = model.run(text, request=RunRequest(use_cache=False, values=True))
        np.testing.assert_array_equal(got.attentions, want.attentions)
        np.testing.assert_array_equal(got.value_norms, want.value_norms)


@pytest.mark.parametrize("n_head,n_kv_head", [(8, 2), (4, 4), (4, 1)])
def test_self_attention_over_a_cached_prefix_equals_the_full_run(tmp_path, n_head, n_kv_head):
    model = load_model(tiny_llama(tmp_path / "m", n_head=n_head, n_kv_head=n_kv_head))
    cfg, layer = model.config, model.weights.layers[0]
    T, p = 11, 6
    h = RNG.standard_normal((T, cfg.d_model)).astype(np.float32)
    ids = np.arange(T)
    full = np.empty((cfg.n_head, T, T), np.float32)
    whole = Trace(kv=True, z=True, resid=True)
    whole.begin(1, ids)
    out = self_attention(h, layer, layer_consts(cfg, T)[0], whole.slot(0, None, full))
    k, v = whole.k[0], whole.v[0]
    assert out.shape == (T, cfg.d_model) and k.shape == v.shape == (cfg.n_kv_head, T, cfg.d_head)
    pattern = full
    # the prefix's k, v as the cache holds them, then only the rows p..T-1
    rows = np.empty((cfg.n_head, T - p, T), np.float32)
    part = Trace(kv=True, z=True, resid=True)
    part.begin(1, ids, p)
    past = KVCache(ids=ids[:p], k=[k[:, :p]], v=[v[:, :p]], records={"z": whole.z})
    out2 = self_attention(h[p:], layer, layer_consts(cfg, T, p)[0], part.slot(0, past, rows))
    np.testing.assert_allclose(rows, full[:, p:], atol=1e-6)
    np.testing.assert_allclose(out2, out[p:], atol=1e-5)
    np.testing.assert_allclose(part.k[0], k, atol=1e-6)
    np.testing.assert_allclose(part.z[0], whole.z[0], atol=1e-6)
    scale = 1 / math.sqrt(cfg.d_head)
    rope = rope_cos_sin(np.arange(T), cfg.d_head, cfg.rope_theta)
    # each head against a naive loop over its KV group
    group = n_head // n_kv_head
    q = (h @ layer.w_qkv[:, :cfg.n_head * cfg.d_head]).reshape(T, cfg.n_head, -1).transpose(1, 0, 2)
    q = apply_rope(q, *rope)
    for head in range(n_head):
        scores = q[head] @ k[head // group].T * scale
        scores[~causal_mask(T)] = -np.inf
        np.testing.assert_allclose(pattern[head], softmax(scores.astype(np.float32)), atol=1e-6)


def test_run_takes_one_path_for_text_ids_and_typed_ids(tmp_path):
    folder = tiny_llama(tmp_path / "m")  # no tokenizer.json: text is typed ids
    model = load_model(folder)
    by_ids = model.run(ids=[5, 17, 3, 9], request=RunRequest(use_cache=False))
    typed = model.run("5, 17 3 9", request=RunRequest(use_cache=False))
    assert typed.text == "5, 17 3 9" and by_ids.text == ""
    assert typed.tokens == by_ids.tokens == ["5", "17", "3", "9"]
    np.testing.assert_array_equal(typed.attentions, by_ids.attentions)
    # with the cache, a busy cache (another run holds it) and values/inputs: the same numbers
    cached = model.run(ids=[5, 17, 3, 9], request=RunRequest(values=True, inputs=True))
    held = HeldRun(model, [5, 17, 3, 1])  # another thread's run holds the cache
    held.start()
    try:
        busy = model.run(ids=[5, 17, 3, 9], request=RunRequest(values=True, inputs=True))
    finally:
        held.end()
    assert busy.cache_reused == 0 and busy.cache_bytes == cached.cache_bytes > 0
    assert cached.cache_used and not busy.cache_used
    for a, b in ((cached, busy), (cached, model.run(ids=[5, 17, 3, 9],
                                                    request=RunRequest(values=True, inputs=True)))):
        np.testing.assert_allclose(a.attentions, b.attentions, atol=1e-6)
        np.testing.assert_allclose(a.value_norms, b.value_norms, rtol=1e-5)
        for x, y in zip(a.layer_inputs, b.layer_inputs):
            np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize("n_rows", [1, 2, 3, GEMV_ROWS, GEMV_ROWS + 1, 40])
def test_linear_of_a_few_rows_is_each_rows_product(n_rows):
    """A cached keystroke's few new rows go through one matrix-vector product each (a matrix
    product of 2-5 rows packed the weights first and took 2.4-4.8x one product): each row equal to
    its own product, the whole within float32 rounding of x @ w, the bias added once."""
    rng = np.random.default_rng(n_rows)
    x = rng.standard_normal((n_rows, 48), dtype=np.float32)
    w = rng.standard_normal((48, 80), dtype=np.float32)
    b = rng.standard_normal(80, dtype=np.float32)
    y = linear(x, w, b)
    assert y.shape == (n_rows, 80) and y.dtype == np.float32
    np.testing.assert_allclose(y, x.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)
    if n_rows <= GEMV_ROWS:
        for i in range(n_rows):
            np.testing.assert_array_equal(y[i], x[i] @ w + b)


@pytest.mark.parametrize("n_rows", [1, 2, GEMV_ROWS + 1, 24, STORED_ROWS_FIRST, STORED_ROWS_FIRST + 1])
@pytest.mark.parametrize("order", ["C", "F"])
def test_linear_of_stored_rows_times_columns(n_rows, order):
    """w as the [in, out] view of [out, in] rows (F order: a GGUF file's matrices): from
    GEMV_ROWS + 1 to STORED_ROWS_FIRST rows the product is made as w.T @ x.T (the stored rows times
    x's rows as columns; faster there, benchmarks/row_products.py), equal to that product bit for bit,
    C-contiguous, and within float32 rounding of x @ w; a C-order w and other row counts as before."""
    rng = np.random.default_rng(n_rows)
    x = rng.standard_normal((n_rows, 48), dtype=np.float32)
    stored = rng.standard_normal((80, 48), dtype=np.float32)  # [out, in]
    w = stored.T if order == "F" else np.ascontiguousarray(stored.T)
    b = rng.standard_normal(80, dtype=np.float32)
    y = linear(x, w, b)
    assert y.shape == (n_rows, 80) and y.dtype == np.float32 and y.flags.c_contiguous
    np.testing.assert_allclose(y, x.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)
    if order == "F" and GEMV_ROWS < n_rows <= STORED_ROWS_FIRST:
        np.testing.assert_array_equal(y, (stored @ x.T).T + b)
    elif n_rows == 1 or n_rows > GEMV_ROWS:
        np.testing.assert_array_equal(y, x @ w + b)
