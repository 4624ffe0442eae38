"""Reading a safetensors model folder (config.json, model.safetensors, tokenizer.json) into the
engine's one layout (engine/reading/layout.py), per family: BERT, GPT-2, the Llama family and
Gemma 3.

A layer is converted when it is first asked for and kept as the memory budget allows
(`Weights.layers` is a LayerStore, engine/reading/budget.py): the loaders here say how to build
layer i, the store when. The GGUF loader beside this one (gguf_model.py) does the same for GGUF
files; engine/computing/load.py builds a Model from what either read.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.budget import LayerStore
from attnviz.engine.reading.memory_budget import grams_bytes, resolve_budget
from attnviz.engine.reading.config import ModelConfig, read_config
from attnviz.engine.reading.layout import (
    Layer, ReadModel, Weights, cat_bias, kept_in_c_order, read_head,
)
from attnviz.engine.reading.tokenizer import TextTokenizer
from attnviz.engine.reading.hf_config import keys, pick
from attnviz.engine.reading.validate import (
    check_vocab_rows, exists, layers_beyond, read_json_object, regular_file, too_few_layers)
from attnviz.engine.reading.weights import (
    PICKLE_SUFFIXES, SAVED_WITH, Checkpoint, held_by, mapped_files, refuse_pickle,
)

log = logging.getLogger(__name__)


def _prefix(ckpt: Checkpoint, probe: str, candidates: tuple[str, ...], cfg: ModelConfig) -> str:
    """The prefix the checkpoint's tensor names carry ("model."), found by the token embedding
    `probe`; the embedding's rows are checked against the vocabulary here, first."""
    for p in candidates:
        if p + probe in ckpt:
            check_vocab(cfg, ckpt, p + probe)
            return p
    raise ModelLoadError(f"{held_by(ckpt.files)} has no tensor {probe!r} (tried prefixes "
                         f"{list(candidates)}): is it a {cfg.model_type} model, as {ckpt.config} says?")


def _claim(cfg: ModelConfig, ckpt: Checkpoint, name: str, value: int, source: str | None = None
           ) -> tuple[str, str]:
    """(the config.json key of field `name`, what config.json says of it: "x sets key to value",
    or "x does not set key (default value)" where it leaves the key out and a default stands, as
    Gemma 3's do). Gemma 3's multimodal config nests its language model's under text_config, which
    the config read leaves out."""
    key = pick(cfg.raw, keys(name, cfg.model_type))[0]
    raw = read_json_object(Path(ckpt.config))
    given = raw.get(key) is not None
    if cfg.family == "gemma3" and isinstance(raw.get("text_config"), dict):
        given, key = raw["text_config"].get(key) is not None, f"text_config.{key}"
    source = source or ckpt.config
    return key, (f"{source} sets {key} to {value:,}" if given else
                 f"{source} does not set {key} (default {value:,})")


def check_vocab(cfg: ModelConfig, ckpt: Checkpoint, name: str) -> None:
    """The token embedding `name` has one row per token config.json counts (writing a GGUF too)."""
    rows = ckpt.shape(name)[0] if ckpt.shape(name) else 0
    if rows != cfg.vocab_size:
        key, claim = _claim(cfg, ckpt, "vocab_size", cfg.vocab_size)
        check_vocab_rows(rows, cfg.vocab_size, claim,
                         f"the token embedding {name} in {held_by(ckpt.files)}",
                         f"set {key} to {rows:,} if these weights are the model's, or {SAVED_WITH}")


def too_few(cfg: ModelConfig, ckpt: Checkpoint, held: int) -> ModelLoadError:
    """config.json counts more layers than the weights, which hold layers 0..held-1 (writing a
    GGUF too)."""
    key, claim = _claim(cfg, ckpt, "n_layer", cfg.n_layer)
    return too_few_layers(claim, held, held_by(ckpt.files),
                          f"set {key} to {held:,} if the model has {held:,} "
                          f"layer{'s' if held != 1 else ''}, or add the missing layers' weights")


