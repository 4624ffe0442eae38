"""Generation: new tokens from a prompt, one KV-cached step each, and what each step read. Pure
NumPy, no Qt.

Step s (0-based) reads T = len(prompt) + s tokens: the prompt and the tokens chosen before it. The
prompt is run once (prefill); every later step runs only its one new token against the
generation's own KV cache (a KVCache its traces bring, Trace.past), never the model's: that one
serves the window's runs of the text, which may hold it at any moment. From the final-norm input
of the last position the model's head (Model.lm_head: final norm and unembedding) gives the
next-token log-probabilities; the token is their argmax (greedy, the default), or a draw at a
temperature from the smallest set of tokens whose probability reaches top_p, with a seeded
generator so a run can be repeated.

Each Step keeps the token, the top-k it was drawn from, the bytes of K and V the generation's
cache held when it was chosen (its T tokens, as the cache counted them from the arrays: the
calculator's kv_bytes_sequence at T for a model without a sliding window), and, when asked, the last
position's row in every head [n_layer, n_head, T]: what the token that chose it read.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnviz.engine.errors import InputError
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.logits import Unembedding, log_softmax
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.run_result import allocated_bytes
from attnviz.engine.computing.trace import KVCache, LayerCache, Trace, kv_room
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.sampling import MIN_TEMPERATURE, draw_p, draw_set, pick

TOP_K = 5
log = logging.getLogger(__name__)


class _StepTrace(Trace):
    """What a generation step asks of the forward pass: K and V for the cache, the final-norm input
    of the last position, and (rows=True) the last position's pattern row in every layer; no
    dense patterns and no per-position records."""

    one_call = "step"  # onerow_stack: every layer to its end, the last rows and final kept after

    def __init__(self, rows: bool, past: KVCache):
        super().__init__(patterns=False)
        self.past = past  # the generation's own cache (see the module docstring)
        self.keep_rows = rows
        self.final: np.ndarray | None = None  # [1, d_model]
        self.last_rows: list = []  # per layer [n_head, T]

    @property
    def wants_output(self) -> bool:  # every layer runs to the end: the logits need its output
        return True

    def begin(self, n_layer, ids, p=0):
        super().begin(n_layer, ids, p)
        self.last_rows = [None] * n_layer

    def record_resid(self, i, x, past):
        if i == len(self.last_rows):  # (the last layer's output: nothing writes it after)
            self.final = x[-1:]

    def slot(self, i, past, rows):
        return _StepSlot(self, i, past, rows)


class _StepSlot(LayerCache):
    def pattern(self, a):  # [n_head, n, T]: keep the last query row
        if self.trace.keep_rows:
            self.trace.last_rows[self.i] = np.array(a[:, -1])


@dataclass(frozen=True)
class Step:
    id: int  # the chosen token
    token: str  # its label
    T: int  # tokens read to choose it (len(prompt) + step index)
    kv_bytes: int  # bytes of K and V the generation's cache held when it was chosen (its T tokens)
    kv_held: int  # bytes of the arrays holding them: with the room they keep for next positions
    top_ids: np.ndarray  # [k] int64, most likely first
    top_logprobs: np.ndarray  # [k] float64
    top_tokens: list  # [k] labels
    top_drawn: np.ndarray | None = None  # [k] float64: each one's probability in the draw (None: greedy)
    rows: np.ndarray | None = None  # [n_layer, n_head, T]: the last position's row in every head

    def top_json(self) -> list[dict]:  # as `attnviz predict --json` writes its top, and p in the draw
        drawn = [None] * len(self.top_ids) if self.top_drawn is None else self.top_drawn.tolist()
        return [{"id": int(i), "token": t, "logprob": float(lp), **({} if d is None else {"p_drawn": d})}
                for i, t, lp, d in zip(self.top_ids, self.top_tokens, self.top_logprobs, drawn)]


@dataclass
class Generation:
    prompt_ids: list[int]
    steps: list[Step] = field(default_factory=list)
    stopped: str = ""  # "eos", "max_new", "context" (the model's positions), "stopped" (should_stop)
    notice: str | None = None  # what was changed in the prompt text, if anything (RunResult.notice)

    @property
    def new_ids(self) -> list[int]:
        return [s.id for s in self.steps]


def eos_ids(model) -> frozenset:
    """The model's end-of-sequence token ids (config.json's eos_token_id, an int or a list; GGUF's
    tokenizer.ggml.eos_token_id)."""
    v = (getattr(model.config, "raw", {}) or {}).get("eos_token_id")
    return frozenset(int(x) for x in (v if isinstance(v, list) else [v])
                     if isinstance(x, int) and not isinstance(x, bool))


def check_sampling(temperature: float, top_p: float, max_new: int) -> None:
    if not (isinstance(max_new, int) and max_new >= 1):
        raise InputError(f"the number of new tokens must be a whole number >= 1, got {max_new!r}")
    if not np.isfinite(temperature) or temperature < 0:
        raise InputError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if 0 < temperature < MIN_TEMPERATURE:  # (choose's softmax would be NaN: sampling.py)
        raise InputError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {temperature:g}")
    if not (np.isfinite(top_p) and 0 < top_p <= 1):
        raise InputError(f"top-p must be in (0, 1], got {top_p}")


def generate(model, text: str | None = None, *, ids=None, max_new: int, temperature: float = 0.0,
             top_p: float = 1.0, seed: int | None = None, ignore_eos: bool = False,
             rows: bool = False, k: int = TOP_K, on_step: Callable[[Step], None] | None = None,
             should_stop: Callable[[], bool] | None = None) -> Generation:
    """Up to `max_new` tokens after `text` (with the model's special tokens; or a text
    Model.prepare gave) or `ids`, one cached
    step each (module docstring). Stops at the model's end-of-sequence token (kept as the last
    step) unless ignore_eos, at the model's context, or when should_stop() says so (checked before
    each step). on_step(step) is called as each token arrives."""
    check_sampling(temperature, top_p, max_new)
    head = model.lm_head()  # NoPrediction for an encoder or a file without a head, before any run
    if isinstance(head.w_u, Unembedding):
        head.w_u.expect_passes(max_new)
    rng = np.random.default_rng(seed)
    eos = frozenset() if ignore_eos else eos_ids(model)
    packing = pack_head_ahead(head)
    try:
        return _generate(model, text, ids, head, max_new, temperature, top_p, rng, eos, rows, k,
                         on_step, should_stop)
    finally:
        if packing is not None:
            packing.join()


def pack_head_ahead(head) -> threading.Thread | None:
    """Where every step's logits will come from the unembedding packed for the kernels (one row:
    LMHead.packed_for) and it is not packed yet, pack it on a thread of its own while the prefill
    runs (on the other core), rather than after it. The same table either way (PackedUnembedding
    packs once, under its lock); what the thread meets going wrong the step's own get() meets
    again and raises."""
    pack = head.pack
    if pack is None or pack.made or not pack.could_take(1):
        return None

    def run():
        try:
            pack.get()
        except Exception:  # (raised again by the step's own get(), in the caller's thread)
            log.debug("packing the unembedding ahead failed", exc_info=True)

    t = threading.Thread(target=run, name="attnviz-pack-head", daemon=True)
    t.start()
    return t


def _generate(model, text, ids, head, max_new, temperature, top_p, rng, eos, rows, k, on_step,
              should_stop) -> Generation:
    cache = KVCache()  # the prefill computes the prompt: its last position gives the first token
    first = model.run(text, ids=ids, trace=_StepTrace(rows, cache),
                      request=RunRequest(labels=False))
    gen = Generation(prompt_ids=first.input_ids.tolist(), notice=first.notice)
    seq = list(gen.prompt_ids)
    limit = model.config.max_positions
    # the ids [T] each step runs: a view of one array each token is written into, not an array
    # made from seq anew each step (room for the steps the loop may run: max_new, below limit)
    ids_at = np.empty(max(len(seq), min(len(seq) + max_new, limit)), np.int64)
    ids_at[:len(seq)] = seq
    trace = first.trace
    while True:
        logprobs = log_softmax(head.logits(trace.final)[0])  # [vocab] float64
        top = top_ids(logprobs, k)
        drawn = draw_set(logprobs, temperature, top_p) if temperature > 0 else None  # (once a step)
        token = int(np.argmax(logprobs)) if drawn is None else pick(drawn, rng)
        labels = [token_text(model, i) for i in [token, *top.tolist()]]
        kv_bytes, kv_held = held_kv(cache, trace, len(seq))
        step = Step(id=token, token=labels[0], T=len(seq), kv_bytes=kv_bytes, kv_held=kv_held,
                    top_ids=top.astype(np.int64), top_logprobs=logprobs[top], top_tokens=labels[1:],
                    top_drawn=None if drawn is None else draw_p(drawn, top),
                    rows=np.stack(trace.last_rows) if rows else None)
        gen.steps.append(step)
        seq.append(token)
        if on_step is not None:
            on_step(step)
        if token in eos:
            gen.stopped = "eos"
            break
        if len(gen.steps) >= max_new or len(seq) >= limit:
            gen.stopped = "max_new" if len(gen.steps) >= max_new else "context"
            break
        if should_stop is not None and should_stop():
            gen.stopped = "stopped"
            break
        ids_at[len(seq) - 1] = token
        trace = run_step(model, ids_at[:len(seq)], rows, cache)
    return gen


def run_step(model, ids: np.ndarray, rows: bool, cache: KVCache) -> _StepTrace:
    """A generation step's run of ids [T] (int64; all but the last token the cache's): the forward
    pass Model.run gives a trace that brings its own cache, without the RunResult no step reads
    (its labels, the counts of the model's cache). The new token is checked against the vocabulary
    as Model.run checks ids (a head wider than the embedding could choose one past it)."""
    V = model.config.vocab_size
    if not 0 <= ids[-1] < V:
        raise InputError(f"token id {int(ids[-1])} at position {len(ids) - 1} is outside this "
                         f"model's vocabulary 0..{V - 1}")
    trace = _StepTrace(rows, cache)
    forward(model.config, model.weights, ids, trace, cache)
    return trace


TOP_BLOCKS = 64  # top_ids: blocks of the vocabulary whose maxima bound the k-th largest


def top_ids(logprobs: np.ndarray, k: int) -> np.ndarray:
    """logprobs [vocab] -> the ids of the k largest [k], most likely first, the lowest id first
    among equals (as choose's argmax; np.argsort(-logprobs, kind="stable")[:k]). Only the values
    at least the k-th largest of TOP_BLOCKS block maxima are sorted (the k largest are among them:
    k blocks' maxima are k values): a step reads the vocabulary twice, not a full partition."""
    V = len(logprobs)
    k = min(k, V)
    if k <= 0:
        return np.empty(0, np.int64)
    starts = np.arange(0, V, -(-V // TOP_BLOCKS))  # (fewer than TOP_BLOCKS where V does not divide)
    if V > 4 * TOP_BLOCKS and k <= len(starts):
        maxima = np.maximum.reduceat(logprobs, starts)
        floor = np.sort(maxima)[len(maxima) - k]  # (NaN sorts last: then no value reaches it)
        near = np.flatnonzero(logprobs >= floor)  # [m] ids, m >= k, ascending
        if len(near) >= k:
            return near[np.argsort(-logprobs[near], kind="stable")[:k]]
    return np.argsort(-logprobs, kind="stable")[:k]  # (a small vocabulary, or NaN among the values)


def held_kv(cache: KVCache, trace: Trace, T: int) -> tuple[int, int]:
    """(bytes of K and V `cache` holds, which must be those of the T tokens `trace` just ran and
    stored there: its arrays [n_kv_head, T, d_head] per layer, without the room they keep for
    later positions; bytes of the arrays they lie in, with that room). As the cache counted them
    (KVCache.nbytes) and the run knew them (Trace.kv_held), else from the arrays."""
    if len(cache.ids) != T or cache.k is not trace.k or cache.v is not trace.v or not cache.k or any(
            a.shape[1] != T for a in (cache.k[0], cache.k[-1], cache.v[0], cache.v[-1])):
        raise RuntimeError(f"the generation's KV cache holds {len(cache.ids)} tokens, not the {T} just run")
    held = trace.kv_held if trace.kv_held is not None else allocated_bytes([*cache.k, *cache.v])
    return cache.nbytes, held


def kv_positions(T0: int, T: int) -> tuple[int, int]:
    """(positions a generation's K and V arrays keep at most once it reads T tokens after a prompt
    of T0, the most they keep at once on the way there). The prompt's are its T0 positions; a step
    that finds no room copies them into arrays with room for kv_room more (trace.append_positions,
    or onerow_stack's one buffer of every layer, which a step may move them to with room still
    left), and until the copy is done the old arrays lie beside the new ones."""
    if T <= T0:
        return T0, T0
    held = T + kv_room(T)  # (a copy made at t <= T has room up to t + kv_room(t))
    before = T0 if T == T0 + 1 else T - 1 + kv_room(T - 1)  # the arrays a copy at T leaves
    return held, before + held


def kv_bytes_per_position(cfg) -> int:
    """Bytes of one position's K and V in every layer, float32 as the engine holds them."""
    return 2 * cfg.n_layer * cfg.n_kv_head * cfg.d_head * 4


def decode(model, ids: list[int]) -> str:
    """The text of `ids` (special tokens written out), or the ids themselves without a tokenizer
    (Model.decode)."""
    return model.decode(ids)
