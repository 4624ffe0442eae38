"""What heads do, as one window (or one saved view) asks it: an ablation state (which heads are
switched off and how, which edges are knocked out), the run shown under it, and one analysis of a
query position (the prediction, the logit lens and DLA) of the clean and the changed run.

Pure NumPy on the engine's prediction (engine/analysing/predict.py) and ablation (engine/analysing/ablation.py)
arithmetic, no Qt:

    window_run(model, text, ...)   -> WindowRun: the clean run (a trace with z and the residual
                                      stream) and, under an ablation, the changed run recomputed
                                      from the first layer it changes; `result` is what the grid shows
    analyse(model, run, ...)       -> Analysis: top-k of both runs, Δ log p(target), the lens and
                                      DLA of the run shown
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.engine.analysing.ablation import MODES, first_layer, head_edits, knockout_edits
from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.patterns import check_finite
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.analysing.predict import (
    Attribution, Lens, Prediction, attribute, dla_tokens, lens_of, lens_rows, position_index,
    prediction_of, prediction_trace, vocab_token,
)
from attnviz.engine.computing.logits import vocab_logits
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.run_result import RunResult
from attnviz.engine.computing.trace import Trace
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.token_text import plural, tokens

TOP_K = 10


@dataclass(frozen=True)
class Ablation:
    """Heads switched off (`mode`: their output z zeroed, or replaced by its mean over the positions
    of this text in the clean run) and edges knocked out (query q -> key k in `layers`: score -inf before the softmax).
    Heads are (layer, head); knockouts (layers, q, k). Sorted, so equal states compare equal."""
    heads: tuple = ()
    mode: str = "zero"
    knockouts: tuple = ()

    def __post_init__(self):
        if self.mode not in MODES:
            raise InputError(f"ablation mode {self.mode!r}: expected one of {', '.join(MODES)}")
        object.__setattr__(self, "heads", tuple(sorted({(int(l), int(h)) for l, h in self.heads})))
        object.__setattr__(self, "knockouts", tuple(sorted(
            {(tuple(sorted({int(i) for i in layers})), int(q), int(k)) for layers, q, k in self.knockouts})))

    @property
    def active(self) -> bool:
        return bool(self.heads or self.knockouts)

    def toggled(self, layer: int, head: int) -> Ablation:
        """The same with head (layer, head) switched off, or back on when it was off."""
        key = (int(layer), int(head))
        heads = [h for h in self.heads if h != key] if key in self.heads else [*self.heads, key]
        return dataclasses.replace(self, heads=tuple(heads))

    def with_knockout(self, layers, q: int, k: int) -> Ablation:
        """The same with edge q -> k knocked out in `layers` (or restored, when exactly that was)."""
        ko = (tuple(sorted({int(i) for i in layers})), int(q), int(k))
        kos = [x for x in self.knockouts if x != ko] if ko in self.knockouts else [*self.knockouts, ko]
        return dataclasses.replace(self, knockouts=tuple(kos))

    def describe(self) -> str:
        """What is switched off, in one line: "zero-ablated L3 H1, L5 H0; knocked out 7→3 in layers 2-4"."""
        parts = []
        if self.heads:
            parts.append(f"{self.mode}-ablated " + ", ".join(head_title(l, h) for l, h in self.heads))
        for layers, q, k in self.knockouts:
            parts.append(f"knocked out {q}→{k} in {layers_text(layers)}")
        return "; ".join(parts) or "nothing switched off"

    def to_json(self) -> dict:
        return {"heads": [list(h) for h in self.heads], "mode": self.mode,
                "knockouts": [{"layers": list(l), "q": q, "k": k} for l, q, k in self.knockouts]}

    @staticmethod
    def from_json(d, n_layer: int, n_head: int) -> Ablation:
        """A saved view's ablation, checked against the model (InputError naming what is wrong)."""
        if not isinstance(d, dict):
            raise InputError("ablation must be an object with heads, mode and knockouts")
        try:
            heads = [(int(l), int(h)) for l, h in d.get("heads", [])]
            kos = [(tuple(int(i) for i in x["layers"]), int(x["q"]), int(x["k"]))
                   for x in d.get("knockouts", [])]
        except (TypeError, ValueError, KeyError):
            raise InputError("ablation: heads must be [layer, head] pairs and knockouts "
                             "{layers, q, k}") from None
        for l, h in heads:
            if not (0 <= l < n_layer and 0 <= h < n_head):
                raise InputError(f"ablation: head {head_title(l, h)} is not one of this model's "
                                 f"{plural(n_layer, 'layer')} × {plural(n_head, 'head')}")
        for layers, q, k in kos:
            if not layers or not all(0 <= i < n_layer for i in layers):
                raise InputError(f"ablation: knockout layers {list(layers)} are not in 0..{n_layer - 1}")
        return Ablation(tuple(heads), str(d.get("mode", "zero")), tuple(kos))


