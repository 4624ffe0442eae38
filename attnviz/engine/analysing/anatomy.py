"""The anatomy of one attention layer on a real sentence: the pipeline of the lesson with the
loaded model's own weights and activations, and what it costs per head. Pure NumPy, no Qt.

    x [T, d_model] -> W_Q [d_model, n_head d_head], W_K, W_V [d_model, n_kv_head d_head]
    -> q [n_head, T, d_head], k, v [n_kv_head, T, d_head] -> pattern [n_head, T, T]
    -> head outputs [n_head, T, d_head] -> concat [T, n_head d_head] -> W_O [n_head d_head, d_model]
    -> attention output [T, d_model]

`x` is the layer's attention input as the forward pass computed it (`RunRequest(inputs=True)`:
after the input norm in a pre-LN model). Everything after it is recomputed here with the stages
`families.self_attention` is made of (project_qkv, attend, head_outputs, attention_output), from the
weights the engine uses (GGUF's Q/K rows already un-permuted), keeping what self_attention drops
(q, each head's output, the concat); so the pattern equals the one the grid shows (tested) and the
output exists even for the last layer, whose output projection the forward pass skips.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.computing.edits import edited_z
from attnviz.engine.computing.families import FAMILY, attend, attention_output, head_outputs, layer_consts, project_qkv
from attnviz.engine.computing.layers import kv_group, rms_norm

BYTES = 4  # float32: every array here, as the engine holds it


@dataclass(frozen=True)
class LayerAnatomy:
    layer: int
    x: np.ndarray  # [T, d_model] the attention input
    w_q: np.ndarray  # [d_model, n_head d_head] (views of the engine's fused W_QKV)
    w_k: np.ndarray  # [d_model, n_kv_head d_head]
    w_v: np.ndarray  # [d_model, n_kv_head d_head]
    q: np.ndarray  # [n_head, T, d_head] (after RoPE in a RoPE model)
    k: np.ndarray  # [n_kv_head, T, d_head] (after RoPE)
    v: np.ndarray  # [n_kv_head, T, d_head]
    pattern: np.ndarray  # [n_head, T, T]
    head_out: np.ndarray  # [n_head, T, d_head] = pattern @ v of the head's KV group
    concat: np.ndarray  # [T, n_head d_head]
    w_o: np.ndarray  # [n_head d_head, d_model]
    out: np.ndarray  # [T, d_model] = concat @ W_O (+ b_O)
    kv_group: np.ndarray  # [n_head] the KV head each query head reads

    @property
    def d_head(self) -> int:
        return self.q.shape[-1]


def weight_blocks(cfg: ModelConfig, layer) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A layer's W_Q, W_K, W_V [d_model, n d_head] and W_O [n_head d_head, d_model]: views of the
    arrays the forward pass multiplies by (columns of the fused W_QKV ordered Q | K | V)."""
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    w = layer.w_qkv
    return w[:, :dq], w[:, dq:dq + dkv], w[:, dq + dkv:], layer.w_o


def layer_anatomy(cfg: ModelConfig, weights, x: np.ndarray, layer: int,
                  pattern: np.ndarray | None = None, edits=()) -> LayerAnatomy:
    """Layer input x [T, d_model] -> every stage of that layer's attention (LayerAnatomy).
    `pattern` [n_head, T, T]: the forward pass's own (what the grid shows); computed when None.
    `edits`: a changed run's (its trace's): heads it switched off or patched have its z."""
    lw = weights.layers[layer]
    c = layer_consts(cfg, x.shape[0])[layer]  # the forward pass's stages, one at a time
    q, k, v = project_qkv(x, lw, c)  # [n_head, T, d_head], [n_kv_head, T, d_head] x2
    if pattern is None:
        pattern = attend(q, k, c)  # [n_head, T, T]
    head_out = edited_z(edits, layer, head_outputs(pattern, v, c))  # [n_head, T, d_head]
    concat, out = attention_output(head_out, lw)  # [T, n_head d_head], [T, d_model]
    w_q, w_k, w_v, w_o = weight_blocks(cfg, lw)
    group = kv_group(cfg.n_head, cfg.n_kv_head)  # [n_head]
    return LayerAnatomy(layer, x, w_q, w_k, w_v, np.ascontiguousarray(q), np.ascontiguousarray(k),
                        np.ascontiguousarray(v), pattern, head_out, concat, w_o, out, group)


def input_name(cfg: ModelConfig, layer: int, weights=None) -> str:
    """What x is in this family's `layer` (from the family's data: FAMILY in families.py; the
    embedding tables and norm the `weights` have, for layer 0)."""
    fam = FAMILY[cfg.family]
    norm = "RMSNorm" if fam.norm is rms_norm else "LayerNorm"
    if layer > 0:
        if not fam.pre_norm:
            return "x = layer input (post-LN: the previous layer's output)"
        return f"x = {norm}(residual stream)"
    tables = ["token"] + [name for name, table in (("position", "pos_emb"), ("token-type", "type_emb"))
                          if getattr(weights, table, None) is not None]
    emb = f"the {' + '.join(tables)} embeddings" + (" × √d_model" if fam.embed_scale else "")
    if not fam.pre_norm:  # (BERT: the first layer reads the embedding LayerNorm's output)
        if getattr(weights, "emb_norm", None) is not None:
            return f"x = layer input (post-LN: the embedding LayerNorm's output, LayerNorm({emb}))"
        return f"x = layer input (post-LN: {emb})"
    return f"x = {norm}(residual stream: {emb})"


