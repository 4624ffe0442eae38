"""Loading a model folder and running text through it: the engine's public face."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np

from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.errors import AttnvizError, InputError, ModelLoadError
from attnviz.engine.computing.families import forward, output_projection
from attnviz.engine.computing.packed import PACK_PATTERN_BYTES, PACK_ROWS, forward_packed, pack_texts
from attnviz.engine.computing.kept_memory import kept_besides
from attnviz.engine.computing.layers import head_grams, head_output_share, head_value_norms, kv_group
from attnviz.engine.computing.logits import LMHead, build_head
from attnviz.engine.computing.longdoc import check_dense, is_long
from attnviz.engine.computing.patterns import check_finite, non_finite_layer
from attnviz.engine.reading.layout import Weights
from attnviz.engine.reading.tokenizer import Encoded, TextTokenizer
from attnviz.engine.reading.token_text import quoted
from attnviz.engine.computing.request import PLAIN, Prepared, RunRequest, kept_positions
from attnviz.engine.computing.run_result import RunResult, kept_sizes
from attnviz.engine.computing.text_input import check_ids, clean_text, parse_typed_ids
from attnviz.engine.computing.trace import KVCache, Trace
from attnviz.engine.reading.budget import LayerStore
from attnviz.engine.reading.mapped_files import check_files
from attnviz.engine.reading.memory_budget import default_budget, grams_bytes

log = logging.getLogger(__name__)


class Model:
    """A loaded model: weights, tokenizer and, for a causal model, the KV cache of its last runs.
    Safe across threads: one run at a time uses the cache, any other computes in full."""

    quantization: str | None = None  # the type a quantized copy was made at (computing/quantized.py)

    def __init__(self, name: str, path: Path, config: ModelConfig, weights: Weights,
                 tokenizer: TextTokenizer | None, license: str | None = None,
                 notice: str | None = None):
        self.name = name
        self.notice = notice  # one line for the user, e.g. why there is no tokenizer
        self.no_tokenizer = notice if tokenizer is None else None  # (a loader's notice says why)
        self.path = path
        self.config = config
        self._weights = weights  # (read through `weights`)
        self.tokenizer = tokenizer
        self.license = license
        self.kv_group = kv_group(config.n_head, config.n_kv_head)
        # The cache belongs to this Model alone. Only a run holding _cache_lock reads or updates it
        # (a run that bypasses it reports its byte count, one int, as a snapshot); a run finding the
        # lock taken computes in full and leaves the cache alone: it never waits. Nor does a swap
        # (adopt_cache): made at once, or by the run holding the lock as it lets it go.
        self._cache = KVCache() if config.causal else None
        self._cache_lock = threading.Lock()
        self._swap_lock = threading.Lock()
        self._swap: tuple | None = None  # (the cache, clears) a run holding the cache makes as it ends
        self._clears = 0  # clear_cache calls so far (cache_clears)
        self._head: LMHead | None = None  # lm_head(): built on first use
        self._pack = None  # the packed copy of the head a new budget let go: the same table's, kept
        self._head_lock = threading.Lock()
        self._grams: tuple | None = None  # (the layers they come from, each layer's or None): output_grams()
        self._grams_lock = threading.Lock()
        # weak references to the models open beside this one (Compare's other side): replaced whole,
        # never changed in place, so a thread reading it meanwhile reads the old tuple or the new
        self._beside: tuple = ()

    @property
    def weights(self) -> Weights:
        """The weights, to read: every run and analysis reads them here, the files they map checked
        first (mapped_files.py: one fstat each; ModelFileChanged for one changed in place)."""
        weights = self._weights
        check_files(weights.files, self.path)
        return weights

    @weights.setter
    def weights(self, weights: Weights) -> None:
        self._weights = weights

    @property
    def unchecked_weights(self) -> Weights:
        """The weights for what they say of themselves (layer sizes, budget, packed types), their
        files not checked: never to read values from."""
        return self._weights

    def __repr__(self):
        c = self.config
        return (f"Model({self.name!r}, {c.model_type}, {c.n_layer} layers x {c.n_head} heads, "
                f"{c.n_kv_head} KV heads)")

    def set_memory_budget(self, n_bytes: int | None) -> None:
        """Keep as many expanded layers as `n_bytes` allow (None: the default, from the memory
        available now, the layers this model holds counted in, less room for the W_O Grams it and
        the models open beside it (open_beside) have not made yet); InputError for less than one
        layer. Prediction's unembedding is rebuilt under the new budget when next asked."""
        layers = self._weights.layers
        if not isinstance(layers, LayerStore):
            return  # built in memory (the textbook model): nothing to expand
        if n_bytes is None:
            unmade = self.grams_to_make() + sum(m.grams_to_make() for m in self.beside())
            free = default_budget(unmade, clamp=False)  # (memory short of the Grams takes it from the layers)
            n_bytes = None if free is None else max(max(layers.sizes), free + layers.held_bytes())
        layers.set_budget(n_bytes)
        head, self._head = self._head, None
        if head is not None and head.pack is not None:  # (the budget does not change it)
            self._pack = head.pack

    def let_go_layers(self) -> None:
        """Drop the float32 layers this model holds (a training step not shown while Compare's B is
        open): each is expanded again from its file when a run next needs it."""
        layers = self._weights.layers
        if isinstance(layers, LayerStore):
            layers.let_go()

    def leave_room(self, n_bytes: int) -> None:
        """Lower the memory budget by `n_bytes` that another model will take later (Compare's A:
        the W_O Grams it has not made yet, as B opens under the default budget), never below one
        layer; nothing where no budget limits the layers."""
        layers = self._weights.layers
        if n_bytes > 0 and isinstance(layers, LayerStore) and layers.budget is not None:
            self.set_memory_budget(max(max(layers.sizes), layers.budget - n_bytes))

    def open_beside(self, other) -> None:
        """`other` is open beside this model (Compare's B beside A, or A beside B) for as long as it
        lives: the default budget (set_memory_budget(None)) leaves room for its Grams too."""
        if other is not self:
            alive = tuple(r for r in self._beside if r() is not None and r() is not other)
            self._beside = (*alive, weakref.ref(other))

    def close_beside(self, other) -> None:
        """`other` is no longer open beside this model (Compare's A moved to another step)."""
        self._beside = tuple(r for r in self._beside if r() is not None and r() is not other)

    def beside(self) -> list:
        """The models open beside this one that are still alive (open_beside)."""
        return [m for m in (r() for r in self._beside) if m is not None]

    def budgeted_bytes(self) -> tuple[int, int]:
        """(float32 layers held now, the unembedding's float32 copy kept now) in bytes: what of this
        model a chosen memory budget holds (the copy is kept only where the budget holds every
        layer and it besides: logits._fits). The packed blocks, W_O Grams and embeddings come on
        top of it."""
        layers = self._weights.layers
        head = self._head
        copy = getattr(getattr(head, "w_u", None), "kept", None)
        return (layers.held_bytes() if isinstance(layers, LayerStore) else 0,
                copy.nbytes if isinstance(copy, np.ndarray) else 0)

    def lm_head(self) -> LMHead:
        """This model's final norm and unembedding, ready for logits (engine/computing/logits.py),
        built on first use and kept until the memory budget changes (its copy packed for the
        kernels, made for the same table, kept then too). NoPrediction, in one line,
        for an encoder, a file missing its final norm or unembedding, or non-finite values in them."""
        check_files(self._weights.files, self.path)  # (a head built before reads the files)
        head = self._head
        if head is None:
            with self._head_lock:
                if self._head is None:
                    head = build_head(self)
                    if head.pack is not None and self._pack is not None:
                        head = replace(head, pack=self._pack)
                    self._head = head
                head = self._head
        return head

    @property
    def memory(self) -> str | None:
        """One line: the memory budget and the layers it keeps expanded, then what the model keeps
        beside them now, with its bytes (kept_memory.kept_besides: float32 or in-memory tables,
        the unembedding's copies, the W_O Grams), if any (None: not budgeted)."""
        weights = self._weights
        if not isinstance(weights.layers, LayerStore):
            return None
        also = kept_besides(weights, self._head, self._grams_made())
        return weights.layers.describe() + (f"; also kept: {', '.join(also)}" if also else "")

    def _grams_made(self) -> tuple[int, int, int] | None:
        """(layers whose W_O Grams are held, layers, the Grams' bytes); None where none were asked
        for (output_grams)."""
        held = self._grams
        if held is None:
            return None
        made = [g for g in held[1] if g is not None]
        return len(made), len(held[1]), sum(g.nbytes for g in made)

    def grams_held(self) -> int:
        """Bytes of the W_O Grams this model holds now (output_grams)."""
        return 0 if (made := self._grams_made()) is None else made[2]

    def grams_to_make(self) -> int:
        """Bytes of the W_O Grams this model has not made yet: the room its default budget, and
        that of a model open beside it, leave for them (memory_budget.grams_bytes)."""
        return grams_bytes(self.config) - self.grams_held()

    def clear_cache(self) -> int:
        """Forget the KV cache. Never waits: a run in progress with the cache finishes on it, and
        the swap, and its count, come as it ends (one cache, one count throughout) -> adopt_cache's."""
        return self.adopt_cache(KVCache())

    def adopt_cache(self, cache: KVCache) -> int:
        """Make `cache` (filled by runs that brought it as their trace's `past`) the model's KV
        cache in place of the one it had, counted as a clear (what that one held is gone); where a
        run with the cache is on, as it ends (clear_cache). -> cache_clears once it is made."""
        with self._swap_lock:
            if self._cache is None:
                return self._clears
            clears = 1 + (self._swap[1] if self._swap is not None else 0)
            self._swap = (cache, clears)
            if self._cache_lock.acquire(blocking=False):  # (no run on: swapped now)
                self._release_cache()
            return self._clears + (self._swap[1] if self._swap is not None else 0)

    def _release_cache(self) -> None:  # (the lock holder's last act, under _swap_lock)
        if self._swap is not None:
            (self._cache, clears), self._swap = self._swap, None
            self._clears += clears
        self._cache_lock.release()

    @property
    def cache_clears(self) -> int:
        """How many times the KV cache was cleared (clear_cache, a run refused): a pair.Follower
        reads it to clear B's cache where A's was cleared between two of A's runs."""
        return self._clears

    @property
    def cache_promotions(self) -> int:
        """Earlier runs the KV cache made its current one since it was last cleared (KVCache.promoted:
        a run stopped after that leaves it made): a pair.Follower compares A's and B's."""
        cache = self._cache
        return cache.promoted if cache is not None else 0

    def run(self, text=None, *, ids=None, request: RunRequest = PLAIN,
            trace: Trace | None = None) -> RunResult:
        """Attention patterns of `text` (with the model's special tokens), raw `ids` (without), or a
        text already `prepare`d, with the options of `request` (request.RunRequest).

        `trace`: a Trace asking for more (head outputs z, the residual stream) or carrying edits;
        it is filled and returned as result.trace. A text whose patterns at once would pass the
        dense limit runs as request.long says (a longdoc.LongRun is returned) or is refused."""
        t0 = time.perf_counter()
        if isinstance(text, Prepared) and ids is not None:
            raise InputError("give a prepared text or ids, not both")
        check_files(self._weights.files, self.path)  # (before the tokens: a GGUF's tokenizer reads it)
        prep = text if isinstance(text, Prepared) else self.prepare(text, ids=ids, request=request)
        given, trace = trace, Trace() if trace is None else trace
        if trace.want_patterns and is_long(self.config, len(prep.ids), request.dense_limit):
            if request.long is None:
                check_dense(self.config, len(prep.ids), request.dense_limit)  # DenseTooLarge
            return request.long(prep)  # decided here, once: the text's rows in blocks, no dense patterns
        use_cache = request.use_cache
        if request.stop is not None:
            trace.stop = request.stop
        if request.layers is not None:
            if not 1 <= request.layers <= self.config.n_layer:
                raise InputError(f"layers must be 1..{self.config.n_layer} for {self.name}, "
                                 f"got {request.layers}")
            trace.end, use_cache = int(request.layers), False
        trace.want_values |= request.values
        trace.want["inputs"] |= request.inputs
        early = request.early
        if early is not None and trace.want_patterns and 1 <= early[0] < trace.n_run(self.config.n_layer):
            k, tell = early

            def partial(tr):
                part = tr.attentions[:k]
                if non_finite_layer(part[:, :, tr.reused:]) is None:  # (the full run refuses it)
                    tell(self._result(prep, part, t0, tr.reused))
            trace.early = (k, partial)
        attentions, reused, kept, used = self._forward(prep.ids, use_cache, trace)
        try:
            # a long trace keeps no patterns (it checks its own rows); rows a cached run gave were
            # checked when computed (a run refused clears the cache)
            if attentions is not None and reused < attentions.shape[2]:
                check_finite(self.name, attentions[:, :, reused:])
        except ModelLoadError:
            self.clear_cache()  # the bad rows' keys and values are cached: the next run recomputes all
            raise
        norms, share = self.value_norms(attentions, trace.v) if request.values else (None, None)
        inputs = tuple(trace.inputs[:trace.n_run(self.config.n_layer)]) if request.inputs else None
        return self._result(prep, attentions, t0, reused, **kept, cache_used=used,
                            value_norms=norms, head_share=share,
                            layer_inputs=inputs, trace=given)

    def _result(self, prep: Prepared, attentions, t0: float, reused: int, **more) -> RunResult:
        """A RunResult of the prepared text `prep` with these patterns, timed from t0."""
        return RunResult(text=prep.text, tokens=list(prep.tokens), labels=list(prep.labels),
                         offsets=list(prep.offsets), input_ids=prep.ids, attentions=attentions,
                         kv_group=self.kv_group.copy(), truncated=prep.truncated,
                         n_tokens_full=prep.n_full, compute_s=time.perf_counter() - t0,
                         cache_reused=reused, cache_computed=len(prep.ids) - reused,
                         notice=prep.notice, **more)

    def run_many(self, texts, *, truncate: bool = False, max_tokens: int | None = None) -> list:
        """Several texts' patterns, as run(text, request=RunRequest(truncate=..., max_tokens=...,
        use_cache=False)) gives each, computed together: the texts' rows go through the weights in
        one pass (PACK_ROWS rows and PACK_PATTERN_BYTES of patterns at most per pass;
        packed.pack_texts), which for short texts (a corpus scan) takes a fraction of the time of
        one run per text. -> one entry per text, in order: its RunResult, or the AttnvizError its
        run would raise (the others are still computed)."""
        out: list = [None] * len(texts)
        for i, result in self.iter_many(texts, truncate=truncate, max_tokens=max_tokens):
            out[i] = result
        return out

    def iter_many(self, texts, *, truncate: bool = False, max_tokens: int | None = None, stop=None,
                  progress=None):
        """run_many one pass at a time: yields (index, RunResult or AttnvizError) as each pass ends,
        so a caller that drops each result holds one pass's patterns at most (errors first).
        `stop()`: asked before each layer of a pass (forward_packed); once True, Cancelled.
        `progress(layers done, layers in all)`: the layers of every pass in turn (n_layer a pass),
        called with 0 once the texts are packed, then after each layer."""
        request = RunRequest(truncate=truncate, max_tokens=max_tokens, use_cache=False)
        ready = []  # (index, Prepared)
        for i, text in enumerate(texts):
            try:
                prep = self.prepare(text, request=request)
                check_dense(self.config, len(prep.ids))
                ready.append((i, prep))
            except AttnvizError as exc:
                yield i, exc
        c = self.config
        passes = pack_texts([len(prep.ids) for _, prep in ready], c.n_layer, c.n_head, PACK_ROWS,
                            PACK_PATTERN_BYTES)
        total = c.n_layer * len(passes)
        if progress is not None:
            progress(0, total)
        for p, pack in enumerate([ready[k] for k in ks] for ks in passes):
            t0 = time.perf_counter()
            layer_done = None if progress is None else (
                lambda i, _n, base=p * c.n_layer: progress(base + i, total))
            patterns = forward_packed(self.config, self.weights, [prep.ids for _, prep in pack], stop,
                                      layer_done)
            spent = (time.perf_counter() - t0) / len(pack)
            for k, (i, prep) in enumerate(pack):
                attentions, patterns[k] = patterns[k], None  # the caller's to keep or drop
                try:
                    check_finite(self.name, attentions)
                except ModelLoadError as exc:
                    yield i, exc
                    continue
                yield i, RunResult(
                    text=prep.text, tokens=prep.tokens, labels=prep.labels, offsets=prep.offsets,
                    input_ids=prep.ids, attentions=attentions, kv_group=self.kv_group.copy(),
                    truncated=prep.truncated, n_tokens_full=prep.n_full, compute_s=spent,
                    cache_computed=len(prep.ids), notice=prep.notice)

    def encode(self, text: str | None = None, *, ids=None) -> tuple[np.ndarray, list[str], str | None]:
        """Text (with the model's special tokens) or ids (without) -> (ids int64 [T], their token
        labels, a notice or None), checked as run checks them, without running anything."""
        prep = self.prepare(text, ids=ids)
        return prep.ids, list(prep.tokens), prep.notice

    def labels(self, ids) -> list[str]:
        """Token ids -> their labels as the window shows them (no tokenizer: the ids, as text)."""
        if self.tokenizer is None:
            return [str(int(i)) for i in ids]
        return self.tokenizer.labels_for_ids([int(i) for i in ids])[1]

    def decode(self, ids, skip_special: bool = False) -> str:
        """Token ids -> their text (special tokens written out unless skip_special); the ids as a
        model without a tokenizer reads them typed ("5, 17, 3")."""
        if self.tokenizer is None:
            return ", ".join(str(int(i)) for i in ids)
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def prepare(self, text: str | None = None, *, ids=None, request: RunRequest = PLAIN) -> Prepared:
        """text or ids -> the ids to run, tokenised once (cut to the limit when request.truncate),
        with their tokens; InputError for a text over the limit without truncate. Text is taken as
        a tokenizer can read it (clean_text: lone surrogates become U+FFFD, the notice says so);
        anything but a str is an InputError, and so is an empty id list or a text that gives no
        tokens: a run always has at least one token."""
        text, notice, enc = self._encode(text, ids)
        ids = np.asarray(enc.ids, dtype=np.int64)
        keep = kept_positions(len(ids), enc.special[-1], self.config.max_positions, request)
        if keep is not None:
            ids = ids[keep]
        # cut first, then labelled: a paste far over the limit labels only the tokens it keeps
        tokens, labels, offsets = self._pieces(text, enc, keep, request.labels)
        return Prepared(text, notice, ids, tokens, labels, offsets, keep is not None, len(enc.ids))

    def _pieces(self, text: str, enc: Encoded, keep, labels: bool) -> tuple[list, list, list]:
        """(pieces, labels, offsets) of the tokens of `enc` at positions `keep` (None: all). Ids
        given (enc.tokens None) get their pieces from the vocabulary, "" with labels=False."""
        def pick(seq) -> list:
            return list(seq) if keep is None else [seq[i] for i in keep]
        ids, offsets = pick(enc.ids), pick(enc.offsets)
        if enc.tokens is not None:
            tokens = pick(enc.tokens)
            return tokens, self.tokenizer.label(ids, tokens, pick(enc.special), text), offsets
        if not labels:
            tokens = names = [""] * len(ids)
        elif self.tokenizer is not None:
            tokens, names = self.tokenizer.labels_for_ids(ids)
        else:
            tokens = names = self.labels(ids)
        return tokens, names, offsets

    def _encode(self, text, ids) -> tuple[str, str | None, Encoded]:
        """text or ids -> (the text as run, its notice, the tokens, without labels: Model._pieces
        makes them for the tokens kept). Ids, given or typed as the text of a model without a
        tokenizer, come without special tokens and without pieces (tokens None); text gets the
        model's special tokens."""
        if (text is None) == (ids is None):
            raise InputError("give text or ids to run" if text is None else
                             "give text or ids, not both")
        notice = None
        if text is not None:
            text, notice = clean_text(text)
            if self.tokenizer is None:  # the text itself may be token ids: "5, 17, 3"
                ids = parse_typed_ids(text)
                if not ids:  # not ids, or nothing typed (the loader's notice says why there is no tokenizer)
                    raise InputError(f"{self.name}: {self.no_tokenizer}" if self.no_tokenizer else
                                     f"{self.name} has no tokenizer: type token ids instead, e.g. 5, 17, 3")
        if ids is not None:
            ids = check_ids(ids, self.config.vocab_size)
            return text or "", notice, Encoded(ids.tolist(), None, [], [(0, 0)] * len(ids),
                                               [False] * len(ids))
        enc = self.tokenizer.encode(text, labels=False)
        if not enc.ids:
            raise InputError("nothing to run: the text gives no tokens" +
                             ("; type something" if not text.strip() else
                              f" ({self.name}'s tokenizer drops all of it)"))
        if max(enc.ids) >= self.config.vocab_size:  # a tokenizer.json that is not this model's
            i = next(n for n, t in enumerate(enc.ids) if t >= self.config.vocab_size)
            label = self.tokenizer.label(enc.ids[:i + 1], enc.tokens[:i + 1], enc.special[:i + 1], text)[-1]
            raise ModelLoadError(
                f"{self.name}: the tokenizer gives token id {enc.ids[i]} ({quoted(label)}), but "
                f"the model has {self.config.vocab_size} embedding rows "
                f"(0..{self.config.vocab_size - 1}): its tokenizer.json does not match its weights")
        return text, notice, enc

    def value_norms(self, attentions, v_layers):
        """Patterns [n_layer, n_head, T, T] and each layer's V [n_kv_head, T, d_head] -> value norms
        ||v_j W_O(h)|| [n_layer, n_head, T] and head shares [n_layer, n_head] (value-weighted
        attention), for the layers the patterns hold (a run that ended early: its layers).
        attentions None (a long run keeps no patterns): the norms of every layer in v_layers, no
        shares. Both from each layer's W_O Grams (output_grams), not from W_O."""
        c = self.config
        shape = attentions.shape[:3] if attentions is not None else (
            len(v_layers), c.n_head, v_layers[0].shape[1])
        norms = np.empty(shape, dtype=np.float32)
        share = None if attentions is None else np.empty(attentions.shape[:2], dtype=np.float32)
        for i, v in enumerate(v_layers[:len(norms)]):
            gram = self.output_grams(i)
            norms[i] = head_value_norms(v, gram, c.n_group)
            if attentions is not None:
                share[i] = head_output_share(attentions[i], v, gram, c.n_group)
        return norms, share

    def output_grams(self, i: int) -> np.ndarray:
        """Layer i's per-head W_O Grams [n_head, d_head, d_head] (layers.head_grams), made from its
        W_O when first asked for and kept with the model: n_head d_head^2 floats a layer, d_head /
        d_model of W_O, so a model held in its file's blocks does not dequantise W_O again for each
        run's value norms. Made again from new weights (self.weights replaced: an edited W_O); a
        model's weight arrays are never changed in place. Counted beside the layers: a loader's
        default memory budget leaves room for them (memory_budget.grams_bytes), and `memory` and
        grams_held say what is held."""
        layers = self._weights.layers
        held = self._grams
        if held is None or held[0] is not layers:
            with self._grams_lock:
                held = self._grams
                if held is None or held[0] is not layers:
                    held = self._grams = (layers, [None] * len(layers))
        gram = held[1][i]
        if gram is None:  # (two threads may both make it: the same bits)
            check_files(self._weights.files, self.path)  # (W_O read from the layers)
            gram = held[1][i] = head_grams(output_projection(layers, i)[0], self.config.n_head)
        return gram

    def _forward(self, ids: np.ndarray, use_cache: bool, trace: Trace) -> tuple:
        """ids [T] -> (patterns [n_layer, n_head, T, T], tokens reused, what the model's cache
        holds after it (kept_sizes), whether this run used the cache), with `trace` filled. The
        run uses the cache when it may (a causal model, use_cache, a trace without edits, and no
        other run holding it) and computes in full otherwise (its files checked by `run`, just before)."""
        if trace.past is not None:  # the trace's own (run_long's reuse, a generation's): the model's untouched
            forward(self.config, self._weights, ids, trace, trace.past)
            return trace.attentions, trace.past.reused, kept_sizes(self._cache), False
        owns = (use_cache and self._cache is not None and not trace.edits and not trace.start
                and self._cache_lock.acquire(blocking=False))
        try:
            cache = self._cache if owns else None  # read under the lock: clear_cache may swap it
            forward(self.config, self._weights, ids, trace, cache)
            kept = cache if cache is not None else self._cache  # the one this run used, or the model's
            return (trace.attentions, cache.reused if cache is not None else 0, kept_sizes(kept),
                    cache is not None)
        finally:
            if owns:
                with self._swap_lock:
                    self._release_cache()


def token_text(model, i: int) -> str:
    """Token id -> its display label (Model.labels)."""
    return model.labels([i])[0]
