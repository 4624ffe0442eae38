"""Activation patching (causal tracing) between a clean and a corrupted text of one length.

Run the corrupted text, put back one piece of the clean run, and measure how much of the clean
answer returns (`denoise`, the default); `noise` runs the clean text and puts in the corrupted
piece. At position P (default: the last token), with tokens `target` and `alt`:

    diff     = logit(target) - logit(alt)                      at P
    effect   = (diff_patched - diff_corrupt) / (diff_clean - diff_corrupt)

so in `denoise` 1 means the clean answer is fully back and 0 that nothing changed; in `noise` the
same formula gives 1 where nothing changed (the clean run's diff) and 0 where the corrupted piece
brought the corrupted answer in whole. `unpatched` is the effect of a patch that changes nothing
(0 denoise, 1 noise); `ranked` orders pieces by |effect - unpatched|. Defaults: target = the clean
run's top-1 at P; alt = the corrupted run's top-1, or its second when it is the target. Refused
when |diff_clean - diff_corrupt| < MIN_SPREAD |w_U[target] - w_U[alt]| |normed x| (the larger of
the two runs' final streams; the most the diff can be, diff_size): on SmolLM2 float32 moves a diff
by about 4e-8 of that bound whatever the diff itself, so a smaller spread would leave an effect
off by more than about 1e-3 (1 + |effect|), measuring rounding. Refused too (check_reach) when a
causal model's P comes before the first token the texts differ in: both runs are the same there.

What can be patched (`what`, the effect's shape), each from the other run's trace:
    resid            [n_layer, T]          the residual entering block l (before its norm), position t
    head_out         [n_layer, n_head]     head h's output z_h (its slice of W_O's input), every position
    head_out_by_pos  [n_layer, T, n_head]  the same, one position t
    head_pattern     [n_layer, n_head]     head h's attention weights at every query (values stay the run's)
    mlp_out          [n_layer, T]          the MLP's output at position t

Each patch is a `Patch` edit (engine/computing/trace.py) and an exact re-run from the layer it
changes: the layers before it, and (causal models) the positions before the first one it changes,
are the base run's. Positions after P cannot reach P under the causal mask: their effect is
`unpatched` exactly and they are not run. The patches of one layer run as rows of one forward
(packed.forward_batch), BATCH_ROWS rows at a time.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnviz.engine.analysing.pair import Pair, texts_pair
from attnviz.engine.analysing.predict import position_index
from attnviz.engine.analysing.zero_mlps import stored_as_zeros
from attnviz.engine.computing.logits import vocab_logits
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.packed import forward_batch
from attnviz.engine.computing.trace import Patch, Trace
from attnviz.engine.errors import Cancelled, InputError, NoPrediction
from attnviz.engine.reading.token_text import quoted, tokens

WHATS = ("resid", "head_out", "head_out_by_pos", "head_pattern", "mlp_out")
DIRECTIONS = ("denoise", "noise")
MIN_SPREAD = 5e-5  # |diff_clean - diff_corrupt| under this share of diff_size: refused
BATCH_ROWS = 1024  # rows of one batched forward (all its copies' positions together)


def source_trace() -> Trace:
    """What each side of the pair keeps: every value a patch can take, and the keys and values a
    copy resumed at a later position reads."""
    return Trace(kv=True, z=True, resid=True, mlp_out=True)


class _BatchTrace(Trace):
    """A batched run's trace: its edits, nothing recorded; every layer runs to the end."""

    @property
    def wants_output(self) -> bool:
        return True


@dataclass(frozen=True)
class Metric:
    """The logit difference at one position, clean and corrupted (module docstring)."""
    position: int
    target: int  # token id
    alt: int
    diff_clean: float
    diff_corrupt: float

    def effect(self, diff):  # diff_patched (array or float) -> effect, same shape
        return (np.asarray(diff, np.float64) - self.diff_corrupt) / (self.diff_clean - self.diff_corrupt)


