"""A one-shot command's SentencePiece tokenizer read from the vocabulary's bytes
(gguf_text_vocab.TokenTable, sentencepiece_for_text, TableVocabulary) against the whole vocabulary's:
the same ids, pieces, labels, offsets and special flags for its text and texts within it, the
same labels, special ids, token ids and decoded text for any id, on Mistral's 32,000 pieces and on
a vocabulary with the odd cases (a repeated token, a normal token that holds a byte token or the
unknown token, user-defined and control tokens typed in the text)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine.reading import gguf_text_vocab as TV
from attnviz.engine.reading import gguf_vocab as V
from attnviz.engine.reading.gguf_file import metadata, open_gguf, string_bytes
from attnviz.engine.reading.gguf_model import gguf_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny import FIXTURES  # noqa: E402
from gguf_files import spm_vocab_kv, write_vocab_gguf  # noqa: E402

SPM_CASES = json.loads((FIXTURES / "spm" / "tokens.json").read_text(encoding="utf-8"))["cases"]
ODD = {1000: "▁repeated", 2000: "▁repeated", 3000: "<0x41>z", 3001: "▁ab<unk>",
       3002: "<user>", 3003: "<ctl>", 3004: "<ctl>"}  # id -> its token in the odd vocabulary
ODD_TYPES = {3002: V.USER_DEFINED, 3003: V.CONTROL, 3004: V.CONTROL}
ODD_TEXTS = ["a repeated word, repeated", "A<0x41>z and ▁ab<unk> here", "x<user>y <ctl> z<ctl>",
             "<s>One</s> two <unk>"]


def odd_kv() -> dict:
    kv = spm_vocab_kv(True, True)
    for i, token in ODD.items():
        kv["tokenizer.ggml.tokens"][i] = token
        kv["tokenizer.ggml.token_type"][i] = ODD_TYPES.get(i, V.NORMAL)
    return kv


@pytest.fixture(params=["mistral", "odd"])
def vocab_gguf(request, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    kv = spm_vocab_kv(True, True) if request.param == "mistral" else odd_kv()
    texts = [case["text"] for case in SPM_CASES[::5]] + ["One, two, three, four, five", "  spaced  out  "]
    return open_gguf(write_vocab_gguf(tmp_path / "v.gguf", kv)), texts + ODD_TEXTS


def same_encoding(a, b) -> bool:
    return (a.ids, a.tokens, a.labels, a.offsets, a.special) == (b.ids, b.tokens, b.labels, b.offsets, b.special)


def test_a_table_finds_every_token_as_a_dict_of_the_decoded_strings_does(vocab_gguf, monkeypatch):
    reader, _ = vocab_gguf
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    table = TV.TokenTable(*string_bytes(reader, "tokenizer.ggml.tokens"))
    assert len(table) == len(tokens) and [table.token(i) for i in range(len(tokens))] == tokens
    every = {}
    for i, t in enumerate(tokens):
        every.setdefault(t, []).append(i)
    asked = list(every) + ["not a token", "", "▁", "▁repeat", "\ud800"]
    assert table.lookup(asked) == {t: every[t] for t in asked if t in every}
    assert table.last_ids(asked) == {t: every[t][-1] for t in asked if t in every}
    for part in ("<0x", "<unk>", "ing", "▁"):
        assert table.containing(part) == [i for i, t in enumerate(tokens) if part in t]
    monkeypatch.setattr(TV, "byte_hashes", lambda data, begins, stops: np.zeros(len(begins), np.uint64))
    collided = TV.TokenTable(*string_bytes(reader, "tokenizer.ggml.tokens"))  # every hash the same
    sample = asked[::997] + asked[-5:]
    assert collided.lookup(sample) == {t: every[t] for t in sample if t in every}


def test_byte_hashes_are_the_word_wise_fnv_of_each_string():
    def reference(b: bytes) -> int:
        prime, wrap = 0x100000001B3, 1 << 64
        h = ((0xCBF29CE484222325 ^ len(b)) * prime) % wrap
        for at in range(0, len(b), 8):
            h = ((h ^ int.from_bytes(b[at:at + 8], "little")) * prime) % wrap
        return h

    strings = [b"", b"a", "\u2581two".encode(), b"a longer string than the others, of 41 bytes",
               b"ab", b"12345678", b"123456789", b"\x00", b"\x00\x00", "東京".encode()]
    lengths = [len(s) for s in strings]
    stops = np.cumsum(lengths)
    got = TV.byte_hashes(np.frombuffer(b"".join(strings), np.uint8), stops - lengths, stops)
    assert got.tolist() == [reference(s) for s in strings]
    assert len(set(got.tolist())) == len(strings)


def test_a_tokenizer_read_for_a_text_is_the_whole_ones_for_that_text(vocab_gguf, monkeypatch):
    reader, texts = vocab_gguf
    whole, _ = gguf_tokenizer(reader)
    n = len(metadata(reader, "tokenizer.ggml.tokens"))
    ids = list(range(n)) + [n, n + 7]
    want_labels, want_special = whole.labels_for_ids(ids), whole.special_ids()
    for text in texts:
        with monkeypatch.context() as m:  # neither the whole vocabulary nor its merge order is made
            for name in ("sentencepiece_bpe", "cached_merges", "merge_ids"):
                m.setattr(V, name, lambda *a, **k: pytest.fail("the whole vocabulary was built"))
            one, _ = gguf_tokenizer(reader, text=text)
            within = text[len(text) // 3:]
            for t, special in ((text, True), (text, False), (within, True), (within, False)):
                assert same_encoding(one.encode(t, add_special_tokens=special),
                                     whole.encode(t, add_special_tokens=special)), repr(t)
            text_ids = whole.encode(text).ids
            assert one.decode(text_ids, True) == whole.decode(text_ids, True)
            for token in whole.encode(text).tokens + ["▁repeated", "<ctl>", "<user>", "nope", ""]:
                assert one.token_to_id(token) == whole.token_to_id(token), token
            assert one.labels_for_ids(text_ids + [n]) == whole.labels_for_ids(text_ids + [n])
            assert not one.for_every_text
    assert one.labels_for_ids(ids) == want_labels  # every id, special or not, repeated or not
    assert one.special_ids() == want_special
    assert not one.for_every_text
    others = [5, 1000, 2000, 3003, 3004, n - 1, 1, 2, 0, n, 300, 301]  # (bytes 0xFD 0xFE: no text)
    for skip in (False, True):
        assert one.decode(others, skip) == whole.decode(others, skip)
        assert one.decode(list(range(n)), skip) == whole.decode(list(range(n)), skip)
    assert not one.for_every_text
    assert one.raw.to_str() == whole.raw.to_str() and one.for_every_text


def test_a_text_too_long_to_look_up_gets_the_whole_vocabulary(vocab_gguf, monkeypatch):
    reader, _ = vocab_gguf
    monkeypatch.setattr(TV, "MAX_TEXT_PIECES", 100)
    assert gguf_tokenizer(reader, text="a longer text than that " * 3)[0].for_every_text
    assert not gguf_tokenizer(reader, text="short")[0].for_every_text


def test_a_vocabulary_the_table_cannot_read_gets_the_whole_build_and_its_message(tmp_path):
    """Arrays the whole build refuses are refused with its message, text or not."""
    kv = spm_vocab_kv(True, True)
    kv["tokenizer.ggml.scores"] = kv["tokenizer.ggml.scores"][:-1]
    reader = open_gguf(write_vocab_gguf(tmp_path / "v.gguf", kv))
    for text in (None, "One, two"):
        with pytest.raises(Exception, match="gives tokenizer.ggml.scores 31,999 entries, but it must give one per token"):
            gguf_tokenizer(reader, text=text)


def test_same_finds_every_id_of_a_repeated_token_among_colliding_hashes(monkeypatch):
    tokens = ["a", "b", "a", "c", "a", "b", "d"]
    encoded = [t.encode() for t in tokens]
    stops = np.cumsum([len(b) for b in encoded])
    begins = stops - [len(b) for b in encoded]
    monkeypatch.setattr(TV, "byte_hashes",  # a, b and c collide, d and e
                        lambda data, b, s: np.where(data[b] < ord("d"), 1, 2).astype(np.uint64))
    table = TV.TokenTable(b"".join(encoded), begins, stops)
    want = {i: [j for j, u in enumerate(tokens) if u == t] for i, t in enumerate(tokens)}
    assert {i: table.same(i) for i in range(len(tokens))} == want
    assert table.lookup(["a", "b", "c", "d", "e"]) == {"a": [0, 2, 4], "b": [1, 5], "c": [3], "d": [6]}


def test_a_token_that_is_not_utf8_is_named_when_it_is_read(tmp_path, monkeypatch):
    """As the metadata's own strings: the text's tokenizer builds, and a label of that id names
    the token in one line."""
    from attnviz.engine.errors import ModelLoadError

    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    kv = spm_vocab_kv(True, True)
    kv["tokenizer.ggml.tokens"][5000] = "\u2581zz\u00e9zz"
    path = write_vocab_gguf(tmp_path / "v.gguf", kv)
    bad = bytearray(path.read_bytes())
    at = bytes(bad).index("\u2581zz\u00e9zz".encode()) + len("\u2581zz".encode())
    bad[at] = 0xFF  # (é's first byte: not UTF-8 now)
    path.write_bytes(bytes(bad))
    one, _ = gguf_tokenizer(open_gguf(path), text="One, two")
    assert one.encode("One, two").ids
    with pytest.raises(ModelLoadError, match="tokenizer.ggml.tokens cannot be read: token 5000"):
        one.labels_for_ids([5000])


BYTE_LEVEL_TEXTS = ["One, two, three, four, five", "<|im_start|>user\nHi 123456 there<|im_end|>",
                    "  spaced\tout \n\n", "東京 👨‍👩‍👧‍👦 naïve café", "", "x<|endoftext|>y", "1234567890"]


def test_a_byte_level_tokenizer_read_for_a_text_is_the_whole_ones_for_that_text(monkeypatch):
    """SmolLM2's byte-level BPE (its pre-tokenizer's digit and GPT-2 splits, control tokens typed
    in the text) as test_a_tokenizer_read_for_a_text_is_the_whole_ones_for_that_text checks it."""
    from attnviz.engine.reading.registry import resolve

    reader = open_gguf(resolve("SmolLM2-135M-Instruct")[1])
    whole, _ = gguf_tokenizer(reader)
    n = len(metadata(reader, "tokenizer.ggml.tokens"))
    for text in BYTE_LEVEL_TEXTS:
        with monkeypatch.context() as m:
            m.setattr(V, "byte_level_bpe", lambda *a, **k: pytest.fail("the whole vocabulary was built"))
            one, _ = gguf_tokenizer(reader, text=text)
            assert one.kind == whole.kind
            within = text[len(text) // 3:]
            for t, special in ((text, True), (text, False), (within, True)):
                assert same_encoding(one.encode(t, add_special_tokens=special),
                                     whole.encode(t, add_special_tokens=special)), repr(t)
            text_ids = whole.encode(text).ids
            assert one.labels_for_ids(text_ids) == whole.labels_for_ids(text_ids)
            for skip in (False, True):
                assert one.decode(text_ids, skip) == whole.decode(text_ids, skip)
            for token in whole.encode(text).tokens + ["<|im_start|>", "Ġthe", "nope"]:
                assert one.token_to_id(token) == whole.token_to_id(token), token
            assert not one.for_every_text
    ids = list(range(n)) + [n]
    assert one.labels_for_ids(ids) == whole.labels_for_ids(ids)
    assert one.decode(ids[::7], True) == whole.decode(ids[::7], True)
    assert one.special_ids() == whole.special_ids()
    assert one.encode("Another text").ids == whole.encode("Another text").ids
    assert not one.for_every_text  # (another text: its own tokenizer; test_tokenizer_for_other_texts.py)


def test_a_text_whose_runs_outnumber_half_the_vocabulary_gets_the_whole_one(vocab_gguf):
    """Looking up more runs than half the vocabulary's tokens costs more than building it whole."""
    reader, _ = vocab_gguf
    table = TV.TokenTable(*string_bytes(reader, "tokenizer.ggml.tokens"))
    n = max(k for k in range(1, 2000) if TV.worth_looking_up(k, table))
    assert n * min(table.longest, n + 1) <= len(table) // 2 < (n + 1) * min(table.longest, n + 2)
    assert not gguf_tokenizer(reader, text="x" * n)[0].for_every_text
    assert gguf_tokenizer(reader, text="x" * (n + 1))[0].for_every_text
