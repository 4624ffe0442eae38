"""Model.run_many: several texts through the weights together give each text's run alone.

A scan's texts are short: one run per text makes one product of a few rows per weight, which reads
every weight once per text. run_many packs the texts' rows into one pass (packed.forward_packed)
and runs attention per text. Every family is checked against run(text) within 1e-5, with texts
spread over several passes, and a text that cannot run gives its own error in its place."""

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.computing import model as model_module
from tiny import FIXTURES, tiny_llama
from attnviz.engine.computing.request import RunRequest

ATOL = 1e-5


@pytest.fixture(scope="module", params=["bert", "gpt2", "llama_gqa", "mistral_window", "qwen3",
                                        "gemma3", "phi3"])
def model(request, tmp_path_factory):
    name = request.param
    if name == "llama_gqa":
        return load_model(tiny_llama(tmp_path_factory.mktemp("gqa"), seed=3, n_head=8, n_kv_head=2))
    return load_model(FIXTURES / name)


def typed(ids) -> str:  # a model without tokenizer.json reads typed ids
    return ", ".join(str(i) for i in ids)


def test_every_family_packed_equals_each_text_run_alone(model, monkeypatch):
    monkeypatch.setattr(model_module, "PACK_ROWS", 16)  # several passes, and texts longer than one
    rng = np.random.default_rng(0)
    V = model.config.vocab_size
    lengths = [1, 7, 3, 20, 2, 9, 9, 5]
    texts = [typed(rng.integers(0, V, n)) for n in lengths]
    texts.insert(3, typed([V + 5]))  # outside the vocabulary: its own error, the others still run
    many = model.run_many(texts)
    assert len(many) == len(texts)
    assert isinstance(many[3], InputError) and str(V + 5) in str(many[3])
    for text, got in zip(texts, many):
        if text == typed([V + 5]):
            continue
        want = model.run(text, request=RunRequest(use_cache=False))
        assert got.attentions.shape == want.attentions.shape
        np.testing.assert_allclose(got.attentions, want.attentions, atol=ATOL)
        np.testing.assert_array_equal(got.input_ids, want.input_ids)


def test_texts_are_truncated_and_labelled_as_run_does_it(minilm):
    texts = ["The keys to the cabinet are on the table.", "word " * 80, "", "Hello there."]
    many = minilm.run_many(texts, truncate=True, max_tokens=32)
    for text, got in zip(texts, many):
        want = minilm.run(text, request=RunRequest(truncate=True, max_tokens=32, use_cache=False))
        assert (got.labels, got.tokens, got.offsets, got.truncated, got.n_tokens_full) == \
            (want.labels, want.tokens, want.offsets, want.truncated, want.n_tokens_full)
        np.testing.assert_allclose(got.attentions, want.attentions, atol=ATOL)
    assert many[1].truncated and many[1].n_tokens == 32
    with_limit = minilm.run_many(["word " * 80], max_tokens=32)  # without truncate: refused
    assert isinstance(with_limit[0], InputError) and "32" in str(with_limit[0])


def test_packed_texts_rotate_each_texts_rows_from_position_0():
    """forward_packed gives layer_consts every row's own position: two texts of two tokens are
    rotated as positions 0, 1, 0, 1 (RoPE's scores depend on the distance only, so the patterns
    alone would not show a shifted second text)."""
    from attnviz.engine.computing.families import layer_consts

    cfg = load_model(FIXTURES / "qwen3").config
    cos, sin = layer_consts(cfg, 4, masks=False, positions=np.array([0, 1, 0, 1]))[0].rope
    np.testing.assert_array_equal(cos[2:], cos[:2])
    np.testing.assert_array_equal(sin[2:], sin[:2])
    plain = layer_consts(cfg, 4, masks=False)[0].rope[0]  # no positions given: 0..3
    assert not np.array_equal(plain[2:], plain[:2])


def test_passes_hold_at_most_their_rows_and_pattern_bytes_and_keep_the_texts_order():
    from attnviz.engine.computing.packed import pack_texts

    lengths = [5, 5, 30, 1, 1, 12, 40, 10, 10, 3, 3, 3]
    per_row = 4 * 2 * 3  # n_layer 2, n_head 3, float32: a text of n tokens holds 24 n^2 bytes
    packs = pack_texts(lengths, 2, 3, max_rows=20, max_pattern_bytes=per_row * 150)
    assert [j for p in packs for j in p] == list(range(len(lengths)))  # each once, in order
    for p in packs:
        rows = sum(lengths[j] for j in p)
        held = sum(per_row * lengths[j] ** 2 for j in p)
        if len(p) > 1:  # a text over a limit runs alone; a pass of several is under both
            assert rows <= 20 and held <= per_row * 150
    # the rows bound [5, 5] | 30 and [1, 1, 12] | 40; the bytes bound 10 | 10 (20 rows, but
    # 200 squared rows of patterns)
    assert packs == [[0, 1], [2], [3, 4, 5], [6], [7], [8, 9, 10, 11]]
    # each pass as full as it may be: the next text would break a limit
    for a, b in zip(packs, packs[1:]):
        n = lengths[b[0]]
        assert (sum(lengths[j] for j in a) + n > 20
                or sum(per_row * lengths[j] ** 2 for j in a) + per_row * n * n > per_row * 150)
    assert pack_texts([], 2, 3) == []


def test_iter_many_reports_each_layer_of_every_pass_in_turn(monkeypatch):
    """progress(layers done, layers in all): 0 once the texts are packed, then once after each
    layer of each pass, before that pass's results come; with the same results as without it."""
    model = load_model(FIXTURES / "gpt2")
    L = model.config.n_layer
    texts = [typed([1, 2, 3, 4, 5, 6]), typed([7, 8, 9, 10, 11]), typed([3, 1, 4, 1, 5])]
    for rows, passes in ((1024, 1), (8, 3)):  # one pass; each text a pass of its own
        monkeypatch.setattr(model_module, "PACK_ROWS", rows)
        plain, seen = model.run_many(texts), []
        out = [(i, r, len(seen)) for i, r in model.iter_many(
            texts, progress=lambda done, total: seen.append((done, total)))]
        # a pass's results come once its layers are reported
        told = [L * (j + 1) + 1 for j in range(3)] if passes == 3 else [L + 1] * 3
        assert [(i, k) for i, _r, k in out] == list(zip(range(3), told))
        assert seen == [(k, L * passes) for k in range(L * passes + 1)]
        for (_i, got, _k), want in zip(out, plain):
            np.testing.assert_array_equal(got.attentions, want.attentions)
