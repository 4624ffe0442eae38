"""Tiny GGUF files written by the tests with gguf.GGUFWriter, the way llama.cpp's converter writes
them: llama.cpp tensor names, Q/K rows permuted for its RoPE, weights quantised with gguf.quants."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

Q = gguf.GGMLQuantizationType


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (Q with n_head, K with n_kv_head)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_tensors(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """An HF Llama-family checkpoint folder -> (config, {gguf name: float32 array [out, in]})."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    hf = load_file(str(Path(folder) / "model.safetensors"))
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    permuted = cfg["model_type"] in ("llama", "mistral")
    out = {}
    for name, arr in hf.items():
        arr = arr.astype(np.float32)
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = arr
        elif name == "model.norm.weight":
            out["output_norm.weight"] = arr
        elif name == "lm_head.weight":
            out["output.weight"] = arr
        elif name.startswith("model.layers."):
            _, _, i, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            if permuted and module == "self_attn.q_proj":
                arr = permute(arr, n_head)
            elif permuted and module == "self_attn.k_proj":
                arr = permute(arr, n_kv)
            out[f"blk.{i}.{HF_TO_GGUF[module]}.{kind}"] = arr
    return cfg, out


def rope_theta(cfg: dict) -> float:
    return (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))


def write_gguf(path: Path, cfg: dict, tensors: dict[str, np.ndarray], qtype=Q.F32, *,
               arch: str | None = None, extra_kv=None) -> Path:
    """Write a GGUF file; 2-D weights in `qtype` where their rows divide into its blocks (llama.cpp
    falls back to F32 the same way), 1-D tensors in F32."""
    arch = arch or cfg["model_type"]
    d = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(d)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg.get("num_key_value_heads", n_head))
    w.add_rope_freq_base(float(rope_theta(cfg)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    d_head = cfg.get("head_dim") or d // n_head
    w.add_rope_dimension_count(d_head)
    if cfg.get("head_dim"):
        w.add_key_length(d_head)
        w.add_value_length(d_head)
    w.add_vocab_size(cfg["vocab_size"])
    add_kv(w, extra_kv or {})
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    for name, arr in tensors.items():
        if arr.ndim == 2 and qtype != Q.F32 and arr.shape[-1] % block == 0:
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, arr if arr.dtype.kind in "iu" else arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


SPM_VOCAB = Path(__file__).resolve().parent / "fixtures" / "spm" / "vocab.npz"


def spm_vocab_kv(add_space_prefix: bool | None = True, add_bos: bool | None = True) -> dict:
    """tokenizer.ggml.* of a SentencePiece GGUF, as llama.cpp's converter writes them, from
    Mistral-7B-v0.1's vocabulary (tests/fixtures/spm/vocab.npz). None leaves a flag out."""
    with np.load(SPM_VOCAB, allow_pickle=False) as z:
        kv = {
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": [str(t) for t in z["tokens"]],
            "tokenizer.ggml.scores": [float(s) for s in z["scores"]],
            "tokenizer.ggml.token_type": [int(t) for t in z["types"]],
            "tokenizer.ggml.bos_token_id": int(z["bos"]),
            "tokenizer.ggml.eos_token_id": int(z["eos"]),
            "tokenizer.ggml.unknown_token_id": int(z["unk"]),
        }
    if add_space_prefix is not None:
        kv["tokenizer.ggml.add_space_prefix"] = add_space_prefix
    if add_bos is not None:
        kv["tokenizer.ggml.add_bos_token"] = add_bos
    return kv


def add_kv(w: gguf.GGUFWriter, kv: dict) -> None:
    """Metadata in the GGUF types llama.cpp's converter uses: strings, bools, uint32 ids, and arrays
    of strings, float32 scores or int32 token types."""
    for key, value in kv.items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:  # a list of Python floats is written as FLOAT32, of ints as INT32
            w.add_array(key, list(value))


def write_vocab_gguf(path: Path, kv: dict, arch: str = "llama") -> Path:
    """A GGUF of metadata only (no tensors): enough for gguf_tokenizer."""
    w = gguf.GGUFWriter(str(path), arch)
    add_kv(w, kv)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