def head_dim_note(cfg: ModelConfig) -> str | None:
    """A sentence when the model's head_dim is not d_model / n_head (Gemma, Qwen3 and others)."""
    if cfg.n_head * cfg.d_head == cfg.d_model:
        return None
    return (f"head_dim = {cfg.d_head} from config.json, not d_model / n_head = "
            f"{cfg.d_model} / {cfg.n_head} = {cfg.d_model / cfg.n_head:g}: the heads together are "
            f"{cfg.n_head} x {cfg.d_head} = {cfg.n_head * cfg.d_head} wide, not {cfg.d_model}")


@dataclass(frozen=True)
class CostRow:
    what: str
    per_head: int | float  # one query head (its share of a KV head shared by n_group: 1 / n_group, a
    # fraction where n_group does not divide it)
    all_heads: int  # the layer's n_head heads together
    full_head: int  # one head as wide as d_model (d_head = d_model, no KV sharing)
    unit: str  # "params", "FLOPs", "scores" (the softmax's) or "bytes"
    note: str = ""


def key_reads(cfg: ModelConfig, T: int, layer: int = 0) -> tuple[int, str]:
    """(query-key pairs one head scores in `layer` over T tokens, what they are): every query reads
    all T keys in an encoder; query t reads its t + 1 keys up to itself under the causal mask, the
    last `window` of them in a sliding-window layer."""
    if not cfg.causal:
        return T * T, "all T\u00b2 pairs"
    window = cfg.window(layer)
    if window is None or window >= T:
        return T * (T + 1) // 2, "causal: T(T+1)/2 pairs"
    return window * (window + 1) // 2 + (T - window) * window, f"causal, window {window:,}"


def head_costs(cfg: ModelConfig, T: int, layer: int = 0) -> list[CostRow]:
    """The lesson's arithmetic for one layer on T tokens, exact integers. FLOPs count the matrix
    products as the Calculator does, a multiply-add 2 FLOPs: the Q, K, V projections, q\u00b7k\u1d40 and
    weights\u00b7V over the query-key pairs the layer's mask lets each query read (key_reads), and
    W_O; biases, RoPE and the softmax are not FLOPs here (the softmax row counts its scores).
    Memory is float32, as the engine holds it; K/V weights and activations of a KV head
    shared by n_group query heads count 1 / n_group per query head (exactly: a fraction where
    n_group does not divide them, as 512 / 3 bytes). Each row's note
    says "equal" when all heads together cost what one d_model-wide head costs, else why not.
    The parameter rows add up to the Calculator's attention parameters per layer: W_Q, W_K, W_V
    and W_O, each its weights only (as its shape multiplies out), then the biases in rows of their
    own, Q, K and V's (a slice per head) and W_O's (the layer's, not a head's)."""
    d, dh, nh, nkv, g = cfg.d_model, cfg.d_head, cfg.n_head, cfg.n_kv_head, cfg.n_group
    D, Dkv = nh * dh, nkv * dh
    qb, fb = (dh, d) if cfg.qkv_bias else (0, 0)
    wide = f"heads {D} wide, d_model {d}" if D != d else ""
    gqa = f"GQA: K, V {Dkv} wide" if g > 1 else ""
    P, pairs = key_reads(cfg, T, layer)
    t2 = f"{nh} patterns of T\u00b2, not one"
    rows = []

    def add(what, per_head, all_heads, full_head, unit, *why):
        reasons = "; ".join(w for w in why if w)
        note = "equal" if all_heads == full_head else (reasons or "differs")
        rows.append(CostRow(what, per_head, all_heads, full_head, unit, note))

    add("W_Q", d * dh, d * D, d * d, "params", wide)
    add("W_K + W_V", 2 * d * dh / g, 2 * d * Dkv, 2 * d * d, "params", gqa, wide)
    add("W_O", dh * d, D * d, d * d, "params", wide)
    if qb:  # each head's own slice of them, in a row of its own as W_O's bias is
        add("Q, K, V biases", qb + 2 * qb / g, (nh + 2 * nkv) * qb, 3 * fb, "params", gqa, wide)
    if cfg.o_bias:  # the layer's, added once after the heads are merged: no head's share
        add("W_O bias (no head's)", 0, d, d, "params")
    add("Q, K, V projections", 2 * T * d * dh + 4 * T * d * dh / g, 2 * T * d * (D + 2 * Dkv),
        6 * T * d * d, "FLOPs", gqa, wide)
    add(f"q\u00b7k\u1d40, {pairs}", 2 * P * dh, 2 * P * D, 2 * P * d, "FLOPs", wide)
    add("softmax", P, nh * P, P, "scores", f"{nh} patterns, not one")
    add(f"weights\u00b7V, {pairs}", 2 * P * dh, 2 * P * D, 2 * P * d, "FLOPs", wide)
    add("output projection W_O", 2 * T * dh * d, 2 * T * D * d, 2 * T * d * d, "FLOPs", wide)
    add("q, k, v, head output", BYTES * T * 2 * dh + BYTES * T * 2 * dh / g, BYTES * T * (2 * D + 2 * Dkv),
        BYTES * T * 4 * d, "bytes", gqa, wide)
    add("pattern T\u00d7T", BYTES * T * T, BYTES * nh * T * T, BYTES * T * T, "bytes", t2)
    kv = "KV cache per token" if cfg.causal else "K, V per token (an encoder caches none)"
    add(kv, BYTES * 2 * dh / g, BYTES * 2 * Dkv, BYTES * 2 * d, "bytes", gqa, wide)
    return rows


def cost_totals(rows: list[CostRow], unit: str) -> tuple[int, int]:
    """(all heads, one full-width head) summed over the rows of one unit."""
    sel = [r for r in rows if r.unit == unit]
    return sum(r.all_heads for r in sel), sum(r.full_head for r in sel)