def unpatched(direction: str) -> float:
    """The effect of a patch that changes nothing, the base run's own diff: 0 denoising (the
    corrupted run's), 1 noising (the clean run's)."""
    return 1.0 if direction == "noise" else 0.0


def logit_diff(head, x, target: int, alt: int) -> np.ndarray:
    """Final-norm inputs x [n, d_model] -> logit(target) - logit(alt) [n] float64."""
    u = np.asarray(head.w_u[target], np.float64) - np.asarray(head.w_u[alt], np.float64)  # [d_model]
    # each row on its own (no product whose rounding depends on the row count): a run that
    # reproduces the clean final stream gives diff_clean to the last bit
    return (head.normed(np.asarray(x, np.float32)).astype(np.float64) * u).sum(axis=-1)


def check_model(model):
    """The model's LMHead, or InputError: patching measures a prediction."""
    try:
        return model.lm_head()
    except NoPrediction as exc:
        raise InputError(f"{exc}, and patching measures how the next token's prediction changes") from None


def check_ids(ids_clean, ids_corrupt) -> None:
    """InputError in one line for an empty text, two texts of different lengths, or two texts of
    the same tokens (every patch would change nothing: refused before the runs)."""
    for label, ids in (("clean", ids_clean), ("corrupted", ids_corrupt)):
        if len(ids) == 0:
            raise InputError(f"the {label} text is empty (0 tokens): patching needs two texts of "
                             "one length")
    if len(ids_clean) != len(ids_corrupt):
        raise InputError(f"the clean text is {tokens(len(ids_clean))} and the corrupted text "
                         f"{len(ids_corrupt)}: patching needs texts of one length")
    if [int(i) for i in ids_clean] == [int(i) for i in ids_corrupt]:
        raise InputError(f"the clean and corrupted texts are the same {tokens(len(ids_clean))}: "
                         "patching needs a corrupted text that differs from the clean one, for "
                         "example in one name, with the same number of tokens")


def first_difference(ids_clean, ids_corrupt) -> int:
    """The first position where two texts of one length differ (check_ids: there is one)."""
    return int(np.flatnonzero(np.asarray(ids_clean) != np.asarray(ids_corrupt))[0])


def check_reach(model, ids_clean, ids_corrupt, position: int) -> None:
    """InputError where a causal model's position P comes before the first token the texts differ
    in: under the causal mask nothing at P sees it, so both runs are the same there (an encoder's
    every position sees every token)."""
    first = first_difference(ids_clean, ids_corrupt)
    if model.config.causal and position < first:
        T = len(ids_clean)
        raise InputError(f"the clean and corrupted texts first differ at token {first} "
                         f"{quoted(token_text(model, int(ids_clean[first])))}/"
                         f"{quoted(token_text(model, int(ids_corrupt[first])))}, after position "
                         f"{position}: under the causal mask position {position} sees no later token, "
                         f"so both runs are the same there and no patch can move the diff; pick a "
                         f"position from {first} to {T - 1}")


def metric_of(model, head, pair: Pair, position: int | None = None, target: int | None = None,
              alt: int | None = None) -> Metric:
    """The metric of a clean (pair.a) and corrupted (pair.b) run: defaults as the module says;
    InputError for two runs of the same tokens (check_ids), an unknown token, target = alt, or
    diffs too close (check_spread)."""
    check_ids(pair.a.ids, pair.b.ids)
    V = model.config.vocab_size
    q = position_index(pair.T, position)
    check_reach(model, pair.a.ids, pair.b.ids, q)
    for name, t in (("target", target), ("alt", alt)):
        if t is not None and not 0 <= int(t) < V:
            raise InputError(f"{name} token id {t} is outside the vocabulary 0..{V - 1}")
    logits = vocab_logits(head, np.stack([pair.a.trace.resid[-1][q], pair.b.trace.resid[-1][q]]))  # [2, vocab]
    if target is None:
        target = int(np.argmax(logits[0]))
    if alt is None:
        order = np.argsort(-logits[1], kind="stable")[:2]
        alt = int(order[1] if order[0] == target else order[0])
    target, alt = int(target), int(alt)
    if target == alt:
        raise InputError(f"target and alt are the same token ({target}): pick two different tokens")
    # the same arithmetic as a patched run's diff: a full patch gives diff_clean to the last bit
    finals = np.stack([pair.a.trace.resid[-1][q], pair.b.trace.resid[-1][q]])  # [2, d_model]
    dc, dd = (float(d) for d in logit_diff(head, finals, target, alt))
    check_spread(dc, dd, diff_size(head, finals, target, alt))
    return Metric(q, target, alt, dc, dd)