def layers_text(layers) -> str:
    layers = list(layers)
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}-{layers[-1]}"
    return "layers " + ", ".join(map(str, layers))


CLEAN = Ablation()


def edits_of(model, clean: Trace, ablation: Ablation) -> list:
    """The trace edits of `ablation` on the clean run (InputError when a knocked-out edge is not
    in this text, e.g. after an edit made it shorter)."""
    edits = head_edits(clean, ablation.heads, ablation.mode) if ablation.heads else []
    if ablation.knockouts:
        T = len(clean.ids)
        for _layers, q, k in ablation.knockouts:
            if not (0 <= q < T and 0 <= k < T):
                raise InputError(f"knockout {q}→{k} is outside this text's {tokens(T)}")
        edits += knockout_edits(model.config, T, [(list(l), q, k) for l, q, k in ablation.knockouts])
    return edits


@dataclass(frozen=True)
class WindowRun:
    """One run as the window shows it. `result`: what the grid shows (the changed run's patterns
    under an ablation); `clean`, `changed`: the traces (changed None when nothing is switched off
    or the ablation does not apply: `note` says why)."""
    result: object  # RunResult
    clean: Trace
    changed: Trace | None
    ablation: Ablation
    note: str = ""
    dense_limit: int | None = None  # the dense limit its runs were made under (RunRequest's)

    @property
    def shown(self) -> Trace:
        return self.changed if self.changed is not None else self.clean


WINDOW = RunRequest(truncate=True)  # the window's runs: a text over the limit is cut to it


def is_changed(result) -> bool:
    """Whether a run's result (a RunResult) is a changed run: edits (heads switched off, edges
    knocked out) in its trace."""
    return bool(getattr(getattr(result, "trace", None), "edits", None))


def window_run(model, text: str, *, ids=None, request: RunRequest = WINDOW,
               ablation: Ablation = CLEAN, ran=None) -> WindowRun:
    """Run `text` (or `ids`) keeping what prediction reads; under an active `ablation` the changed
    run too, from the first layer it changes, with the clean run's earlier layers reused. An
    ablation that does not apply to this text (an edge past its end) leaves the clean run shown,
    with a note. `request`: as Model.run's (its values, inputs and stop hold for both runs); a long
    text it runs as request.long says comes back as that LongRun, with no ablation. `ran(clean,
    result)`: called as the clean run is in, before a changed run that may yet be stopped (a
    caller that follows every run the model's KV cache takes: Compare's pair.Follower)."""
    clean = prediction_trace()
    kw = {"ids": ids} if ids is not None else {"text": text}
    result = model.run(**kw, request=request, trace=clean)
    if not isinstance(result, RunResult):  # a long text's run (request.long): no trace to edit
        return result
    if ran is not None:
        ran(clean, result)
    values, inputs, limit = request.values, request.inputs, request.dense_limit
    if not ablation.active:
        return WindowRun(result, clean, None, ablation, dense_limit=limit)
    try:
        edits = edits_of(model, clean, ablation)
    except InputError as exc:
        return WindowRun(result, clean, None, ablation, f"{ablation.describe()} not applied: {exc}", limit)
    t0 = time.perf_counter()
    changed = Trace(z=True, resid=True, values=values, inputs=inputs, edits=edits,
                    start=first_layer(edits), base=clean)
    changed.stop = request.stop
    forward(model.config, model.weights, clean.ids, changed)
    check_finite(model.name, changed.attentions)
    norms = share = None
    if values:
        norms, share = model.value_norms(changed.attentions, changed.v)
    # (the time shown is both runs': the clean one's, taken from the cache or not, and this one's)
    # (the cache_* fields stay the clean run's: Compare's Follower reads cache_used as the clean
    # run's, and calc_views.live_text, their one reader on screen, words a changed run's line apart)
    shown = dataclasses.replace(result, attentions=changed.attentions, value_norms=norms,
                                head_share=share, trace=changed,
                                layer_inputs=tuple(changed.inputs) if inputs else None,
                                compute_s=result.compute_s + time.perf_counter() - t0)
    return WindowRun(shown, clean, changed, ablation, dense_limit=limit)


