"""Tokens as a person reads them: the one place a tokenizer's pieces become the labels every view
shows (token strip, axes, hover, Find, exports, command-line tables).

- Byte-level BPE pieces (GPT-2, SmolLM2: "Ġthe", "Ċ") and SentencePiece pieces ("▁the", "<0x0A>")
  are decoded to the bytes they stand for, then to text.
- A leading (or trailing) space shows as a middle dot: " the" -> "·the".
- A token that is only whitespace shows each character as a mark: " " -> "␣", "\\n" -> "↵",
  "\\t" -> "⇥", "\\r" -> "␍"; a newline or tab inside a token shows as its mark too.
- A token holding part of a multi-byte character shows the bytes it holds ("<E6 9D>"); the token
  that completes the character shows its bytes and the character: "<B0>杰". Bytes that are not
  UTF-8 at all show the same way.
- WordPiece and word-level pieces ("the", "##lip", "[UNK]") read as they are; special tokens
  ("[CLS]", "<|endoftext|>") keep their own spelling.
- A format character (a bidi control such as U+202E, a zero-width space, U+FEFF) shows as its
  bytes, so a label never reorders the line it stands in; the joiners U+200C and U+200D stay.
- A token that would draw nothing shows something: a combining mark alone on a dotted circle
  ("◌́"), a variation selector or a joiner alone as its bytes ("<EF B8 8F>").

The raw piece is not lost: a RunResult keeps it in `tokens` (hover shows both).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Sequence

BYTE_LEVEL = "byte_level"  # GPT-2's bytes_to_unicode alphabet ("Ġ" = a space byte)
SENTENCEPIECE = "sentencepiece"  # "▁" = a space, "<0xNN>" = one byte (byte fallback)
TEXT = "text"  # the piece is already text (WordPiece, word level, or decoded elsewhere)
KINDS = (BYTE_LEVEL, SENTENCEPIECE, TEXT)

SPACE_MARK = "\u00b7"  # · a leading or trailing space of a word
WHITESPACE_MARKS = {" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}  # ␣ ↵ ⇥ ␍
JOINERS = "\u200c\u200d"  # zero-width non-joiner and joiner
DOTTED_CIRCLE = "\u25cc"  # ◌ the base a combining mark alone is shown on
INVISIBLE = ("Mn", "Me", "Cf")  # categories that draw nothing alone (marks, format characters)
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted: {printable stand-in: byte}. Printable bytes stand for
    themselves; the other 68 (space, control bytes, ...) are shifted to U+0100 and up ("Ġ" = 0x20)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table, shift = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + shift)] = b
            shift += 1
    return table


def piece_bytes(piece: str, kind: str) -> bytes:
    """The bytes a piece stands for: [piece] -> bytes."""
    if kind == BYTE_LEVEL:
        table = byte_level_alphabet()
        if all(c in table for c in piece):
            return bytes(table[c] for c in piece)
        return piece.encode("utf-8")  # an added token written as plain text
    if kind == SENTENCEPIECE:
        m = _SP_BYTE.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")
    return piece.encode("utf-8")


def _utf8_length(lead: int) -> int:
    """Bytes in the UTF-8 character that starts with `lead`; 0 for a byte no character starts with."""
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def _is_continuation(b: int) -> bool:
    return 0x80 <= b <= 0xBF


def _hex(data: bytes) -> str:
    return "<" + " ".join(f"{b:02X}" for b in data) + ">"


def _mark_text(text: str, alone: bool = True) -> str:
    """Visible whitespace: a whitespace-only token (`alone`: the text is the whole token) as marks,
    leading and trailing spaces as dots, a newline, tab or carriage return anywhere as its mark,
    other control characters as bytes."""
    if alone and text and text.isspace():
        return "".join(WHITESPACE_MARKS.get(c, WHITESPACE_MARKS[" "]) for c in text)
    body = text.lstrip(" ")
    lead = len(text) - len(body)
    core = body.rstrip(" ")
    trail = len(body) - len(core)
    marked = SPACE_MARK * lead + "".join(map(_shown_char, core)) + SPACE_MARK * trail
    return _drawn(marked) if alone else marked


def _shown_char(c: str) -> str:
    """One character as a label shows it: a newline, tab or return as its mark, a control or format
    character (a bidi override, a zero-width space) as its bytes, so no label reorders or hides the
    text around it; the joiners stay, since they shape the characters beside them."""
    if c in WHITESPACE_MARKS and c != " ":
        return WHITESPACE_MARKS[c]
    cat = unicodedata.category(c)
    if cat == "Cc" or (cat == "Cf" and c not in JOINERS):
        return _hex(c.encode("utf-8"))
    return c


def _is_variation_selector(c: str) -> bool:
    return "\ufe00" <= c <= "\ufe0f" or "\U000e0100" <= c <= "\U000e01ef"


def _drawn(label: str) -> str:
    """A label that would draw nothing, given a visible form: combining marks alone on a dotted
    circle ("◌́"), a variation selector or joiner alone as its bytes ("<EF B8 8F>")."""
    if not label or any(unicodedata.category(c) not in INVISIBLE for c in label):
        return label
    if all(unicodedata.category(c) in ("Mn", "Me") and not _is_variation_selector(c) for c in label):
        return DOTTED_CIRCLE + label
    return _hex(label.encode("utf-8"))


class _Decoder:
    """Bytes of consecutive tokens to their labels, carrying a character split across tokens."""

    def __init__(self):
        self.pending = b""  # the start of a character whose other bytes are in later tokens

    def label(self, data: bytes) -> str:
        parts: list[tuple[str, str]] = []  # ("text", s) or ("bytes", hex) in order
        i = 0
        if self.pending:
            need = _utf8_length(self.pending[0]) - len(self.pending)
            cont = b""
            while i < len(data) and len(cont) < need and _is_continuation(data[i]):
                cont += data[i:i + 1]
                i += 1
            if cont and len(cont) == need:
                char = self._decode(self.pending + cont)
                parts.append(("bytes", _hex(cont)))
                if char is not None:
                    parts.append(("char", char))
                self.pending = b""
            elif cont and i == len(data):  # the character goes on in the next token
                parts.append(("bytes", _hex(cont)))
                self.pending += cont
                return self._join(parts)
            else:
                if cont:
                    parts.append(("bytes", _hex(cont)))
                self.pending = b""  # a broken character: its bytes were shown as bytes
        text = ""
        while i < len(data):
            n = _utf8_length(data[i])
            chunk = data[i:i + n] if n else b""
            if n and len(chunk) == n and all(_is_continuation(b) for b in chunk[1:]):
                char = self._decode(chunk)
                if char is not None:
                    text += char
                    i += n
                    continue
            if n > 1 and len(chunk) < n and all(_is_continuation(b) for b in chunk[1:]):
                if text:
                    parts.append(("text", text))
                    text = ""
                parts.append(("bytes", _hex(chunk)))  # a character the next token completes
                self.pending = chunk
                return self._join(parts)
            if text:
                parts.append(("text", text))
                text = ""
            parts.append(("bytes", _hex(data[i:i + 1])))  # not UTF-8
            i += 1
        if text:
            parts.append(("text", text))
        return self._join(parts)

    @staticmethod
    def _decode(data: bytes) -> str | None:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @staticmethod
    def _join(parts: list[tuple[str, str]]) -> str:
        out = []
        for kind, s in parts:
            if kind == "bytes" and out and out[-1][0] == "bytes":
                out[-1] = ("bytes", out[-1][1][:-1] + " " + s[1:])  # "<E6>" "<9D>" -> "<E6 9D>"
            else:
                out.append((kind, s))
        alone = len(out) == 1
        return "".join(_mark_text(s, alone) if kind == "text" else "".join(map(_shown_char, s)) if kind == "char"
                       else s for kind, s in out)


def readable_tokens(pieces: Sequence[str], kind: str,
                    special: Sequence[bool] | None = None) -> list[str]:
    """The labels of one sequence of pieces: [T] pieces -> [T] labels.

    The sequence is read as a whole, so a character whose bytes are split over several tokens is
    shown complete on the token that completes it. Special tokens keep their own spelling."""
    if kind not in KINDS:
        raise ValueError(f"token kind {kind!r} is not one of {', '.join(KINDS)}")
    special = list(special) if special is not None else [False] * len(pieces)
    if kind == TEXT:
        return [p if sp else (_mark_text(p) or p) for p, sp in zip(pieces, special)]
    dec = _Decoder()
    labels = []
    for piece, sp in zip(pieces, special):
        if sp:
            dec.pending = b""
            labels.append(piece)
            continue
        if dec.pending:  # a character begun in an earlier token: this label depends on it
            labels.append(dec.label(piece_bytes(piece, kind)) or piece)
        else:  # nothing carried over: the label is the piece's alone (every keystroke's tokens)
            label, dec.pending = _fresh_label(piece, kind)
            labels.append(label)
    return labels


@lru_cache(maxsize=8192)
def _fresh_label(piece: str, kind: str) -> tuple[str, bytes]:
    """A piece's label read with nothing carried over from the token before, and the start of a
    character it leaves for the next token: (label, pending bytes). A keystroke relabels every
    token of its text, nearly all of them met before."""
    dec = _Decoder()
    return dec.label(piece_bytes(piece, kind)) or piece, dec.pending


def quoted(label: str) -> str:
    """A label inside a sentence, between quotes and otherwise as the window shows it: no escapes
    ("'·five'", "'<E6 9D>'"; repr would write a backslash or a quote as an escape)."""
    return f"'{label}'"


def plain(label: str) -> str:
    """A label without its space marks, as a person types the token ("·keys" -> "keys")."""
    return label.strip(SPACE_MARK).strip()


def plural(n: int, word: str) -> str:
    """`1 layer`, `2 layers`, `1,000 tokens`: a count and its word (an `s` where n is not 1)."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def tokens(n: int) -> str:
    """`1 token`, `41 tokens`."""
    return plural(n, "token")