def diff_size(head, x, target: int, alt: int) -> float:
    """|w_U[target] - w_U[alt]| times the largest |normed x| of final-norm inputs x [n, d_model]:
    the most logit(target) - logit(alt) can be (Cauchy-Schwarz), what its float32 rounding scales
    with."""
    u = np.asarray(head.w_u[target], np.float64) - np.asarray(head.w_u[alt], np.float64)  # [d_model]
    normed = head.normed(np.asarray(x, np.float32)).astype(np.float64)  # [n, d_model]
    return float(np.linalg.norm(u) * np.linalg.norm(normed, axis=-1).max())


def check_spread(dc: float, dd: float, size: float) -> None:
    """InputError where diff_clean and diff_corrupt are too close for an effect to mean anything:
    apart by less than MIN_SPREAD of diff_size `size`, an effect's float32 rounding (about 4e-8
    of the size over the spread, as measured on SmolLM2) would reach 1e-3 (1 + |effect|)."""
    floor = MIN_SPREAD * size
    if not abs(dc - dd) >= floor:
        raise InputError(f"diff_clean {dc:.6g} and diff_corrupt {dd:.6g} differ by {abs(dc - dd):.2g}, "
                         f"under {floor:.2g} ({MIN_SPREAD:g} x {size:.3g} = |w_U[target] - w_U[alt]| x |final "
                         "normed stream|, the most the difference could be here): the two texts "
                         "give nearly the same difference at this position, so an effect would "
                         "measure float32 rounding, not what a patch restores; pick another "
                         "position, target or alt")


def effect_shape(what: str, n_layer: int, n_head: int, T: int) -> tuple[int, ...]:
    return {"resid": (n_layer, T), "head_out": (n_layer, n_head),
            "head_out_by_pos": (n_layer, T, n_head), "head_pattern": (n_layer, n_head),
            "mlp_out": (n_layer, T)}[what]


@dataclass(frozen=True)
class Job:
    """One patched run: where its effect goes, the first position it changes (the copy runs
    positions s..P), and what it puts in (point, head, the positions patched)."""
    index: tuple
    s: int
    point: str
    head: int | None
    positions: np.ndarray  # int [r]


def jobs(what: str, layer: int, n_head: int, P: int) -> list[Job]:
    """The patched runs of one layer for `what`, up to position P."""
    if what in ("resid", "mlp_out"):
        return [Job((layer, t), t, what, None, np.array([t])) for t in range(P + 1)]
    if what == "head_out_by_pos":
        return [Job((layer, t, h), t, "z", h, np.array([t]))
                for t in range(P + 1) for h in range(n_head)]
    point = "z" if what == "head_out" else "pattern"
    return [Job((layer, h), 0, point, h, np.arange(P + 1)) for h in range(n_head)]


def job_value(src: Trace, layer: int, job: Job, P: int) -> np.ndarray:
    """The other run's value at the job's point and positions."""
    if job.point == "resid":
        return src.resid[layer][job.positions]  # [r, d_model]
    if job.point == "mlp_out":
        return src.mlp_out[layer][job.positions]  # [r, d_model]
    if job.point == "z":
        return src.z[layer][job.head][job.positions]  # [r, d_head]
    return src.attentions[layer, job.head][job.positions][:, :P + 1]  # [r, P + 1]


