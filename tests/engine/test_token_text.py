"""Tokens as a person reads them: byte-level BPE decoded, spaces and whitespace visible, split
characters shown as their bytes and completed, on every tokenizer kind the project ships."""

import unicodedata

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.reading import textbook
from attnviz.engine.analysing.find import resolve_token
from attnviz.engine.reading.token_text import (
    BYTE_LEVEL, SENTENCEPIECE, TEXT, byte_level_alphabet, piece_bytes, plain, readable_tokens,
)
from attnviz.engine.reading.tokenizer import piece_kind

# one text with what broke: a space token, digits, a capital after a space, runs of whitespace,
# a CJK character, Arabic, an emoji
TEXT_ALL = "around 1450, The  cat\n\n\tsat 杰 مرحبا 🙂 end."


def byte_piece(data: bytes) -> str:
    """A byte-level BPE piece spelling `data` (GPT-2's alphabet)."""
    inverse = {b: c for c, b in byte_level_alphabet().items()}
    return "".join(inverse[b] for b in data)


def test_byte_level_alphabet_is_gpt2s():
    table = byte_level_alphabet()
    assert len(table) == 256 and sorted(table.values()) == list(range(256))
    assert table["Ġ"] == 0x20 and table["Ċ"] == 0x0A and table["ĉ"] == 0x09 and table["a"] == ord("a")
    assert piece_bytes("Ġthe", BYTE_LEVEL) == b" the"
    assert piece_bytes("<0x0A>", SENTENCEPIECE) == b"\n"
    assert piece_bytes("\u2581the", SENTENCEPIECE) == b" the"


@pytest.mark.parametrize("kind, pieces, labels", [
    # a leading space is a dot; a token that is only whitespace is its marks
    (BYTE_LEVEL, ["Ġthe", "Ġ", "ĊĊ", "ĉ", "ĠĠĠ", "Ċ", "end", "."], ["·the", "␣", "↵↵", "⇥", "␣␣␣", "↵", "end", "."]),
    (SENTENCEPIECE, ["\u2581the", "\u2581", "<0x0A>", "cat"], ["·the", "␣", "↵", "cat"]),
    (TEXT, ["the", "##lip", "[UNK]", " "], ["the", "##lip", "[UNK]", "␣"]),
])
def test_spaces_and_whitespace_tokens_show_as_marks(kind, pieces, labels):
    assert readable_tokens(pieces, kind) == labels


def test_a_character_split_over_tokens_shows_its_bytes_then_the_character():
    ji = "杰".encode()  # E6 9D B0
    smile = "🙂".encode()  # F0 9F 99 82
    pieces = [byte_piece(b" " + ji[:2]), byte_piece(ji[2:]), byte_piece(smile[:1]), byte_piece(smile[1:3]),
              byte_piece(smile[3:] + b"ok")]
    assert readable_tokens(pieces, BYTE_LEVEL) == ["·<E6 9D>", "<B0>杰", "<F0>", "<9F 99>", "<82>🙂ok"]
    # SentencePiece byte fallback: one byte per piece
    sp = [f"<0x{b:02X}>" for b in ji]
    assert readable_tokens(sp, SENTENCEPIECE) == ["<E6>", "<9D>", "<B0>杰"]
    # bytes that are not UTF-8, and a character cut short, are shown as bytes, never as "�"
    assert readable_tokens([byte_piece(b"\xff"), byte_piece(ji[:2]), "a"], BYTE_LEVEL) == ["<FF>", "<E6 9D>", "a"]
    # a special token between the halves breaks the character
    assert readable_tokens([byte_piece(ji[:2]), "<|endoftext|>", byte_piece(ji[2:])], BYTE_LEVEL,
                           [False, True, False]) == ["<E6 9D>", "<|endoftext|>", "<B0>"]


def test_labels_never_hold_replacement_characters_or_raw_byte_letters(smollm2, toy):
    for model in (smollm2, toy):
        r = model.run(TEXT_ALL)
        body = [lab for lab, (a, b) in zip(r.labels, r.offsets) if b > a]
        assert not any("\ufffd" in lab for lab in body), r.labels
        assert not any(c in lab for lab in body for c in "ĠĊĉ"), r.labels
        # every character of the text shows on the token that completes it
        shown = "".join(r.labels)
        for ch in "杰مرحبا🙂":
            assert ch in shown, (ch, r.labels)
        # the raw pieces stay in the result, for hover
        assert any("Ġ" in t for t in r.tokens)


