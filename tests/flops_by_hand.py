"""One decode step's attention FLOPs worked out by hand from a preset's own config numbers (its JSON
entry), for the calculator's tests: 2 FLOPs per multiply-add, matrix products only, all layers,
the new token reading T cached tokens (a window layer the last `sliding_window`), W_O included.
MLA in the absorbed form of DeepSeek-V3's inference/model.py (attn_impl "absorb")."""

from attnviz.engine.calc.presets import load_presets

# one preset of each kind the calculator knows
KINDS = {"MHA": "gpt2", "GQA": "llama-3-8b", "GQA small": "smollm2-135m", "MQA": "falcon-7b",
         "sliding window": "gemma-2-9b", "MLA": "deepseek-v3", "MLA (V2)": "deepseek-v2"}


def expected(preset_id: str) -> dict:
    """projections, q·kᵀ, weights·V (MLA: weights·latent), total, softmax elements, and the
    one-wide-head comparison's two matmul totals (None under MLA), at the preset's own context."""
    c = load_presets()[preset_id].raw
    D, H, L, T = c["d_model"], c["n_heads"], c["n_layers"], c["max_context"]
    if c.get("sliding_window"):
        local = {"even": L - L // 2, "odd": L // 2}.get(c["window_layers"], None)
        local = len(c["window_layers"]) if local is None else local
        keys = (L - local) * T + local * min(T, c["sliding_window"])
    else:
        keys = L * T
    m = c.get("mla")
    if m is None:
        dh = c["head_dim"] or D // H
        K = c["n_kv_heads"] or H
        proj = L * (D * H * dh + 2 * D * K * dh + H * dh * D) * 2
        qk = av = 2 * H * dh * keys
        width = H * dh
        one_head = L * 2 * 4 * D * width + 2 * 2 * width * keys
    else:
        r, rope, nope, v, ql = (m["kv_lora_rank"], m["qk_rope_head_dim"], m["qk_nope_head_dim"],
                                m["v_head_dim"], m["q_lora_rank"])
        per_layer = (D * ql + ql * H * (nope + rope)  # wq_a, wq_b
                     + D * (r + rope)  # wkv_a: the latent and the shared rope key
                     + H * nope * r  # q_nope through wkv_b's key half
                     + H * r * v  # the mixed latent through wkv_b's value half
                     + H * v * D)  # wo
        proj = 2 * L * per_layer
        qk = 2 * H * (r + rope) * keys  # q·latent + q_rope·k_rope
        av = 2 * H * r * keys  # weights · latent
        one_head = None
    total = proj + qk + av
    return {"projections": proj, "qk": qk, "av": av, "total": total, "softmax": H * keys,
            "n_heads_matmul": None if one_head is None else total, "one_head_matmul": one_head,
            "T": T, "L": L}
