"""A one-shot command's tokenizer for one text (and the texts within it), read from a GGUF
vocabulary's bytes: the tokens, merges and added tokens that text can meet, found by hash
(TokenTable) without a Python string for every token, and TableVocabulary answering for every other
id as the whole vocabulary (engine/reading/gguf_vocab.py) would. The tokenizer built gives the text
the same ids, offsets and labels as the whole one. A window's load builds one for its first text,
and its keystrokes' texts get their own (text_builder) until the whole one is built."""

from __future__ import annotations

import numpy as np
from tokenizers import AddedToken, Tokenizer, processors

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.gguf_vocab import (
    BYTE, CONTROL, NORMAL, SPACE, UNKNOWN, USER_DEFINED, add_bos_eos, byte_level_tokenizer,
    spm_tokenizer, text_pieces)
from attnviz.engine.reading.token_text import byte_level_alphabet

MAX_TEXT_PIECES = 1 << 20  # (position, length) pairs a text's tokens are looked up by, at most

# A one-shot command's tokenizer for its text, read from the vocabulary's bytes: the tokens its
# text can meet, found by hash, not a Python string and dict entry for each of them.

_OFFSET, _PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)  # FNV-1's


def worth_looking_up(n_chars: int, table: TokenTable) -> bool:
    """Whether a text of `n_chars` characters is better read from `table` than with the whole
    vocabulary: its runs (n_chars of each length up to the longest token) at most MAX_TEXT_PIECES
    and half the vocabulary's tokens (a run's look-up costs about what a token's share of the
    whole vocabulary's build does)."""
    return n_chars * min(table.longest, n_chars + 1) <= min(MAX_TEXT_PIECES, len(table) // 2)


def _runs(chars: str, longest: int) -> set[str]:
    """Every run of `chars` of at most `longest` characters."""
    return {chars[a:b] for a in range(len(chars)) for b in range(a + 1, min(len(chars), a + longest) + 1)}


def _tokens_of_types(table: TokenTable, types: np.ndarray, kinds: tuple[int, ...]) -> dict[int, str]:
    return {i: table.token(i) for i in np.flatnonzero(np.isin(types, kinds)).tolist()}


def byte_hashes(data: np.ndarray, begins: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """[n] uint64 hashes of the byte strings data[begins[k]:stops[k]] (data: uint8): the length,
    then each 8-byte word (little-endian, the last one's missing bytes zero) xored in and
    multiplied by FNV's prime, a NumPy step per word over the strings that long. Equal strings
    hash alike; a look-up compares the bytes of equal hashes."""
    lengths = stops - begins
    n = len(begins)
    hashes = np.empty(n, np.uint64)
    if not n:
        return hashes
    longest = int(lengths.max())
    shorter = (longest - lengths).astype(np.uint16 if longest < 1 << 16 else np.int64)
    order = np.argsort(shorter, kind="stable")  # longest first: those still going are a prefix
    padded = np.concatenate([data, np.zeros(8, np.uint8)])  # (a last word read past the end)
    words = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))  # the word at every byte
    first, left = begins[order], lengths[order].astype(np.uint64)
    going = n - np.cumsum(np.bincount(lengths))  # [p]: how many are longer than p bytes
    h = (_OFFSET ^ left) * _PRIME
    for at in range(0, longest, 8):
        k = going[at]
        w = words[first[:k] + at]
        rest = left[:k] - np.uint64(at)
        short = np.flatnonzero(rest < 8)  # a last word: its bytes past the string's end zeroed
        w[short] &= (np.uint64(1) << (np.uint64(8) * rest[short])) - np.uint64(1)
        h[:k] = (h[:k] ^ w) * _PRIME
    hashes[order] = h
    return hashes


def _keys(hashes: np.ndarray) -> np.ndarray:  # [n] uint64 -> [n] uint32, a table's sort key
    return (hashes >> np.uint64(32)).astype(np.uint32)


def _sort_order(keys: np.ndarray) -> np.ndarray:  # [n] uint32 -> ids by key (equal keys: by id)
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")  # (two radix passes)
    return low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]


