"""One run API (issue 43, item 5): Model.run takes few parameters and its options in a RunRequest;
a text is tokenised once per run and whether it is long is decided once, in Model.run; and
self_attention attends one way, the packed-text and row-block strategies chosen by its caller
giving the dense path's numbers. No Qt."""

import dataclasses
import inspect

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing import families as F
from attnviz.engine.computing.families import (
    dense_attention, layer_consts, project_qkv, segment_attention, self_attention,
)
from attnviz.engine.computing.layers import causal_mask, mask_bias
from attnviz.engine.computing.longdoc import (
    DenseTooLarge, LongRun, LongTrace, block_attention, dense_bytes, run_long,
)
from attnviz.engine.computing.model import Model
from attnviz.engine.computing.run_result import RunResult
from attnviz.engine.computing.request import Prepared, RunRequest
from tiny import FIXTURES, tiny_llama, tiny_text_model

TEXT = "The keys to the cabinet are on the table."


def test_model_run_takes_at_most_six_parameters_and_its_options_in_a_request():
    params = [p for name, p in inspect.signature(Model.run).parameters.items() if name != "self"]
    assert len(params) <= 6, [p.name for p in params]
    assert all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
    assert "request" in {p.name for p in params}
    assert dataclasses.is_dataclass(RunRequest) and RunRequest.__dataclass_params__.frozen


@pytest.fixture
def counted(minilm, monkeypatch):
    """MiniLM with its tokenizer's encode wrapped: the list of texts it is asked to encode."""
    calls = []
    encode = minilm.tokenizer.encode
    monkeypatch.setattr(minilm.tokenizer, "encode",
                        lambda text, *a, **k: calls.append(text) or encode(text, *a, **k))
    return minilm, calls


def test_a_dense_run_tokenises_its_text_once(counted):
    model, calls = counted
    for request in (RunRequest(), RunRequest(truncate=True, values=True, inputs=True, use_cache=False)):
        calls.clear()
        model.run(TEXT, request=request)
        assert calls == [TEXT]
    calls.clear()
    model.run(TEXT, request=RunRequest(use_cache=False))  # the same text again: tokenised again,
    model.run(TEXT, request=RunRequest(use_cache=False))  # no memo of the last text
    assert calls == [TEXT, TEXT]


def test_a_long_run_is_decided_in_the_engine_and_tokenises_once(counted):
    """Over request.dense_limit Model.run hands the prepared text to request.long (here run_long):
    one tokenisation; without a `long` such a text is refused with its sizes."""
    model, calls = counted
    cfg = model.config
    limit = dense_bytes(cfg.n_layer, cfg.n_head, 8)  # over 8 tokens: long
    given = []

    def long(prep):
        given.append(prep)
        return run_long(model, prep)
    out = model.run(TEXT, request=RunRequest(long=long, dense_limit=limit, use_cache=False))
    assert isinstance(out, LongRun) and calls == [TEXT]
    assert isinstance(given[0], Prepared) and list(out.result.tokens) == given[0].tokens
    dense = model.run(TEXT, request=RunRequest(use_cache=False))
    assert out.result.labels == dense.labels
    np.testing.assert_allclose(out.patterns.dense(), dense.attentions, atol=1e-5)
    calls.clear()
    with pytest.raises(DenseTooLarge, match="over the"):
        model.run(TEXT, request=RunRequest(dense_limit=limit))
    assert calls == [TEXT]
    calls.clear()
    short = model.run("Hi.", request=RunRequest(long=long, dense_limit=limit, use_cache=False))
    assert isinstance(short, RunResult) and short.attentions is not None and calls == ["Hi."]


def test_run_long_of_a_text_tokenises_it_once(counted):
    model, calls = counted
    run = run_long(model, TEXT)
    assert calls == [TEXT] and run.result.n_tokens == len(model.run(TEXT).input_ids)


def test_a_prepared_text_runs_as_its_text_does(minilm):
    prep = minilm.prepare(TEXT, request=RunRequest(truncate=True))
    a = minilm.run(prep, request=RunRequest(use_cache=False))
    b = minilm.run(TEXT, request=RunRequest(use_cache=False, truncate=True))
    assert a.tokens == b.tokens and a.offsets == b.offsets
    np.testing.assert_array_equal(a.attentions, b.attentions)


# ---- self_attention: one dense path, strategies chosen by the caller --------------------------------

@pytest.fixture(scope="module", params=["gqa", "gpt2", "mistral_window"])
def layer0(request, tmp_path_factory):
    """(config, layer 0's weights, an input x [T, d_model]) of a tiny model."""
    if request.param == "gqa":
        model = load_model(tiny_llama(tmp_path_factory.mktemp("gqa"), seed=5, n_head=8, n_kv_head=2))
    else:
        model = load_model(FIXTURES / request.param)
    cfg = model.config
    T = 13
    x = np.random.default_rng(1).standard_normal((T, cfg.d_model)).astype(np.float32)
    return cfg, model.weights.layers[0], x