def test_smollm2_tokens_read_as_the_text(smollm2):
    """The bundled decoder (a byte-level BPE built from GGUF metadata)."""
    assert piece_kind(smollm2.tokenizer.raw) == BYTE_LEVEL
    r = smollm2.run(TEXT_ALL)
    assert r.labels[:8] == ["around", "␣", "1", "4", "5", "0", ",", "·The"]
    assert "↵↵" in r.labels and "⇥" in r.labels and "·<E6>" in r.labels and "<B0>杰" in r.labels
    assert "·🙂" in r.labels and "·end" in r.labels


def test_toy_gpt2_tokens_read_as_the_text(toy):
    """The toy model's tokenizer.json (GPT-2 byte-level BPE): a lone space token is ␣, not Ġ."""
    assert piece_kind(toy.tokenizer.raw) == BYTE_LEVEL
    r = toy.run("The cat. The dog")
    assert "Ġ" not in "".join(r.labels)
    assert r.labels[0] == "<|endoftext|>"  # a special token keeps its spelling
    assert all(not lab.startswith("Ġ") for lab in r.labels)


def test_wordpiece_and_word_level_read_as_they_are(minilm):
    """MiniLM's WordPiece ("##" continues a word) and the textbook's word-level tokens."""
    assert piece_kind(minilm.tokenizer.raw) == TEXT
    r = minilm.run("The keys to the cabinet are on the table.")
    assert r.labels == r.tokens
    book = load_model(textbook.TEXTBOOK_NAME)
    assert piece_kind(book.tokenizer.raw) == TEXT
    r = book.run("the cat sat on the mat")
    assert r.labels == r.tokens == ["<|bos|>", "the", "cat", "sat", "on", "the", "mat"]


def test_ids_run_without_text_get_the_same_labels(smollm2):
    r = smollm2.run(TEXT_ALL)
    by_ids = smollm2.run(ids=[int(i) for i in r.input_ids])
    assert by_ids.labels == r.labels
    assert np.array_equal(by_ids.input_ids, r.input_ids)


def test_find_takes_a_token_with_or_without_its_space_mark(smollm2):
    r = smollm2.run("The keys to the cabinet are on the table.")
    assert r.labels[1] == "·keys"
    assert resolve_token(r, "keys") == resolve_token(r, "·keys") == resolve_token(r, "Ġkeys") == 1
    assert plain("·keys") == "keys" and plain("␣") == "␣"


def test_each_encode_gives_the_callers_own_lists(minilm):
    """encode keeps nothing between calls (a run tokenises its text once, Model.prepare): the same
    text gives equal tokens in lists of the caller's own, and a caller's change stays its own."""
    tok = minilm.tokenizer
    first = tok.encode("the cat sat on the mat")
    again = tok.encode("the cat sat on the mat")
    assert again == first and again.ids is not first.ids
    again.ids.append(0)
    assert tok.encode("the cat sat on the mat") == first
    other = tok.encode("the cat sat on the mat", add_special_tokens=False)  # another question
    assert other.ids == first.ids[1:-1]
    assert tok.encode("a dog").ids != first.ids



def _labels_read_afresh(pieces, kind, special):
    """The labels as one decoder reads the whole sequence, nothing remembered between calls."""
    from attnviz.engine.reading.token_text import _Decoder

    dec, out = _Decoder(), []
    for piece, sp in zip(pieces, special):
        if sp:
            dec.pending = b""
            out.append(piece)
        else:
            out.append(dec.label(piece_bytes(piece, kind)) or piece)
    return out


