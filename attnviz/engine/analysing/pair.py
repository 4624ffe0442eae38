"""Two runs of one shape side by side: the object comparison and activation patching share.

A `Pair` holds two `Run`s with the same token count, layers and heads, each with its own Trace.
- Comparison: one token list through model A and model B (`models_pair`): a model against its
  quantization, a fine-tune or another checkpoint.
- Patching: one model on a clean and a corrupted text of one length (`texts_pair`).
The metrics on a pair are pure functions of the two traces (`engine/analysing/compare.py`,
`engine/analysing/patching.py`); a run against itself gives each metric's identity value.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnviz.engine.computing.families import forward
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.trace import KVCache, Trace
from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.reading.token_text import quoted, tokens

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """One side of a pair: what ran (`model`), on which ids [T], and the trace it filled."""
    label: str  # how the window and the command line name this side: "A", "B", "clean", "corrupt"
    model: object  # an attnviz Model
    ids: np.ndarray  # int64 [T]
    trace: Trace

    @property
    def attentions(self) -> np.ndarray:  # [n_layer, n_head, T, T]
        return self.trace.attentions


@dataclass(frozen=True)
class Pair:
    """Two runs of one shape: a.ids and b.ids have the same length, both models the same layers
    and heads (checked when the pair is made)."""
    a: Run
    b: Run

    @property
    def T(self) -> int:
        return len(self.a.ids)

    @property
    def n_layer(self) -> int:
        return self.a.model.config.n_layer

    @property
    def n_head(self) -> int:
        return self.a.model.config.n_head

    def swapped(self) -> Pair:
        """The same two runs, b first (patching's `noise` direction reads the pair this way)."""
        return Pair(self.b, self.a)


def check_same_shape(a, b) -> None:
    """InputError, in one line naming both models and both numbers, unless the models have the same
    layers, heads, KV heads and causality (what a head-by-head comparison needs)."""
    ca, cb = a.config, b.config
    for what, x, y in (("layers", ca.n_layer, cb.n_layer), ("query heads", ca.n_head, cb.n_head),
                       ("KV heads", ca.n_kv_head, cb.n_kv_head)):
        if x != y:
            raise InputError(f"{a.name} has {x} {what} and {b.name} has {y}: a pair needs models "
                             "of one shape")
    if ca.causal != cb.causal:
        raise InputError(f"{a.name} is {'causal' if ca.causal else 'an encoder'} and {b.name} "
                         f"is {'causal' if cb.causal else 'an encoder'}: a pair needs one kind")


def vocabulary(model) -> list[str]:
    """The model's token strings by id [vocab] (its tokenizer's; InputError without one)."""
    if model.tokenizer is None:
        raise InputError(f"{model.name} has no tokenizer: its vocabulary cannot be compared")
    raw = model.tokenizer.raw
    size = raw.get_vocab_size(with_added_tokens=True)
    return [raw.id_to_token(i) for i in range(size)]


def check_same_vocab(a, b) -> None:
    """InputError, in one line naming both sizes and the first differing token, unless the two
    models' vocabularies hold the same token strings in the same order. Two models without a
    tokenizer (raw ids only) need the same number of embedding rows."""
    if a.tokenizer is None and b.tokenizer is None:
        if a.config.vocab_size != b.config.vocab_size:
            raise InputError(f"{a.name} has {a.config.vocab_size:,} token ids and {b.name} "
                             f"{b.config.vocab_size:,}: a pair needs one vocabulary")
        return
    va, vb = vocabulary(a), vocabulary(b)
    for i, (x, y) in enumerate(zip(va, vb)):
        if x != y:
            raise InputError(f"{a.name} ({len(va):,} tokens) and {b.name} ({len(vb):,} tokens) "
                             f"have different vocabularies: token {i} is {_label(a, i)} in one and {_label(b, i)} "
                             "in the other")
    if len(va) != len(vb):
        i = min(len(va), len(vb))
        extra = _label(a if len(va) > len(vb) else b, i)
        raise InputError(f"{a.name} ({len(va):,} tokens) and {b.name} ({len(vb):,} tokens) have "
                         f"different vocabularies: token {i} ({extra}) is in only one")


def _label(model, i: int) -> str:
    """Token id i of a model's vocabulary in a message: as the window labels it, between quotes."""
    return quoted(token_text(model, i))


def check_same_length(label_a: str, ids_a, label_b: str, ids_b) -> None:
    """InputError with both lengths unless the two id lists are equally long."""
    if len(ids_a) != len(ids_b):
        raise InputError(f"the {label_a} text is {tokens(len(ids_a))} and the {label_b} text "
                         f"{len(ids_b)}: a pair needs texts of one length")


def run_side(label: str, model, ids, trace: Trace) -> Run:
    """One side: `ids` [T] through `model`'s forward pass, filling `trace` (no KV cache, so the
    model's own cache and a window's typing runs are left alone)."""
    ids = np.asarray(ids, dtype=np.int64)
    return Run(label, model, ids, forward(model.config, model.weights, ids, trace))


def models_pair(a, b, ids, make_trace: Callable[[], Trace], labels=("A", "B")) -> Pair:
    """The same ids [T] through models a and b (same shape and vocabulary, checked first); each
    side gets a fresh trace from `make_trace`."""
    check_same_shape(a, b)
    check_same_vocab(a, b)
    return Pair(run_side(labels[0], a, ids, make_trace()), run_side(labels[1], b, ids, make_trace()))


def texts_pair(model, ids_a, ids_b, make_trace: Callable[[], Trace],
               labels=("clean", "corrupt")) -> Pair:
    """Two id lists of one length through one model; each side gets a fresh trace."""
    check_same_length(labels[0], ids_a, labels[1], ids_b)
    return Pair(run_side(labels[0], model, ids_a, make_trace()),
                run_side(labels[1], model, ids_b, make_trace()))


def _keep_also(trace: Trace, want: dict) -> None:
    """`trace` keeps the records `want` names (a Trace.want: A's run's) besides its own: B's
    trace of a run keeps what A's kept, so B's cache holds and weighs as A's, and never less than
    its own comparison reads (the residual stream, even where A's noted run kept none)."""
    for name, on in want.items():
        trace.want[name] = trace.want[name] or bool(on)


MAX_BEHIND = 6  # A's runs B may be behind by; further behind, both run the text afresh (Follower)


@dataclass(frozen=True)
class _Noted:
    """One of A's runs as B must replay it."""
    trace: weakref.ref  # A's trace, weakly
    ids: np.ndarray  # int64 [T]
    one_row: bool | None  # the steps A's run took (Trace.one_row)
    cached: bool  # whether it ran with A's cache (result.cache_used)
    want: dict  # the records A's trace kept (Trace.want): B's cache then holds, and weighs, as A's
    reused: int  # the tokens A's run took from its cache (Trace.reused)
    clears: int  # A's cache clears before it (Model.cache_clears): B clears its cache where they grew
    promoted: int  # A's cache's runs made current by then (Model.cache_promotions): B's since it followed
    dense_limit: int | None  # the dense limit A's run was made under (RunRequest.dense_limit): B's too


def noted(a, trace: Trace, cached: bool = True, dense_limit: int | None = None) -> _Noted:
    """Model a's run that filled `trace`, as a Follower replays it on B (Follower.note's
    arguments), read just after the run: a's cache's clears and promotions are then the run's."""
    return _Noted(weakref.ref(trace), trace.ids, trace.one_row, cached, dict(trace.want),
                  trace.reused, a.cache_clears, a.cache_promotions, dense_limit)


def whole_in_cache(a, run: _Noted) -> bool:
    """Whether model a's cache still holds `run` (noted) as its last, computed whole: every row in
    one chunk with the cache (nothing taken from it), and the cache neither cleared nor turned to
    an earlier run since. A Follower made with it (`last`) keeps a's cache and replays that run
    on B's, which then holds the same rows: a's run need not be made again for B. A model with
    no KV cache (an encoder) computes every row of every run in one chunk, and keeps nothing
    that B's runs must follow: any run of it whose trace is still held is whole."""
    if run.trace() is None:
        return False
    if not a.config.causal:
        return run.reused == 0
    return (run.cached and run.reused == 0
            and run.clears == a.cache_clears and run.promoted == a.cache_promotions)


class Follower:
    """Model B's KV cache kept in step with model A's while B follows A's typing runs: B runs the
    ids of each of A's runs, in A's order, each with the steps A's took (Trace.one_row), keeping
    the records A's kept (Trace.want: which runs a cache may reuse, and how much room its earlier
    runs take) and, as A's did, with its cache or apart from it. B's cache then takes the same
    runs as A's, and each of B's runs computes the same rows, in the same chunks, the same way as
    A's: a model compared with itself gives the same bits. A run of B that is stopped (a newer
    keystroke) or never started leaves A's run noted: the next `follow` runs it first. Each run
    of B, and a run made afresh, is made under the dense limit A's run was (note's and follow's
    `dense_limit`: the window's), so a text A ran dense runs dense on B too.

    Where B cannot follow, both caches are cleared and the text compared is run afresh on both
    sides, each computing every row in one chunk (`follow` does it): at the comparison after one
    B refused (an error: the runs noted are dropped, the error raised), once B is more than
    MAX_BEHIND of A's runs behind (keys typed faster than B followed: B would run each of them
    before the comparison), and where a run of B took another number of tokens from its cache
    than A's run did (logged).

    Made as B opens, it clears both caches: A's (rows typed a key at a time before B came would
    not be those of B's first run, one chunk of every row), so A's next run computes every row in
    one chunk, as B's first does; and B's (a checkpoint's model is kept, with the runs it made as
    A). Given A's `last` run (`noted`) where A's cache holds it whole (`whole_in_cache`: A's
    text run with nothing from the cache, and nothing since; any run of an encoder), A's cache is
    kept and that run noted, B's first: A's run is compared as it is, not made again. A's cache cleared between two of A's runs (a benchmark's pass, a run A refused) clears B's
    before B runs the later one. One thread at a time notes and follows (the window's pool), the
    thread that runs A's cached runs."""

    def __init__(self, a, b, last=None):
        self.a, self.b = a, b
        self._runs: list[_Noted] = []  # not followed yet, oldest first
        # whether A's `last` run is B's first to follow, A's cache kept (see the class docstring)
        self.took_last = last is not None and whole_in_cache(a, last)
        # A's cache's promotions before B's cache (cleared) began to follow it: B's count from 0
        # matches A's count less these (a kept cache may have made earlier runs current before)
        self._promoted = 0
        if self.took_last:
            if b is not a:  # (B, A's own Model, reads A's run from the one cache)
                b.clear_cache()
            self._clears, self._runs, self._promoted = last.clears, [last], last.promoted
        else:
            b.clear_cache()
            # A's clears that B's cache has followed: this one's too, where A's run on makes it later
            self._clears = a.clear_cache()
        self._lost = False  # B's cache out of step with A's: the next follow runs both afresh
        self._refused = False  # B refused the last text: the next follow runs B's afresh first

    def note(self, trace: Trace, cached: bool = True, dense_limit: int | None = None) -> None:
        """A's run that filled `trace`, with its cache (`cached`: result.cache_used) or apart,
        under `dense_limit` (its RunRequest's: B's run of it is made under the same)."""
        self._runs.append(noted(self.a, trace, cached, dense_limit))
        if len(self._runs) > MAX_BEHIND:  # (the next follow runs the text afresh on both sides)
            self._runs.clear()
            self._lost = True

    @property
    def behind(self) -> int:
        """A's runs noted that B has not run yet."""
        return len(self._runs)

    def follow(self, a_trace: Trace, make_trace: Callable[[], Trace], stop=None,
               cached: bool = True, dense_limit: int | None = None) -> tuple[Trace, Trace]:
        """(A's trace, B's trace) of the ids of A's run that filled `a_trace`: B's trace from
        `make_trace`, B having first run each of A's runs noted before it (that run noted now,
        `cached` and `dense_limit` as note's, if it was not). Where B cannot follow (the class
        docstring), both caches are cleared and A runs those ids afresh first, under
        `dense_limit` (the one A's run was made under): the A trace returned is then that run's.
        `stop`: as RunRequest.stop, for each run (Cancelled: the runs not done stay noted). Any
        other error drops the runs noted and is raised (the next follow runs afresh)."""
        if self.b is self.a:  # (a checkpoint entry that is A's own Model: one cache, A's run in it)
            self._runs.clear()
            trace = make_trace()
            trace.one_row = a_trace.one_row
            _keep_also(trace, a_trace.want)
            self.b.run(ids=a_trace.ids, trace=trace,
                       request=RunRequest(stop=stop, use_cache=cached, dense_limit=dense_limit))
            return a_trace, trace
        at = next((j for j, run in enumerate(self._runs) if run.trace() is a_trace), None)
        if at is None:
            self.note(a_trace, cached, dense_limit)
            at = len(self._runs) - 1
        try:
            if self._refused:  # (while B refuses the text, A's cache and runs are left alone)
                return self._b_first(a_trace, make_trace, stop, dense_limit)
            if self._lost:
                a_trace, at = self._afresh(a_trace, stop, dense_limit), 0
            trace, same = self._replay(at, make_trace, stop)
            if not same:  # B's cache held other rows than A's
                self._lost = True  # (until both caches are cleared)
                a_trace = self._afresh(a_trace, stop, dense_limit)
                trace, _ = self._replay(0, make_trace, stop)
            return a_trace, trace
        except Cancelled:
            raise
        except Exception:  # (a run B refuses: Model.run has cleared B's cache)
            self._runs.clear()
            self._lost = self._refused = True
            raise

    def _replay(self, at: int, make_trace, stop) -> tuple[Trace, bool]:
        """B runs the runs noted up to `at` -> (B's trace of the last run, whether each took as
        many tokens from B's cache as A's did from A's; the first that did not ends the replay)."""
        for _ in range(at + 1):
            run = self._runs[0]
            trace = make_trace()
            _keep_also(trace, run.want)  # (B's records as A's: the runs its cache may reuse)
            trace.one_row = run.one_row  # the steps A's run took (a one-row run's)
            if run.cached and run.clears != self._clears:  # A's cache cleared since B's last run
                log.info("%s's cache was cleared: %s's is cleared too", self.a.name, self.b.name)
                self.b.clear_cache()
                self._clears, self._promoted = run.clears, 0
            self.b.run(ids=run.ids, trace=trace,
                       request=RunRequest(stop=stop, use_cache=run.cached, dense_limit=run.dense_limit))
            self._runs.pop(0)
            promoted = run.promoted - self._promoted  # (A's since B's cache began to follow)
            if trace.reused != run.reused or (run.cached and self.b.cache_promotions != promoted):
                # (the same count from another kept run: a run of A stopped after its cache made
                # an earlier run current, which B never ran)
                log.warning("B (%s) took %d tokens from its cache, %d times from an earlier run, where "
                            "A (%s) took %d, %d times: both run the text afresh", self.b.name,
                            trace.reused, self.b.cache_promotions, self.a.name, run.reused, promoted)
                return trace, False
        return trace, True

    def _b_first(self, a_trace: Trace, make_trace, stop, dense_limit) -> tuple[Trace, Trace]:
        """After a text B refused: B runs a_trace's ids on its cache cleared, and only once it has
        A runs them afresh (_afresh), taking B's steps: both caches then hold that one run, its
        rows in one chunk each. B refusing again raises, A's cache left as its typing filled it."""
        if stop is not None and stop():  # (a stale job clears nothing)
            raise Cancelled("stopped before running the text afresh: a newer run was asked for")
        self.b.clear_cache()
        trace = make_trace()
        _keep_also(trace, a_trace.want)
        self.b.run(ids=a_trace.ids, trace=trace, request=RunRequest(stop=stop, dense_limit=dense_limit))
        self._refused = False
        return self._afresh(a_trace, stop, dense_limit, b_ran=trace), trace

    def _afresh(self, a_trace: Trace, stop, dense_limit, b_ran: Trace | None = None) -> Trace:
        """A's run of a_trace's ids made again into an empty cache, which then becomes A's; B's
        cache cleared; that run noted (B's next to run), unless B has just run it on its cleared
        cache (`b_ran`, B's trace: A then takes its steps). A run stopped by a newer key leaves
        A's cache as it was (the grid's next keystroke reuses its rows) and the follower still
        out of step (the next follow runs afresh)."""
        if stop is not None and stop():  # (a stale job clears nothing)
            raise Cancelled("stopped before running the text afresh: a newer run was asked for")
        trace = Trace(patterns=a_trace.want_patterns, values=a_trace.want_values, **a_trace.want)
        if b_ran is not None:
            trace.one_row = b_ran.one_row
        causal = self.a.config.causal  # (a model without a KV cache: its runs are whole anyway)
        trace.past = KVCache() if causal else None
        self.a.run(ids=a_trace.ids, trace=trace, request=RunRequest(stop=stop, dense_limit=dense_limit))
        fresh, trace.past = trace.past, None
        self._clears = self.a.adopt_cache(fresh) if causal else self.a.cache_clears
        self._promoted = 0  # (A's cache a new one, B's cleared)
        if b_ran is None:
            self.b.clear_cache()
        self._runs.clear()
        self._lost = False
        if b_ran is None:
            self.note(trace, causal, dense_limit)  # (with A's cache: its rows are the cache's now)
        return trace
