"""The bundled real decoder, SmolLM2-135M-Instruct (Q4_1 GGUF): parity with transformers' GGUF
loader, tokens on 383 strings, the KV cache against the calculator, and induction heads found by
the probe (no head numbers written here)."""

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from attnviz.engine.analysing import heads, probes
from attnviz.engine.calc import calc_inputs_from_config, calculate
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

REF = FIXTURES / "smollm2"


def test_config_matches_transformers(smollm2):
    ref = np.load(REF / "expected.npz")
    c = smollm2.config
    got = {"num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head,
           "num_key_value_heads": c.n_kv_head, "hidden_size": c.d_model, "head_dim": c.d_head,
           "vocab_size": c.vocab_size}
    for key, value in got.items():
        assert value == int(ref[f"config_{key}"]), key
    assert c.rope_theta == float(ref["config_rope_theta"])
    assert c.norm_eps == pytest.approx(float(ref["config_rms_norm_eps"]))
    assert smollm2.kv_group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_patterns_match_transformers(smollm2):
    ref = np.load(REF / "expected.npz")
    layers = ref["layers"].tolist()
    n = 0
    while f"text_{n}" in ref:
        result = smollm2.run(str(ref[f"text_{n}"]))
        assert result.input_ids.tolist() == ref[f"ids_{n}"].tolist()
        np.testing.assert_allclose(result.attentions[layers], ref[f"attn_{n}"], atol=1e-4, rtol=0)
        n += 1
    assert n >= 4 and 29 in layers


def _smollm2_reference_tokenizer(vocab, merges, specials):
    """SmolLM2's own pre-tokenizer (tokenizer.json: Digits(individual_digits) then ByteLevel),
    written independently of the engine's Split(\\p{N}) form of llama.cpp's 'smollm' regexes."""
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    return tok


def test_tokens_match_transformers_gguf_tokenizer(smollm2):
    """383 strings: digits, unicode, whitespace runs, emoji, code, the empty string.

    transformers' GGUF tokenizer ignores tokenizer.ggml.pre = 'smollm' (it keeps GPT-2's regex),
    so where a whitespace run or a non-ASCII number meets a digit it differs from SmolLM2 and from
    llama.cpp (7 strings). There attnviz follows SmolLM2's own tokenizer, checked against an
    independent construction of it; everywhere else it must equal transformers exactly."""
    data = json.loads((REF / "tokens.json").read_text(encoding="utf-8"))
    cases = data["cases"]
    assert len(cases) >= 200 and any(c["text"] == "" for c in cases)
    engine = smollm2.tokenizer
    spec = json.loads(engine.raw.to_str())
    reference = _smollm2_reference_tokenizer(
        spec["model"]["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1))
                                 for m in spec["model"]["merges"]],
        [t["content"] for t in spec["added_tokens"] if t["special"]])
    differ = []
    for case in cases:
        got = engine.encode(case["text"]).ids
        assert got == reference.encode(case["text"]).ids, case["text"]
        if got != case["ids"]:
            differ.append(case["text"])
        assert engine.raw.decode(got, skip_special_tokens=False) == case["text"]
    # the differences are exactly the pre-tokenizer's digit rule, and nothing else
    assert len(differ) == 7, differ
    assert "  12" in differ and "\u00bd \u00be" in differ


def test_digit_splits_follow_smollm2(smollm2):
    t = smollm2.tokenizer
    assert t.encode("  12").ids == [256, 33, 34]  # 'ĠĠ', '1', '2' (transformers: 216 216 33 34)
    assert t.encode("12345").ids == [33, 34, 35, 36, 37]
    assert t.encode("<|im_start|>user").tokens[0] == "<|im_start|>"
    assert t.encode("Hello").ids[0] != 1  # add_bos_token is false: no BOS


def test_kv_cache_bytes_equal_the_calculator(smollm2):
    smollm2.clear_cache()
    text = "When Mary and John went to the store, John gave a drink to"
    first = smollm2.run(text)
    second = smollm2.run(text + " Mary")
    T = second.n_tokens
    assert second.cache_reused == first.n_tokens and second.cache_computed == T - first.n_tokens
    calc = calculate(calc_inputs_from_config(smollm2.config, seq_len=T, kv_dtype="fp32"))
    c = smollm2.config
    assert second.cache_bytes == calc.kv_bytes_sequence == T * c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    fresh = smollm2.run(text + " Mary", request=RunRequest(use_cache=False))
    np.testing.assert_allclose(second.attentions, fresh.attentions, atol=1e-5, rtol=0)


def test_probe_finds_induction_heads(smollm2):
    """The repeated random sequence labels some heads 'induction'; which ones is the model's business."""
    result, _ = probes.run_probe(smollm2)
    scores = heads.score_heads(result.attentions, result.input_ids)
    induction = [(l, h) for l, row in enumerate(scores.labels) for h, role in enumerate(row)
                 if role == "induction"]
    assert len(induction) >= 2, "no induction head found in SmolLM2"
    # an induction head's weight on the token after the earlier copy beats a uniform spread by far
    l, h = induction[0]
    assert scores.scores["induction"][l, h] > 5 / result.n_tokens


def test_typing_a_word_computes_one_row_a_key(smollm2):
    """The byte-level BPE re-splits a growing word (" cabin" then " cab" + "ine"): the KV cache's
    earlier runs hold the prefix, so each key's run computes one row, and the patterns are a fresh
    run's."""
    smollm2.clear_cache()
    text = "The keys to the cabinet"
    rows = [smollm2.run(text[:i]).cache_computed for i in range(1, len(text) + 1)]
    assert max(rows[1:]) == 1
    got = smollm2.run(text[:-1] + "e")
    want = smollm2.run(text[:-1] + "e", request=RunRequest(use_cache=False))
    assert got.cache_computed <= 1
    np.testing.assert_allclose(got.attentions, want.attentions, atol=1e-5)
