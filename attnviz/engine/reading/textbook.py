"""The textbook model: a 2-layer, 3-head attention-only GPT-2 whose weights are constructed by hand.

Each head does exactly one job, so its pattern is the textbook picture of a role. The model is written
as an ordinary checkpoint folder (config.json, model.safetensors, tokenizer.json) and loaded by the same
engine as any real model.

Residual stream (d_model = 3 * d_head; unused dimensions stay zero). Every feature is a one-hot written
as +1 in one block and -1 in a mirror block, so each residual vector has mean 0 and a known norm:
LayerNorm (weight 1, bias 0) then only multiplies it by a known constant c, which the query weights
undo. Blocks, V = vocabulary size, P = positions:

    token     [0, V) and -[V, 2V)                 from the token embedding
    position  [2V, 2V+P) and -[2V+P, 2V+2P)       from the position embedding
    previous  [2V+2P, 3V+2P) and -[3V+2P, 4V+2P)  written by head L0 H0 (the token one position back)

Logits are built as sums of matches, each worth GAP (or GAP/2 for the fall-back to the first token), so
the wanted key beats every other key by at least GAP/2 = 12 nats: the softmax is one-hot to ~1e-5.
MLP weights are zero, so the model is attention-only.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import numpy as np

from attnviz.engine.reading.user_cache import cache_root as user_cache_root
from attnviz.engine.reading.json_text import dumps as strict_json

log = logging.getLogger(__name__)

TEXTBOOK_NAME = "attnviz-textbook"
TEXTBOOK_VERSION = 2  # bump when the folder's contents change: the cached folder is rebuilt
# the project's own constructed model, so the project's licence (pyproject.toml); README.md says it
TEXTBOOK_LICENSE = "Apache-2.0"
_MARKER = "attnviz_textbook.json"

BOS = "<|bos|>"
UNK = "<|unk|>"
WORDS = (
    "the a keys to cabinet are is on table cat sat mat dog ran red blue green ball "
    "big small was and of in it he she saw bird tree house car sun moon book door "
    "key box , ."
).split()
VOCAB = [BOS, UNK] + WORDS  # id = index
N_LAYER = 2
N_HEAD = 3
N_POS = 64
N_INNER = 4  # the MLP is all zeros: keep it small
GAP = 24.0  # logit margin of one match, in nats
LN_EPS = 1e-5

# (layer, head) -> (role it was built for, how)
HEADS = {
    (0, 0): ("previous",
             "Query = one-hot of position i-1, key = one-hot of position j: only the previous token "
             "matches. Its value copies that token into the 'previous token' block of the residual "
             "stream, which the induction head L1 H0 reads."),
    (0, 1): ("duplicate",
             "Query and key both read the token's one-hot, so earlier copies of the same token match; "
             "a penalty on its own position removes the trivial self-match, and a half-size bonus on "
             "position 0 parks rows that have no earlier copy on the first token (on text without "
             "repeats it therefore looks like a sink)."),
    (0, 2): ("self",
             "Query and key both read the position's one-hot, so every token matches only itself."),
    (1, 0): ("induction",
             "Query reads the current token, key reads the 'previous token' block written by head "
             "L0 H0: the match is the position right after an earlier copy of the current token, the "
             "two-layer induction circuit. Rows with no earlier copy park on the first token."),
    (1, 1): ("sink",
             "A constant query (a bias) against a key that only position 0 has: every row puts its "
             "weight on the first token."),
    (1, 2): ("mixed",
             "Query and key weights are zero, so all allowed keys get the same weight: a running "
             "average, the control that fits no role."),
}


def vocabulary_line() -> str:
    """One line naming every word the textbook model knows (the models list, About, the README)."""
    return (f"{TEXTBOOK_NAME} knows only these {len(WORDS)} words (any other word is {UNK}): "
            f"{' '.join(WORDS)}")


def describe_head(layer, head):
    """One sentence on how a textbook head was built (or None)."""
    item = HEADS.get((int(layer), int(head)))
    return None if item is None else f"built as {item[0]}: {item[1]}"


def dims():
    """(V, P, d_head, d_model): the textbook model's vocabulary, positions, head and model widths."""
    V, P = len(VOCAB), N_POS
    d_head = V + P  # the duplicate head needs V token dims + P position dims
    d_model = N_HEAD * d_head
    assert d_model >= 4 * V + 2 * P, (d_model, V, P)
    return V, P, d_head, d_model


