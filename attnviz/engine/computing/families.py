"""The forward pass of every family: BERT, GPT-2, the Llama family and Gemma 3, on weights in the
engine's one layout (engine/reading/layout.py; the loaders that build it are in engine/reading/).

One forward pass serves every family, in the order data flows: `embed`, then per layer a block of
`self_attention` and `mlp` around the residual stream. What differs between families (LayerNorm or
RMSNorm, pre- or post-LN, a gated MLP, RoPE) is data: one `Family` each, in `FAMILY`; the config's
numbers for each layer are its `Consts`. The linear steps around the attention (q, k and v projected
into heads, the heads merged and projected out) are in engine/computing/projections.py.

`forward` fills a `Trace` (engine/computing/trace.py) with what its caller asked for and applies the trace's
edits (ablation, knockout) at named points; nothing else is recorded. A causal model's forward pass
can take a `KVCache` from the previous run and compute only the tokens after the longest common
prefix: under the causal mask nothing before a position can see it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from attnviz.engine.reading.config import LOCAL, ModelConfig
from attnviz.engine.errors import Cancelled
from attnviz.engine.computing.projections import attention_output, in_row_chunks, packed, project_qkv
from attnviz.engine.computing.projections import output_projection  # noqa: F401  (imported from here)
from attnviz.engine.computing.layers import (
    ACTIVATIONS, attention_scores, causal_mask, group_size, layer_for, layer_norm, linear,
    mask_bias, one_row_stack, one_row_steps, repeat_kv, rms_norm, rope_qk,
    silu, softmax,
)
from attnviz.engine.parallel import for_row_chunks
from attnviz.engine.computing.rope import ANGLE_ROWS, rope_row, rope_tables
from attnviz.engine.computing.rowconsts import RowConsts, row_block
from attnviz.engine.computing.trace import NOTHING, KVCache, Stop, Trace
from attnviz.engine.reading.layout import Layer, Weights


def dense_attention(q, k, v, c: Consts, cache=NOTHING):
    """q [n_head, n, d_head], k and v [n_kv_head, T, d_head] -> z [n_head, n, d_head]: each head's
    pattern [n_head, n, T] (edited and recorded by the cache), then its weighted values. The one
    attention of self_attention unless its caller chose another strategy (Consts.attention:
    segment_attention for packed texts and copies, longdoc.block_attention for a long text's rows)."""
    pattern = attend(q, k, c, cache)  # [n_head, n, T]
    cache.pattern(pattern)
    return head_outputs(pattern, v, c)


@dataclass(frozen=True)
class Consts:
    """One layer's constants for one run, derived from the config and the family: what the block
    needs besides its input and weights. The run covers new positions p..T-1 (n = T - p tokens)."""
    n_head: int
    n_kv_head: int
    d_head: int
    scale: float  # score scale: 1 / sqrt(d_head) (GPT-2's scale_attn_by_inverse_layer_idx: / (i + 1))
    rope: tuple | None  # (cos, sin) [n, d_head] for the new positions, or None (no RoPE)
    bias: np.ndarray | None  # [n, T]: 0 where a query may look, -inf where masked; None: sees all
    # (or a long run's, whose attention masks each block itself: rowblocks.scores_t)
    norm: Callable  # (x, gain_bias) -> x: the family's norm with the config's epsilon
    act: Callable  # the MLP's activation
    gated_mlp: bool  # act(x W_gate) * (x W_up) (SwiGLU), or act(x W_in)
    qk_norm: Callable | None = None  # Family.qk_norm
    window: int | None = None  # keys a causal query sees (q - k < window), None: all before it
    causal: bool = False  # a query sees no key after it
    workers: int = 1  # threads the row-wise steps (projections, MLP) share a long run's rows over
    # several texts in one run (forward_packed): (a, b, bias [b - a, b - a] or None, patterns out
    # [n_head, b - a, b - a]) per text, rows a..b-1; each text's rows attend to its own keys only
    segments: tuple = ()
    # (q, k, v, consts, cache) -> z [n_head, n, d_head]: how self_attention attends, chosen by its
    # caller: dense_attention, segment_attention (segments), longdoc.block_attention (row blocks)
    attention: Callable = dense_attention
    rotate: Callable = rope_qk  # (q, k, cos, sin) -> q, k rotated by position (rotate-half)
    # (x, layer, consts, cache) -> x: one layer in place of the family's block (a one-row run's
    # compiled block, onerow.pre_norm_block), None: Family.block
    block: Callable | None = None

    @property
    def n_group(self) -> int:  # query heads per KV head
        return group_size(self.n_head, self.n_kv_head)


def pre_norm_block(x, layer: Layer, c: Consts, cache=None):  # [n, d_model] -> [n, d_model]
    """GPT-2, Llama: x + attn(norm(x)), then x + mlp(norm(x))."""
    x = x + self_attention(c.norm(x, layer.norm1), layer, c, cache)
    return x + mlp(c.norm(x, layer.norm2), layer, c, cache)


def post_norm_block(x, layer: Layer, c: Consts, cache=None):  # [n, d_model] -> [n, d_model]
    """BERT: norm(x + attn(x)), then norm(x + mlp(x))."""
    x = c.norm(x + self_attention(x, layer, c, cache), layer.norm1)
    return c.norm(x + mlp(x, layer, c, cache), layer.norm2)


def sandwich_norm_block(x, layer: Layer, c: Consts, cache=None):  # [n, d_model] -> [n, d_model]
    """Gemma 3: x + norm(attn(norm(x))), then x + norm(mlp(norm(x))): four norms per layer (input,
    post-attention, pre-feedforward, post-feedforward)."""
    x = x + c.norm(self_attention(c.norm(x, layer.norm1), layer, c, cache), layer.post_attn_norm)
    return x + c.norm(mlp(c.norm(x, layer.norm2), layer, c, cache), layer.post_mlp_norm)


def head_rms_norm(q, k, layer: Layer, c: Consts):
    """q [n_head, n, d_head], k [n_kv_head, n, d_head] -> same: each head's q and k RMS-normed over
    d_head with the layer's gains, before RoPE (Qwen3, Gemma 3)."""
    return c.norm(q, (layer.q_norm,)), c.norm(k, (layer.k_norm,))


@dataclass(frozen=True)
class Family:
    """What sets a family's forward pass apart, as data (the weights say which embedding tables
    it has: learned positions, token types, an embedding norm).

    A new family adds a named step as a field holding a callable, with a default that changes
    nothing, called at that step's one place: a per-head q/k norm (`qk_norm`), a scale on the token
    embedding (`embed_scale`), or another residual layout (`block`: sandwich norms). What differs
    per layer (window, RoPE base and scaling, score scale) is the config's (`ModelConfig.window`,
    `rope_of`, `query_pre_attn_scalar`), read by `layer_consts` for every family alike."""
    norm: Callable  # layer_norm(x, gain, bias, eps) or rms_norm(x, gain, eps)
    block: Callable  # one layer, (x, layer, consts, cache) -> x: pre_norm_block, post_norm_block, ...
    gated_mlp: bool
    rope: bool  # rotary positions on q and k, or none (learned positions are added to x instead)
    qk_norm: Callable | None = None  # (q, k, layer, consts) -> q, k, after the projection
    embed_scale: Callable | None = None  # (cfg) -> factor on the token embedding

    @property
    def pre_norm(self) -> bool:  # attention reads norm(x), not the residual itself
        return self.block is not post_norm_block


FAMILY = {
    "bert": Family(norm=layer_norm, block=post_norm_block, gated_mlp=False, rope=False),
    "gpt2": Family(norm=layer_norm, block=pre_norm_block, gated_mlp=False, rope=False),
    "llama": Family(norm=rms_norm, block=pre_norm_block, gated_mlp=True, rope=True),
    "qwen3": Family(norm=rms_norm, block=pre_norm_block, gated_mlp=True, rope=True,
                    qk_norm=head_rms_norm),
    # Gemma's (1 + w) gains are folded at load (safetensors_model._gemma_gain): one RMSNorm serves it
    "gemma3": Family(norm=rms_norm, block=sandwich_norm_block, gated_mlp=True, rope=True,
                     qk_norm=head_rms_norm, embed_scale=lambda cfg: np.sqrt(cfg.d_model)),
}


CONSTS_ROWS = 16  # runs of at most this many new rows keep their Consts (layer_consts)
CONSTS_KEPT = 8  # (config, T, p, ...) of the last this many such runs
CONSTS_MASK = 1 << 20  # and a mask [n, T] of at most this many entries (a long text's is not kept)


_CONSTS: dict = {}  # (id(cfg), T, p, masks, workers) -> (cfg, [Consts]), oldest first
_CONSTS_LOCK = threading.Lock()  # (runs on several threads: the window's, a comparison's)


def layer_consts(cfg: ModelConfig, T: int, p: int = 0, masks: bool = True,
                 workers: int = 1, positions: np.ndarray | None = None) -> list[Consts]:
    """_layer_consts, kept for a run of a few new rows at positions p..T-1 (a keystroke, a
    generation step: the same T and p again and again, and every layer's masks and RoPE tables
    would be built anew each run); their arrays are made read-only, as they are shared."""
    row = _ROWS.get(cfg, p, max(1, int(workers))) if positions is None and T - p == 1 else None
    if row is not None:  # (the last row alone: a generation step's)
        return list(row)
    if positions is not None or T - p > CONSTS_ROWS or (masks and (T - p) * T > CONSTS_MASK):
        return _layer_consts(cfg, T, p, masks, workers, positions)
    key = (id(cfg), T, p, bool(masks), max(1, int(workers)))
    with _CONSTS_LOCK:
        kept = _CONSTS.pop(key, None)
    if kept is None or kept[0] is not cfg:  # (an id can be a freed config's, reused)
        consts = _layer_consts(cfg, T, p, masks, workers)
        last = None
        for c in consts:
            if c is not last:  # (layers alike share one)
                for a in (c.bias, *(c.rope or ())):
                    if a is not None:
                        a.setflags(write=False)
                last = c
        kept = (cfg, consts)
    with _CONSTS_LOCK:
        while len(_CONSTS) >= CONSTS_KEPT:
            del _CONSTS[next(iter(_CONSTS))]
        _CONSTS[key] = kept  # (the newest last)
    return list(kept[1])


def _row_block(cfg: ModelConfig, block: int, workers: int) -> list | None:
    """rowconsts.row_block of the block's first position's Consts (_layer_consts of its one row,
    whose RoPE rows it replaces: made from its position's own table, not rope_row's kept block)."""
    p = block * ANGLE_ROWS
    first = _layer_consts(cfg, p + 1, p, True, workers, np.arange(p, p + 1))
    return row_block(first, [rope for _, rope, _ in _kinds(cfg)], block, cfg.d_head)


_ROWS = RowConsts(_row_block)  # a run of one row's Consts, per block of ANGLE_ROWS positions


def _layer_consts(cfg: ModelConfig, T: int, p: int = 0, masks: bool = True,
                  workers: int = 1, positions: np.ndarray | None = None) -> list[Consts]:
    """Every layer's Consts for a run over positions p..T-1 (n = T - p); layers with the same window
    and RoPE share their arrays. Layer i's window and RoPE are the config's (a local layer of
    Gemma 3 has its own window and base); the score scale is query_pre_attn_scalar^-0.5 where the
    config has one (Gemma), else d_head^-0.5. masks=False: no [n, T] mask (a long run's attention
    masks its blocks itself); `workers`: threads for the row-wise steps (Consts.workers);
    `positions` [n]: the rows' positions where they are not p..T-1 (packed texts, each from 0).
    Layers of the same window, RoPE and scale share one Consts."""
    fam = FAMILY[cfg.family]
    one_row = positions is None and T - p == 1  # (a generation step's: one new position)
    positions = np.arange(p, T) if positions is None and not one_row else positions  # [n]
    eps = cfg.norm_eps

    def norm(x, gain_bias):  # [n, d_model] -> [n, d_model]
        return fam.norm(x, *gain_bias, eps)

    masks, ropes, made, out = ({} if masks else None), {}, {}, []
    kind = None
    kinds = _kinds(cfg)
    alike = len(kinds) > 1 and kinds[0] is kinds[-1]  # (_kinds' one entry for all: one Consts)
    for same in kinds[:1] if alike else kinds:
        if same is kind:  # (the entry of the layer before: no key to hash)
            out.append(out[-1])
            continue
        kind = same
        window, rope, scale = kind
        c = made.get(kind)
        if c is None:  # (layers alike share one: a generation's every step makes them anew)
            if cfg.causal and masks is not None and window not in masks:  # [n, T] (0 or -inf)
                seen = None if window is None and p == T - 1 else causal_mask(T, window, start=p)
                # (none where every key is seen, a last row: the one-row scores take their fast path)
                masks[window] = None if seen is None or seen.all() else mask_bias(seen)
            if fam.rope and rope not in ropes:  # [n, d_head] x2
                ropes[rope] = (rope_row(p, cfg.d_head, rope) if one_row
                               else rope_tables(positions, cfg.d_head, rope))
            c = made[kind] = Consts(
                n_head=cfg.n_head, n_kv_head=cfg.n_kv_head, d_head=cfg.d_head, scale=scale,
                rope=ropes.get(rope) if fam.rope else None,
                bias=masks.get(window) if cfg.causal and masks is not None else None,
                norm=norm, act=ACTIVATIONS[cfg.activation], gated_mlp=fam.gated_mlp,
                qk_norm=fam.qk_norm, window=window if cfg.causal else None, causal=cfg.causal,
                workers=max(1, int(workers)))
        out.append(c)
    return out * len(kinds) if alike else out


_KINDS: dict = {}  # id(cfg) -> (cfg, its _kinds), for the few configs in use


def _kinds(cfg: ModelConfig) -> tuple:
    """Each layer's (window, RoPE, score scale), kept for the (frozen) config; one entry (one
    tuple, repeated) for all where no layer differs, otherwise one made for each layer: a run then
    makes one Consts without asking each layer."""
    kept = _KINDS.get(id(cfg))
    if kept is not None and kept[0] is cfg:  # (an id can be a freed config's, reused)
        return kept[1]
    base = 1.0 / np.sqrt(cfg.query_pre_attn_scalar or cfg.d_head)
    if LOCAL not in cfg.layer_types and not cfg.attn_scale_by_layer:  # (is_local false throughout)
        kinds = ((None, cfg.rope, base),) * cfg.n_layer
    else:
        kinds = tuple((cfg.window(i), cfg.rope_of(i), base / (i + 1) if cfg.attn_scale_by_layer else base)
                      for i in range(cfg.n_layer))
    if len(_KINDS) >= 2 * CONSTS_KEPT:
        _KINDS.clear()
    _KINDS[id(cfg)] = (cfg, kinds)  # (one dict write: threads at worst compute it twice)
    return kinds


_ONE_ROW: dict = {}  # id(Consts) -> (those Consts, their one-row variant), for layer_consts' kept ones


def one_row_consts(steps, cfg: ModelConfig, c: Consts) -> Consts:
    """c with the compiled one-row steps (`steps`: engine/computing/onerow.py) of a run of one new
    row on the kernels, kept while layer_consts keeps c (a keystroke's T and p come again)."""
    kept = _ONE_ROW.get(id(c))
    if kept is None or kept[0] is not c:  # (an id can be a freed Consts', reused)
        if len(_ONE_ROW) >= 2 * CONSTS_KEPT * cfg.n_layer:
            _ONE_ROW.clear()
        fam = FAMILY[cfg.family]
        kept = (c, steps.fused(c, cfg.norm_eps, fam.norm is rms_norm,
                               fam.block if fam.block is pre_norm_block else None))
        _ONE_ROW[id(c)] = kept  # (one dict write: threads at worst build a variant twice)
    return kept[1]


def embed(w: Weights, ids: np.ndarray, positions: np.ndarray, cfg: ModelConfig) -> np.ndarray:
    """Token ids [n] at `positions` [n] -> x [n, d_model]: the tables the family has, summed."""
    fam = FAMILY[cfg.family]
    x = np.asarray(w.tok_emb[ids], dtype=np.float32)  # [n, d_model] token embedding
    if fam.embed_scale is not None:
        x = x * np.float32(fam.embed_scale(cfg))
    if w.pos_emb is not None:
        x = x + w.pos_emb[positions]  # [n, d_model] learned positions (BERT, GPT-2)
    if w.type_emb is not None:
        x = x + w.type_emb[0]  # [d_model] BERT: every token is of type 0
    if w.emb_norm is not None:
        x = layer_norm(x, *w.emb_norm, cfg.norm_eps)  # BERT's embedding LayerNorm
    return x


def attend(q, k, c: Consts, cache=NOTHING):
    """q [n_head, n, d_head], k [n_kv_head, T, d_head] -> pattern [n_head, n, T]: scores, the
    cache's edits to them (knockout), softmax. Written into cache.rows when the cache gives them;
    otherwise, under grouped-query attention, one product per KV head (k is not repeated: a
    generation step's product reads the cache once, not n_group times)."""
    if c.n_group > 1 and cache.rows is None:
        n_head, n, d = q.shape
        qg = np.ascontiguousarray(q).reshape(c.n_kv_head, c.n_group * n, d)  # heads by KV head
        scores = attention_scores(qg, k, c.scale).reshape(n_head, n, -1)  # [n_head, n, T]
        if c.bias is not None:
            scores += c.bias
    else:
        scores = attention_scores(q, repeat_kv(k, c.n_group), c.scale, c.bias,  # [n_head, n, T]
                                  out=cache.rows)
    return softmax(cache.scores(scores))


def head_outputs(pattern, v, c: Consts):  # [n_head, n, T], [n_kv_head, T, d_head] -> z [n_head, n, d_head]
    if c.n_group > 1 and pattern.flags.c_contiguous:  # one product per KV head, v not repeated
        n_head, n, T = pattern.shape
        return (pattern.reshape(c.n_kv_head, c.n_group * n, T) @ v).reshape(n_head, n, -1)
    return pattern @ repeat_kv(v, c.n_group)  # each head's weighted values


def segment_attention(q, k, v, c: Consts, cache=NOTHING):
    """dense_attention of several texts or copies in one run (forward_packed, forward_batch): each
    segment's rows a..b-1 attend to its own keys (and a copy's cached first positions) only, with
    its own mask (c.segments) -> z [n_head, n, d_head]."""
    z = np.empty((c.n_head, q.shape[1], v.shape[-1]), dtype=np.float32)  # [n_head, n, d_head]
    for a, b, bias, out, past in c.segments:
        one = replace(c, bias=bias, segments=(), attention=dense_attention)
        ks, vs = k[:, a:b], v[:, a:b]  # [n_kv_head, b - a, d_head] x2
        if past is not None:  # a copy's unchanged first positions: their keys and values
            ks, vs = np.concatenate([past[0], ks], axis=1), np.concatenate([past[1], vs], axis=1)
        pattern = attend(q[:, a:b], ks, one)  # [n_head, b - a, n_k]
        cache.pattern(pattern, a)
        if out is not None:
            out[...] = pattern
        z[:, a:b] = head_outputs(pattern, vs, one)
    return z


def self_attention(x, layer: Layer, c: Consts, cache=None):  # [n, d_model] -> [n, d_model]
    """One layer's multi-head attention of n new tokens over all T = p + n, attending as
    c.attention says (dense_attention unless the caller chose another strategy).

    `cache`: this layer's slot of a Trace (trace.LayerCache): it supplies the p cached tokens' k
    and v, records what the trace asks for and applies its edits, at the named points below."""
    cache = NOTHING if cache is None else cache
    cache.input(x)
    q, k, v = project_qkv(x, layer, c)  # [n_head, n, d_head], [n_kv_head, n, d_head] x2
    k, v = cache.kv(k, v)  # [n_kv_head, T, d_head] x2, cached keys and values first
    z = c.attention(q, k, v, c, cache)  # [n_head, n, d_head]
    z = cache.z(z)  # [n_head, n, d_head]
    if in_row_chunks(x, c):
        out = np.empty((z.shape[1], x.shape[1]), dtype=np.float32)  # [n, d_model]

        def rows(a, b):
            out[a:b] = attention_output(z[:, a:b], layer)[1]
        for_row_chunks(z.shape[1], rows, c.workers)
        return out
    return attention_output(z, layer)[1]  # [n, d_model]


def mlp(x, layer: Layer, c: Consts, cache=None):  # [n, d_model] -> [n, d_model]
    """The MLP's output; `cache` (the layer's trace slot) records or patches it (its mlp_out)."""
    cache = NOTHING if cache is None else cache
    if in_row_chunks(x, c):  # a long run: chunks of rows, [chunk, d_ff] in cache, on c.workers threads
        out = np.empty(x.shape, dtype=np.float32)  # [n, d_model]

        def rows(a, b):
            out[a:b] = _mlp(x[a:b], layer, c)
        for_row_chunks(x.shape[0], rows, c.workers)
        return cache.mlp_out(out)
    return cache.mlp_out(_mlp(x, layer, c))


def _mlp(x, layer: Layer, c: Consts):  # [n, d_model] -> [n, d_model]
    # [n, d_ff] (gated: [n, 2 d_ff], gate | up)
    hidden = linear(x, layer.w_in, layer.b_in, packed(layer, "w_in"))
    if c.gated_mlp:
        d_ff = hidden.shape[-1] // 2
        gate, up = hidden[:, :d_ff], hidden[:, d_ff:]  # [n, d_ff] each
        hidden = c.act(gate)
        hidden *= up  # [n, d_ff] SwiGLU
    else:
        hidden = c.act(hidden)  # [n, d_ff]
    return linear(hidden, layer.w_out, layer.b_out, packed(layer, "w_out"))  # [n, d_model]


def forward(cfg: ModelConfig, w: Weights, ids: np.ndarray, trace: Trace | None = None,
            cache: KVCache | None = None) -> Trace:
    """Token ids [T] -> the trace, filled with what it asks for (default: the patterns).

    With a `cache` (causal models only; the trace then keeps k and v) the tokens of the longest
    common prefix with a cached run's ids (its current run or one of the few earlier ones it keeps:
    KVCache.reuse) are reused: only rows p..T-1 are computed, and the cache is updated to `ids`.
    Same ids compute nothing; ids that are a prefix of the cached ones cut the cache to them. The
    patterns are then a read-only view of the cache's array. A cache that did not keep a record
    the trace asks for is recomputed in full. A trace with edits or a resume point computes
    in full from its start layer and never reads or writes a cache."""
    trace = Trace() if trace is None else trace
    T = len(ids)
    p = 0
    if cache is not None:
        assert cfg.causal, "only a causal model's earlier rows stay valid when tokens follow"
        assert not trace.edits and not trace.start, "an edited run leaves the cache alone"
        assert trace.end is None, "a cache holds every layer: a run that ends early leaves it alone"
        trace.want_kv = True
        p = cache.reuse(ids, trace)  # the longest prefix a kept run holds (it becomes the current one)
        if p == T and T:  # same ids, or the text got shorter: every row is known
            cache.give(trace, T)
            return trace
    trace.begin(cfg.n_layer, ids, p)
    if trace.want_patterns:
        trace.attentions = np.empty((trace.n_run(cfg.n_layer), cfg.n_head, T, T), dtype=np.float32)
        if p:  # old query rows cannot see the new keys
            trace.attentions[:, :, :p, :p] = cache.attentions[:, :, :p, :p]
            trace.attentions[:, :, :p, p:] = 0
        if trace.start:  # the layers before it are the base run's
            trace.attentions[:trace.start] = trace.base.attentions[:trace.start]
    if T > p:
        _forward_rows(cfg, w, ids, p, trace, cache if p else None)
    if cache is not None:
        cache.store(trace)
        if trace.attentions is not None:
            trace.attentions = trace.attentions.view()
    return trace


def _forward_rows(cfg, w, ids, p, trace: Trace, past: KVCache | None) -> None:
    """Rows p..T-1 of every layer from layer trace.start on, recorded into `trace`; `past` gives
    rows :p."""
    fam = FAMILY[cfg.family]
    T = len(ids)
    consts = layer_consts(cfg, T, p, masks=trace.attention is None, workers=trace.workers)
    if trace.attention is not None:  # the trace's own strategy (a long trace's row blocks)
        consts = [replace(c, attention=trace.attention) for c in consts]
    if trace.start:
        x = trace.base.resid[trace.start]  # [T, d_model] the residual entering layer `start`
    else:
        x = embed(w, ids[p:], np.arange(p, T), cfg)  # [n, d_model], n = T - p new tokens
        if _in_one_call(cfg, w, p, trace, past, consts, x):
            return
    try:
        n_run = trace.n_run(cfg.n_layer)
        for i in range(trace.start, n_run):
            if trace.stop is not None and trace.stop():
                raise Cancelled(f"stopped before layer {i}: a newer run was asked for")
            x = trace.at_resid(i, x)  # its patches (activation patching)
            trace.record_resid(i, x, past)
            rows = trace.attentions[i, :, p:] if trace.attentions is not None else None
            layer = layer_for(w.layers, i, len(x))
            steps = one_row_steps(layer, len(x), trace) if trace.attention is None else None
            c = consts[i] if steps is None else one_row_consts(steps, cfg, consts[i])
            x = (fam.block if c.block is None else c.block)(x, layer, c, trace.slot(i, past, rows))
            if trace.early is not None and i + 1 == trace.early[0]:
                trace.early[1](trace)  # layers 0..i are final: a caller may show them now
        if n_run == cfg.n_layer:
            trace.record_resid(cfg.n_layer, x, past)  # the final-norm input
    except Stop:  # the trace wants nothing after this point
        pass


def _in_one_call(cfg, w, p, trace: Trace, past: KVCache | None, consts, x) -> bool:
    """Whether every layer of the run went through one compiled call (a cached run of one row of a
    pre-norm RMSNorm family with SwiGLU and RoPE, whose trace asks for nothing between the
    layers: onerow_stack.stacked_rows says), and then it has."""
    fam = FAMILY[cfg.family]
    if (past is None or len(x) != 1 or trace.attention is not None or fam.block is not pre_norm_block
            or fam.norm is not rms_norm or not fam.gated_mlp or not fam.rope or fam.qk_norm is not None
            or ACTIVATIONS[cfg.activation] is not silu):
        return False
    stack = one_row_stack(1, trace, w.layers)
    return stack is not None and stack.stacked_rows(cfg, w, p, trace, past, consts, x, layer_for)