class TokenTable:
    """A vocabulary's token strings read from its bytes (gguf_file.string_bytes: string k's UTF-8
    is blob[begins[k]:stops[k]]) when asked: a token by id, decoded then (strict UTF-8, as the
    metadata's strings), and the ids of given strings, by a hash of each token's bytes (32 bits of
    it sorted once: a look-up is a binary search), compared byte for byte."""

    def __init__(self, blob: bytes, begins: np.ndarray, stops: np.ndarray):
        self._blob, self._begins, self._stops = blob, begins, stops
        keys = _keys(byte_hashes(np.frombuffer(blob, np.uint8), begins, stops))
        self._order = _sort_order(keys)
        self._sorted = keys[self._order]
        self._repeated: dict[int, list[int]] | None = None  # same(): made when first asked
        self.longest = int((stops - begins).max()) if len(begins) else 0  # bytes

    def __len__(self) -> int:
        return len(self._begins)

    def __getitem__(self, i: int) -> str:
        return self.token(i)

    def token(self, i: int) -> str:
        try:
            return self._blob[self._begins[i]:self._stops[i]].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ModelLoadError(f"GGUF metadata tokenizer.ggml.tokens cannot be read: token {i}: "
                                 f"{exc}") from exc

    def lookup(self, strings) -> dict[str, list[int]]:
        """{string: the ids whose token it is, ascending} for each of `strings` that is a token."""
        wanted = list(dict.fromkeys(strings))
        encoded = [w.encode("utf-8", "surrogatepass") for w in wanted]  # (lone surrogate: no token)
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        stops = np.cumsum(lengths)
        data = np.frombuffer(b"".join(encoded), np.uint8)
        hashes = _keys(byte_hashes(data, stops - lengths, stops))
        lo = np.searchsorted(self._sorted, hashes, "left")
        hi = np.searchsorted(self._sorted, hashes, "right")
        found = {}
        for k in np.flatnonzero(hi > lo).tolist():  # (most strings asked are no token)
            b = encoded[k]
            ids = [i for i in self._order[lo[k]:hi[k]].tolist()
                   if self._blob[self._begins[i]:self._stops[i]] == b]
            if ids:
                found[wanted[k]] = sorted(ids)
        return found

    def same(self, i: int) -> list[int]:
        """The ids whose token is token i's (i among them), ascending."""
        repeated = self._repeated
        if repeated is None:  # (made whole before it is kept: another thread may ask meanwhile)
            repeated, s = {}, self._sorted
            twice = s[1:][s[1:] == s[:-1]]  # (a repeat shares its hash), ascending as s is
            # each hash once (np.unique's result, without its import of numpy.ma in a one-shot command)
            for h in twice[np.r_[True, twice[1:] != twice[:-1]]].tolist() if len(twice) else ():
                near = self._order[np.searchsorted(s, h, "left"):np.searchsorted(s, h, "right")]
                groups = {}  # (one hash: the same bytes, or a collision)
                for k in near.tolist():
                    groups.setdefault(self._blob[self._begins[k]:self._stops[k]], []).append(k)
                for ids in groups.values():
                    repeated.update((k, sorted(ids)) for k in ids)
            self._repeated = repeated
        return repeated.get(i, [i])

    def last_ids(self, strings) -> dict[str, int]:
        """{string: the last id whose token it is} (a repeated token's id in a dict of them all)."""
        return {w: ids[-1] for w, ids in self.lookup(strings).items()}

    def containing(self, part: str) -> list[int]:
        """The ids whose token holds `part` (not empty)."""
        b = part.encode("utf-8", "surrogatepass")
        hits, at = set(), self._blob.find(b)
        while at >= 0:
            k = int(np.searchsorted(self._stops, at, "right"))
            if k < len(self) and self._begins[k] <= at and at + len(b) <= self._stops[k]:
                hits.add(k)
            at = self._blob.find(b, at + 1)
        return sorted(hits)


