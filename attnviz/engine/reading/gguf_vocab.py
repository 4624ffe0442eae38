"""The tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes, built with the `tokenizers`
library: byte-level BPE (`tokenizer.ggml.model` = gpt2) and SentencePiece (= llama).

What each builds is what llama.cpp's tokenizer (src/llama-vocab.cpp) does with the same metadata:
- Control, unknown and user-defined tokens are matched whole in the typed text (llama.cpp with
  parse_special), control and unknown ones as special tokens.
- SentencePiece: the text between those tokens is one piece each; with `add_space_prefix` every
  piece gets a leading space (llama.cpp prefixes the first piece and every piece after a special
  token, and every piece is one of those), then spaces become "▁", and the symbols are merged in
  the order of their merged token's score, highest first (SentencePiece's BPE). A character that
  no token spells falls back to its UTF-8 bytes (<0x41>...) or, without byte tokens, the unknown
  token. The merges `tokenizers` needs are derived from the scores: every split of a token into two
  tokens, ranked by the whole token's score. Deriving them reads every split of every token (a
  large vocabulary's biggest cost at load), so their order is kept in the user's cache folder
  (engine/reading/user_cache.py), keyed by a hash of the tokens, scores and types it came from.

A one-shot command's text needs only a sliver of that: sentencepiece_for_text and
byte_level_for_text build, for one text and those within it, a tokenizer of the tokens, merges and
added tokens it can meet, found in the vocabulary's bytes (TokenTable, by hash) without a Python
string for every token; TableVocabulary answers for every other id as the whole one would.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import tempfile
from contextlib import contextmanager

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.user_cache import cache_root

log = logging.getLogger(__name__)

# tokenizer.ggml.token_type (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# tokenizer.ggml.pre -> the pre-tokenizer split regexes, as llama.cpp's llama-vocab.cpp applies them
# (in order), before byte-level encoding. "gpt2" is GPT-2's own regex, which ByteLevel carries.
_GPT2_REGEX = None  # ByteLevel(use_regex=True)
PRE_SPLITS = {
    "gpt2": [_GPT2_REGEX],
    "smollm": [r"\p{N}", _GPT2_REGEX],
    "llama-bpe": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
                  r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
              r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}
SUPPORTED_PRE = tuple(sorted(PRE_SPLITS))
SPACE = "\u2581"  # "▁", SentencePiece's visible space


@contextmanager
def collector_paused():
    """No garbage collection inside (as it was after, where it was off before): a vocabulary's
    lists, dict and merge pairs are a million objects that form no cycle, and each collection the
    allocations set off would walk those made so far."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def byte_level_bpe(tokens: list[str], merges: list[str], pre: str) -> Tokenizer:
    """Byte-level BPE (GPT-2 style): the file's merges, the split regexes of `pre` (PRE_SPLITS);
    for one text and those within it, byte_level_for_text builds what it needs of it."""
    vocab = {t: i for i, t in enumerate(tokens)}
    return _byte_level(vocab, [tuple(m.split(" ", 1)) for m in merges if " " in m], pre)


def _byte_level(vocab: dict[str, int], pairs, pre: str) -> Tokenizer:
    """Byte-level BPE over `vocab` and the merges `pairs` (byte_level_bpe)."""
    tok = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))
    splits = []
    for regex in PRE_SPLITS[pre]:
        if regex is None:
            splits.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        else:
            splits.append(pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False))
    if not any(isinstance(s, pre_tokenizers.ByteLevel) for s in splits):
        splits.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits)
    tok.decoder = decoders.ByteLevel()
    return tok


def score_merges(tokens: list[str], scores, types) -> list[tuple[str, str]]:
    """SentencePiece BPE's merge order as `tokenizers` merges: for every normal token, each split
    into two tokens that exist, ranked by the whole token's score (highest first; ties by the
    token's id, then the parts' ids). Byte, control, unknown and unused tokens are never the result
    of a merge, as in SentencePiece."""
    left, right = merge_ids(tokens, scores, types)
    return _pairs(tokens, left, right)