# === tokens the user types ==========================================================================
def token_id(model, spec: str) -> int:
    """A token the user typed in the window -> its id (predict.vocab_token: `#123` is an id, digits
    alone are text, as on the command line)."""
    return vocab_token(model, spec)


# === one analysis of a position ======================================================================
@dataclass(frozen=True)
class Analysis:
    """The prediction after token `position`, of the clean run and (under an ablation) the changed
    one; the lens and DLA of the run shown. target/alt default as predict.dla_tokens says."""
    position: int
    clean: Prediction
    changed: Prediction | None
    target: int
    alt: int
    lens: Lens  # of the run shown, for `target`
    dla: Attribution  # of the run shown
    ablation: Ablation
    tokens: dict  # id -> label, for every id shown

    @property
    def shown(self) -> Prediction:
        return self.changed if self.changed is not None else self.clean

    def delta_target(self) -> float | None:
        """Δ log p(target) of the changed run against the clean one (None without a change)."""
        if self.changed is None:
            return None
        return float(self.changed.logprobs[self.target] - self.clean.logprobs[self.target])

    def label(self, i: int) -> str:
        return self.tokens.get(int(i), f"#{int(i)}")


def analyse(model, run: WindowRun, position: int | None = None, target: str = "", alt: str = "",
            k: int = TOP_K, stop: Callable[[], bool] | None = None) -> Analysis:
    """Prediction, lens and DLA at `position` (None: the last token). `target`, `alt`: typed tokens
    ('' for the defaults: predict.dla_tokens). NoPrediction for a model that predicts nothing.

    One pass over the unembedding serves the prediction and the lens (the lens's last layer is the
    shown run's prediction; under an ablation the clean run's final row rides along), in blocks
    with `stop()` asked between them (Cancelled: a newer keystroke does not wait for the rest)."""
    head = model.lm_head()
    shown = run.shown
    q = position_index(len(shown.ids), position)
    rows = lens_rows(shown, q)  # [n_layer, d_model]
    if run.changed is not None:
        rows = np.concatenate([rows, run.clean.resid[-1][q:q + 1]])  # + the clean final row
    L = vocab_logits(head, rows, stop)  # [n_layer (+1), vocab]
    n_layer = len(shown.resid) - 1
    clean = prediction_of(L[-1], q, max(k, 2))
    changed = prediction_of(L[n_layer - 1], q, max(k, 2)) if run.changed is not None else None
    t, a = dla_tokens(clean.top_ids, token_id(model, target) if target.strip() else None,
                      token_id(model, alt) if alt.strip() else None)
    lens = lens_of(L[:n_layer], q, t, stop)
    if stop is not None and stop():
        raise Cancelled("a newer request replaced this one")
    dla = attribute(model, head, shown, q, t, a)
    ids = {t, a, *clean.top_ids.tolist(), *lens.top_ids.tolist()}
    if changed is not None:
        ids |= set(changed.top_ids.tolist())
    labels = {i: token_text(model, i) for i in sorted(ids)}  # the token strip's labels
    cut = lambda p: dataclasses.replace(p, top_ids=p.top_ids[:k], top_logprobs=p.top_logprobs[:k])  # noqa: E731
    return Analysis(q, cut(clean), None if changed is None else cut(changed), t, a, lens, dla,
                    run.ablation, labels)
