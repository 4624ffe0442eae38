"""Several runs in one pass over the weights: a scan's texts packed as rows of one forward
(`pack_texts`, `forward_packed`), and copies of one run resumed at a layer, each with its own edits
(`forward_batch`, activation patching). The row-wise steps take every text's or copy's rows at once;
attention runs per text or copy (families.segment_attention)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Callable

import numpy as np

from attnviz.engine.errors import Cancelled
from attnviz.engine.computing.families import FAMILY, embed, layer_consts, segment_attention
from attnviz.engine.computing.layers import causal_mask, layer_for, mask_bias
from attnviz.engine.computing.trace import Trace
from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.reading.layout import Weights


# forward_packed's passes (pack_texts): at most PACK_ROWS rows (all the texts' tokens), and at most
# PACK_PATTERN_BYTES of patterns held ([n_layer, n_head, T_j, T_j] float32 per text). More rows a
# pass read the weights fewer times for a scan's short texts (benchmarks/scan.py measures it); the
# pattern budget keeps a pass of long texts (a 128-token text's SmolLM2 patterns are 17.7 MB) from
# holding much more than one of short.
PACK_ROWS = 1024
PACK_PATTERN_BYTES = 32 * 2 ** 20


def pack_texts(lengths: Sequence[int], n_layer: int, n_head: int, max_rows: int = PACK_ROWS,
               max_pattern_bytes: int = PACK_PATTERN_BYTES) -> list[list[int]]:
    """Texts of `lengths` tokens -> passes of forward_packed: lists of positions in `lengths`, in
    order, each pass as many texts as fit under both limits (a text over a limit alone)."""
    packs: list[list[int]] = []
    rows = held = 0  # the open pass's rows and pattern bytes
    for j, n in enumerate(lengths):
        size = 4 * n_layer * n_head * n * n  # its patterns, float32
        if not packs or rows + n > max_rows or held + size > max_pattern_bytes:
            packs.append([])
            rows = held = 0
        packs[-1].append(j)
        rows, held = rows + n, held + size
    return packs


def forward_packed(cfg: ModelConfig, w: Weights, seqs: Sequence[np.ndarray],
                   stop: Callable[[], bool] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
    """Several texts' ids [T_j] -> each text's patterns float32 [n_layer, n_head, T_j, T_j], the same
    as a run of each text alone (positions from 0, its own mask), in one pass over the weights.

    The row-wise steps (embeddings, norms, projections, MLP) take every text's rows at once,
    [N, d_model] with N = sum T_j: one product per weight for all the texts instead of one per
    text, each of a few rows (a scan's short texts: the weights are read once, the products are
    big enough for BLAS to run at speed). Attention runs per text, on its own rows (Consts.segments).
    Nothing is recorded but the patterns; no cache is read or written. `stop()`, asked before each
    layer, raises Cancelled (a caller may also wait inside it: the pass resumes where it was).
    `progress(layers done, n_layer)` is called after each layer."""
    fam = FAMILY[cfg.family]
    lens = [len(s) for s in seqs]
    ends = np.cumsum(lens)
    positions = np.concatenate([np.arange(n) for n in lens])  # [N]
    consts = layer_consts(cfg, len(positions), masks=False, positions=positions)
    out = [np.empty((cfg.n_layer, cfg.n_head, n, n), dtype=np.float32) for n in lens]
    masks = {}  # (T_j, window) -> [T_j, T_j] bias

    def bias(n, window):
        if not cfg.causal:
            return None
        if (n, window) not in masks:
            masks[n, window] = mask_bias(causal_mask(n, window))
        return masks[n, window]

    x = embed(w, np.concatenate(seqs), positions, cfg)  # [N, d_model]
    for i in range(cfg.n_layer):
        if stop is not None and stop():
            raise Cancelled(f"stopped before layer {i}: cancelled")
        c = consts[i]
        segments = tuple((int(e - n), int(e), bias(n, c.window), out[j][i], None)
                         for j, (n, e) in enumerate(zip(lens, ends)))
        c = replace(c, segments=segments, attention=segment_attention)
        x = fam.block(x, layer_for(w.layers, i, len(x)), c, None)
        if progress is not None:
            progress(i + 1, cfg.n_layer)
    return out


def forward_batch(cfg: ModelConfig, w: Weights, base: Trace, start: int, spans, trace: Trace,
                  stop: Callable[[], bool] | None = None) -> np.ndarray:
    """B copies of `base`'s run resumed at layer `start`, each with its own edits, as rows of one
    forward -> the final-norm input of every copy's rows [N, d_model], N = sum(e_b - s_b).

    Copy b runs positions s_b..e_b-1 (`spans` [(s_b, e_b)]; causal models): its first s_b
    positions are the base run's (nothing later changes them under the causal mask), read as the
    base's keys and values (base kept kv and resid), and the positions from e_b on cannot change
    the ones before. The row-wise steps take every copy's rows at once; attention runs per copy.
    `trace` applies its edits at the named points, its rows the batch's rows (copy b's from
    sum(e_j - s_j, j < b)); it records what it asks for except the residual stream (its rows
    only). `stop()`, asked before each layer, raises Cancelled."""
    assert cfg.causal, "a copy resumed at a later position needs the causal mask"
    fam = FAMILY[cfg.family]
    spans = [(int(s), int(e)) for s, e in spans]
    starts = np.cumsum([0] + [e - s for s, e in spans])  # [B + 1] each copy's first row
    positions = np.concatenate([np.arange(s, e) for s, e in spans])  # [N]
    ids = np.concatenate([base.ids[s:e] for s, e in spans])
    consts = layer_consts(cfg, len(positions), masks=False, positions=positions)
    masks = {}  # (s, e, window) -> [e - s, e] bias

    def bias(s, e, window):
        if (s, e, window) not in masks:
            masks[s, e, window] = mask_bias(causal_mask(e, window, start=s))
        return masks[s, e, window]

    trace.begin(cfg.n_layer, ids, 0)
    x = np.concatenate([base.resid[start][s:e] for s, e in spans])  # [N, d_model]
    for i in range(start, cfg.n_layer):
        if stop is not None and stop():
            raise Cancelled(f"stopped before layer {i}: cancelled")
        x = trace.at_resid(i, x)
        c = consts[i]
        segments = tuple((int(a), int(a + e - s), bias(s, e, c.window), None,
                          (base.k[i][:, :s], base.v[i][:, :s]) if s else None)
                         for a, (s, e) in zip(starts, spans))
        x = fam.block(x, layer_for(w.layers, i, len(x)),
                      replace(c, segments=segments, attention=segment_attention),
                      trace.slot(i, None, None))
    return x