def merge_ids(tokens: list[str], scores, types) -> tuple[list[int], list[int]]:
    """score_merges' merges as the ids of their (left, right) parts."""
    vocab = {t: i for i, t in enumerate(tokens)}
    get = vocab.get
    ranked = []
    for i, (token, score, kind) in enumerate(zip(tokens, np.asarray(scores, np.float64).tolist(), types)):
        if kind != NORMAL or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left = get(token[:cut])
            if left is not None:
                right = get(token[cut:])
                if right is not None:
                    ranked.append((-score, i, left, right))
    ranked.sort()
    return [r[2] for r in ranked], [r[3] for r in ranked]


def _pairs(tokens: list[str], left, right) -> list[tuple[str, str]]:
    at = tokens.__getitem__
    return list(zip(map(at, left), map(at, right)))


MERGES_VERSION = 1  # part of the cache key: bump when merge_ids' rule changes
KEPT_VOCABULARIES = 8  # merge orders kept in the cache folder, the most recently made


def cached_merges(tokens: list[str], scores, types) -> list[tuple[str, str]]:
    """score_merges' list, its ids read from the cache folder when this vocabulary's are there
    (checked: [n, 2] ids of its tokens), else derived and written there (a folder that cannot be
    written only loses the saving)."""
    ids = cached_merge_ids(tokens, scores, types)
    return _pairs(tokens, ids[:, 0].tolist(), ids[:, 1].tolist())


def cached_merge_ids(tokens: list[str], scores, types) -> np.ndarray:
    """cached_merges' merges as [n, 2] int32 ids (left, right), in their order."""
    path = cache_root() / "vocab" / f"merges-{vocabulary_key(tokens, scores, types)}.npy"
    ids = _read_ids(path, len(tokens))
    if ids is None:
        left, right = merge_ids(tokens, scores, types)
        ids = np.array([left, right], dtype=np.int32).reshape(2, -1).T
        _write_ids(path, ids)
    return ids


MAX_TEXT_PIECES = 1 << 20  # (position, length) pairs a text's tokens are looked up by, at most


def text_pieces(text: str) -> str:
    """The characters SentencePiece's BPE meets in `text`, spaces as "▁" (sentencepiece_bpe's
    normalizer; the "▁" it puts before each piece is its own character of the same kind)."""
    return text.replace(" ", SPACE)


def vocabulary_key(tokens: list[str], scores, types) -> str:
    """A hash of what the merge order is derived from: every token (its length and characters),
    score and type."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"merges {MERGES_VERSION} {len(tokens)}\n".encode())
    h.update(np.fromiter(map(len, tokens), np.int64, len(tokens)).tobytes())
    h.update("".join(tokens).encode("utf-8", "surrogatepass"))
    h.update(np.asarray(scores, np.float64).tobytes())
    h.update(np.asarray(types, np.int64).tobytes())
    return h.hexdigest()


def _read_ids(path, n_tokens: int) -> np.ndarray | None:  # [n, 2] int32, or None
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if ids.dtype != np.int32 or ids.ndim != 2 or ids.shape[1] != 2 or (
            ids.size and not (0 <= ids.min() and ids.max() < n_tokens)):
        log.info("%s is not a merge order of this vocabulary: made again", path)
        return None
    return ids


def _write_ids(path, ids: np.ndarray) -> None:
    """Write atomically (a reader sees the whole file or none), then keep the KEPT_VOCABULARIES
    newest files."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.save(fh, ids, allow_pickle=False)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        kept = sorted(path.parent.glob("merges-*.npy"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEPT_VOCABULARIES:]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        log.info("the merge order could not be kept in %s: %s", path.parent, exc)


def sentencepiece_bpe(tokens: list[str], scores, types, add_space_prefix: bool,
                      unk_id: int | None) -> Tokenizer:
    """SentencePiece BPE as llama.cpp runs it (see the module's docstring); for one text and those
    within it, sentencepiece_for_text builds what it needs of it."""
    vocab = {t: i for i, t in enumerate(tokens)}
    has_bytes = all(f"<0x{b:02X}>" in vocab for b in range(256))
    unk = tokens[unk_id] if unk_id is not None else None
    return _spm(vocab, cached_merges(tokens, scores, types), unk, has_bytes, add_space_prefix)


