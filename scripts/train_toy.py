"""Train attnviz's toy model: a two-layer, attention-only GPT-2 on Python standard-library docstrings
with repeated random segments, saving checkpoints across the induction-head phase change.

Dev only: needs torch (the `.devvenv`, see the README); the app and the tests never do.

    .devvenv/bin/python scripts/train_toy.py            # writes resources/toy-stdlib-gpt2/

Why this design (Olsson et al., 2022, "In-context Learning and Induction Heads"):
- Attention-only, two layers. An induction head needs two heads in series (a previous-token head in
  layer 0 whose output the layer-1 head's keys read, K-composition); with no MLPs the attention
  layers are all the model has, so the circuit forms cleanly and early, as in the paper's small
  attention-only models. Eight heads of 16 dimensions (d_model 128) leave room for other roles
  (previous-token, sink) beside it. The MLP weights are stored as zeros so the checkpoints are plain
  GPT-2 files.
- Data: docstrings of the Python standard library (module, class and function docstrings read
  with `ast` from the running interpreter's `Lib/`, tests, idlelib, turtledemo and site-packages left
  out; PSF License 2.0, which allows this use), tokenised by a 1024-token byte-level BPE trained here
  on the same text. Half of the 128-token training windows are docstring text, and in half of
  those a 10-30-token span of the text is said again 0-40 tokens later; the other half are one
  random segment of 8-40 tokens repeated to the end of the window ("periodic"). Random tokens can
  only be predicted by looking back, so copying pays; the text keeps ordinary bigram statistics
  for the model to learn first, which gives the plateau before the phase change, and its repeated
  spans teach the heads to copy text tokens too, not only random ones.
- The learned position embedding (GPT-2's wpe) starts from a sinusoid table instead of noise, so
  "attend to the previous position", the first half of the circuit, is within reach of a linear
  map; it is trained like any weight.
- Seeded (torch, NumPy, Python), one CPU thread, AdamW at a constant learning rate (1e-3) after a
  100-step warm-up, 2000 steps of 32 x 128 tokens: the induction head appears after a plateau,
  and the checkpoints are chosen afterwards to be dense across that rise (see select_checkpoints).

What did not work (measured on this machine, same seed and model): docstrings with one repeated
segment in half the windows and a noise-initialised wpe had no induction head after 2400 steps
(best induction 0.024, ICL score -0.15, --periodic-p 0 --repeat-p 0.5, without --sin-pos); a repeat
in every window with the sinusoid start and lr 2e-3 rose only at the very end (0.10 at step 1760,
0.52 at 2000). The periodic windows make copying pay on most of their tokens, and the phase change
then comes mid-run, with a plateau before it and a settled head after it: with random segments as
the single repeats (--repeat-random) the rise spans steps 860-1160 and the best head reaches 0.80,
but on typed text it stays weaker (made-up names said twice: 0.49, under the 0.5 label); repeating
a span of the text itself (the default) gives a rise over steps 900-1240, 0.89 at the end and 0.59
on the made-up names.

Scores recorded per checkpoint (in checkpoints.json):
- induction_score: the best head's induction strength (attnviz.engine.analysing.heads, TransformerLens "mul"
  score over its coverage) on attnviz's repeated-random probe (probes.probe_ids: 25 random tokens,
  seed 0, repeated twice), computed by the attnviz engine from the saved F16 file.
- icl_score: Olsson et al.'s in-context-learning score: the mean loss on late tokens (positions
  100-127 of the context) minus the mean loss on early tokens (positions 10-19), over held-out
  windows. More negative = later tokens are predicted better thanks to the context. `icl_score` is
  measured on held-out windows built like the training data (held-out modules' docstrings, with
  the repeated and periodic segments), `icl_score_text` on held-out docstring text alone.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAME = "toy-stdlib-gpt2"  # the folder in resources/; attnviz lists it as attnviz-toy-stdlib
BOS = "<|endoftext|>"
SEED = 0
VOCAB = 1024
N_LAYER, N_HEAD, D_MODEL, N_POS = 2, 8, 128, 128
N_INNER = 4  # the MLP is all zeros (attention-only); kept small
BATCH = 32
LR, WARMUP = 1e-3, 100
SNAPSHOT_EVERY = 20
N_CHECKPOINTS = 33
REPEAT_P, REPEAT_LEN, REPEAT_GAP = 0.5, (10, 30), (0, 40)
ICL_LATE, ICL_EARLY = (100, 128), (10, 20)
N_EVAL = 128
SIN_POS = True  # wpe starts from a sinusoid table (--noise-pos: from noise, like GPT-2)
REPEAT_TEXT = True  # the single repeat is a span of the text (--repeat-random: random tokens)
PERIODIC_P, PERIOD_LEN = 0.5, (8, 40)  # --periodic-p: windows that are one segment repeated


# ---------------------------------------------------------------- data

def stdlib_docstrings():
    """(relative path, [docstrings]) for every stdlib module, sorted by path."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "turtledemo", "site-packages", "lib2to3", "__pycache__"}
    out = []
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib)
        if skip & set(rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        docs = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 20 and doc.isascii():
                    docs.append(doc.strip())
        if docs:
            out.append((rel.as_posix(), docs))
    return out


def build_tokenizer(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[BOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.token_to_id(BOS) == 0 and tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 0)])
    return tok