class TableVocabulary:
    """What a tokenizer built for some texts (sentencepiece_for_text, byte_level_for_text) answers
    for every id as the whole one does, from the TokenTable: the whole tokenizer's vocabulary maps
    each token to its last id (a repeated token's earlier ids have no token), and its special
    tokens are those of `special_types`, added under that id."""

    def __init__(self, table: TokenTable, types: np.ndarray, special_types: tuple[int, ...]):
        self.table, self._types, self._special_types = table, types, special_types

    def id_to_token(self, i: int) -> str | None:
        if not 0 <= i < len(self.table):
            return None
        return self.table.token(i) if self.table.same(i)[-1] == i else None

    def is_special(self, i: int) -> bool:
        return self.id_to_token(i) is not None and any(
            int(self._types[j]) in self._special_types for j in self.table.same(i))

    def special_ids(self) -> set[int]:
        ids = np.flatnonzero(np.isin(self._types, self._special_types)).tolist()
        return set(self.table.last_ids([self.table.token(i) for i in ids]).values())

    def token_to_id(self, token: str) -> int | None:
        return self.table.last_ids([token]).get(token)


def sentencepiece_for_text(table: TokenTable, scores, types, add_space_prefix: bool,
                           unk_id: int | None, text: str, also=()) -> Tokenizer | None:
    """sentencepiece_bpe(...) with add_file_tokens' control and unknown tokens (special) and
    user-defined ones, for `text` and texts within it (text_pieces(other) in text_pieces(text)):
    their tokens, offsets and labels bit for bit. It holds only what such a text can meet: the
    tokens that are runs of its characters (spaces as "▁", "▁" before them), byte tokens and those
    that hold "<0x" or the unknown token; the merges whose result is one of them (every split of
    such a token into two tokens, ranked as merge_ids ranks them: a merge can apply only where its
    result is a run of the text or holds such a token, so no merge that can is left out); the
    added tokens found in the text, or that are in the vocabulary it holds; the tokens of the ids
    `also` (the BOS and EOS the post-processor adds: decoded with the rest). Every token keeps its
    id (the last of a repeated token, as the whole vocabulary's dict). None where the text is too
    long to be worth looking up (worth_looking_up) or the unknown token is empty (every token
    holds it)."""
    chars = text_pieces(text)
    if not worth_looking_up(len(chars), table):
        return None
    unk = table.token(unk_id) if unk_id is not None else None
    if unk == "":
        return None
    scores = np.asarray(scores, np.float64)
    types = np.asarray(types)
    runs = _runs(chars, table.longest)
    runs |= {SPACE + r for r in runs} | {SPACE}
    byte_names = [f"<0x{b:02X}>" for b in range(256)]
    found = table.lookup(runs | set(byte_names))
    has_bytes = all(b in found for b in byte_names)
    symbols = {i for ids in found.values() for i in ids}  # what a symbol or a merge's result can be
    symbols.update(np.flatnonzero(types == BYTE).tolist())
    symbols.update(table.containing("<0x"))
    if unk is not None:
        symbols.update(table.containing(unk))
    token = {i: table.token(i) for i in sorted(symbols)}
    token.update((i, table.token(i)) for i in also if i is not None)
    added = _tokens_of_types(table, types, (CONTROL, UNKNOWN, USER_DEFINED))
    parts = {t[:cut] for i, t in token.items() if types[i] == NORMAL for cut in range(1, len(t))}
    parts |= {t[cut:] for i, t in token.items() if types[i] == NORMAL for cut in range(1, len(t))}
    last = {w: ids[-1] for w, ids in found.items()}
    asked = runs | set(byte_names)  # (looked up: a string found there is in `last`)
    last.update(table.last_ids((parts | set(token.values()) | set(added.values())) - asked))
    ranked = []
    for i, t in token.items():
        if types[i] != NORMAL or len(t) < 2:
            continue
        for cut in range(1, len(t)):
            left = last.get(t[:cut])
            if left is not None:
                right = last.get(t[cut:])
                if right is not None:
                    ranked.append((-scores[i], i, t[:cut], t[cut:]))
    ranked.sort(key=lambda r: (r[0], r[1], last[r[2]], last[r[3]]))
    vocab = {w: last[w] for w in set(token.values()) | {w for r in ranked for w in r[2:]}}
    vocab.update((w, last[w]) for w in added.values() if text_pieces(w) in chars)
    tok = spm_tokenizer(vocab, [r[2:] for r in ranked], unk, has_bytes, add_space_prefix)
    kept = [i for i, w in added.items() if w in vocab]
    tok.add_special_tokens([AddedToken(added[i], special=True, normalized=False)
                            for i in kept if types[i] in (CONTROL, UNKNOWN)])
    tok.add_tokens([AddedToken(added[i], special=False, normalized=False)
                    for i in kept if types[i] == USER_DEFINED])
    return tok


