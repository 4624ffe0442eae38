"""Why head (l, h) attends from query q to key k: QK attribution of one pre-softmax score.

The residual stream entering block l is a sum of components, at every position:

    embed      the embedding layer's output (token, with any scale the family applies, plus learned
               positions and token types where the family has them), less BERT's embedding-norm β
    LiHj       head j of an earlier layer i (L3H1): z_{i,j} W_O[j]
    Li.mlp     layer i's MLP output, less its output bias
    bias       every bias and norm offset: attention and MLP output biases, LayerNorm β

Each component passes the block's input norm with the norm's scale frozen from this run, so the norm
is linear and the parts still add up:

    RMSNorm:   part · g / rms(x)
    LayerNorm: (part - mean(part)) · g / std(x), and β goes to `bias`

then W_Q (at q) or W_K (at k), the projection biases to `bias`, the per-head q/k RMSNorm where the
family has one (Qwen3, Gemma 3: part · g_q / rms(q), its scale frozen too), and RoPE at the true
positions (a rotation: linear). With q_a and k_b the query- and key-side parts,

    table[a][b] = scale · q_a · k_b       score = Σ_ab table[a][b]

where `scale` is the layer's score scale (1/sqrt(d_head), or the family's). Families that normalise
what a block writes linearise those norms the same way: Gemma 3's post-attention RMSNorm scales each
head's part by g / rms(attention output), as direct logit attribution does (predict.attribute), and
its post-MLP norm is inside the MLP's part. In a post-norm model (BERT) every earlier block's two
LayerNorms are linearised in turn, so each component is centred and scaled through them.

Row totals (`query_side[a]` = scale · q_a · k) say how much component a at the query reads the
whole key; column totals (`key_side[b]` = scale · q · k_b) how much component b at the key is read.
Arithmetic on a Trace that kept z and the residual stream (qk_trace()), at the two positions only;
a post-norm model's MLP outputs are recomputed there, as its trace keeps no MLP input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.analysing.zero_mlps import stored_as_zeros
from attnviz.engine.computing.families import (
    FAMILY, Layer, layer_consts, mlp, output_projection, project_qkv,
)
from attnviz.engine.computing.layers import apply_rope, kv_group, layer_norm, layer_vectors
from attnviz.engine.computing.patterns import head_key
from attnviz.engine.computing.trace import Trace
from attnviz.engine.errors import InputError
from attnviz.engine.reading.token_text import tokens

TOP = 20  # component pairs in QKAttribution.top


@dataclass(frozen=True)
class QKAttribution:
    """One score split into query-side × key-side components (module docstring)."""
    layer: int
    head: int
    query: int
    key: int
    score: float  # the score the run used: scale · q · k, before the mask and the softmax
    components: tuple[str, ...]  # names, `bias` last
    table: np.ndarray  # [n_comp, n_comp] float64: query-side component × key-side component
    note: str = ""  # MLP parts that are 0 but for rounding: MLPs stored as zeros (zero_mlps)

    @property
    def query_side(self) -> np.ndarray:  # [n_comp]: scale · q_a · k (the whole key)
        return self.table.sum(axis=1)

    @property
    def key_side(self) -> np.ndarray:  # [n_comp]: scale · q · k_b (the whole query)
        return self.table.sum(axis=0)

    @property
    def bias(self) -> float:
        """The terms with a bias on either side: the table's last row and column, counted once."""
        t = self.table
        return float(t[-1].sum() + t[:-1, -1].sum())

    def total(self) -> float:
        return float(self.table.sum())

    def top(self, n: int = TOP) -> list[tuple[str, str, float]]:
        """The n largest pairs by |value|: (query component, key component, value)."""
        flat = self.table.ravel()
        n = min(n, flat.size)
        idx = np.argpartition(-np.abs(flat), n - 1)[:n]
        idx = idx[np.argsort(-np.abs(flat[idx]), kind="stable")]
        m = self.table.shape[1]
        return [(self.components[i // m], self.components[i % m], float(flat[i])) for i in idx]


def qk_trace(**kw) -> Trace:
    """A trace that keeps what QK attribution reads: z and the residual stream."""
    return Trace(z=True, resid=True, **kw)


def check_cell(cfg, T: int, layer: int, head: int, query: int, key: int) -> None:
    """InputError in one line for a cell the head never scored."""
    if not 0 <= layer < cfg.n_layer:
        raise InputError(f"layer {layer} is outside this model's layers 0..{cfg.n_layer - 1}")
    if not 0 <= head < cfg.n_head:
        raise InputError(f"head {head} is outside this model's heads 0..{cfg.n_head - 1}")
    for name, p in (("query", query), ("key", key)):
        if not 0 <= p < T:
            raise InputError(f"{name} position {p} is outside the {tokens(T)} (0..{T - 1})")
    if cfg.causal and key > query:
        raise InputError(f"key {key} comes after query {query}: a causal model's query sees only "
                         f"keys 0..{query}")
    window = cfg.window(layer) if cfg.causal else None
    if window is not None and query - key >= window:
        raise InputError(f"key {key} is outside layer {layer}'s window of {tokens(window)}: query "
                         f"{query} sees keys {query - window + 1}..{query}")


def residual_parts(model, trace: Trace, layer: int, rows) -> tuple[list[str], np.ndarray]:
    """The residual stream entering block `layer` at positions `rows` [n] -> names and parts
    [n_comp, n, d_model] float64, `bias` last; the parts add up to trace.resid[layer][rows]."""
    cfg = model.config
    rows = np.asarray(rows)
    names = ["embed"]
    x0 = trace.resid[0][rows].astype(np.float64)  # [n, d_model]
    bias = np.zeros_like(x0)
    weights = model.weights  # (read once: its files checked once, not a layer)
    emb_norm = weights.emb_norm
    if emb_norm is not None:  # BERT: the embedding LayerNorm's β is a norm offset
        bias += emb_norm[1]
    parts = [x0 - bias]
    pre = FAMILY[cfg.family].pre_norm
    consts = None if pre else layer_consts(cfg, len(rows), masks=False, positions=rows)
    for i in range(layer):
        w_out, b_out, post_norm = output_projection(weights.layers, i)
        w_o = w_out.reshape(cfg.n_head, cfg.d_head, -1).astype(np.float64)  # [n_head, d_head, d_model]
        z = trace.z[i][:, rows].astype(np.float64)  # [n_head, n, d_head]
        heads = np.einsum("hnd,hdm->hnm", z, w_o)  # [n_head, n, d_model]
        b_o = np.zeros_like(x0) if b_out is None else np.broadcast_to(b_out.astype(np.float64), x0.shape)
        if post_norm is not None:  # Gemma 3: the heads' sum is RMS-normed before the add
            out = heads.sum(axis=0) + b_o  # [n, d_model] the attention output
            r = post_norm[0] / np.sqrt(np.mean(out * out, axis=-1, keepdims=True) + cfg.norm_eps)
            heads, b_o = heads * r, b_o * r
        names += [head_key(i, j) for j in range(cfg.n_head)] + [f"L{i}.mlp"]
        if pre:
            b_mlp = _bias(layer_vectors(weights.layers, i).b_out, x0.shape)
            step = (trace.resid[i + 1][rows].astype(np.float64)
                    - trace.resid[i][rows])  # attention + MLP, as written to the stream
            mlp_part = step - heads.sum(axis=0) - b_o - b_mlp
            parts += [*heads, mlp_part]
            bias = bias + b_o + b_mlp
        else:  # post-norm: x = LN2(y + mlp(y)), y = LN1(x + attn(x)), each linearised
            lw = weights.layers[i]
            parts += [*heads]
            bias = bias + b_o
            stack = np.stack(parts + [bias])
            u = stack.sum(axis=0)  # [n, d_model] x + attention output
            stack = _layer_norm_parts(stack, u, lw.norm1, cfg.norm_eps)
            y = stack.sum(axis=0)  # [n, d_model]
            m = mlp(y.astype(np.float32), lw, consts[i]).astype(np.float64)  # [n, d_model]
            b_mlp = _bias(lw.b_out, x0.shape)
            stack = np.concatenate([stack[:-1], (m - b_mlp)[None], stack[-1:] + b_mlp])
            stack = _layer_norm_parts(stack, stack.sum(axis=0), lw.norm2, cfg.norm_eps)
            parts, bias = list(stack[:-1]), stack[-1]
    out = np.stack(parts + [bias])  # [n_comp, n, d_model]
    return names + ["bias"], out


def _bias(b, shape):  # a bias [d_model] or None -> float64 [n, d_model]
    return np.zeros(shape) if b is None else np.broadcast_to(b.astype(np.float64), shape)


def _layer_norm_parts(stack, x, gain_bias, eps):  # [n_comp, n, d], whole x [n, d] -> the same
    """LayerNorm of x linearised: every part centred and scaled by g / std(x), β added to the last
    part (the bias)."""
    c = x - x.mean(axis=-1, keepdims=True)
    s = np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)  # [n, 1] frozen from the run
    out = (stack - stack.mean(axis=-1, keepdims=True)) * (gain_bias[0].astype(np.float64) / s)
    out[-1] += gain_bias[1]
    return out


def _input_norm_parts(stack, x, gain_bias, centred: bool, eps):  # [n_comp, d], x [d] -> [n_comp, d]
    g = gain_bias[0].astype(np.float64)
    if centred:  # LayerNorm: centre each part, frozen std, β to the bias
        c = x - x.mean()
        out = (stack - stack.mean(axis=-1, keepdims=True)) * (g / np.sqrt(np.mean(c * c) + eps))
        out[-1] += gain_bias[1]
        return out
    return stack * (g / np.sqrt(np.mean(x * x) + eps))  # RMSNorm: frozen 1 / rms


def _project(stack, w, b, gain, eps):  # [n_comp, d_model] -> [n_comp, d_head]
    """Each part through one head's slice of W_Q or W_K, the projection bias to the bias part, and
    the per-head RMSNorm with its scale frozen from the whole vector (gain None: no q/k norm)."""
    out = stack @ w.astype(np.float64)
    if b is not None:
        out[-1] += b
    if gain is not None:
        whole = out.sum(axis=0)
        out *= gain.astype(np.float64) / np.sqrt(np.mean(whole * whole) + eps)
    return out


def qk_attribution(model, trace: Trace, layer: int, head: int, query: int, key: int) -> QKAttribution:
    """Head (layer, head)'s score from position `query` to position `key`, split into query-side ×
    key-side components of the residual stream entering the block (module docstring). The trace
    kept z and the residual stream (qk_trace()); InputError in one line for a cell the head never
    scored."""
    cfg = model.config
    T = len(trace.ids)
    check_cell(cfg, T, layer, head, query, key)
    if not trace.z or trace.z[0] is None or not trace.resid or trace.resid[layer] is None:
        raise ValueError("QK attribution needs a trace that kept z and the residual stream (qk_trace())")
    fam = FAMILY[cfg.family]
    rows = np.array([query, key])
    names, parts = residual_parts(model, trace, layer, rows)  # [n_comp, 2, d_model]
    lw: Layer = model.weights.layers[layer]
    c = layer_consts(cfg, 2, masks=False, positions=rows)[layer]
    x = trace.resid[layer][rows]  # [2, d_model] the run's residual entering the block
    if fam.pre_norm:
        centred = fam.norm is layer_norm
        q_parts = _input_norm_parts(parts[:, 0], x[0].astype(np.float64), lw.norm1, centred, cfg.norm_eps)
        k_parts = _input_norm_parts(parts[:, 1], x[1].astype(np.float64), lw.norm1, centred, cfg.norm_eps)
        x_in = c.norm(x, lw.norm1)  # [2, d_model] the attention input, as the run computed it
    else:
        q_parts, k_parts, x_in = parts[:, 0], parts[:, 1], x
    dh, g = cfg.d_head, int(kv_group(cfg.n_head, cfg.n_kv_head)[head])
    qcol = slice(head * dh, (head + 1) * dh)
    kcol = slice(cfg.n_head * dh + g * dh, cfg.n_head * dh + (g + 1) * dh)
    b = lw.b_qkv
    qn, kn = (lw.q_norm, lw.k_norm) if fam.qk_norm is not None else (None, None)
    qv = _project(q_parts, lw.w_qkv[:, qcol], None if b is None else b[qcol], qn, cfg.norm_eps)
    kv = _project(k_parts, lw.w_qkv[:, kcol], None if b is None else b[kcol], kn, cfg.norm_eps)
    if c.rope is not None:  # rotate each part at its own position
        cos, sin = (t.astype(np.float64) for t in c.rope)
        qv = apply_rope(qv[None], cos[0], sin[0])[0]
        kv = apply_rope(kv[None], cos[1], sin[1])[0]
    table = c.scale * (qv @ kv.T)  # [n_comp, n_comp]
    score = run_score(model, x_in, lw, c, head, g)
    zero = stored_as_zeros(model, range(layer))  # (the MLPs before the block are its parts)
    return QKAttribution(layer, head, query, key, score, tuple(names), table,
                         f"{zero}, so its MLP parts here are 0 but for float rounding" if zero else "")


def run_score(model, x_in, lw: Layer, c, head: int, g: int) -> float:
    """The score as the forward pass computes it, from the attention input x_in [2, d_model] (query
    row, key row) through the engine's own projection, q/k norms and RoPE."""
    q, k, _ = project_qkv(np.ascontiguousarray(x_in, dtype=np.float32), lw, c)
    return float(np.float32(c.scale) * q[head, 0] @ k[g, 1])
