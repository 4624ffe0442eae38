"""Tokenizing through the model's own `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.validate import (
    MAX_TOKENIZER_BYTES, check_token_ids, parse_json_object, read_text, tokenizer_ids,
)

_BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    tokens: list[str]  # the tokenizer's own token strings
    labels: list[str]  # readable, as the model sees it: "the", "##lip", "[UNK]", " world" -> "world"
    offsets: list[tuple[int, int]]  # character spans into the text; (0, 0) for special tokens
    special: list[bool]


class TextTokenizer:
    def __init__(self, source: Path | Tokenizer):
        """`source`: a tokenizer.json path, or a Tokenizer built elsewhere (from GGUF metadata).
        A file is checked before `tokenizers` parses it: a regular file, a JSON object, every id a
        whole number >= 0 (check_ids then holds them against the model's embedding rows)."""
        self.path: Path | None = None
        self._ids: list[tuple[str, str, int]] = []  # (field, token, id): what the file can produce
        if isinstance(source, Tokenizer):
            tok = source
        else:
            self.path = Path(source)
            text = read_text(self.path, MAX_TOKENIZER_BYTES)
            self._ids = tokenizer_ids(parse_json_object(text, self.path), self.path)
            try:
                tok = Tokenizer.from_str(text)
            except Exception as exc:  # tokenizers raises a bare Exception on malformed files
                raise ModelLoadError(f"cannot read {source}: {exc}") from exc
        # the file's own padding/truncation (MiniLM's pads to 128) would change what the model sees
        tok.no_padding()
        tok.no_truncation()
        self._tok = tok
        # WordPiece ("##lip") and word-level token strings read as they are; byte-level BPE ("Ġthe")
        # and SentencePiece ("▁the") strings are decoded to text
        self._readable_tokens = type(tok.model).__name__ in ("WordPiece", "WordLevel")

    def check_ids(self, n_rows: int, rows_from: str = "config.json vocab_size") -> None:
        """Refuse, at load, a tokenizer.json that can produce an id the embedding has no row for
        (it would fail with an IndexError at the first run that meets the token)."""
        if self.path is not None:
            check_token_ids(self._ids, n_rows, self.path, rows_from)

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoded:
        enc = self._tok.encode(text, add_special_tokens=add_special_tokens)
        special = [bool(s) for s in enc.special_tokens_mask]
        offsets = [tuple(o) for o in enc.offsets]
        labels = [self._label(i, t, sp) for i, t, sp in zip(enc.ids, enc.tokens, special)]
        return Encoded(list(enc.ids), list(enc.tokens), labels, offsets, special)

    def labels_for_ids(self, ids: list[int]) -> tuple[list[str], list[str]]:
        """Token strings and readable labels for raw ids."""
        tokens = [self._tok.id_to_token(i) or f"<{i}>" for i in ids]
        return tokens, [self._label(i, t, False) for i, t in zip(ids, tokens)]

    @property
    def raw(self) -> Tokenizer:
        """The underlying `tokenizers.Tokenizer` (padding and truncation already off)."""
        return self._tok

    def special_ids(self) -> set[int]:
        return {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}

    def _label(self, token_id: int, token: str, special: bool) -> str:
        """The token as the model sees it ("[UNK]" stays "[UNK]"), in readable form."""
        if special or self._readable_tokens:
            return token
        text = self._tok.decode([token_id], skip_special_tokens=False).strip()
        # a SentencePiece byte-fallback token (<0xE0>) is part of a character: it reads as itself
        return token if not text or (text == "\ufffd" and _BYTE_TOKEN.fullmatch(token)) else text
