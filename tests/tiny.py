"""Tiny random checkpoints written by the tests themselves (safetensors + config.json)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

FIXTURES = Path(__file__).parent / "fixtures"  # the committed checkpoints and HF references


def llama_config(n_head=8, n_kv_head=2, d_model=32, n_layer=2, d_ff=48, vocab=50, positions=64, **extra):
    cfg = {"model_type": "llama", "hidden_size": d_model, "num_attention_heads": n_head,
           "num_key_value_heads": n_kv_head, "num_hidden_layers": n_layer, "intermediate_size": d_ff,
           "vocab_size": vocab, "max_position_embeddings": positions, "rms_norm_eps": 1e-6,
           "rope_theta": 1000.0, "hidden_act": "silu"}
    cfg.update(extra)
    return cfg


def llama_tensors(cfg, seed=0, std=0.2):
    rng = np.random.default_rng(seed)
    d = cfg["hidden_size"]
    d_head = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    dq = cfg["num_attention_heads"] * d_head
    dkv = cfg["num_key_value_heads"] * d_head
    f = cfg["intermediate_size"]
    r = lambda *s: (rng.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    t = {"model.embed_tokens.weight": r(cfg["vocab_size"], d),
         "model.norm.weight": (1 + r(d)).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        a = f"model.layers.{i}."
        t.update({a + "self_attn.q_proj.weight": r(dq, d), a + "self_attn.k_proj.weight": r(dkv, d),
                  a + "self_attn.v_proj.weight": r(dkv, d), a + "self_attn.o_proj.weight": r(d, dq),
                  a + "mlp.gate_proj.weight": r(f, d), a + "mlp.up_proj.weight": r(f, d),
                  a + "mlp.down_proj.weight": r(d, f),
                  a + "input_layernorm.weight": (1 + r(d)).astype(np.float32),
                  a + "post_attention_layernorm.weight": (1 + r(d)).astype(np.float32)})
    return t


def write_model(folder: Path, cfg: dict, tensors: dict) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def rewrite_in_place(path: Path) -> int:
    """A model file's second half changed in place, its size kept and its modification time set 5 s
    later (as a tool writing into an open file leaves it) -> that time in ns."""
    data = bytearray(Path(path).read_bytes())
    for k in range(len(data) // 2, len(data), 7):
        data[k] ^= 0x55
    with open(path, "r+b") as fh:
        fh.write(data)
    mtime = os.stat(path).st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(mtime, mtime))
    return mtime


def tiny_llama(folder: Path, seed=0, **cfg_kw) -> Path:
    cfg = llama_config(**cfg_kw)
    return write_model(folder, cfg, llama_tensors(cfg, seed))


def byte_level_tokenizer_json() -> str:
    """A byte-level BPE tokenizer.json (every string encodes) with no special tokens: like SmolLM2,
    an empty text gives 0 tokens. Ids 0..258."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def tiny_text_model(folder, positions=64, seed=0):
    """A tiny Llama-family decoder with a byte-level tokenizer.json (written, not downloaded)."""
    tok = byte_level_tokenizer_json()
    cfg = llama_config(vocab=len(json.loads(tok)["model"]["vocab"]), positions=positions)
    write_model(folder, cfg, llama_tensors(cfg, seed))
    (folder / "tokenizer.json").write_text(tok, encoding="utf-8")
    return folder


def tiny_text_decoder(folder: Path, **cfg_kw) -> Path:
    """A tiny Llama-family decoder with a byte-level tokenizer and an unembedding (it takes text and
    predicts)."""
    folder = Path(folder)
    tok = byte_level_tokenizer_json()
    cfg = llama_config(vocab=len(json.loads(tok)["model"]["vocab"]), **cfg_kw)
    tensors = llama_tensors(cfg)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    write_model(folder, cfg, tensors)
    (folder / "tokenizer.json").write_text(tok, encoding="utf-8")
    return folder
