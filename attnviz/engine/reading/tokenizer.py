"""Tokenizing through the model's own `tokenizer.json` (Hugging Face `tokenizers`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.token_text import BYTE_LEVEL, SENTENCEPIECE, SPACE_MARK, TEXT, readable_tokens
from attnviz.engine.reading.validate import (
    MAX_TOKENIZER_BYTES, check_token_ids, parse_json_object, read_text, tokenizer_ids,
)


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    tokens: list[str] | None  # the tokenizer's own token strings (None: ids given, Model._encode)
    labels: list[str]  # as a person reads them (token_text): "the", "##lip", "[UNK]", "Ġworld" -> "·world"
    offsets: list[tuple[int, int]]  # character spans into the text; (0, 0) for special tokens
    special: list[bool]


class TextTokenizer:
    def __init__(self, source: Path | Tokenizer, whole: Callable[[], Tokenizer] | None = None,
                 covers: Callable[[str], bool] | None = None, vocabulary=None,
                 for_text: Callable[[str], tuple[Tokenizer, Callable[[str], bool]] | None] | None = None):
        """`source`: a tokenizer.json path, or a Tokenizer built elsewhere (from GGUF metadata).
        A file is checked before `tokenizers` parses it: a regular file, a JSON object, every id a
        whole number >= 0 (check_ids then holds them against the model's embedding rows).
        `whole` and `covers`: a Tokenizer built for some texts only (a one-shot command's, with
        the merges they can meet), `covers(text)` saying which, and how to build the whole one,
        which takes its place when `raw` is asked for, or when another text is encoded that
        `for_text` cannot serve.
        `for_text(text)`: a Tokenizer built the same way for another text and its `covers`, None
        where that text is better served by the whole one (too long to look up); an encode of a
        text no tokenizer built so far covers takes one (the newest is kept), up to
        TEXTS_BEFORE_WHOLE of them, rather than build the whole vocabulary (or wait for another
        thread's build of it): the same tokens, at a fraction of the cost.
        `vocabulary`: with `whole`, what answers for any id as the whole one would where the one
        built for some texts holds only part of the vocabulary (gguf_text_vocab.TableVocabulary:
        id_to_token, is_special, special_ids, token_to_id)."""
        self._whole, self._vocabulary, self._for_text = whole, vocabulary, for_text
        self._whole_lock = threading.Lock()
        self._part_lock = threading.Lock()  # (the texts left, the newest part)
        self._texts_left = TEXTS_BEFORE_WHOLE
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
        # (a Tokenizer for some texts, their covers) read and replaced as one: None once whole
        self._part = (tok, covers) if whole is not None and covers is not None else None
        self.kind = piece_kind(tok)  # how token_text reads this tokenizer's pieces
        self._special: frozenset[int] | None = None  # special_ids, read once when first asked

    def check_ids(self, n_rows: int, rows_from: str = "config.json vocab_size") -> None:
        """Refuse, at load, a tokenizer.json that can produce an id the embedding has no row for
        (it would fail with an IndexError at the first run that meets the token)."""
        if self.path is not None:
            check_token_ids(self._ids, n_rows, self.path, rows_from)

    def encode(self, text: str, add_special_tokens: bool = True, labels: bool = True) -> Encoded:
        """The text's tokens (a run tokenises its text once: Model.prepare). labels=False: no
        labels (an empty list); `label` makes them for the tokens a caller keeps."""
        part = self._part  # (one read: raw or another text may replace it meanwhile)
        tok = part[0] if part is not None and part[1](text) else self._tokenizer_for(text)
        # (a batch of one: the Rust tokenizer lets go of the GIL in encode_batch, not in encode, and
        # a long paste tokenised on a job would otherwise hold the window's thread still)
        enc = tok.encode_batch([text], add_special_tokens=add_special_tokens)[0]
        special = [bool(s) for s in enc.special_tokens_mask]
        offsets = [tuple(o) for o in enc.offsets]
        ids, tokens = list(enc.ids), list(enc.tokens)
        return Encoded(ids, tokens, self.label(ids, tokens, special, text) if labels else [],
                       offsets, special)

    def label(self, ids: list[int], tokens: list[str], special: list[bool], text: str) -> list[str]:
        """The readable labels of the first tokens of `text`'s encoding ([n] each, n at most all of
        them; a closing special token may follow them): a label reads only the tokens before it."""
        labels = self._labels(list(ids), list(tokens), list(special))
        # a space the tokenizer put before the text (SentencePiece's add_space_prefix, GPT-2's
        # add_prefix_space) is none of the text's: the first word reads "Hello", not "·Hello"
        first = next((i for i, sp in enumerate(special) if not sp), None)
        if first is not None and not text[:1].isspace() and labels[first].startswith(SPACE_MARK):
            labels[first] = labels[first][1:]
        return labels

    def labels_for_ids(self, ids: list[int]) -> tuple[list[str], list[str]]:
        """Token strings and readable labels for raw ids."""
        part = self._vocabulary
        if part is not None:
            tokens = [part.id_to_token(i) or f"<{i}>" for i in ids]
            return tokens, self._labels(list(ids), tokens, [part.is_special(i) for i in ids])
        tokens = [self._tok.id_to_token(i) or f"<{i}>" for i in ids]
        special = self._special_ids()
        return tokens, self._labels(list(ids), tokens, [i in special for i in ids])

    @property
    def for_every_text(self) -> bool:
        """False while it holds a Tokenizer built for some texts only (__init__'s `whole`)."""
        return self._whole is None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids` (the decoder and the vocabulary: no merge needed)."""
        part, tok = self._vocabulary, self._tok  # (in this order: raw sets _tok first)
        if part is not None and tok.decoder is not None:  # (as tokenizers' decode does)
            tokens = [part.id_to_token(i) for i in ids]
            return tok.decoder.decode([t for i, t in zip(ids, tokens) if t is not None and not (
                skip_special_tokens and part.is_special(i))])
        return tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def unknown_token(self) -> str | None:
        """The vocabulary's unknown token ([UNK], <unk>), None where it has none; a tokenizer built
        for one text names it as the whole one does, without building the whole."""
        return getattr(self._tok.model, "unk_token", None)

    def token_to_id(self, token: str) -> int | None:
        """The id of a token string of the vocabulary or its added tokens, else None."""
        part = self._vocabulary
        return part.token_to_id(token) if part is not None else self._tok.token_to_id(token)

    @property
    def raw(self) -> Tokenizer:
        """The underlying `tokenizers.Tokenizer` (padding and truncation already off), for every
        text (one built for some texts only is replaced by the whole one now)."""
        if self._whole is not None:
            with self._whole_lock:
                if self._whole is not None:
                    tok = self._whole()
                    tok.no_padding()
                    tok.no_truncation()
                    self._tok = tok
                    with self._part_lock:
                        # (the per-text builder's tables go with them)
                        self._part, self._whole, self._vocabulary, self._for_text = None, None, None, None
        return self._tok

    def _tokenizer_for(self, text: str) -> Tokenizer:
        """A Tokenizer that encodes `text` as the whole vocabulary does: the whole one where it is
        built, else one built for `text` (__init__'s `for_text`; another thread may be building
        the whole one meanwhile), else the whole one, built now or waited for."""
        if self._whole is None:
            return self._tok
        for_text = self._for_text
        with self._part_lock:
            taken = for_text is not None and self._texts_left > 0
            self._texts_left -= taken
        built = for_text(text) if taken else None
        if built is None:
            return self.raw
        with self._part_lock:
            if self._whole is not None:  # (not where raw made it whole meanwhile)
                self._part = built
        return built[0]

    def special_ids(self) -> set[int]:
        """The ids of the special added tokens (a new set each call)."""
        part = self._vocabulary
        return part.special_ids() if part is not None else set(self._special_ids())

    def _special_ids(self) -> frozenset[int]:
        # read from the tokenizer once: a large vocabulary has thousands of added tokens, and
        # every label asks
        if self._special is None:
            self._special = frozenset(i for i, t in self._tok.get_added_tokens_decoder().items() if t.special)
        return self._special

    def _labels(self, ids: list[int], tokens: list[str], special: list[bool]) -> list[str]:
        """The tokens as a person reads them (token_text.readable_tokens; "[UNK]" stays "[UNK]")."""
        if self.kind == UNKNOWN_DECODER:  # pieces only the tokenizer's own decoder can read
            pieces = [t if sp else self._tok.decode([i], skip_special_tokens=False)
                      for i, t, sp in zip(ids, tokens, special)]
            return readable_tokens(pieces, TEXT, special)
        return readable_tokens(tokens, self.kind, special)


TEXTS_BEFORE_WHOLE = 32  # texts a TextTokenizer for some texts builds its own for, at most

UNKNOWN_DECODER = "decoder"  # a decoder token_text does not know: each piece decoded on its own


def piece_kind(tok: Tokenizer) -> str:
    """How a tokenizer spells its pieces: token_text.BYTE_LEVEL ("Ġthe"), SENTENCEPIECE ("▁the",
    "<0x0A>"), TEXT (WordPiece "##lip", word level), or UNKNOWN_DECODER."""
    if type(tok.model).__name__ in ("WordPiece", "WordLevel"):
        return TEXT
    decoder = tok.decoder.__getstate__().decode("utf-8", "replace") if tok.decoder is not None else ""
    if '"ByteLevel"' in decoder:
        return BYTE_LEVEL
    if any(mark in decoder for mark in ('"Metaspace"', '"ByteFallback"', "\u2581", "\\u2581")):  # ▁, raw or escaped
        return SENTENCEPIECE
    return UNKNOWN_DECODER if decoder else TEXT
