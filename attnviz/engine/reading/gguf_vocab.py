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

A one-shot command's text needs only a sliver of that: engine/reading/gguf_text_vocab.py builds the
tokenizer of the tokens, merges and added tokens one text can meet.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import tempfile
import threading
from contextlib import contextmanager

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors

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


_pause_lock = threading.Lock()
_pauses = 0  # collector_paused blocks running now, on any thread
_thresholds = (700, 10, 10)  # the collector's thresholds when the first of them began


@contextmanager
def collector_paused():
    """No automatic garbage collection inside: a vocabulary's lists, dict and merge pairs are a
    million objects that form no cycle, and each collection the allocations set off would walk
    those made so far. Paused by the collector's first threshold (0: no automatic collection),
    never by its on/off switch, which stays its owner's (the window's runner turns it off for
    good, from another thread than a load's): pauses nested or on several threads are one pause,
    whose last end puts the thresholds back, unless someone set others meanwhile. An explicit
    gc.collect() still collects."""
    global _pauses, _thresholds
    with _pause_lock:
        if _pauses == 0:
            _thresholds = gc.get_threshold()
            gc.set_threshold(0, *_thresholds[1:])
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and gc.get_threshold() == (0, *_thresholds[1:]):
                gc.set_threshold(*_thresholds)


def byte_level_bpe(tokens: list[str], merges: list[str], pre: str) -> Tokenizer:
    """Byte-level BPE (GPT-2 style): the file's merges, the split regexes of `pre` (PRE_SPLITS);
    for one text and those within it, byte_level_for_text builds what it needs of it."""
    vocab = {t: i for i, t in enumerate(tokens)}
    return byte_level_tokenizer(vocab, [tuple(m.split(" ", 1)) for m in merges if " " in m], pre)


def byte_level_tokenizer(vocab: dict[str, int], pairs, pre: str) -> Tokenizer:
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
    return spm_tokenizer(vocab, cached_merges(tokens, scores, types), unk, has_bytes, add_space_prefix)


def spm_tokenizer(vocab: dict[str, int], merges, unk: str | None, has_bytes: bool,
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
