"""Per-family weight conversion and forward passes: BERT, GPT-2, and the Llama family.

Weights are converted once at load into one layout: float32, every projection `[d_in, d_out]`
(so `x @ w`), Q/K/V fused into one `[d_model, (n_head + 2 n_kv_head) d_head]` matrix.

One forward pass serves every family, in the order data flows: `embed`, then per layer
`self_attention` and `mlp` around the residual stream. What differs between families (LayerNorm or
RMSNorm, pre- or post-LN, a gated MLP, RoPE) is data: one `Family` each, in `FAMILY`.

A causal model's forward pass can take a `KVCache` from the previous run and compute only the tokens
after the longest common prefix: under the causal mask nothing before a position can see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from attnviz.engine.config import ModelConfig
from attnviz.engine.errors import ModelLoadError
from attnviz.engine.layers import (
    ACTIVATIONS, apply_rope, attention_pattern, causal_mask, layer_norm, linear, mask_bias, merge_heads,
    qkv_heads, repeat_kv, rms_norm, rope_cos_sin,
)
from attnviz.engine.weights import Checkpoint


@dataclass(frozen=True)
class Layer:
    w_qkv: np.ndarray  # [d_model, (n_head + 2 n_kv_head) d_head]
    b_qkv: np.ndarray | None
    w_o: np.ndarray  # [n_head d_head, d_model]
    b_o: np.ndarray | None
    norm1: tuple  # (gain, bias) or (gain,)
    norm2: tuple
    w_in: np.ndarray  # [d_model, d_ff] (llama: [d_model, 2 d_ff], gate | up)
    b_in: np.ndarray | None
    w_out: np.ndarray  # [d_ff, d_model]
    b_out: np.ndarray | None


@dataclass(frozen=True)
class Weights:
    tok_emb: np.ndarray  # [vocab, d_model] (memory-mapped where the file is float32)
    pos_emb: np.ndarray | None  # [max_positions, d_model]
    type_emb: np.ndarray | None  # [type_vocab, d_model]
    emb_norm: tuple | None  # BERT's embedding LayerNorm
    layers: tuple[Layer, ...]


def _prefix(ckpt: Checkpoint, probe: str, candidates: tuple[str, ...]) -> str:
    for p in candidates:
        if p + probe in ckpt:
            return p
    raise ModelLoadError(f"checkpoint has no tensor {probe!r} (tried prefixes {list(candidates)})")


def _cat(parts):  # [d_in, a], [d_in, b], ... -> contiguous float32 [d_in, a + b + ...]
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def _cat_bias(parts):
    if all(p is None for p in parts):
        return None
    if any(p is None for p in parts):
        raise ModelLoadError("checkpoint has biases for some of Q/K/V but not all")
    return np.concatenate(parts).astype(np.float32)


def _t(w):  # nn.Linear [out, in] -> [in, out], contiguous float32
    return np.ascontiguousarray(w.T, dtype=np.float32)


def load_bert(cfg: ModelConfig, ckpt: Checkpoint) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    p = _prefix(ckpt, "embeddings.word_embeddings.weight", ("", "bert."))
    g = lambda name, shape: ckpt.get(p + name, shape)  # noqa: E731

    def norm(name):
        return (g(name + ".weight", (d,)), g(name + ".bias", (d,)))

    layers = []
    for i in range(cfg.n_layer):
        a = f"encoder.layer.{i}."
        q, k, v = (g(f"{a}attention.self.{n}.weight", (d, d)) for n in ("query", "key", "value"))
        bq, bk, bv = (g(f"{a}attention.self.{n}.bias", (d,)) for n in ("query", "key", "value"))
        layers.append(Layer(
            w_qkv=_cat([q.T, k.T, v.T]), b_qkv=_cat_bias([bq, bk, bv]),
            w_o=_t(g(a + "attention.output.dense.weight", (d, d))),
            b_o=np.array(g(a + "attention.output.dense.bias", (d,))),
            norm1=norm(a + "attention.output.LayerNorm"), norm2=norm(a + "output.LayerNorm"),
            w_in=_t(g(a + "intermediate.dense.weight", (f, d))),
            b_in=np.array(g(a + "intermediate.dense.bias", (f,))),
            w_out=_t(g(a + "output.dense.weight", (d, f))),
            b_out=np.array(g(a + "output.dense.bias", (d,))),
        ))
    return Weights(
        tok_emb=g("embeddings.word_embeddings.weight", (cfg.vocab_size, d)),
        pos_emb=g("embeddings.position_embeddings.weight", (cfg.max_positions, d)),
        type_emb=g("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, d)),
        emb_norm=norm("embeddings.LayerNorm"), layers=tuple(layers),
    )


def load_gpt2(cfg: ModelConfig, ckpt: Checkpoint) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    p = _prefix(ckpt, "wte.weight", ("", "transformer."))
    g = lambda name, shape: ckpt.get(p + name, shape)  # noqa: E731

    def norm(name):
        return (g(name + ".weight", (d,)), g(name + ".bias", (d,)))

    layers = []
    for i in range(cfg.n_layer):
        a = f"h.{i}."
        # Conv1D stores [in, out] already
        layers.append(Layer(
            w_qkv=np.ascontiguousarray(g(a + "attn.c_attn.weight", (d, 3 * d)), dtype=np.float32),
            b_qkv=np.array(g(a + "attn.c_attn.bias", (3 * d,))),
            w_o=np.ascontiguousarray(g(a + "attn.c_proj.weight", (d, d)), dtype=np.float32),
            b_o=np.array(g(a + "attn.c_proj.bias", (d,))),
            norm1=norm(a + "ln_1"), norm2=norm(a + "ln_2"),
            w_in=np.ascontiguousarray(g(a + "mlp.c_fc.weight", (d, f)), dtype=np.float32),
            b_in=np.array(g(a + "mlp.c_fc.bias", (f,))),
            w_out=np.ascontiguousarray(g(a + "mlp.c_proj.weight", (f, d)), dtype=np.float32),
            b_out=np.array(g(a + "mlp.c_proj.bias", (d,))),
        ))
    return Weights(tok_emb=g("wte.weight", (cfg.vocab_size, d)),
                   pos_emb=g("wpe.weight", (cfg.max_positions, d)),
                   type_emb=None, emb_norm=None, layers=tuple(layers))


def load_llama(cfg: ModelConfig, ckpt: Checkpoint) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    p = _prefix(ckpt, "embed_tokens.weight", ("model.", ""))
    g = lambda name, shape: ckpt.get(p + name, shape)  # noqa: E731
    layers = []
    for i in range(cfg.n_layer):
        a = f"layers.{i}."
        sa = a + "self_attn."
        q = g(sa + "q_proj.weight", (dq, d))
        k = g(sa + "k_proj.weight", (dkv, d))
        v = g(sa + "v_proj.weight", (dkv, d))
        if cfg.qkv_bias:
            biases = [g(sa + "q_proj.bias", (dq,)), g(sa + "k_proj.bias", (dkv,)),
                      g(sa + "v_proj.bias", (dkv,))]
        else:
            biases = [None, None, None]
        gate = g(a + "mlp.gate_proj.weight", (f, d))
        up = g(a + "mlp.up_proj.weight", (f, d))
        b_in = None
        if cfg.mlp_bias:
            b_in = np.concatenate([g(a + "mlp.gate_proj.bias", (f,)), g(a + "mlp.up_proj.bias", (f,))])
        layers.append(Layer(
            w_qkv=_cat([q.T, k.T, v.T]), b_qkv=_cat_bias(biases),
            w_o=_t(g(sa + "o_proj.weight", (d, dq))),
            b_o=np.array(g(sa + "o_proj.bias", (d,))) if cfg.o_bias else None,
            norm1=(np.array(g(a + "input_layernorm.weight", (d,))),),
            norm2=(np.array(g(a + "post_attention_layernorm.weight", (d,))),),
            w_in=_cat([gate.T, up.T]), b_in=b_in,
            w_out=_t(g(a + "mlp.down_proj.weight", (d, f))),
            b_out=np.array(g(a + "mlp.down_proj.bias", (d,))) if cfg.mlp_bias else None,
        ))
    return Weights(tok_emb=g("embed_tokens.weight", (cfg.vocab_size, d)), pos_emb=None,
                   type_emb=None, emb_norm=None, layers=tuple(layers))


LOADERS = {"bert": load_bert, "gpt2": load_gpt2, "llama": load_llama}


@dataclass(frozen=True)
class Family:
    """What sets a family's forward pass apart, as data (the weights say which embedding tables
    it has: learned positions, token types, an embedding norm)."""
    norm: Callable  # layer_norm(x, gain, bias, eps) or rms_norm(x, gain, eps)
    pre_norm: bool  # norm before attention and MLP (GPT-2, Llama), or after each residual add (BERT)
    gated_mlp: bool  # act(x W_gate) * (x W_up) (SwiGLU), or act(x W_in)
    rope: bool  # rotary positions on q and k, or none (learned positions are added to x instead)


FAMILY = {
    "bert": Family(norm=layer_norm, pre_norm=False, gated_mlp=False, rope=False),
    "gpt2": Family(norm=layer_norm, pre_norm=True, gated_mlp=False, rope=False),
    "llama": Family(norm=rms_norm, pre_norm=True, gated_mlp=True, rope=True),
}


@dataclass
class KVCache:
    """What one causal run leaves for the next: its ids, every layer's K (after RoPE) and V, and its
    patterns. Mutable: `forward_attentions` replaces the fields at the end of a run. Not locked here:
    its owner (a Model) lets one run at a time use it."""
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # int64 [T]
    k: list = field(default_factory=list)  # per layer [n_kv_head, T, d_head], not repeated
    v: list = field(default_factory=list)  # per layer [n_kv_head, T, d_head]
    h: list = field(default_factory=list)  # per layer [T, d_model] attention input, when captured
    attentions: np.ndarray | None = None  # [n_layer, n_head, T, T], read-only: results share it
    nbytes: int = 0  # bytes of K and V held, from the arrays
    reused: int = 0  # tokens the last run took from the cache

    def prefix(self, ids: np.ndarray) -> int:  # [T] -> tokens in common with the cached ids
        n = min(len(ids), len(self.ids))
        differ = np.flatnonzero(self.ids[:n] != ids[:n])
        return int(differ[0]) if differ.size else n

    def _store(self, ids, k, v, attentions, reused, h=()):
        attentions.flags.writeable = False
        self.ids, self.k, self.v, self.attentions = ids.copy(), k, v, attentions
        self.h = list(h)
        self.nbytes = sum(a.nbytes for a in k) + sum(a.nbytes for a in v)
        self.reused = reused

    def _cut(self, T: int) -> None:  # keep the first T tokens
        if T < len(self.ids):
            def cut(a):  # a copy, so the rest is freed
                return np.ascontiguousarray(a[:, :T])
            self._store(self.ids[:T], [cut(a) for a in self.k], [cut(a) for a in self.v],
                        np.ascontiguousarray(self.attentions[:, :, :T, :T]), T,
                        [np.ascontiguousarray(a[:T]) for a in self.h])
        else:
            self.reused = T


def forward_attentions(cfg: ModelConfig, w: Weights, ids: np.ndarray,
                       cache: KVCache | None = None, values_out: list | None = None,
                       inputs_out: list | None = None) -> np.ndarray:
    """Token ids [T] -> attention patterns [n_layer, n_head, T, T] (float32).

    With a `cache` (causal models only) the tokens of the common prefix with the cached ids are
    reused: only rows p..T-1 are computed, and the cache is updated to `ids`. Same ids compute
    nothing; ids that are a prefix of the cached ones cut the cache to them. The patterns returned
    are then a read-only view of the cache's array.

    `values_out` (a list) receives every layer's V [n_kv_head, T, d_head], all T tokens (with a
    cache, the cache's own arrays). `inputs_out` (a list) receives every layer's attention input
    [T, d_model] (after the input norm in a pre-LN model), all T tokens; only then are they kept,
    in the cache too (a cache without them is recomputed in full). The default path keeps none."""
    T = len(ids)
    p = 0
    if cache is not None:
        assert cfg.causal, "only a causal model's earlier rows stay valid when tokens follow"
        if cache.attentions is not None:
            p = cache.prefix(ids)
            if inputs_out is not None and len(cache.h) != cfg.n_layer:
                p = 0  # the cached run kept no layer inputs: compute them all
        if p == T and T:  # same ids, or the text got shorter: every row is known
            cache._cut(T)
            if inputs_out is not None:
                inputs_out.extend(cache.h)
            if values_out is not None:
                values_out.extend(cache.v)
            return cache.attentions.view()
    out = np.empty((cfg.n_layer, cfg.n_head, T, T), dtype=np.float32)
    if p:  # old query rows cannot see the new keys
        out[:, :, :p, :p] = cache.attentions[:, :, :p, :p]
        out[:, :, :p, p:] = 0
    keys, values = ([], []) if cache is not None else (None, values_out)
    inputs = inputs_out if inputs_out is None or cache is None else []
    if T > p:
        _forward_rows(cfg, w, ids, p, out, cache, keys, values, inputs)
    if cache is None:
        return out
    cache._store(ids, keys, values, out, p, inputs or ())
    if inputs_out is not None:
        inputs_out.extend(inputs)
    if values_out is not None:
        values_out.extend(values)
    return out.view()


def embed(w: Weights, ids: np.ndarray, positions: np.ndarray, eps: float) -> np.ndarray:
    """Token ids [n] at `positions` [n] -> x [n, d_model]: the tables the family has, summed."""
    x = np.asarray(w.tok_emb[ids], dtype=np.float32)  # [n, d_model] token embedding
    if w.pos_emb is not None:
        x = x + w.pos_emb[positions]  # [n, d_model] learned positions (BERT, GPT-2)
    if w.type_emb is not None:
        x = x + w.type_emb[0]  # [d_model] BERT: every token is of type 0
    if w.emb_norm is not None:
        x = layer_norm(x, *w.emb_norm, eps)  # BERT's embedding LayerNorm
    return x


def attention_scale(cfg: ModelConfig, i: int) -> float:
    """Layer i's score scale: 1 / sqrt(d_head), and also / (i + 1) with GPT-2's
    scale_attn_by_inverse_layer_idx."""
    scale = 1.0 / np.sqrt(cfg.d_head)
    return scale / (i + 1) if cfg.attn_scale_by_layer else scale


def position_terms(cfg: ModelConfig, T: int, p: int = 0):
    """What the positions of new tokens p..T-1 (n = T - p of them) add to every layer's attention:
    rope (cos, sin) [n, d_head] or None, and bias [n, T] (0 where a query may look, -inf where
    masked) or None."""
    positions = np.arange(p, T)  # [n]
    bias = mask_bias(causal_mask(T, cfg.sliding_window, start=p)) if cfg.causal else None  # [n, T]
    rope = rope_cos_sin(positions, cfg.d_head, cfg.rope_theta) if FAMILY[cfg.family].rope else None
    return rope, bias


def project_qkv(h, layer: Layer, cfg: ModelConfig, rope):
    """h [n, d_model] -> q [n_head, n, d_head], k and v [n_kv_head, n, d_head], q and k rotated by
    position when `rope` is given."""
    q, k, v = qkv_heads(h, layer.w_qkv, layer.b_qkv,  # [n_head, n, d_head], [n_kv_head, n, d_head] x2
                        cfg.n_head, cfg.n_kv_head, cfg.d_head)
    if rope is not None:
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)  # same shapes, rotated by position
    return q, k, v


def attention_output(pattern, v, layer: Layer, cfg: ModelConfig):
    """pattern [n_head, n, T], v [n_kv_head, T, d_head] -> heads [n_head, n, d_head] (each head's
    weighted values), concat [n, n_head d_head], out [n, d_model]."""
    heads = pattern @ repeat_kv(v, cfg.n_group)  # [n_head, n, d_head] weighted values
    concat = merge_heads(heads)  # [n, n_head d_head]
    return heads, concat, linear(concat, layer.w_o, layer.b_o)  # [n, d_model]


def self_attention(h, layer: Layer, cfg: ModelConfig, scale: float, rope, bias, past, keep: bool,
                   pattern_out, project: bool = True):
    """h [n, d_model] -> out [n, d_model], pattern [n_head, n, T], k and v [n_kv_head, T, d_head]:
    one layer's multi-head attention of n new tokens over all T = p + n.

    `past`: the p cached tokens' (k, v), each [n_kv_head, p, d_head], or None. `keep`: return k
    and v as arrays of their own, not views of the projection. `rope`, `bias`: position_terms. The
    pattern is written into `pattern_out`; `out` is None when not `project` (the last layer's
    output changes no pattern)."""
    q, k, v = project_qkv(h, layer, cfg, rope)  # [n_head, n, d_head], [n_kv_head, n, d_head] x2
    if past is not None:  # cached keys and values first
        k = np.concatenate([past[0], k], axis=1)  # [n_kv_head, T, d_head]
        v = np.concatenate([past[1], v], axis=1)  # [n_kv_head, T, d_head]
    elif keep:
        k, v = np.ascontiguousarray(k), np.ascontiguousarray(v)  # [n_kv_head, T, d_head]
    pattern = attention_pattern(q, repeat_kv(k, cfg.n_group), scale, bias,  # [n_head, n, T]
                                out=pattern_out)
    if not project:
        return None, pattern, k, v
    _, _, out = attention_output(pattern, v, layer, cfg)  # [n, d_model]
    return out, pattern, k, v


def mlp(x, layer: Layer, act, gated: bool):  # [n, d_model] -> [n, d_model]
    hidden = linear(x, layer.w_in, layer.b_in)  # [n, d_ff] (gated: [n, 2 d_ff], gate | up)
    if gated:
        gate, up = np.split(hidden, 2, axis=-1)  # [n, d_ff] each
        hidden = act(gate) * up  # [n, d_ff] SwiGLU
    else:
        hidden = act(hidden)  # [n, d_ff]
    return linear(hidden, layer.w_out, layer.b_out)  # [n, d_model]


def _forward_rows(cfg, w, ids, p, out, cache, keys, values, inputs=None) -> None:
    """Query rows p..T-1 of every layer's pattern into out[:, :, p:]; K and V of all T tokens
    appended to `keys` and `values` when they are lists (rows before p come from the cache), and
    each layer's attention input of all T tokens to `inputs` when it is a list."""
    fam = FAMILY[cfg.family]
    T = len(ids)
    act = ACTIVATIONS[cfg.activation]
    x = embed(w, ids[p:], np.arange(p, T), cfg.norm_eps)  # [n, d_model], n = T - p new tokens
    rope, bias = position_terms(cfg, T, p)  # [n, d_head] x2 | None, [n, T] | None
    keep = keys is not None or values is not None

    def norm(x, gain_bias):  # [n, d_model] -> [n, d_model]
        return fam.norm(x, *gain_bias, cfg.norm_eps)

    for i, layer in enumerate(w.layers):
        last = i == cfg.n_layer - 1  # its patterns are the last thing anything here can change
        h = norm(x, layer.norm1) if fam.pre_norm else x  # [n, d_model] attention input
        if inputs is not None:  # the layer input the anatomy shows: only when asked
            inputs.append(np.concatenate([cache.h[i][:p], h]) if p else np.ascontiguousarray(h))
        past = (cache.k[i][:, :p], cache.v[i][:, :p]) if p else None
        attn, _, k, v = self_attention(h, layer, cfg, attention_scale(cfg, i), rope, bias, past, keep,
                                       out[i, :, p:], project=not last)
        if keys is not None:
            keys.append(k)
        if values is not None:
            values.append(v)
        if last:
            break
        if fam.pre_norm:  # GPT-2, Llama: x + attn(norm(x)), then x + mlp(norm(x))
            x = x + attn
            x = x + mlp(norm(x, layer.norm2), layer, act, fam.gated_mlp)
        else:  # BERT, post-LN: norm(x + attn(x)), then norm(x + mlp(x))
            x = norm(x + attn, layer.norm1)
            x = norm(x + mlp(x, layer, act, fam.gated_mlp), layer.norm2)