@pytest.mark.parametrize("kind", [BYTE_LEVEL, SENTENCEPIECE])
def test_labels_remembered_per_piece_are_the_labels_read_afresh(kind):
    # a keystroke relabels its whole text; a piece read with nothing carried over is remembered:
    # random bytes (split characters, broken UTF-8, whitespace) cut into random pieces, each
    # sequence labelled twice (the second time from what was remembered)
    rng = np.random.default_rng(7)
    alphabet = list(" \n\tab.") + ["杰", "🙂", "é", "م"]
    for _ in range(300):
        data = "".join(rng.choice(alphabet, rng.integers(1, 12))).encode()
        if rng.random() < 0.2:
            data += bytes([int(rng.integers(0x80, 0x100))])  # a byte no character starts with
        cuts = sorted(set(rng.integers(1, len(data), rng.integers(0, 5)).tolist())) if len(data) > 1 else []
        parts = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        if kind == BYTE_LEVEL:
            pieces = [byte_piece(p) for p in parts]
        else:  # byte fallback pieces for non-ASCII, text pieces for the rest
            pieces = [p.decode("ascii").replace(" ", "\u2581") if p.isascii()
                      else "".join(f"<0x{b:02X}>" for b in p[:1]) for p in parts]
        special = [bool(rng.random() < 0.1) for _ in pieces]
        want = _labels_read_afresh(pieces, kind, special)
        assert readable_tokens(pieces, kind, special) == want
        assert readable_tokens(pieces, kind, special) == want


def test_a_cut_text_names_what_it_shows(minilm, toy):
    """A cut MiniLM text shows [CLS], its first body tokens and its closing [SEP]; a cut decoder text
    its first tokens."""
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.reading.token_text import cut_shown
    r = minilm.run("The quick brown fox. " * 120, request=RunRequest(truncate=True))
    assert cut_shown(r.labels, r.offsets) == "its first 511 tokens and its closing [SEP]"
    assert cut_shown(r.labels, r.offsets, short=True) == "its first 511 and [SEP]"
    r = toy.run("a b c " * 100, request=RunRequest(truncate=True))
    assert r.truncated and cut_shown(r.labels, r.offsets) == f"its first {len(r.labels)} tokens"


def test_format_characters_show_as_bytes_never_raw():
    """A bidi override or a zero-width space inside a token shows as its bytes, so a label never
    reorders the line it stands in; the joiners stay beside what they join."""
    assert readable_tokens(["ab\u202ec", "x\u200by", "\u2067z", "a\u200db"], TEXT) == [
        "ab<E2 80 AE>c", "x<E2 80 8B>y", "<E2 81 A7>z", "a\u200db"]
    rlo = "\u202e".encode()
    pieces = [byte_piece(b" " + rlo[:2]), byte_piece(rlo[2:]), byte_piece(rlo + b"abc")]
    labels = readable_tokens(pieces, BYTE_LEVEL)
    assert labels == ["·<E2 80>", "<AE><E2 80 AE>", "<E2 80 AE>abc"]
    assert not any(unicodedata.category(c) == "Cf" for lab in labels for c in lab)


def test_a_token_that_draws_nothing_shows_something(smollm2):
    """A variation selector, a joiner or a format character alone shows as its bytes; a combining
    mark alone on a dotted circle."""
    assert readable_tokens(["\ufe0f", "\u200d", "\ufeff", "\u0301", "\u0301\u0302"], TEXT) == [
        "<EF B8 8F>", "<E2 80 8D>", "<EF BB BF>", "\u25cc\u0301", "\u25cc\u0301\u0302"]
    assert readable_tokens([byte_piece("\ufe0f".encode())], BYTE_LEVEL) == ["<EF B8 8F>"]
    r = smollm2.run("I \u2764\ufe0f \u6771\u4eac")
    assert "<EF B8 8F>" in r.labels, r.labels
    assert all(any(unicodedata.category(c) not in ("Mn", "Me", "Cf") for c in lab) for lab in r.labels), r.labels


def test_right_to_left_labels_are_set_apart_and_others_left_as_they_are():
    from attnviz.engine.reading.token_text import isolated
    assert isolated("\u05e9") == "\u2068\u05e9\u2069" and isolated("##\u05dc") == "\u2068##\u05dc\u2069"
    assert isolated("\u0661\u0662") == "\u2068\u0661\u0662\u2069"  # Arabic digits turn a line around too
    assert [isolated(s) for s in ("·the", "12", "<E2 80 AE>", "杰", "🙂")] == ["·the", "12", "<E2 80 AE>", "杰", "🙂"]


def test_typed_ids_cut_to_fit_have_no_closing_token():
    """Typed ids span no text: the last one kept is read as a body token, not as a closing [SEP]."""
    from attnviz.engine.reading.token_text import cut_shown

    assert cut_shown(["a", "b", "to"], [(0, 0)] * 3) == "its first 3 tokens"
    assert cut_shown(["[CLS]", "a", "[SEP]"], [(0, 0), (0, 1), (1, 1)]) == "its first 2 tokens and its closing [SEP]"