def encode_stream(tok, texts):
    ids = []
    for t in texts:
        ids.extend(tok.encode(t, add_special_tokens=False).ids)
        ids.append(0)  # documents separated by BOS/EOS, as GPT-2 does
    return np.array(ids, dtype=np.int64)


def make_batch(stream, rng, n, repeat_p=None, periodic_p=None):
    """[n, N_POS] windows: BOS + 127 stream tokens, with a repeated random segment in a share
    `repeat_p` of them (default REPEAT_P); a share `periodic_p` (default PERIODIC_P) are instead
    one random segment repeated to the end of the window."""
    repeat_p = REPEAT_P if repeat_p is None else repeat_p
    periodic_p = PERIODIC_P if periodic_p is None else periodic_p
    x = np.empty((n, N_POS), dtype=np.int64)
    starts = rng.integers(0, len(stream) - N_POS, size=n)
    for i, s in enumerate(starts):
        x[i, 0] = 0
        x[i, 1:] = stream[s:s + N_POS - 1]
        if periodic_p and rng.random() < periodic_p:
            L = int(rng.integers(PERIOD_LEN[0], PERIOD_LEN[1] + 1))
            seg = rng.integers(1, VOCAB, size=L)
            x[i, 1:] = np.tile(seg, (N_POS - 1) // L + 1)[:N_POS - 1]
        elif rng.random() < repeat_p:
            L = int(rng.integers(REPEAT_LEN[0], REPEAT_LEN[1] + 1))
            gap = int(rng.integers(REPEAT_GAP[0], REPEAT_GAP[1] + 1))
            a = int(rng.integers(1, N_POS - 2 * L - gap + 1))
            seg = rng.integers(1, VOCAB, size=L)
            if REPEAT_TEXT:  # the window's own text at a, said again
                seg = x[i, a:a + L].copy()
            x[i, a:a + L] = seg
            x[i, a + L + gap:a + 2 * L + gap] = seg
    return torch.from_numpy(x)


# ---------------------------------------------------------------- model (GPT-2 layout, no MLP)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D_MODEL, eps=1e-5)
        self.c_attn = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.c_proj = nn.Linear(D_MODEL, D_MODEL)

    def forward(self, x, want_pattern=False):  # [B, T, d_model] -> same (, pattern [B, n_head, T, T])
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D_MODEL, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, -1).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        att = att.softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D_MODEL)
        return x + self.c_proj(y), (att if want_pattern else None)