# GPT-2's byte -> character map, which byte-level tokens are spelled in (tokenizers' ByteLevel)
_BYTE_CHARS = {b: c for c, b in byte_level_alphabet().items()}


def byte_level_for_text(table: TokenTable, merges: TokenTable | None, types, pre: str,
                        text: str) -> Tokenizer | None:
    """byte_level_bpe(...) with add_file_tokens' control tokens (special) and user-defined ones,
    for `text` and texts within it (other in text): their tokens, offsets and labels bit for bit.
    The pre-tokenizer cuts a text into pieces of it, whose bytes are spelled in GPT-2's byte
    alphabet: every symbol BPE meets is a run of the text's bytes so spelled. It holds the tokens that are such
    runs, the merges (`merges`: the file's "left right" strings, their order its ranks) of two
    parts that make one of them, and the added tokens found in the text or in the vocabulary it
    holds, each under its id (the last of a repeated token). None where the text is too long to
    be worth looking up (worth_looking_up), or where a merge of those names a part that is no
    token (the whole vocabulary's build refuses the file)."""
    chars = "".join(_BYTE_CHARS[b] for b in text.encode("utf-8", "surrogatepass"))
    if not worth_looking_up(len(chars), table):
        return None
    types = np.asarray(types)
    last = table.last_ids(_runs(chars, table.longest))
    asked = {f"{t[:cut]} {t[cut:]}" for t in last for cut in range(1, len(t))}
    ranks = merges.lookup(asked) if merges is not None else {}
    ranked = sorted((rank, m) for m, at in ranks.items() for rank in at)
    pairs = [tuple(m.split(" ", 1)) for _, m in ranked]
    if any(p not in last for pair in pairs for p in pair):
        return None
    added = _tokens_of_types(table, types, (CONTROL, USER_DEFINED))
    vocab = dict(last)
    vocab.update(table.last_ids({w for w in added.values() if w in text} - last.keys()))
    tok = byte_level_tokenizer(vocab, pairs, pre)
    kept = [i for i, w in added.items() if w in vocab]
    tok.add_special_tokens([AddedToken(added[i], special=True, normalized=False)
                            for i in kept if types[i] == CONTROL])
    tok.add_tokens([AddedToken(added[i], special=False, normalized=False)
                    for i in kept if types[i] == USER_DEFINED])
    return tok


def text_builder(found, pre: str, spm: tuple[int | None, bool] | None, bos: int | None,
                 eos: int | None):
    """text -> (the Tokenizer of what `text` can meet, covers(other): whether it serves `other`
    too), or None where `text` is better served by the whole vocabulary. `found`: (TokenTable,
    scores, types, merges) (gguf_model._text_table); `spm`: a SentencePiece vocabulary's (unknown
    id, add_space_prefix), None for byte-level BPE (`pre`: its pre-tokenizer); `bos`, `eos`: the
    ids the post-processor adds (None: not added)."""
    table, scores, types, merges = found

    def build(text: str):
        if spm is not None:
            part = sentencepiece_for_text(table, scores, types, spm[1], spm[0], text, (bos, eos))
            within = text_pieces(text)
            covers = lambda other: text_pieces(other) in within  # noqa: E731
        else:
            part = byte_level_for_text(table, merges, types, pre, text)
            covers = lambda other: other in text  # noqa: E731
        if part is None:
            return None
        add_bos_eos(part, table, bos, eos,
                    fallback=None if spm is not None else processors.ByteLevel(trim_offsets=False))
        part.no_padding()
        part.no_truncation()
        return part, covers
    return build