def batches(todo: list[Job], P: int, rows: int) -> list[list[Job]]:
    """Jobs in runs of at most `rows` rows (a job alone when it has more)."""
    out: list[list[Job]] = []
    n = 0
    for job in todo:
        size = P + 1 - job.s
        if not out or n + size > rows:
            out.append([])
            n = 0
        out[-1].append(job)
        n += size
    return out


def run_batch(model, head, base: Trace, src: Trace, layer: int, batch: list[Job], metric: Metric,
              stop: Callable[[], bool] | None = None) -> np.ndarray:
    """One batch's jobs as rows of one forward resumed at `layer` from `base` -> diff_patched
    [len(batch)] float64."""
    P = metric.position
    spans = [(job.s, P + 1) for job in batch]
    offsets = np.cumsum([0] + [P + 1 - job.s for job in batch])  # [B + 1]
    edits = [Patch(job.point, layer, offsets[b] + job.positions - job.s,
                   job_value(src, layer, job, P), job.head) for b, job in enumerate(batch)]
    x = forward_batch(model.config, model.weights, base, layer, spans, _BatchTrace(patterns=False, edits=edits),
                      stop)
    return logit_diff(head, x[offsets[1:] - 1], metric.target, metric.alt)


def patched_diff(model, head, base: Trace, edits, metric: Metric) -> float:
    """diff_patched of one run of base's ids with `edits` (Patch, in positions), recomputed in full
    from the first layer they change (the reference the batched runs are checked against)."""
    edits = list(edits)
    start = min(e.layer for e in edits)
    trace = forward(model.config, model.weights, base.ids,
                    Trace(patterns=False, resid=True, edits=edits, start=start, base=base))
    return float(logit_diff(head, trace.resid[-1][metric.position:metric.position + 1],
                            metric.target, metric.alt)[0])


@dataclass(frozen=True)
class Patching:
    """A patching run's result: the metric, and the effect in `what`'s shape (module docstring)."""
    what: str
    direction: str
    metric: Metric
    effect: np.ndarray  # float64, effect_shape(...)
    seconds: dict  # where the time went: pair (the two runs), forward (patched runs), total
    runs: int  # patched runs made
    note: str = ""  # what the map cannot show: mlp_out of MLPs stored as zeros (zero_mlps)


def patch(model, ids_clean, ids_corrupt, what: str, position: int | None = None,
          target: int | None = None, alt: int | None = None, direction: str = "denoise",
          progress: Callable[[int, int], None] | None = None,
          cancelled: Callable[[], bool] | None = None, layers=None,
          rows: int = BATCH_ROWS, pair: Pair | None = None) -> Patching:
    """Patch every piece `what` names, one at a time (module docstring) -> Patching.

    `layers`: only these layers (the others' effects are NaN). `progress(done, total)` is called
    before anything runs and after each batch; `cancelled()` is asked before each batch and each
    layer and raises Cancelled. `pair`: the clean and corrupted runs when the caller has them
    (made with source_trace())."""
    if what not in WHATS:
        raise InputError(f"what {what!r}: expected one of {', '.join(WHATS)}")
    if direction not in DIRECTIONS:
        raise InputError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
    head = check_model(model)
    check_ids(ids_clean, ids_corrupt)
    cfg = model.config
    T = len(ids_clean)
    P = position_index(T, position)
    check_reach(model, ids_clean, ids_corrupt, P)  # (before the two runs)
    layers = list(range(cfg.n_layer)) if layers is None else sorted(set(int(i) for i in layers))
    todo = {layer: jobs(what, layer, cfg.n_head, P) for layer in layers}
    total = sum(len(j) for j in todo.values())
    if progress:
        progress(0, total)
    t0 = time.perf_counter()
    if pair is None:
        pair = texts_pair(model, ids_clean, ids_corrupt, source_trace)
    metric = metric_of(model, head, pair, P, target, alt)
    base, src = (pair.b, pair.a) if direction == "denoise" else (pair.a, pair.b)
    t1 = time.perf_counter()
    effect = np.full(effect_shape(what, cfg.n_layer, cfg.n_head, T), np.nan)
    if what in ("resid", "mlp_out", "head_out_by_pos"):
        effect[layers, P + 1:] = unpatched(direction)  # later positions cannot reach P
    stop = (lambda: bool(cancelled())) if cancelled is not None else None
    done = 0
    for layer in layers:
        for batch in batches(todo[layer], P, rows):
            if stop is not None and stop():
                raise Cancelled("patching was cancelled")
            diffs = run_batch(model, head, base.trace, src.trace, layer, batch, metric, stop)
            for job, d in zip(batch, metric.effect(diffs)):
                effect[job.index] = d
            done += len(batch)
            if progress:
                progress(done, total)
    t2 = time.perf_counter()
    zero = stored_as_zeros(model, layers) if what == "mlp_out" else ""
    return Patching(what, direction, metric, effect,
                    {"pair": t1 - t0, "forward": t2 - t1, "total": t2 - t0}, total,
                    f"{zero}, so patching its output changes nothing" if zero else "")