def _beyond(cfg: ModelConfig, ckpt: Checkpoint, p: str, one: Callable) -> str | None:
    """The notice where the weights hold layers past those config.json counts (layers n_layer, ...
    up to the first of which they hold no tensor), left unread as Transformers leaves them."""
    n = cfg.n_layer
    while True:
        found = []

        def probe(name, shape):
            found.append(p + name in ckpt)
            return np.zeros((1,) * len(shape), dtype=np.float32)

        one(n, probe)
        if not any(found):
            break
        n += 1
    if n == cfg.n_layer:  # (the usual case: config.json is not read again for a claim unused)
        return None
    claim = _claim(cfg, ckpt, "n_layer", cfg.n_layer, Path(ckpt.config).name)[1]
    return layers_beyond(set(range(n)), cfg.n_layer, claim, held_by(ckpt.files))


def _layers(cfg: ModelConfig, ckpt: Checkpoint, p: str, one: Callable, budget: int | None,
            name: str | None) -> LayerStore:
    """A safetensors model's layers within the memory budget (engine/reading/budget.py).
    `one(i, g)` builds layer i, reading tensor `p + name` with `g(name, shape)`. Every layer's
    tensors are checked at load (present, their shapes, float types) without reading them, and
    counted: the float32 bytes of the tensors a layer reads are its size expanded."""
    sizes, missing, absent = [], {}, set()  # (layer: its first missing tensor; layers with none)
    for i in range(cfg.n_layer):
        read, lacks = [], []

        def dry(n, shape):
            read.append(4 * int(np.prod(shape, dtype=np.int64)))
            if p + n not in ckpt:
                lacks.append(p + n)
                return np.zeros((1,) * len(shape), dtype=np.float32)
            return ckpt.check(p + n, shape)

        one(i, dry)
        sizes.append(sum(read))
        if lacks:
            missing[i] = lacks[0]
            if len(lacks) == len(read):
                absent.add(i)
    if missing:
        _refuse_missing(cfg, ckpt, missing, absent)
    # a sharded checkpoint is named as a whole (a budget concerns every shard), a single file by itself
    source = held_by(ckpt.files)
    # the embeddings and the head as float32 (at most); the W_O Grams, made only when asked for
    other = ckpt.float32_bytes() - sum(sizes)
    store = LayerStore(lambda i, check: one(i, lambda n, shape: ckpt.get(p + n, shape, check)),
                       sizes, resolve_budget(name or source, sizes, other, budget,
                                             optional_bytes=grams_bytes(cfg)), source)
    store.expand_kept()  # a model that fits: every layer read and checked at load
    return store


def _refuse_missing(cfg: ModelConfig, ckpt: Checkpoint, missing: dict[int, str], absent: set[int]):
    """The first layer tensor the weights lack; where every layer from one on is absent whole,
    config.json counts more layers than the weights hold, and says so."""
    first = min(missing)
    if absent >= set(range(first, cfg.n_layer)):
        raise too_few(cfg, ckpt, first)
    raise ckpt.missing(missing[first])


def _cat(parts):  # [d_in, a], [d_in, b], ... -> contiguous float32 [d_in, a + b + ...]
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def _t(w):  # nn.Linear [out, in] -> [in, out], contiguous float32
    return np.ascontiguousarray(w.T, dtype=np.float32)


def _in_out(w):  # nn.Linear [out, in] -> [in, out] float32, laid out by kept_in_c_order
    """As GGUF layers are kept (gguf_model._matrix). An encoder keeps C order (_t): its runs are of
    many rows, for which the layout makes no difference (benchmarks/row_products.py --layouts)."""
    out, inp = w.shape
    return _t(w) if kept_in_c_order(inp, out) else np.ascontiguousarray(w, dtype=np.float32).T


