"""Tokenizing through the model's own `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from attnviz.engine.errors import ModelLoadError


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    tokens: list[str]  # the tokenizer's own token strings
    labels: list[str]  # readable: the text each token covers, or the special token itself
    offsets: list[tuple[int, int]]  # character spans into the text; (0, 0) for special tokens
    special: list[bool]


class TextTokenizer:
    def __init__(self, path: Path):
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise ModelLoadError(f"cannot read {path}: {exc}") from exc
        # the file's own padding/truncation (MiniLM's pads to 128) would change what the model sees
        tok.no_padding()
        tok.no_truncation()
        self._tok = tok

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoded:
        enc = self._tok.encode(text, add_special_tokens=add_special_tokens)
        special = [bool(s) for s in enc.special_tokens_mask]
        offsets = [tuple(o) for o in enc.offsets]
        labels = [self._label(text, tok, off, sp) for tok, off, sp in zip(enc.tokens, offsets, special)]
        return Encoded(list(enc.ids), list(enc.tokens), labels, offsets, special)

    def labels_for_ids(self, ids: list[int]) -> tuple[list[str], list[str]]:
        """Token strings and readable labels for raw ids."""
        tokens = [self._tok.id_to_token(i) or f"<{i}>" for i in ids]
        labels = [(self._tok.decode([i], skip_special_tokens=False).strip() or t) for i, t in zip(ids, tokens)]
        return tokens, labels

    def special_ids(self) -> set[int]:
        return {self._tok.token_to_id(t.content) for t in self._tok.get_added_tokens_decoder().values()
                if t.special}

    @staticmethod
    def _label(text, token, offset, special):
        if special:
            return token
        start, end = offset
        piece = text[start:end].strip()
        return piece or token