def _spm(vocab: dict[str, int], merges, unk: str | None, has_bytes: bool,
         add_space_prefix: bool) -> Tokenizer:
    """SentencePiece BPE over `vocab` and `merges` as llama.cpp runs it (sentencepiece_bpe)."""
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=has_bytes))
    steps = [normalizers.Prepend(SPACE)] if add_space_prefix else []
    tok.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPACE)])
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
        + ([decoders.Strip(" ", 1, 0)] if add_space_prefix else []))
    return tok


def add_file_tokens(tok: Tokenizer, tokens: list[str], types, special_types: tuple[int, ...]) -> None:
    """Tokens matched whole in typed text, as llama.cpp does with parse_special: those of
    `special_types` as special tokens, user-defined ones as plain added tokens."""
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i in range(len(tokens)) if types[i] in special_types])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i in range(len(tokens)) if types[i] == USER_DEFINED])


def add_bos_eos(tok: Tokenizer, tokens: list[str], bos: int | None, eos: int | None,
                fallback=None) -> None:
    """The post-processor: BOS before and EOS after the text where given (None: not added), else
    `fallback` (the byte-level one keeps offsets as they are)."""
    if bos is None and eos is None:
        if fallback is not None:
            tok.post_processor = fallback
        return
    first = f"{tokens[bos]} " if bos is not None else ""
    last = f" {tokens[eos]}" if eos is not None else ""
    special = sorted({(tokens[i], int(i)) for i in (bos, eos) if i is not None})
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first}$A{last}", pair=f"{first}$A{last} {first}$B{last}", special_tokens=special)


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
        if self._repeated is None:
            self._repeated, s = {}, self._sorted
            for h in np.unique(s[1:][s[1:] == s[:-1]]).tolist():  # (a repeat shares its hash)
                near = self._order[np.searchsorted(s, h, "left"):np.searchsorted(s, h, "right")]
                groups = {}  # (one hash: the same bytes, or a collision)
                for k in near.tolist():
                    groups.setdefault(self._blob[self._begins[k]:self._stops[k]], []).append(k)
                for ids in groups.values():
                    self._repeated.update((k, sorted(ids)) for k in ids)
        return self._repeated.get(i, [i])

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
    tok = _spm(vocab, [r[2:] for r in ranked], unk, has_bytes, add_space_prefix)
    kept = [i for i, w in added.items() if w in vocab]
    tok.add_special_tokens([AddedToken(added[i], special=True, normalized=False)
                            for i in kept if types[i] in (CONTROL, UNKNOWN)])
    tok.add_tokens([AddedToken(added[i], special=False, normalized=False)
                    for i in kept if types[i] == USER_DEFINED])
    return tok


def byte_chars() -> dict[int, str]:
    """GPT-2's byte -> character map, which byte-level tokens are spelled in (tokenizers'
    ByteLevel): printable bytes as themselves, the others as characters from U+0100 on."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {**{b: chr(b) for b in kept}, **{b: chr(256 + k) for k, b in enumerate(moved)}}


_BYTE_CHARS = byte_chars()


def byte_level_for_text(table: TokenTable, merges: TokenTable | None, types, pre: str,
                        text: str) -> Tokenizer | None:
    """byte_level_bpe(...) with add_file_tokens' control tokens (special) and user-defined ones,
    for `text` and texts within it (other in text): their tokens, offsets and labels bit for bit.
    The pre-tokenizer cuts a text into pieces of it, whose bytes are spelled in byte_chars: every
    symbol BPE meets is a run of the text's bytes so spelled. It holds the tokens that are such
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
    tok = _byte_level(vocab, pairs, pre)
    kept = [i for i, w in added.items() if w in vocab]
    tok.add_special_tokens([AddedToken(added[i], special=True, normalized=False)
                            for i in kept if types[i] == CONTROL])
    tok.add_tokens([AddedToken(added[i], special=False, normalized=False)
                    for i in kept if types[i] == USER_DEFINED])
    return tok