def test_segment_attention_of_one_segment_is_the_dense_path_bit_for_bit(layer0):
    cfg, layer, x = layer0
    T = len(x)
    c = layer_consts(cfg, T)[0]
    q, k, v = project_qkv(x, layer, c)
    bias = mask_bias(causal_mask(T, c.window)) if cfg.causal else None
    packed = dataclasses.replace(layer_consts(cfg, T, masks=False)[0], attention=segment_attention,
                                 segments=((0, T, bias, None, None),))
    np.testing.assert_array_equal(segment_attention(q, k, v, packed), dense_attention(q, k, v, c))
    np.testing.assert_array_equal(self_attention(x, layer, packed), self_attention(x, layer, c))


def test_segment_attention_gives_each_text_its_own_dense_run(layer0):
    """Two texts packed as rows of one run: each text's z is the dense path's on its own rows,
    bit for bit (positions from 0 each, its own mask)."""
    cfg, layer, x = layer0
    n1, n2 = 5, len(x) - 5
    positions = np.concatenate([np.arange(n1), np.arange(n2)])
    c = layer_consts(cfg, len(x), masks=False, positions=positions)[0]
    q, k, v = project_qkv(x, layer, c)

    def bias(n):
        return mask_bias(causal_mask(n, c.window)) if cfg.causal else None
    packed = dataclasses.replace(c, attention=segment_attention,
                                 segments=((0, n1, bias(n1), None, None), (n1, n1 + n2, bias(n2), None, None)))
    z = segment_attention(q, k, v, packed)
    for a, b in ((0, n1), (n1, n1 + n2)):
        alone = dataclasses.replace(c, bias=bias(b - a))
        np.testing.assert_array_equal(z[:, a:b], dense_attention(q[:, a:b], k[:, a:b], v[:, a:b], alone))


@pytest.mark.parametrize("rows", [1, 4, 64])
def test_block_attention_gives_the_dense_paths_numbers(layer0, rows):
    """Row blocks (a long text's strategy) give the dense path's z within float32 rounding, and the
    rows' log-sum-exp they keep gives back the dense pattern."""
    cfg, layer, x = layer0
    T = len(x)
    c = layer_consts(cfg, T)[0]
    q, k, v = project_qkv(x, layer, c)
    dense = dense_attention(q, k, v, c)
    trace = LongTrace(row_block=rows, workers=1, z=True)  # (z wanted: the slot does not stop at the pattern)
    trace.begin(1, np.arange(T))
    blocks = dataclasses.replace(layer_consts(cfg, T, masks=False)[0], attention=trace.attention)
    z = blocks.attention(q, k, v, blocks, trace.slot(0, None, None))
    np.testing.assert_allclose(z, dense, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(self_attention(x, layer, blocks), self_attention(x, layer, c),
                               rtol=1e-5, atol=1e-5)
    assert trace.lse[0].shape == (cfg.n_head, T) and trace.queries[0].shape == q.shape
    np.testing.assert_allclose(z, block_attention(q, k, v, blocks, trace.slot(0, None, None), rows))


def test_self_attention_attends_only_as_its_consts_say(layer0):
    """The strategy in Consts is what self_attention calls, once, with the projected q, k, v; its z
    is what goes through W_O."""
    cfg, layer, x = layer0
    c = layer_consts(cfg, len(x))[0]
    seen = []

    def spy(q, k, v, consts, cache):
        seen.append((q.shape, k.shape, consts is mine))
        return dense_attention(q, k, v, consts, cache) * 0
    mine = dataclasses.replace(c, attention=spy)
    out = self_attention(x, layer, mine)
    assert seen == [((cfg.n_head, len(x), cfg.d_head), (cfg.n_kv_head, len(x), cfg.d_head), True)]
    zero = F.attention_output(np.zeros((cfg.n_head, len(x), cfg.d_head), np.float32), layer)[1]
    np.testing.assert_array_equal(out, zero)


def test_labels_with_and_without_a_tokenizer_come_from_the_model(tmp_path):
    """Model.labels: the tokenizer's labels, or the ids as text for a model without one; a run's
    labels of ids are the same, and a model without one reads typed ids."""
    ids = [5, 17, 3]
    text_model = load_model(tiny_text_model(tmp_path / "t"))
    assert text_model.labels(ids) == text_model.run(ids=ids, request=RunRequest(use_cache=False)).labels
    raw = load_model(FIXTURES / "llama_gqa")
    assert raw.tokenizer is None
    assert raw.labels(ids) == ["5", "17", "3"] == raw.run("5, 17, 3").labels


def test_decode_with_and_without_a_tokenizer_comes_from_the_model(tmp_path):
    """Model.decode: the tokenizer's text, or the ids as a model without one reads them typed."""
    text_model = load_model(tiny_text_model(tmp_path / "t"))
    ids = text_model.encode("a cab")[0].tolist()
    assert text_model.decode(ids) == text_model.tokenizer.raw.decode(ids, skip_special_tokens=False)
    raw = load_model(FIXTURES / "llama_gqa")
    assert raw.decode([5, 17, 3]) == "5, 17, 3" and raw.run(raw.decode([5, 17, 3])).input_ids.tolist() == [5, 17, 3]