def sinusoid_positions(n, d):  # -> [n, d]: the Transformer's sin/cos table, std 0.02 like wte
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    table = torch.zeros(n, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table * (0.02 / table.std())


class ToyGPT(nn.Module):
    def __init__(self, sin_pos=False):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D_MODEL)
        self.wpe = nn.Embedding(N_POS, D_MODEL)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(D_MODEL, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02 / (math.sqrt(2 * N_LAYER) if "c_proj" in name else 1))
        if sin_pos:  # still a learned GPT-2 wpe, only its start is sinusoidal
            with torch.no_grad():
                self.wpe.weight.copy_(sinusoid_positions(N_POS, D_MODEL))

    def forward(self, ids, want_patterns=False):  # [B, T] -> logits [B, T, VOCAB] (, patterns)
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        pats = []
        for block in self.h:
            x, p = block(x, want_patterns)
            pats.append(p)
        logits = self.ln_f(x) @ self.wte.weight.T  # tied unembedding, as GPT-2
        return logits, pats


def gpt2_tensors(model):
    """The model's weights as Hugging Face GPT2Model tensors (Conv1D [in, out]), float16."""
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {"wte.weight": sd["wte.weight"], "wpe.weight": sd["wpe.weight"],
           "ln_f.weight": sd["ln_f.weight"], "ln_f.bias": sd["ln_f.bias"]}
    for i in range(N_LAYER):
        a = f"h.{i}."
        out[a + "ln_1.weight"], out[a + "ln_1.bias"] = sd[a + "ln_1.weight"], sd[a + "ln_1.bias"]
        out[a + "attn.c_attn.weight"] = sd[a + "c_attn.weight"].T
        out[a + "attn.c_attn.bias"] = sd[a + "c_attn.bias"]
        out[a + "attn.c_proj.weight"] = sd[a + "c_proj.weight"].T
        out[a + "attn.c_proj.bias"] = sd[a + "c_proj.bias"]
        out[a + "ln_2.weight"], out[a + "ln_2.bias"] = torch.ones(D_MODEL), torch.zeros(D_MODEL)
        out[a + "mlp.c_fc.weight"] = torch.zeros(D_MODEL, N_INNER)
        out[a + "mlp.c_fc.bias"] = torch.zeros(N_INNER)
        out[a + "mlp.c_proj.weight"] = torch.zeros(N_INNER, D_MODEL)
        out[a + "mlp.c_proj.bias"] = torch.zeros(D_MODEL)
    return {k: v.contiguous().numpy().astype(np.float16) for k, v in out.items()}


def gpt2_config():
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
        "n_positions": N_POS, "n_ctx": N_POS, "n_embd": D_MODEL, "n_layer": N_LAYER,
        "n_head": N_HEAD, "n_inner": N_INNER, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "bos_token_id": 0, "eos_token_id": 0,
        "tie_word_embeddings": True, "torch_dtype": "float16",
        "attnviz_note": ("Toy model trained by attnviz (scripts/train_toy.py): attention-only, on "
                         "Python standard-library docstrings with repeated random segments."),
    }


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def icl_score(model, batch):  # [n, N_POS] -> late loss - early loss
    logits, _ = model(batch)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), batch[:, 1:].reshape(-1),
                           reduction="none").view(batch.shape[0], -1)  # loss of token t+1 at column t
    per_pos = loss.mean(0)  # index t-1 = loss on the token at position t
    late = per_pos[ICL_LATE[0] - 1:ICL_LATE[1] - 1].mean()
    early = per_pos[ICL_EARLY[0] - 1:ICL_EARLY[1] - 1].mean()
    return float(late - early)


@torch.no_grad()
def torch_induction(model, probe):  # probe ids [T] -> best induction strength (torch patterns)
    from attnviz.engine.analysing.heads import score_heads

    _, pats = model(torch.tensor([probe]), want_patterns=True)
    attn = torch.stack([p[0] for p in pats]).numpy()  # [n_layer, n_head, T, T]
    return score_heads(attn, np.array(probe)).best_strength("induction")


