"""Switching heads off and edges out, and which heads matter. Pure NumPy on Traces, no Qt.

- Ablation replaces the outputs z of chosen heads by zero, or by the mean of that head's output
  over the positions of this text in the clean run (`head_edits`); knockout blocks the edge query
  q -> key k in chosen layers (`knockout_edits`: its score is -inf before the softmax).
- `run_edited` recomputes from the first layer an edit changes, reusing the clean trace's earlier
  layers (their residual stream and records), and returns a trace prediction can read.
- `ablation_scan` zero-ablates every head in turn and measures the increase in a loss: `next`,
  -log p(target) after one position, or `repeat`, the mean -log p(token | prefix) over the second
  copy of a repeated sequence, after its first token.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.layers import causal_mask
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.analysing.predict import (
    LMHead, log_softmax, position_index, prediction_trace, vocab_logits,
)
from attnviz.engine.computing.trace import Knockout, ReplaceHead, Trace

MODES = ("zero", "mean")
LOSSES = ("next", "repeat")


HEAD_TEXT = re.compile(r"L\s*(\d+)\s*H\s*(\d+)|(\d+)\s*\.\s*(\d+)", re.IGNORECASE)
HEAD_FORMS = "LAYER.HEAD or L<layer> H<head>, e.g. 18.6 or L18 H6"


def head_from_text(text: str) -> tuple[int, int] | None:
    """A head as typed: "18.6", "L18 H6" (as the window names heads) or "L18H6" -> (18, 6); None
    for anything else. Not checked against a model."""
    m = HEAD_TEXT.fullmatch(text.strip())
    if m is None:
        return None
    layer, head = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
    return int(layer), int(head)


def parse_heads(text: str, n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """"3.1,L5 H0" (heads as head_from_text reads them, comma-separated) -> [(3, 1), (5, 0)],
    checked against the model."""
    heads = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lh = head_from_text(part)
        if lh is None:
            raise InputError(f"head {part!r} is not {HEAD_FORMS}")
        check_head(*lh, n_layer, n_head)
        heads.append(lh)
    if not heads:
        raise InputError(f"no heads given: write heads as {HEAD_FORMS}, separated by commas")
    return heads


def check_head(layer: int, head: int, n_layer: int, n_head: int) -> None:
    if not (0 <= layer < n_layer and 0 <= head < n_head):
        raise InputError(f"head {layer}.{head} is outside this model's layers 0..{n_layer - 1} "
                         f"and heads 0..{n_head - 1}")


def layer_span(text: str, n_layer: int) -> list[int]:
    """Layers as typed, one ("3") or a range ("2-4") -> [2, 3, 4]. ValueError for text that is
    neither; InputError for a range that runs backwards or a layer the model does not have."""
    a, _, b = text.strip().partition("-")
    lo, hi = int(a), int(b or a)
    if hi < lo:
        raise InputError(f"layers {lo}-{hi} run backwards: write {hi}-{lo}")
    for i in (lo, hi):
        if not 0 <= i < n_layer:
            raise InputError(f"layer {i} is outside this model's layers 0..{n_layer - 1}")
    return list(range(lo, hi + 1))


def parse_knockouts(text: str, n_layer: int) -> list[tuple[list[int], int, int]]:
    """"2:7-3,4-5:9-1" -> [([2], 7, 3), ([4, 5], 9, 1)]: layers (one, or a range a-b), query, key."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            layers, edge = part.split(":")
            q, k = (int(x) for x in edge.split("-"))
            span = layer_span(layers, n_layer)
        except ValueError:
            raise InputError(f"knockout {part!r} is not LAYERS:Q-K, e.g. 2:7-3 or 2-4:7-3") from None
        except InputError as exc:
            raise InputError(f"knockout {part!r}: {exc}") from None
        out.append((span, q, k))
    if not out:
        raise InputError("no knockout given: write LAYERS:Q-K[,...], e.g. 2:7-3")
    return out