def cut_shown(labels: Sequence[str], offsets: Sequence[tuple[int, int]], short: bool = False) -> str:
    """What a text cut to the model's positions shows, in words: 'its first 512 tokens', or 'its
    first 511 tokens and its closing [SEP]' where the cut kept the text's closing special token
    (a token that spans no text, last, after tokens that do: typed ids span none); `short`: 'its
    first 512', 'its first 511 and [SEP]'."""
    T = len(labels)
    closing = T > 1 and len(offsets) == T and offsets[-1][1] <= offsets[-1][0] and any(b > a for a, b in offsets[:-1])
    first = T - 1 if closing else T
    if short:
        return f"its first {first:,}" + (f" and {labels[-1]}" if closing else "")
    return f"its first {tokens(first)}" + (f" and its closing {labels[-1]}" if closing else "")


FIRST_STRONG_ISOLATE, POP_ISOLATE = "\u2068", "\u2069"


def isolated(label: str) -> str:
    """A label set apart from the line it stands in (U+2068 ... U+2069), so a right-to-left token
    draws as itself and never reorders the arrow or the weight beside it ("ש → ##ל  0.09"). Only a
    label with right-to-left letters or Arabic digits needs it: the rest cannot turn a
    left-to-right line around. For the window and painted figures; command-line, CSV and JSON text
    keep labels as they are."""
    if any(unicodedata.bidirectional(c) in _RTL_CLASSES for c in label):
        return FIRST_STRONG_ISOLATE + label + POP_ISOLATE
    return label


_RTL_CLASSES = ("R", "AL", "AN", "RLE", "RLO", "LRE", "LRO", "PDF", "RLI", "LRI", "FSI", "PDI")