def select_checkpoints(trace, n=N_CHECKPOINTS):
    """Indices into trace: about a third spread evenly over the whole run, the rest dense over the
    induction rise (from the last snapshot under 10% of the way from the first score to the highest
    to the first one past 90%), always the first and the last."""
    n = min(n, len(trace))
    ind = np.array([t["induction_torch"] for t in trace])
    lo_v, hi_v = ind[0], ind.max()
    a = lo_v + 0.1 * (hi_v - lo_v)
    b = lo_v + 0.9 * (hi_v - lo_v)
    first_b = int(np.argmax(ind >= b))
    below = np.flatnonzero(ind[:first_b + 1] < a)
    start = int(below[-1]) if below.size else 0
    stop = min(len(trace) - 1, first_b + 1)
    start = max(0, start - 1)
    chosen = set(np.linspace(0, len(trace) - 1, n // 3).round().astype(int).tolist())
    dense = n - len(chosen)
    chosen |= set(np.linspace(start, stop, dense).round().astype(int).tolist())
    extra = iter(np.linspace(0, len(trace) - 1, 4 * n).round().astype(int).tolist())
    while len(chosen) < n:  # duplicates: top up evenly
        chosen.add(next(extra))
    return sorted(chosen), (start, stop)


def phase_summary(trace, smooth=5):
    """Where the phase change is, on the evenly spaced trace: the induction rise (from the last
    snapshot under 10% of the way from the first score to the highest, to the first past 90%) and
    the steepest change of the ICL score (its slope over `smooth` snapshots, the largest drop)."""
    steps = np.array([t["step"] for t in trace], dtype=float)
    ind = np.array([t["induction_torch"] for t in trace])
    icl = np.array([t["icl_score"] for t in trace])
    lo, hi = ind[0], ind.max()
    first_hi = int(np.argmax(ind >= lo + 0.9 * (hi - lo)))
    below = np.flatnonzero(ind[:first_hi + 1] < lo + 0.1 * (hi - lo))
    start = int(below[-1]) if below.size else 0
    k = max(1, smooth)
    slope = (icl[k:] - icl[:-k]) / (steps[k:] - steps[:-k])  # per step, over k snapshots
    j = int(np.argmin(slope))
    return {"induction_rise_steps": [int(steps[start]), int(steps[first_hi])],
            "icl_steepest_drop_steps": [int(steps[j]), int(steps[j + k])],
            "icl_steepest_drop_per_1000_steps": round(float(slope[j]) * 1000, 4),
            "induction_first_last": [round(float(ind[0]), 4), round(float(ind[-1]), 4)]}


# ---------------------------------------------------------------- main

def main(argv=None):
    global LR, REPEAT_P, SIN_POS, PERIODIC_P, REPEAT_TEXT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "resources" / NAME)
    ap.add_argument("--time-only", type=int, default=0, help="time this many steps and stop")
    ap.add_argument("--keep-run", type=Path, help="pickle the run's snapshots here (a dev aid)")
    ap.add_argument("--from-run", type=Path, help="skip training: select and write from --keep-run's file")
    ap.add_argument("--lr", type=float, default=LR)
    ap.add_argument("--sin-pos", action="store_true", default=SIN_POS,
                    help="start wpe from a sinusoid table (the default)")
    ap.add_argument("--noise-pos", dest="sin_pos", action="store_false",
                    help="start wpe from noise, as GPT-2 does")
    ap.add_argument("--repeat-p", type=float, default=REPEAT_P)
    ap.add_argument("--periodic-p", type=float, default=PERIODIC_P)
    ap.add_argument("--repeat-text", action="store_true", default=REPEAT_TEXT,
                    help="the single repeat is a span of the window's text (the default)")
    ap.add_argument("--repeat-random", dest="repeat_text", action="store_false",
                    help="the single repeat is random tokens")
    args = ap.parse_args(argv)
    LR, REPEAT_P, SIN_POS, PERIODIC_P = args.lr, args.repeat_p, args.sin_pos, args.periodic_p
    REPEAT_TEXT = args.repeat_text
    if args.from_run:
        import pickle
        trace, snaps, probe, train_s, n_tok, n_mods, n_held = pickle.loads(args.from_run.read_bytes())
        picked, span = select_checkpoints(trace)
        write_checkpoints(args.out, trace, snaps, picked, span, probe, train_s, n_tok, n_mods, n_held)
        return

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    random.seed(SEED)
    rng = np.random.default_rng(SEED)
    t_start = time.perf_counter()

    mods = stdlib_docstrings()
    held = [m for i, m in enumerate(mods) if i % 10 == 0]  # every tenth module held out
    train = [m for i, m in enumerate(mods) if i % 10 != 0]
    train_texts = [d for _, docs in train for d in docs]
    held_texts = [d for _, docs in held for d in docs]
    tok = build_tokenizer(train_texts)
    train_ids, held_ids = encode_stream(tok, train_texts), encode_stream(tok, held_texts)
    print(f"data: {len(train)} modules, {len(train_texts)} docstrings, {len(train_ids)} tokens; "
          f"held out {len(held)} modules, {len(held_ids)} tokens", flush=True)

    eval_rng = np.random.default_rng(SEED + 1)
    eval_mix = make_batch(held_ids, eval_rng, N_EVAL)
    eval_text = make_batch(held_ids, eval_rng, N_EVAL, repeat_p=0.0, periodic_p=0.0)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "config.json").write_text(json.dumps(gpt2_config(), indent=2) + "\n", encoding="utf-8")
    from attnviz.engine.analysing.probes import probe_ids
    from attnviz.engine.computing.load import load_folder
    from safetensors.numpy import save_file

    model = ToyGPT(sin_pos=args.sin_pos)
    save_file(gpt2_tensors(model), str(out / "model.safetensors"))
    probe, _ = probe_ids(load_folder(out))

    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP))
    trace, snaps, recent = [], [], []

    def snapshot(step):
        model.eval()
        trace.append({
            "step": step, "tokens_seen": step * BATCH * N_POS,
            "train_loss": float(np.mean(recent)) if recent else None,
            "icl_score": icl_score(model, eval_mix), "icl_score_text": icl_score(model, eval_text),
            "induction_torch": torch_induction(model, probe)[2],
        })
        snaps.append(gpt2_tensors(model))
        model.train()
        t = trace[-1]
        print(f"step {step:5d} loss {t['train_loss'] or float('nan'):.3f} icl {t['icl_score']:+.3f} "
              f"icl_text {t['icl_score_text']:+.3f} ind {t['induction_torch']:.3f} "
              f"({time.perf_counter() - t_start:.0f} s)", flush=True)

    t_train = time.perf_counter()
    snapshot(0)
    for step in range(1, args.steps + 1):
        x = make_batch(train_ids, rng, BATCH)
        logits, _ = model(x)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        recent = (recent + [loss.item()])[-SNAPSHOT_EVERY:]
        if args.time_only and step == args.time_only:
            dt = time.perf_counter() - t_train
            print(f"{step} steps in {dt:.1f} s: {1000 * dt / step:.0f} ms/step")
            return
        if step % SNAPSHOT_EVERY == 0 or step == args.steps:
            snapshot(step)
    train_s = time.perf_counter() - t_train
    if args.keep_run:  # everything write_checkpoints needs, to redo the selection without training
        import pickle
        args.keep_run.write_bytes(pickle.dumps((trace, snaps, probe, train_s, len(train_ids),
                                                len(mods), len(held))))

    picked, span = select_checkpoints(trace)
    write_checkpoints(out, trace, snaps, picked, span, probe, train_s, len(train_ids), len(mods),
                      len(held))
    print(f"done in {time.perf_counter() - t_start:.0f} s (training {train_s:.0f} s)")