def head_edits(clean: Trace, heads, mode: str = "zero") -> list[ReplaceHead]:
    """ReplaceHead edits for `heads` [(layer, head)]: zero, or the head's mean output over the
    positions of the clean run (`mode` "mean"; the clean trace kept z)."""
    if mode not in MODES:
        raise InputError(f"ablation mode {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "zero":
        return [ReplaceHead(layer, head, 0.0) for layer, head in heads]
    return [ReplaceHead(layer, head, clean.z[layer][head].mean(axis=0)) for layer, head in heads]


def edge_seen(cfg, layer: int, q: int, k: int) -> bool:
    """Whether query q attends to key k in `layer` (two positions inside the text): every edge in
    an encoder; in a decoder k <= q, inside the layer's sliding window where it has one (Gemma 3:
    its local layers, not the global ones)."""
    if not cfg.causal:
        return True
    window = cfg.window(layer)
    return k <= q and (window is None or q - k < window)


def seen_text(cfg, layers) -> str:
    """What a query sees in `layers`, for refusals: 'keys at or before it[, within W]', the window
    said of the local layers where only some of `layers` have one (Gemma 3's global ones see all)."""
    windows = {cfg.window(i) for i in layers} if cfg.causal else {None}
    local = sorted(windows - {None})
    if not local:
        return "keys at or before it"
    within = f", within {' or '.join(map(str, local))}"
    return "keys at or before it" + within + (f" in {local_layers_text(cfg, [i for i in layers if cfg.window(i)])}"
                                              if None in windows else "")


def layer_runs(layers) -> str:
    """Layers in words, runs joined: "layer 3", "layers 0-4, 6-10, 12"."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    words = [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(words)


def unseen_edge(cfg, unseen, q: int, k: int) -> str:
    """The refusal of an edge q -> k in layers `unseen` whose queries do not see it, naming the
    layers that do (Gemma 3's global ones, for a key past the window) as a knockout to give."""
    said = (f"edge {q}->{k} is not one the query sees in {layer_runs(unseen)} (a query sees "
            f"{seen_text(cfg, unseen)}): nothing to knock out")
    seeing = [i for i in range(cfg.n_layer) if edge_seen(cfg, i, q, k)]
    if not seeing:
        return said
    spec = layer_runs(seeing).split(" ", 1)[1].split(", ")
    return (f"{said}; {layer_runs(seeing)} {'sees' if len(seeing) == 1 else 'see'} it: "
            + ",".join(f"{r}:{q}-{k}" for r in spec))


def knockout_layers(cfg, layers, q: int, k: int) -> tuple[list[int], list[int]]:
    """The one rule for an edge q -> k asked to be knocked out in `layers` (the Ablation tab, the
    grid's menu, --knockout): (the layers it is knocked out in: those of `layers` whose queries see
    it, edge_seen; the others, left out). A request is narrowed to the first, said (narrowed_note)
    where the second is not empty, and refused (unseen_edge) where the first is."""
    seen = [i for i in layers if edge_seen(cfg, i, q, k)]
    return seen, [i for i in layers if i not in seen]


def local_layers_text(cfg, layers) -> str:
    """`layers` (local ones) in words: "the local layers" where they are all of the model's,
    else their runs ("layers 0-4, 6-10")."""
    layers = list(layers)
    if layers == [i for i in range(cfg.n_layer) if cfg.window(i) is not None]:
        return "the local layers"
    return layer_runs(layers)


def narrowed_note(cfg, q: int, k: int, seen, unseen, arrow: str = "->") -> str:
    """What a knockout narrowed by knockout_layers was made in, and why not in the rest: "knocked
    out 20->2 in layer 5 only: a query in the local layers sees keys within 8 of it"."""
    windows = sorted({cfg.window(i) for i in unseen} - {None})
    why = f"sees keys within {' or '.join(map(str, windows))} of it" if windows else "does not see it"
    return (f"knocked out {q}{arrow}{k} in {layer_runs(seen)} only: a query in "
            f"{local_layers_text(cfg, unseen)} {why}")


def knockout_notes(cfg, T: int, knockouts) -> list[str]:
    """narrowed_note for each of [(layers, q, k)] that knockout_edits narrows, in order."""
    notes = []
    for layers, q, k in knockouts:
        q, k = position_index(T, q), position_index(T, k)
        seen, unseen = knockout_layers(cfg, layers, q, k)
        if seen and unseen:
            notes.append(narrowed_note(cfg, q, k, seen, unseen))
    return notes


def knockout_edits(cfg, T: int, knockouts) -> list[Knockout]:
    """Knockout edits for [(layers, q, k)], each narrowed to the layers whose queries see its edge
    (knockout_layers; knockout_notes says where) and refused where none does, and no row left
    without a key in any layer."""
    edits = []
    for layers, q, k in knockouts:
        q, k = position_index(T, q), position_index(T, k)
        seen, unseen = knockout_layers(cfg, layers, q, k)
        if not seen:
            raise InputError(unseen_edge(cfg, unseen, q, k))
        edits += [Knockout(layer, q, k) for layer in seen]
    for layer in {e.layer for e in edits}:
        left = causal_mask(T, cfg.window(layer)) if cfg.causal else np.ones((T, T), bool)
        for e in edits:
            if e.layer == layer:
                left[e.q, e.k] = False
        empty = np.flatnonzero(~left.any(axis=1))
        if empty.size:
            raise InputError(f"knocking out every key of query {int(empty[0])} in layer {layer} "
                             "leaves it nothing to attend to")
    return edits


def describe(edits) -> str:
    """What was changed, in one line: "zero-ablated L3 H1; knocked out 7->3 in layers 2, 3"."""
    parts = []
    heads = [e for e in edits if isinstance(e, ReplaceHead)]
    if heads:
        kind = "zero" if all(np.ndim(e.value) == 0 and e.value == 0 for e in heads) else "mean"
        parts.append(f"{kind}-ablated " + ", ".join(head_title(e.layer, e.head) for e in heads))
    edges: dict = {}
    for e in edits:
        if isinstance(e, Knockout):
            edges.setdefault((e.q, e.k), []).append(e.layer)
    for (q, k), layers in edges.items():
        parts.append(f"knocked out {q}->{k} in layer{'s' if len(layers) > 1 else ''} "
                     + ", ".join(map(str, sorted(layers))))
    return "; ".join(parts) or "nothing changed"


def first_layer(edits) -> int:
    """The first layer an edit changes (where an edited run resumes)."""
    return min(e.layer for e in edits)


def run_edited(model, clean: Trace, edits, patterns: bool = True) -> Trace:
    """The clean run (a trace of the same ids that kept z and resid) with `edits` applied:
    recomputed from the first layer they change, the layers before it shared with `clean`."""
    edits = list(edits)
    if not edits:
        raise InputError("nothing to change: give heads to ablate or edges to knock out")
    start = first_layer(edits)
    if patterns and clean.attentions is None:
        raise ValueError("the clean trace kept no patterns")
    trace = prediction_trace(patterns=patterns, edits=edits, start=start, base=clean)
    return forward(model.config, model.weights, clean.ids, trace)


# -- losses ---------------------------------------------------------------------------------------

def next_loss(head: LMHead, trace: Trace, position: int, target: int) -> float:
    """-log p(target | tokens 0..position)."""
    return float(-log_softmax(head.logits(trace.resid[-1][position:position + 1])[0])[target])


def token_losses(head: LMHead, x, targets) -> np.ndarray:
    """-log p(targets[i] | row i) for final-norm inputs x [n, d_model]: one pass over the
    unembedding for all n rows (float32 logits, log-sum-exp in float64) -> [n] float64."""
    L = vocab_logits(head, x)  # [n, vocab]
    rows = np.arange(L.shape[0])
    m = L.max(axis=1).astype(np.float64)  # [n]
    lse = m + np.log(np.exp(L - m[:, None].astype(L.dtype)).sum(axis=1, dtype=np.float64))
    return lse - L[rows, np.asarray(targets)].astype(np.float64)


def repeat_span(ids) -> tuple[int, int]:
    """(start a, length n) of the longest run ids[a:a+n] followed by itself (n >= 2; the earliest
    such a), or InputError when the ids do not repeat."""
    ids = np.asarray(ids)
    T = len(ids)
    for n in range(T // 2, 1, -1):
        same = ids[:T - n] == ids[n:]  # [T - n]: ids[j] == ids[j + n]
        run = np.convolve(same.astype(np.int64), np.ones(n, np.int64), mode="valid")  # [T - 2n + 1]
        hit = np.flatnonzero(run == n)
        if hit.size:
            return int(hit[0]), n
    raise InputError("the ids do not repeat (no sequence of 2 or more tokens followed by itself): "
                     "the repeat loss needs a repeated sequence, e.g. --probe; use --loss next")


def repeat_loss(head: LMHead, trace: Trace, span: tuple[int, int]) -> float:
    """Mean -log p(token | prefix) over the second copy's tokens after its first one."""
    rows, targets = loss_rows(trace.ids, "repeat", span=span)
    return float(token_losses(head, trace.resid[-1][rows], targets).mean())


def loss_rows(ids, loss: str, position: int | None = None, target: int | None = None,
              span: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The positions a loss reads [r] and the token each must predict [r]: `next`, the one
    position and its target; `repeat`, the second copy's positions a+n .. a+2n-2 and the tokens after
    them."""
    if loss == "next":
        return np.array([position]), np.array([target])
    a, n = span
    return np.arange(a + n, a + 2 * n - 1), np.asarray(ids)[a + n + 1:a + 2 * n]


@dataclass(frozen=True)
class Scan:
    """The increase in loss (nats) when each head alone is zero-ablated."""
    loss: str  # "next" or "repeat"
    baseline_loss: float
    effect: np.ndarray  # [n_layer, n_head]
    position: int | None  # the next loss's position
    target: int | None  # the next loss's target token id
    span: tuple[int, int] | None  # the repeat loss's (start, length)
    seconds: dict  # where the time went: forward (resumed layers), unembedding (losses), total

    def ranked(self) -> list[tuple[int, int, float]]:
        """(layer, head, effect), largest effect first."""
        order = np.argsort(-self.effect, axis=None, kind="stable")
        n_head = self.effect.shape[1]
        return [(int(i // n_head), int(i % n_head), float(self.effect.flat[i])) for i in order]


def ablation_scan(model, head: LMHead, ids, loss: str = "next", position: int | None = None,
                  target: int | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  cancelled: Callable[[], bool] | None = None, threads: int = 1) -> Scan:
    """Zero-ablate every head in turn; effect = loss(ablated) - loss(clean), in nats.

    `next`: -log p(target) after token `position` (default the last; target default: the clean
    run's top-1). `repeat`: see repeat_loss (InputError when the ids do not repeat). Only the tokens
    the loss reads are run (a causal model's later tokens cannot change them), and each head's run
    resumes at its layer from the clean residual stream. A layer's heads run on `threads` threads
    (NumPy releases the GIL in its kernels; give each thread one BLAS thread), and their loss rows
    go through the unembedding together, in one product. `progress(done, total)` is called before
    the clean run and after each head; `cancelled()` is checked between heads and raises Cancelled."""
    if loss not in LOSSES:
        raise InputError(f"loss {loss!r}: expected one of {', '.join(LOSSES)}")
    cfg, w = model.config, model.weights
    ids = np.asarray(ids, dtype=np.int64)
    span = None
    if loss == "repeat":
        span = repeat_span(ids)
        ids = ids[:span[0] + 2 * span[1]]
    else:
        position = position_index(len(ids), position)
        ids = ids[:position + 1]
    total = cfg.n_layer * cfg.n_head
    if progress:  # at once, before the clean run
        progress(0, total)
    t0 = time.perf_counter()
    clean = forward(cfg, w, ids, prediction_trace(patterns=False))
    if loss == "next":
        if target is None:
            target = int(np.argmax(head.logits(clean.resid[-1][position:position + 1])[0]))
        elif not 0 <= target < cfg.vocab_size:
            raise InputError(f"target token id {target} is outside the vocabulary 0..{cfg.vocab_size - 1}")
    rows, targets = loss_rows(ids, loss, position, target, span)  # [r], [r]
    base = float(token_losses(head, clean.resid[-1][rows], targets).mean())

    stopped = threading.Event()  # once cancelled() says stop, no later head runs or asks again

    def ablated(layer, h):  # the final-norm input at the loss's rows with head h zeroed: [r, d_model]
        if stopped.is_set() or (cancelled is not None and cancelled()):
            stopped.set()
            raise Cancelled("a newer scan or Cancel replaced this one")
        edited = forward(cfg, w, ids, Trace(resid=True, patterns=False, start=layer, base=clean,
                                            edits=[ReplaceHead(layer, h, 0.0)]))
        return edited.resid[-1][rows]

    effect = np.zeros((cfg.n_layer, cfg.n_head))
    t_forward = t_unembed = 0.0
    pool = ThreadPoolExecutor(max(1, int(threads)), thread_name_prefix="attnviz-scan")
    try:
        for layer in range(cfg.n_layer):
            t1 = time.perf_counter()
            futures = [pool.submit(ablated, layer, h) for h in range(cfg.n_head)]
            finals = []
            for h, f in enumerate(futures):
                finals.append(f.result())  # Cancelled (or an error) raised here, in order
                if progress:
                    progress(layer * cfg.n_head + h + 1, total)
            t2 = time.perf_counter()
            losses = token_losses(head, np.concatenate(finals), np.tile(targets, cfg.n_head))
            effect[layer] = losses.reshape(cfg.n_head, len(rows)).mean(axis=1) - base
            t_forward += t2 - t1
            t_unembed += time.perf_counter() - t2
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    seconds = {"forward": t_forward, "unembedding": t_unembed, "total": time.perf_counter() - t0}
    return Scan(loss, base, effect, position if loss == "next" else None,
                target if loss == "next" else None, span, seconds)