def load_bert(cfg: ModelConfig, ckpt: Checkpoint, budget: int | None = None,
              name: str | None = None) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    p = _prefix(ckpt, "embeddings.word_embeddings.weight", ("", "bert."), cfg)
    g = lambda name, shape: ckpt.get(p + name, shape)  # noqa: E731

    def one(i, g):
        a = f"encoder.layer.{i}."

        def norm(name):
            return (g(name + ".weight", (d,)), g(name + ".bias", (d,)))

        q, k, v = (g(f"{a}attention.self.{n}.weight", (d, d)) for n in ("query", "key", "value"))
        bq, bk, bv = (g(f"{a}attention.self.{n}.bias", (d,)) for n in ("query", "key", "value"))
        return Layer(
            w_qkv=_cat([q.T, k.T, v.T]), b_qkv=cat_bias([bq, bk, bv]),
            w_o=_t(g(a + "attention.output.dense.weight", (d, d))),
            b_o=np.array(g(a + "attention.output.dense.bias", (d,))),
            norm1=norm(a + "attention.output.LayerNorm"), norm2=norm(a + "output.LayerNorm"),
            w_in=_t(g(a + "intermediate.dense.weight", (f, d))),
            b_in=np.array(g(a + "intermediate.dense.bias", (f,))),
            w_out=_t(g(a + "output.dense.weight", (d, f))),
            b_out=np.array(g(a + "output.dense.bias", (d,))),
        )

    layers = _layers(cfg, ckpt, p, one, budget, name)
    return Weights(
        tok_emb=g("embeddings.word_embeddings.weight", (cfg.vocab_size, d)),
        pos_emb=g("embeddings.position_embeddings.weight", (cfg.max_positions, d)),
        type_emb=g("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, d)),
        emb_norm=(g("embeddings.LayerNorm.weight", (d,)), g("embeddings.LayerNorm.bias", (d,))),
        layers=layers,  # (no head: an encoder predicts no next token, whatever its file holds)
        files=mapped_files(ckpt), notice=_beyond(cfg, ckpt, p, one),
    )


def load_gpt2(cfg: ModelConfig, ckpt: Checkpoint, budget: int | None = None,
              name: str | None = None) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    p = _prefix(ckpt, "wte.weight", ("", "transformer."), cfg)
    g = lambda name, shape: ckpt.get(p + name, shape)  # noqa: E731

    def one(i, g):
        a = f"h.{i}."

        def norm(name):
            return (g(name + ".weight", (d,)), g(name + ".bias", (d,)))

        # Conv1D stores [in, out] already
        return Layer(
            w_qkv=np.ascontiguousarray(g(a + "attn.c_attn.weight", (d, 3 * d)), dtype=np.float32),
            b_qkv=np.array(g(a + "attn.c_attn.bias", (3 * d,))),
            w_o=np.ascontiguousarray(g(a + "attn.c_proj.weight", (d, d)), dtype=np.float32),
            b_o=np.array(g(a + "attn.c_proj.bias", (d,))),
            norm1=norm(a + "ln_1"), norm2=norm(a + "ln_2"),
            w_in=np.ascontiguousarray(g(a + "mlp.c_fc.weight", (d, f)), dtype=np.float32),
            b_in=np.array(g(a + "mlp.c_fc.bias", (f,))),
            w_out=np.ascontiguousarray(g(a + "mlp.c_proj.weight", (f, d)), dtype=np.float32),
            b_out=np.array(g(a + "mlp.c_proj.bias", (d,))),
        )

    layers = _layers(cfg, ckpt, p, one, budget, name)
    tok_emb = g("wte.weight", (cfg.vocab_size, d))
    head = read_head(lambda n: ckpt.get(n, (d,)), (p + "ln_f.weight", p + "ln_f.bias"),
                     _unembed(cfg, ckpt, tok_emb, True), _source(ckpt), ckpt.__contains__)
    return Weights(tok_emb=tok_emb, pos_emb=g("wpe.weight", (cfg.max_positions, d)),
                   type_emb=None, emb_norm=None, layers=layers, head=head, files=mapped_files(ckpt),
                   notice=_beyond(cfg, ckpt, p, one))


def _qkv_gate_up(cfg: ModelConfig, g, a: str):
    """Layer `a`'s projections [out, in] as q, k, v, gate, up: separate tensors, or Phi-3's fused
    qkv_proj [(n_head + 2 n_kv_head) d_head, d_model] and gate_up_proj [2 d_ff, d_model] (gate
    first), cut at the same rows."""
    d, f = cfg.d_model, cfg.d_ff
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    sa = a + "self_attn."
    if cfg.model_type == "phi3":
        qkv = g(sa + "qkv_proj.weight", (dq + 2 * dkv, d))
        gate_up = g(a + "mlp.gate_up_proj.weight", (2 * f, d))
        return qkv[:dq], qkv[dq:dq + dkv], qkv[dq + dkv:], gate_up[:f], gate_up[f:]
    return (g(sa + "q_proj.weight", (dq, d)), g(sa + "k_proj.weight", (dkv, d)),
            g(sa + "v_proj.weight", (dkv, d)), g(a + "mlp.gate_proj.weight", (f, d)),
            g(a + "mlp.up_proj.weight", (f, d)))


def load_llama(cfg: ModelConfig, ckpt: Checkpoint, budget: int | None = None,
               name: str | None = None) -> Weights:
    d, f = cfg.d_model, cfg.d_ff
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    p = _prefix(ckpt, "embed_tokens.weight", ("model.", ""), cfg)

    def one(i, g):
        a = f"layers.{i}."
        sa = a + "self_attn."
        q, k, v, gate, up = _qkv_gate_up(cfg, g, a)
        if cfg.qkv_bias:
            biases = [g(sa + "q_proj.bias", (dq,)), g(sa + "k_proj.bias", (dkv,)),
                      g(sa + "v_proj.bias", (dkv,))]
        else:
            biases = [None, None, None]
        b_in = None
        if cfg.mlp_bias:
            b_in = np.concatenate([g(a + "mlp.gate_proj.bias", (f,)), g(a + "mlp.up_proj.bias", (f,))])
        qk_norms = ((np.array(g(sa + "q_norm.weight", (cfg.d_head,))),
                     np.array(g(sa + "k_norm.weight", (cfg.d_head,)))) if cfg.qk_norm else (None, None))
        return Layer(
            w_qkv=_cat([q.T, k.T, v.T]), b_qkv=cat_bias(biases),
            w_o=_in_out(g(sa + "o_proj.weight", (d, dq))),
            b_o=np.array(g(sa + "o_proj.bias", (d,))) if cfg.o_bias else None,
            norm1=(np.array(g(a + "input_layernorm.weight", (d,))),),
            norm2=(np.array(g(a + "post_attention_layernorm.weight", (d,))),),
            w_in=_cat([gate.T, up.T]), b_in=b_in,
            w_out=_in_out(g(a + "mlp.down_proj.weight", (d, f))),
            b_out=np.array(g(a + "mlp.down_proj.bias", (d,))) if cfg.mlp_bias else None,
            q_norm=qk_norms[0], k_norm=qk_norms[1],
        )

    layers = _layers(cfg, ckpt, p, one, budget, name)
    tok_emb = ckpt.rows(p + "embed_tokens.weight", (cfg.vocab_size, d))  # F16/BF16: kept so
    head = read_head(lambda n: ckpt.get(n, (d,)), (p + "norm.weight",),
                     _unembed(cfg, ckpt, tok_emb, False), _source(ckpt), ckpt.__contains__)
    return Weights(tok_emb=tok_emb, pos_emb=None, type_emb=None, emb_norm=None, layers=layers,
                   head=head, files=mapped_files(ckpt), notice=_beyond(cfg, ckpt, p, one))


def _unembed(cfg: ModelConfig, ckpt: Checkpoint, tok_emb, tied_by_default: bool):
    """(name, reader) of a safetensors model's unembedding: the token embedding when config.json
    ties them (`tie_word_embeddings`, default per family as in transformers), else lm_head.weight."""
    tied = cfg.raw.get("tie_word_embeddings", tied_by_default)
    if tied is True:
        return "(tied to the token embedding)", lambda: tok_emb
    return "lm_head.weight", lambda: ckpt.rows("lm_head.weight", (cfg.vocab_size, cfg.d_model))


def _source(ckpt: Checkpoint) -> str:
    """The checkpoint as a line names what it lacks: its folder, whose shards hold the model's
    tensors together (a tensor the first shard lacks may be in another)."""
    return f"the checkpoint in {ckpt.files[0].path.parent.name}/"


def _gemma_gain(w: np.ndarray) -> np.ndarray:  # stored w [n] -> the gain 1 + w [n], float32
    """Gemma's RMSNorm multiplies by (1 + w); folded once here, so the forward pass has one
    RMSNorm (llama.cpp's converter folds it the same way: a GGUF stores 1 + w)."""
    return (1.0 + np.asarray(w, dtype=np.float32)).astype(np.float32)


def load_gemma3(cfg: ModelConfig, ckpt: Checkpoint, budget: int | None = None,
                name: str | None = None) -> Weights:
    """Gemma 3's language model: four norms per layer (input, post-attention, pre-feedforward,
    post-feedforward), q/k norms, every gain (1 + w) folded. Multimodal checkpoints keep it under
    `model.language_model.` (or the older `language_model.model.`); the vision tower is not read."""
    d, f = cfg.d_model, cfg.d_ff
    dq = cfg.n_head * cfg.d_head
    p = _prefix(ckpt, "embed_tokens.weight",
                ("model.", "", "model.language_model.", "language_model.model."), cfg)

    def one(i, g):
        a = f"layers.{i}."
        sa = a + "self_attn."

        def gain(name, n=d):
            return (_gemma_gain(g(name, (n,))),)

        q, k, v, gate, up = _qkv_gate_up(cfg, g, a)
        return Layer(
            w_qkv=_cat([q.T, k.T, v.T]), b_qkv=None,
            w_o=_in_out(g(sa + "o_proj.weight", (d, dq))), b_o=None,
            norm1=gain(a + "input_layernorm.weight"),
            norm2=gain(a + "pre_feedforward_layernorm.weight"),
            w_in=_cat([gate.T, up.T]), b_in=None,
            w_out=_in_out(g(a + "mlp.down_proj.weight", (d, f))), b_out=None,
            q_norm=gain(sa + "q_norm.weight", cfg.d_head)[0],
            k_norm=gain(sa + "k_norm.weight", cfg.d_head)[0],
            post_attn_norm=gain(a + "post_attention_layernorm.weight"),
            post_mlp_norm=gain(a + "post_feedforward_layernorm.weight"),
        )

    layers = _layers(cfg, ckpt, p, one, budget, name)
    tok_emb = ckpt.rows(p + "embed_tokens.weight", (cfg.vocab_size, d))  # F16/BF16: kept so
    head = read_head(lambda n: _gemma_gain(ckpt.get(n, (d,))), (p + "norm.weight",),  # 1 + w too
                     _unembed(cfg, ckpt, tok_emb, True), _source(ckpt), ckpt.__contains__)
    return Weights(tok_emb=tok_emb, pos_emb=None, type_emb=None, emb_norm=None, layers=layers,
                   head=head, files=mapped_files(ckpt), notice=_beyond(cfg, ckpt, p, one))


LOADERS = {"bert": load_bert, "gpt2": load_gpt2, "llama": load_llama, "qwen3": load_llama,
           "gemma3": load_gemma3}


def read_folder(path: Path, name: str | None = None, license: str | None = None,
                budget: int | None = None) -> ReadModel:
    """Read a checkpoint folder (config.json + safetensors [+ tokenizer.json]); its layers are
    expanded to float32 within the memory budget (`budget` bytes, else the one chosen with
    memory_budget.set_memory_budget, else the default from the memory available)."""
    path = Path(path).expanduser()
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES:
            raise refuse_pickle(path)
        path = path.parent
    if not path.is_dir():
        if exists(path):
            regular_file(path)  # names what is there instead: a FIFO, a device, a socket
        raise ModelLoadError(f"no model folder at {path}")
    # the small files first, each checked whole (validate.py), then the weights
    config = read_config(path)
    tok_path = path / "tokenizer.json"
    tokenizer = TextTokenizer(tok_path) if exists(tok_path) else None
    notice = None
    if tokenizer is None:  # (the window shows the notice from the start, not after a failed text)
        notice = "its folder has no tokenizer.json: type token ids instead, e.g. 5, 17, 3"
        log.info("%s has no tokenizer.json: only token ids can be run", path)
    else:
        tokenizer.check_ids(config.vocab_size)
    ckpt = Checkpoint(path)
    weights = LOADERS[config.family](config, ckpt, budget, name or path.name)
    if not license:
        try:
            license = _read_license(path)
        except OSError as exc:  # the licence line is optional: an unreadable README is no reason
            log.warning("cannot read %s: %s", path / "README.md", exc)
    notice = "; ".join(filter(None, (weights.notice, notice))) or None  # (one line: both)
    return ReadModel(name or path.name, path, config, weights, tokenizer, license=license, notice=notice)


def _read_license(path: Path) -> str | None:
    readme = path / "README.md"
    if not readme.is_file():
        return None
    for line in readme.read_text(encoding="utf-8", errors="replace").splitlines()[:40]:
        if line.strip().lower().startswith("license:"):
            return line.split(":", 1)[1].strip()
    return None