def _ln_scale(norm_sq, d_model):  # LayerNorm of a zero-mean vector with |x|^2 = norm_sq: x * c
    return 1.0 / np.sqrt(norm_sq / d_model + LN_EPS)


def build_config():
    V, P, _, d_model = dims()
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": V,
        "n_positions": P,
        "n_ctx": P,
        "n_embd": d_model,
        "n_layer": N_LAYER,
        "n_head": N_HEAD,
        "n_inner": N_INNER,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": LN_EPS,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "attnviz_textbook_version": TEXTBOOK_VERSION,
        "attnviz_note": "Constructed, not trained: see attnviz/engine/reading/textbook.py.",
    }


def build_weights():
    """GPT-2 tensors (Conv1D layout [in, out]), float32, keyed like Hugging Face's GPT2Model."""
    V, P, dh, d = dims()
    TOK, TOKN, POS, POSN = 0, V, 2 * V, 2 * V + P
    PREV, PREVN = 2 * V + 2 * P, 3 * V + 2 * P
    sq = np.sqrt(dh)
    c0 = _ln_scale(4.0, d)  # layer 0 residual: token + position, |x|^2 = 2 + 2
    c1 = _ln_scale(6.0, d)  # layer 1 adds the previous-token block: 2 more
    w = {}

    # embeddings: +1/-1 one-hots, mean zero, |x|^2 = 2 each
    wte = np.zeros((V, d), np.float32)
    wte[np.arange(V), TOK + np.arange(V)] = 1.0
    wte[np.arange(V), TOKN + np.arange(V)] = -1.0
    wpe = np.zeros((P, d), np.float32)
    wpe[np.arange(P), POS + np.arange(P)] = 1.0
    wpe[np.arange(P), POSN + np.arange(P)] = -1.0
    w["wte.weight"], w["wpe.weight"] = wte, wpe

    def qk_gain(c):  # a query weight that, against a key weight 1, adds GAP to the logit
        return GAP * sq / c ** 2

    def bias_gain(c):  # a query bias that, against a key weight 1, adds GAP to the logit
        return GAP * sq / c

    for layer in range(N_LAYER):
        wq, wk, wv = (np.zeros((d, d), np.float32) for _ in range(3))
        bq = np.zeros(d, np.float32)
        wo = np.zeros((d, d), np.float32)
        c = c0 if layer == 0 else c1
        g, b = qk_gain(c), bias_gain(c)

        def cols(h, n):  # the first n columns of head h
            return h * dh + np.arange(n)

        if layer == 0:
            # 0.0 previous token: query dim p is on at position p+1, key dim p at position p
            h = cols(0, P - 1)
            wq[POS + 1 + np.arange(P - 1), h] = g
            wk[POS + np.arange(P - 1), h] = 1.0
            # its value is the token one-hot, written back into the previous-token block
            hv = cols(0, V)
            wv[TOK + np.arange(V), hv] = 1.0
            wo[hv, PREV + np.arange(V)] = 1.0 / c
            wo[hv, PREVN + np.arange(V)] = -1.0 / c
            # 0.1 duplicate token: token match + GAP, own position - GAP, position 0 + GAP/2
            ht, hp = cols(1, V), 1 * dh + V + np.arange(P)
            wq[TOK + np.arange(V), ht] = g
            wk[TOK + np.arange(V), ht] = 1.0
            wq[POS + np.arange(P), hp] = -g
            wk[POS + np.arange(P), hp] = 1.0
            bq[hp[0]] = b / 2
            # 0.2 self: position match
            h = cols(2, P)
            wq[POS + np.arange(P), h] = g
            wk[POS + np.arange(P), h] = 1.0
        else:
            # 1.0 induction: current token against the previous-token block, position 0 + GAP/2
            h = cols(0, V)
            wq[TOK + np.arange(V), h] = g
            wk[PREV + np.arange(V), h] = 1.0
            wk[POS + 0, 0 * dh + V] = 1.0
            bq[0 * dh + V] = b / 2
            # 1.1 first-token sink: constant query, only position 0 has the key
            wk[POS + 0, 1 * dh] = 1.0
            bq[1 * dh] = b
            # 1.2 uniform: nothing
        pre = f"h.{layer}."
        w[pre + "ln_1.weight"] = np.ones(d, np.float32)
        w[pre + "ln_1.bias"] = np.zeros(d, np.float32)
        w[pre + "attn.c_attn.weight"] = np.concatenate([wq, wk, wv], axis=1)
        w[pre + "attn.c_attn.bias"] = np.concatenate([bq, np.zeros(2 * d, np.float32)])
        w[pre + "attn.c_proj.weight"] = wo
        w[pre + "attn.c_proj.bias"] = np.zeros(d, np.float32)
        # attention-only: the MLP adds exactly zero
        w[pre + "ln_2.weight"] = np.ones(d, np.float32)
        w[pre + "ln_2.bias"] = np.zeros(d, np.float32)
        w[pre + "mlp.c_fc.weight"] = np.zeros((d, N_INNER), np.float32)
        w[pre + "mlp.c_fc.bias"] = np.zeros(N_INNER, np.float32)
        w[pre + "mlp.c_proj.weight"] = np.zeros((N_INNER, d), np.float32)
        w[pre + "mlp.c_proj.bias"] = np.zeros(d, np.float32)
    w["ln_f.weight"] = np.ones(d, np.float32)
    w["ln_f.bias"] = np.zeros(d, np.float32)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in w.items()}