def write_checkpoints(out, trace, snaps, picked, span, probe, train_s, n_train_tokens, n_mods,
                      n_held):
    from safetensors.numpy import save_file

    from attnviz.engine.analysing.training import induction_scores
    from attnviz.engine.computing.checkpoints import CHECKPOINTS_FILE, load_checkpoints

    entries = []
    ck_dir = out / "checkpoints"
    if ck_dir.exists():
        for old in sorted(ck_dir.glob("*/model.safetensors")):
            old.unlink()
            old.parent.rmdir()
    for n, i in enumerate(picked):
        last = n == len(picked) - 1
        folder = "." if last else f"checkpoints/step-{trace[i]['step']:06d}"
        (out / folder).mkdir(parents=True, exist_ok=True)
        save_file(snaps[i], str(out / folder / "model.safetensors"))
        t = trace[i]
        entries.append({"step": t["step"], "tokens_seen": t["tokens_seen"],
                        "train_loss": t["train_loss"], "icl_score": round(t["icl_score"], 5),
                        "icl_score_text": round(t["icl_score_text"], 5), "folder": folder})
    meta = {
        "name": NAME,
        "description": ("Toy model trained by attnviz: a 2-layer, 8-head, attention-only GPT-2 "
                        "(d_model 128, 128 positions, 1024-token byte-level BPE) on Python "
                        f"{sys.version.split()[0]} standard-library docstrings (PSF License 2.0), "
                        "with repeated random segments: half of its training windows are one "
                        "random segment repeated throughout, a quarter say a span of their "
                        "docstring text twice" if REPEAT_TEXT else
                        "with repeated random segments: half of its training windows are one "
                        "random segment repeated throughout, a quarter hold one random segment "
                        "written twice"),
        "license": "PSF-2.0 (training text); weights made by attnviz, Apache-2.0",
        "definitions": {
            "icl_score": (f"mean loss on tokens at positions {ICL_LATE[0]}-{ICL_LATE[1] - 1} minus "
                          f"mean loss at positions {ICL_EARLY[0]}-{ICL_EARLY[1] - 1} (Olsson et al. "
                          f"2022), over {N_EVAL} held-out windows built like the training data "
                          "(held-out modules' docstrings, with the repeated spans and the "
                          "periodic windows in the training shares); negative: the context helps"),
            "icl_score_text": "the same on held-out docstring text without repeated segments",
            "induction_score": ("the strongest head's induction strength (attnviz heads: "
                                "TransformerLens 'mul' score over its coverage) on attnviz's "
                                "repeated-random probe (25 random tokens, seed 0, repeated twice), "
                                "computed by the attnviz engine from the stored F16 weights"),
            "train_loss": f"mean training loss over the {SNAPSHOT_EVERY} steps before the checkpoint",
            "tokens_seen": f"step x {BATCH} x {N_POS}",
        },
        "training": {"seed": SEED, "batch": BATCH, "context": N_POS, "lr": LR, "warmup": WARMUP,
                     "optimizer": "AdamW(0.9, 0.98), weight decay 0.01, clip 1.0",
                     "steps": trace[-1]["step"], "train_seconds": round(train_s, 1),
                     "threads": 1, "train_tokens_in_corpus": int(n_train_tokens),
                     "modules": n_mods, "held_out_modules": n_held,
                     "sinusoid_position_init": SIN_POS,
                     "periodic": {"p": PERIODIC_P, "length": list(PERIOD_LEN)},
                     "repeat": {"p": REPEAT_P, "text": REPEAT_TEXT, "length": list(REPEAT_LEN), "gap": list(REPEAT_GAP)},
                     "python": sys.version.split()[0], "torch": torch.__version__},
        "dense_span_steps": [trace[span[0]]["step"], trace[span[1]]["step"]],
        "phase_change": phase_summary(trace),
        "checkpoints": entries,
        "trace": [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in t.items()}
                  for t in trace],
    }
    path = out / CHECKPOINTS_FILE
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    (out / "README.md").write_text(
        f"# attnviz-toy-stdlib\n\nlicense: {meta['license']}\n\n{meta['description']}\n\n"
        f"Written by scripts/train_toy.py: {len(entries)} checkpoints across training (steps "
        f"{entries[0]['step']}-{entries[-1]['step']}, dense over the induction-head rise); "
        "model.safetensors here is the last one, checkpoints/step-*/ hold the others, "
        f"{CHECKPOINTS_FILE} lists them with their scores and the definitions.\n", encoding="utf-8")
    # the induction scores recorded are the engine's, from the stored F16 files
    ckpts = load_checkpoints(out)
    for e, (layer, head, s) in zip(entries, induction_scores(ckpts)):
        e["induction_score"], e["induction_head"] = round(s, 5), [layer, head]
    for e, i in zip(entries, picked):
        assert abs(e["induction_score"] - trace[i]["induction_torch"]) < 0.02, (e, trace[i])
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
