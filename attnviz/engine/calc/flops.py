"""Attention FLOPs of one decode step: one new token whose query reads the cached tokens, in every
layer. Matrix products only, a multiply-add 2 FLOPs; the softmax is counted in elements."""

from __future__ import annotations

from typing import Any

from attnviz.engine.calc.format import format_count, plural
from attnviz.engine.calc.inputs import Dims

COUNTS = (
    "one decode step: one new token whose query reads the cached tokens (itself included) in every "
    "layer, summed over all layers; matrix products only (2 FLOPs per multiply-add), the output "
    "projection W_O included; biases, norms, RoPE and the softmax's own arithmetic not counted")
MLA_FORM = (
    "MLA in the absorbed form, as its latent cache: W_UK is folded into each query and W_UV applied "
    "after the weights mix the latent, so scores and mixing run over the cached latent")
NO_HEADS_VS_ONE_HEAD_MLA = (
    "not shown for MLA, whose heads all read one shared latent: no one-head layer has its shape")

# how a projection is named where it is shown
PROJECTION_NAMES = {"W_UK_absorbed": "W_UK folded into q", "W_UV_absorbed": "W_UV on the mixed latent"}


def parts(fl: dict[str, Any], n_head: int) -> list[tuple[str, int]]:
    """(label, FLOPs) of each part of a step and its total (window and command line alike)."""
    names = ", ".join(PROJECTION_NAMES.get(n, n) for n in fl["projections"])
    keys = f"{plural(fl['context_read'], 'key')} read in all layers"
    mixed = "weights·V" if fl["form"] == "plain" else "weights·latent"
    return [(f"projections ({names})", fl["projections_per_token"]),
            (f"q·kᵀ ({plural(n_head, 'head')} × {fl['qk_width']} wide × {keys})", fl["qk_per_token"]),
            (f"{mixed} ({plural(n_head, 'head')} × {fl['av_width']} wide × {keys})", fl["av_per_token"]),
            ("attention total", fl["attention_per_token"])]


def _projections(d: Dims) -> dict[str, int]:
    """FLOPs of each projection of one token in one layer, by weight."""
    D, H, K, dh = d.d_model, d.n_head, d.n_kv_head, d.d_head
    if d.mla is None:
        return {"W_Q": 2 * D * H * dh, "W_K": 2 * D * K * dh, "W_V": 2 * D * K * dh,
                "W_O": 2 * H * dh * D}
    m = d.mla
    r, rope, nope, dv, ql = (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, d.d_v,
                             m.q_lora_rank)
    out = ({"W_DQ": 2 * D * ql, "W_UQ": 2 * ql * H * dh} if ql else {"W_Q": 2 * D * H * dh})
    out["W_DKV"] = 2 * D * (r + rope)
    out["W_UK_absorbed"] = 2 * H * nope * r  # q_nope [H, nope] -> [H, kv_lora_rank]
    out["W_UV_absorbed"] = 2 * H * r * dv  # mixed latent [H, kv_lora_rank] -> [H, v_head_dim]
    out["W_O"] = 2 * H * dv * D
    return out


def _widths(d: Dims) -> tuple[int, int]:
    """Per-head width of the q·kᵀ and of the weights·V dot products."""
    if d.mla is None:
        return d.d_head, d.d_v
    m = d.mla
    return m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank


def _heads_vs_one_head(d: Dims, ctx: int, many: int) -> dict[str, Any] | None:
    """The lesson's comparison: the model's n_head heads against one head of width n_head·d_head,
    which has its own full-width K and V (so GQA and MQA's narrower W_K, W_V show in the ratio)."""
    if d.mla is not None:
        return None
    width = d.n_head * d.d_head
    one = 2 * 4 * d.d_model * width * d.n_layer + 2 * 2 * width * ctx
    return {
        "one_head_width": width,
        "n_heads_matmul_flops": many,
        "one_head_matmul_flops": one,
        "ratio": many / one,
        "n_heads_softmax_elements": d.n_head * ctx,
        "one_head_softmax_elements": ctx,
    }


def _scope(d: Dims) -> str:
    """What one step reads, with this question's numbers."""
    T, L = d.seq_len, d.n_layer
    read = f"one new token reading {plural(T, 'token')}"
    n_win = len(d.window_layers)
    if d.window and T > d.window:
        read += f" ({n_win} of {plural(L, 'layer')}: the last {d.window:,})"
    return f"{read}, {'all ' if L != 1 else ''}{plural(L, 'layer')}, W_O included"


def heads_vs_text(fl: dict[str, Any], n_head: int, n_kv_head: int, d_head: int) -> str:
    """The lesson's comparison in words (window and command line alike), or why it is absent."""
    hv = fl["heads_vs_one_head"]
    if hv is None:
        return f"heads vs one head: {fl['heads_vs_one_head_absent']}"
    width = f"{hv['one_head_width']:,}"
    softmax = (f"the softmax runs over {n_head}× more scores ({hv['n_heads_softmax_elements']:,} "
               f"vs {hv['one_head_softmax_elements']:,})")
    if n_kv_head == n_head:
        return (f"{plural(n_head, 'head')} of {d_head} cost{'s' * (n_head == 1)} the same matrix FLOPs as one head of {width} "
                f"(ratio {hv['ratio']:.3g}); only {softmax}")
    kv = f"{n_kv_head} KV head" + "s" * (n_kv_head != 1)
    return (f"{n_head} query heads of {d_head} sharing {kv}: "
            f"{format_count(hv['n_heads_matmul_flops'])} matrix FLOPs against "
            f"{format_count(hv['one_head_matmul_flops'])} for one head of {width} with full-width "
            f"K and V (ratio {hv['ratio']:.3g}): the shared KV heads narrow W_K and W_V, q·kᵀ and "
            f"weights·V cost the same; {softmax}")


def decode_flops(d: Dims, ctx: int) -> dict[str, Any]:
    """FLOPs of one decode step; ctx: the tokens each layer reads, summed over layers."""
    per_layer = _projections(d)
    projections = {name: f * d.n_layer for name, f in per_layer.items()}
    proj = sum(projections.values())
    qk_width, av_width = _widths(d)
    scores = 2 * d.n_head * qk_width * ctx  # q·kᵀ
    mix = 2 * d.n_head * av_width * ctx  # weights · V (MLA: weights · latent)
    total = proj + scores + mix
    out = {
        "counts": COUNTS,
        "scope": _scope(d),
        "form": "MLA absorbed" if d.mla else "plain",
        "context_read": ctx,
        "projections": projections,
        "projections_per_token": proj,
        "qk_width": qk_width,
        "av_width": av_width,
        "qk_per_token": scores,
        "av_per_token": mix,
        "attention_per_token": total,
        "softmax_elements_per_token": d.n_head * ctx,
        "heads_vs_one_head": _heads_vs_one_head(d, ctx, total),
    }
    if d.mla is not None:
        out["mla_form"] = MLA_FORM
        out["heads_vs_one_head_absent"] = NO_HEADS_VS_ONE_HEAD_MLA
    return out