def build_tokenizer():
    """A lower-casing word-level tokenizer over VOCAB that puts BOS in front of every text."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token=UNK))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([BOS, UNK])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1", special_tokens=[(BOS, 0)])
    return tok


def _readme():
    lines = [f"# {TEXTBOOK_NAME} (version {TEXTBOOK_VERSION})", "",
             "Attention-only GPT-2 with constructed (not trained) weights, built by attnviz.",
             "", f"License: {TEXTBOOK_LICENSE} (attnviz's own model, under the project's licence)",
             "", "Each head does one job:", ""]
    for (layer, head), (role, how) in HEADS.items():
        lines.append(f"- layer {layer} head {head}: {role}. {how}")
    return "\n".join(lines) + "\n"


def write_textbook(folder):
    """Write the checkpoint folder (config.json, model.safetensors, tokenizer.json, README.md)."""
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(strict_json(build_config(), indent=2), encoding="utf-8")
    save_file(build_weights(), str(folder / "model.safetensors"), metadata={"format": "np"})
    build_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "README.md").write_text(_readme(), encoding="utf-8")
    (folder / _MARKER).write_text(strict_json({"name": TEXTBOOK_NAME, "version": TEXTBOOK_VERSION}),
                                  encoding="utf-8")
    return folder


def _current(folder):
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker.get("version") == TEXTBOOK_VERSION and all(
        (folder / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json"))


def textbook_model_dir(cache_root=None):
    """The textbook checkpoint folder, built on first use and rebuilt when TEXTBOOK_VERSION changes."""
    root = Path(cache_root) if cache_root is not None else user_cache_root()
    folder = root / "textbook"
    if _current(folder):
        return folder
    root.mkdir(parents=True, exist_ok=True)
    # build beside it, then swap in, so a concurrent reader never sees half a folder
    tmp = Path(tempfile.mkdtemp(prefix="textbook-", dir=root))
    try:
        write_textbook(tmp)
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        try:
            tmp.rename(folder)
        except OSError:
            if not _current(folder):  # someone else won the race with a good folder? else fail
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("built %s v%d in %s", TEXTBOOK_NAME, TEXTBOOK_VERSION, folder)
    return folder
