"""Loading a model folder and running text through it: the engine's public face."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from attnviz.engine.config import ModelConfig, read_config
from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.families import LOADERS, KVCache, Weights, forward_attentions
from attnviz.engine.layers import kv_group
from attnviz.engine.tokenizer import TextTokenizer
from attnviz.engine.validate import exists, regular_file
from attnviz.engine.weights import PICKLE_SUFFIXES, Checkpoint, check_fits_in_memory, refuse_pickle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    text: str
    tokens: list[str]
    labels: list[str]
    offsets: list[tuple[int, int]]
    input_ids: np.ndarray  # int64 [T]
    attentions: np.ndarray  # float32 [n_layer, n_head, T, T]
    kv_group: np.ndarray  # int64 [n_head]
    truncated: bool = False
    n_tokens_full: int = 0
    compute_s: float = 0.0
    cache_reused: int = 0  # tokens whose rows came from the KV cache
    cache_computed: int = 0  # tokens computed this run (T for a full run)
    cache_bytes: int = 0  # bytes of K and V the model holds after this run (0: it keeps no cache)

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


class Model:
    """A loaded model: weights, tokenizer and, for a causal model, the KV cache of its last run.
    Safe across threads: one run at a time uses the cache, any other computes in full."""

    def __init__(self, name: str, path: Path, config: ModelConfig, weights: Weights,
                 tokenizer: TextTokenizer | None, license: str | None = None,
                 notice: str | None = None):
        self.name = name
        self.notice = notice  # one line for the user, e.g. why there is no tokenizer
        self.path = path
        self.config = config
        self.weights = weights
        self.tokenizer = tokenizer
        self.license = license
        self.kv_group = kv_group(config.n_head, config.n_kv_head)
        # The cache belongs to this Model alone. Only a run holding _cache_lock reads or updates it
        # (a run that bypasses it reports its byte count, one int, as a snapshot); a run finding the
        # lock taken computes in full and leaves the cache alone: it never waits.
        self._cache = KVCache() if config.causal else None
        self._cache_lock = threading.Lock()

    def __repr__(self):
        c = self.config
        return (f"Model({self.name!r}, {c.model_type}, {c.n_layer} layers x {c.n_head} heads, "
                f"{c.n_kv_head} KV heads)")

    def clear_cache(self) -> None:
        """Forget the KV cache. A run in progress finishes on the old one, which is then dropped."""
        if self._cache is not None:
            self._cache = KVCache()

    def run(self, text: str | None = None, *, ids=None, truncate: bool = False,
            use_cache: bool = True) -> RunResult:
        """Attention patterns for `text` (with the model's special tokens) or raw `ids` (without).

        A causal model reuses the tokens shared with its previous run (the KV cache); with
        use_cache=False the run neither reads nor updates the cache (one-off inputs such as probes)."""
        t0 = time.perf_counter()
        if (text is None) == (ids is None):
            raise InputError("give either text or ids, not both")
        if ids is not None:
            ids = self._check_ids(ids)
            text = ""
            if self.tokenizer is not None:
                tokens, labels = self.tokenizer.labels_for_ids(ids.tolist())
            else:
                tokens = labels = [str(i) for i in ids]
            offsets = [(0, 0)] * len(ids)
        else:
            if self.tokenizer is None:  # the text itself may be token ids: "5, 17, 3"
                typed = parse_typed_ids(text)
                if typed is None:
                    raise InputError(f"{self.name} has no tokenizer.json: type token ids instead, "
                                     "e.g. 5, 17, 3")
                result = self.run(ids=typed, truncate=truncate, use_cache=use_cache)
                return replace(result, text=text, compute_s=time.perf_counter() - t0)
            enc = self.tokenizer.encode(text)
            ids = np.asarray(enc.ids, dtype=np.int64)
            tokens, labels, offsets = enc.tokens, enc.labels, enc.offsets
            special = enc.special
        n_full = len(ids)
        limit = self.config.max_positions
        truncated = False
        if n_full > limit:
            if not truncate:
                raise InputError(f"sequence of {n_full} tokens is longer than this model's "
                                 f"{limit} positions: shorten the text or truncate it "
                                 "(--truncate, run(..., truncate=True))")
            keep = list(range(limit))
            if text and special[-1]:  # keep the closing special token ([SEP])
                keep[-1] = n_full - 1
            ids = ids[keep]
            tokens, labels, offsets = ([seq[i] for i in keep] for seq in (tokens, labels, offsets))
            truncated = True
        attentions, reused, held = self._forward(ids, use_cache)
        return RunResult(text=text, tokens=list(tokens), labels=list(labels), offsets=list(offsets),
                         input_ids=ids, attentions=attentions, kv_group=self.kv_group.copy(),
                         truncated=truncated, n_tokens_full=n_full,
                         compute_s=time.perf_counter() - t0, cache_reused=reused,
                         cache_computed=len(ids) - reused, cache_bytes=held)

    def _forward(self, ids: np.ndarray, use_cache: bool) -> tuple[np.ndarray, int, int]:
        """ids [T] -> (patterns [n_layer, n_head, T, T], tokens reused, cache bytes held)."""
        cache = self._cache
        if cache is None:
            return forward_attentions(self.config, self.weights, ids), 0, 0
        if use_cache and self._cache_lock.acquire(blocking=False):
            try:
                cache = self._cache  # clear_cache may have swapped it
                attentions = forward_attentions(self.config, self.weights, ids, cache)
                return attentions, cache.reused, cache.nbytes
            finally:
                self._cache_lock.release()
        return forward_attentions(self.config, self.weights, ids), 0, self._cache.nbytes

    def _check_ids(self, ids) -> np.ndarray:
        try:
            arr = np.asarray(list(ids))
        except TypeError as exc:
            raise InputError(f"ids must be a list of integers: {exc}") from exc
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"ids must be a flat list of integers, got {ids!r}")
        bad = arr[(arr < 0) | (arr >= self.config.vocab_size)]
        if bad.size:
            raise InputError(f"token id {int(bad[0])} is outside this model's vocabulary "
                             f"0..{self.config.vocab_size - 1}")
        return arr.astype(np.int64)


def parse_typed_ids(text: str) -> list[int] | None:
    """Token ids typed as text ("5, 17 3"), or None when the text is not only integers."""
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts]


def load_folder(path: Path, name: str | None = None, license: str | None = None) -> Model:
    """Load a checkpoint folder (config.json + safetensors [+ tokenizer.json])."""
    path = Path(path).expanduser()
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES:
            raise refuse_pickle(path)
        path = path.parent
    if not path.is_dir():
        if exists(path):
            regular_file(path)  # names what is there instead: a FIFO, a device, a socket
        raise ModelLoadError(f"no model folder at {path}")
    # the small files first, each checked whole (validate.py), then the weights
    config = read_config(path)
    tok_path = path / "tokenizer.json"
    tokenizer = TextTokenizer(tok_path) if exists(tok_path) else None
    if tokenizer is None:
        log.info("%s has no tokenizer.json: only token ids can be run", path)
    else:
        tokenizer.check_ids(config.vocab_size)
    ckpt = Checkpoint(path)
    check_fits_in_memory(ckpt, name or path.name)
    weights = LOADERS[config.family](config, ckpt)
    if not license:
        try:
            license = _read_license(path)
        except OSError as exc:  # the licence line is optional: an unreadable README is no reason
            log.warning("cannot read %s: %s", path / "README.md", exc)
    return Model(name or path.name, path, config, weights, tokenizer, license=license)


def _read_license(path: Path) -> str | None:
    readme = path / "README.md"
    if not readme.is_file():
        return None
    for line in readme.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
        if line.strip().lower().startswith("license:"):
            return line.split(":", 1)[1].strip()
    return None