def ranked(result: Patching, n: int = 10) -> list[tuple[tuple, float]]:
    """The n pieces whose patch changed the most: (index, effect), largest |effect - unpatched|
    first (NaN skipped): |effect| denoising, |effect - 1| noising."""
    change = result.effect - unpatched(result.direction)
    flat = np.nan_to_num(np.abs(change), nan=-1.0).ravel()
    order = np.argsort(-flat, kind="stable")[:n]
    return [(tuple(int(i) for i in np.unravel_index(k, result.effect.shape)), float(result.effect.flat[k]))
            for k in order if flat[k] >= 0]


# -- a corrupted text proposed from the clean one ----------------------------------------------------

NAMES = ("Mary", "John", "Anna", "Paul", "Kate", "Mark", "Emma", "Tom", "Sarah", "David", "Alice", "Bob")
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")


@dataclass(frozen=True)
class Proposal:
    """A corrupted text and what was swapped to make it."""
    text: str
    old: str
    new: str
    start: int  # the swapped word is clean text[start:end]
    end: int

    def describe(self) -> str:
        """Its characters counted from 0, both ends included, as the long view writes its ranges."""
        return (f"swapped {quoted(self.old)} (characters {self.start}..{self.end - 1}) for "
                f"{quoted(self.new)}")


def propose_corrupt(model, text: str) -> Proposal:
    """A corrupted text of the clean one's token count: the last occurrence of a repeated word (a
    name first: capitalised inside a sentence), else the last name, swapped for the first word
    that keeps the token count: another name of the text or a common one (NAMES) for a name,
    another lower-case word of the text for a word. InputError when none does."""
    if model.tokenizer is None:
        raise InputError(f"{model.name} has no tokenizer: type the corrupted ids")
    n = len(model.encode(text)[0])
    words = [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
    counts: dict = {}
    for w, _, _ in words:
        counts[w] = counts.get(w, 0) + 1

    def name(a, word):  # capitalised inside a sentence
        return word[0].isupper() and text[:a].rstrip()[-1:] not in ("", ".", "!", "?")
    names = [x for x in words if name(x[1], x[0])]
    repeated = [x for x in words if counts[x[0]] > 1]
    tried = set()
    for group in ([x for x in repeated if name(x[1], x[0])], repeated, names):
        for word, a, b in reversed(group):
            if word in tried:
                continue
            tried.add(word)
            if word[0].isupper():
                others = [w for _, w in sorted((x[1], x[0]) for x in names)] + list(NAMES)
            else:
                others = [w for w, _, _ in words if w.islower()]
            for new in dict.fromkeys(others):
                if new == word:
                    continue
                candidate = text[:a] + new + text[b:]
                if len(model.encode(candidate)[0]) == n:
                    return Proposal(candidate, word, new, a, b)
    raise InputError("no name or repeated word in the text can be swapped for one of the same "
                     "token count: type the corrupted text")
