"""A GGUF tokenizer loaded for one text (gguf_model.gguf_tokenizer's `text`) meets other texts (a
keystroke's): each gets a tokenizer built for it the same way, with the tokens, labels, offsets and
special flags the whole vocabulary gives, without building the whole vocabulary or waiting for
another thread's build of it; a text too long to look up, or one past TEXTS_BEFORE_WHOLE, gets the
whole one. On Mistral's SentencePiece vocabulary and SmolLM2's byte-level one."""

import json
import sys
import threading
from pathlib import Path

import pytest

from attnviz.engine.reading import gguf_text_vocab as TV
from attnviz.engine.reading import gguf_vocab as V
from attnviz.engine.reading import tokenizer as T
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.gguf_model import gguf_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny import FIXTURES  # noqa: E402
from gguf_files import spm_vocab_kv, write_vocab_gguf  # noqa: E402

FIRST = "The keys to the cabinet are on the"
# keystrokes after it (a letter of the text, new words), and texts unlike it: digits, punctuation,
# whitespace, accents, scripts and emoji, control tokens typed in
TYPED = [FIRST + "s", FIRST + " table.", FIRST[:-3], "Zebras quietly graze, don't they?",
         "Pi is 3.14159; 2+2=4, 1,000,000 and 0x1F!", "  spaced\tout \n\n  ", "naïve café résumé",
         "東京 👨‍👩‍👧‍👦 Привет мир", "<s>One</s> two <unk>", "<|im_start|>user\nHi 123456<|im_end|>",
         "x<|endoftext|>y", "\u00a0a\u2003b\u3000", "", " ", "Supercalifragilisticexpialidocious"]
SPM_TEXTS = [case["text"] for case in json.loads(
    (FIXTURES / "spm" / "tokens.json").read_text(encoding="utf-8"))["cases"]][::4]


@pytest.fixture(params=["sentencepiece", "byte-level"])
def reader(request, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    if request.param == "sentencepiece":
        return open_gguf(write_vocab_gguf(tmp_path / "v.gguf", spm_vocab_kv(True, True)))
    from attnviz.engine.reading.registry import resolve

    return open_gguf(resolve("SmolLM2-135M-Instruct")[1])


def same_encoding(a, b) -> bool:
    return (a.ids, a.tokens, a.labels, a.offsets, a.special) == (b.ids, b.tokens, b.labels, b.offsets, b.special)


def never_whole(m):
    for name in ("sentencepiece_bpe", "byte_level_bpe"):
        m.setattr(V, name, lambda *a, **k: pytest.fail("the whole vocabulary was built"))


def test_other_texts_get_the_whole_vocabularys_tokens_without_it(reader, monkeypatch):
    whole, _ = gguf_tokenizer(reader)
    texts = TYPED + SPM_TEXTS
    monkeypatch.setattr(T, "TEXTS_BEFORE_WHOLE", 2 * len(texts))
    with monkeypatch.context() as m:
        never_whole(m)
        one, _ = gguf_tokenizer(reader, text=FIRST)
        for text in texts:
            for special in (True, False):
                assert same_encoding(one.encode(text, add_special_tokens=special),
                                     whole.encode(text, add_special_tokens=special)), repr(text)
            within = text[len(text) // 3:]  # (the newest tokenizer's, or one built for it)
            assert same_encoding(one.encode(within), whole.encode(within)), repr(within)
            ids = whole.encode(text).ids
            assert one.labels_for_ids(ids) == whole.labels_for_ids(ids)
            assert one.decode(ids) == whole.decode(ids)
        assert not one.for_every_text
    assert one.raw.to_str() == whole.raw.to_str() and one.for_every_text


def test_past_so_many_texts_or_a_long_one_the_whole_vocabulary_is_built(reader, monkeypatch):
    whole, _ = gguf_tokenizer(reader)
    monkeypatch.setattr(T, "TEXTS_BEFORE_WHOLE", 3)
    one, _ = gguf_tokenizer(reader, text=FIRST)
    with monkeypatch.context() as m:
        never_whole(m)
        for text in (TYPED[0], TYPED[1], TYPED[2], TYPED[3], TYPED[3][3:]):  # three built, two covered
            assert same_encoding(one.encode(text), whole.encode(text))
    assert not one.for_every_text
    assert same_encoding(one.encode(TYPED[4]), whole.encode(TYPED[4])) and one.for_every_text
    one, _ = gguf_tokenizer(reader, text=FIRST)
    monkeypatch.setattr(TV, "MAX_TEXT_PIECES", 100)  # (FIRST's tokenizer is built: longer now)
    long = "A pasted paragraph, longer than the runs a look-up takes. " * 3
    assert same_encoding(one.encode(long), whole.encode(long)) and one.for_every_text


def test_a_text_encodes_while_another_thread_builds_the_whole_vocabulary(reader, monkeypatch):
    """The window's case: the worker builds the whole vocabulary (TextTokenizer.raw, holding its
    lock) when a keystroke's text is encoded; the build is held until the texts are encoded."""
    whole, _ = gguf_tokenizer(reader)
    one, _ = gguf_tokenizer(reader, text=FIRST)
    entered, gate = threading.Event(), threading.Event()
    for name in ("sentencepiece_bpe", "byte_level_bpe"):
        real = getattr(V, name)

        def held(*a, real=real, **k):
            if threading.current_thread() is builder:  # (where the encode builds it: not held)
                entered.set()
                assert gate.wait(30)
            return real(*a, **k)
        monkeypatch.setattr(V, name, held)
    builder = threading.Thread(target=lambda: one.raw)
    builder.start()
    try:
        assert entered.wait(60)  # the build has begun, under the tokenizer's lock
        for text in TYPED:
            assert same_encoding(one.encode(text), whole.encode(text)), repr(text)
        assert not one.for_every_text and builder.is_alive()  # (it is still held)
    finally:
        gate.set()
        builder.join(60)
    assert one.for_every_text and same_encoding(one.encode(TYPED[3]), whole.encode(TYPED[3]))
