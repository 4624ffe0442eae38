"""What a caller asks of one `Model.run` besides the text: the `RunRequest`, and `Prepared`, a text
tokenised once and checked as the run will take it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from attnviz.engine.errors import InputError, TooLong


@dataclass(frozen=True)
class RunRequest:
    """Options of one Model.run (all off by default: the patterns of the text, with the KV cache).

    truncate: a text over the limit is cut to it (keeping a closing special token such as [SEP]);
        without it such a text is an InputError.
    max_tokens: lowers that limit below the model's positions.
    use_cache: False: the run neither reads nor updates a causal model's KV cache (one-off inputs
        such as probes). A trace with edits or a resume point never touches it either.
    values: also result.value_norms ||v_j W_O(h)|| [n_layer, n_head, T] and result.head_share
        [n_layer, n_head] (value-weighted attention); the default path computes neither.
    inputs: also result.layer_inputs, every layer's attention input [T, d_model] (the anatomy view).
    layers: run only the first `layers` layers: patterns [layers, n_head, T, T], layer_inputs of
        `layers` entries; the run then neither reads nor updates the KV cache.
    labels: False (ids only): every token's piece and label is "" (a generation step reads neither;
        labelling all T ids is Python per token).
    early: (k, fn): once layers 0..k-1 are computed, fn(partial) is called on the run's thread with
        a RunResult of those layers only (patterns [k, n_head, T, T], final), before the run goes on:
        a window paints the layer it shows first. Not called when the run computes nothing (the KV
        cache holds every token), nor when those layers' patterns are not finite.
    stop: () -> bool, asked before each layer: once True the run stops with Cancelled, and the KV
        cache still holds its last whole run (a keystroke's run that a newer keystroke replaced).
    long: what a text whose patterns at once would pass `dense_limit` runs as: fn(prepared) -> a
        longdoc.LongRun (the window: longdoc.run_long with its progress), returned by Model.run in
        place of a RunResult. None: such a text is refused (longdoc.DenseTooLarge).
    dense_limit: bytes of patterns [n_layer, n_head, T, T] float32 over which a text is long (None:
        longdoc.DENSE_LIMIT)."""
    truncate: bool = False
    max_tokens: int | None = None
    use_cache: bool = True
    values: bool = False
    inputs: bool = False
    layers: int | None = None
    labels: bool = True
    early: tuple | None = None
    stop: Callable[[], bool] | None = None
    long: Callable | None = None
    dense_limit: int | None = None


PLAIN = RunRequest()  # the patterns, with the KV cache


class Prepared(NamedTuple):
    """A text's ids as they will run (Model.prepare): tokenised once, cut to the limit if asked.
    Model.run and longdoc.run_long take it in place of the text."""
    text: str
    notice: str | None  # one line for the user about what was changed in the text, if anything
    ids: np.ndarray  # int64 [T]
    tokens: list
    labels: list
    offsets: list
    truncated: bool
    n_full: int  # tokens before truncation


def kept_positions(n_full: int, closing_special: bool, positions: int, request: RunRequest) -> list[int] | None:
    """The positions of n_full tokens a run keeps under the model's `positions` and
    request.max_tokens: None, all of them; else the first ones, a closing special token ([SEP],
    `closing_special`) kept last, when request.truncate (TooLong without it)."""
    limit, max_tokens = positions, request.max_tokens
    if max_tokens is not None:
        if max_tokens < 1:
            raise InputError(f"max_tokens must be at least 1, got {max_tokens}")
        limit = min(limit, int(max_tokens))
    if n_full <= limit:
        return None
    if not request.truncate:
        what = f"this model's {limit} positions" if limit == positions else f"the limit of {limit} tokens"
        raise TooLong(f"sequence of {n_full} tokens is longer than {what}: shorten the text", limit)
    keep = list(range(limit))
    if closing_special and limit > 1:  # keep the closing special token ([SEP])
        keep[-1] = n_full - 1
    return keep
