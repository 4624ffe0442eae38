"""Tiny GGUF files written by the tests with gguf.GGUFWriter, the way llama.cpp's converter writes
them: llama.cpp tensor names, Q/K rows permuted for its RoPE, weights quantised with gguf.quants."""

from __future__ import annotations

import json
import shutil
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


def tiny_gqa_files(kind: str, where: Path) -> tuple[Path, Path]:
    """(what load_model opens, the file its weights map) of the tiny GQA Llama (tests/fixtures/
    llama_gqa) as a Q8_0 GGUF file (kind "gguf") or as a copy of its safetensors folder."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "llama_gqa"
    if kind == "gguf":
        cfg, tensors = gguf_tensors(fixture)
        path = write_gguf(Path(where) / "tiny.gguf", cfg, tensors, qtype=Q.Q8_0)
        return path, path
    folder = Path(shutil.copytree(fixture, Path(where) / "tiny"))
    return folder, folder / "model.safetensors"


# how a refusal names the file of tiny_gqa_files that changed: from the folder holding the model
CHANGED_NAMES = {"gguf": "tiny.gguf", "safetensors": "tiny/model.safetensors"}


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


def spm_model(path: Path) -> Path:
    """A one-layer Llama GGUF (with its MLP and final norm: it predicts) on Mistral's vocabulary."""
    kv = spm_vocab_kv()
    n_vocab, d, f = len(kv["tokenizer.ggml.tokens"]), 16, 8
    cfg = {"model_type": "llama", "hidden_size": d, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_hidden_layers": 1, "intermediate_size": f, "vocab_size": n_vocab,
           "max_position_embeddings": 64}
    rng = np.random.default_rng(0)
    normal = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    tensors = {"token_embd.weight": normal(n_vocab, d), "blk.0.attn_norm.weight": np.ones(d, np.float32),
               "blk.0.attn_q.weight": normal(d, d), "blk.0.attn_k.weight": normal(8, d),
               "blk.0.attn_v.weight": normal(8, d), "blk.0.attn_output.weight": normal(d, d),
               "blk.0.ffn_norm.weight": np.ones(d, np.float32), "blk.0.ffn_gate.weight": normal(f, d),
               "blk.0.ffn_up.weight": normal(f, d), "blk.0.ffn_down.weight": normal(d, f),
               "output_norm.weight": np.ones(d, np.float32)}
    return write_gguf(path, cfg, tensors, extra_kv=kv)


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


# HF model_type -> llama.cpp architecture whose converter (convert_hf_to_gguf.py) writes it
GGUF_ARCH = {"qwen3": gguf.MODEL_ARCH.QWEN3, "phi3": gguf.MODEL_ARCH.PHI3,
             "gemma3_text": gguf.MODEL_ARCH.GEMMA3, "llama": gguf.MODEL_ARCH.LLAMA}


def llama3_rope_factors(rope: dict, d_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: the llama3 RoPE scaling as
    one divisor per frequency (the rope_freqs tensor)."""
    import math
    base, factor = rope["rope_theta"], rope["factor"]
    low, high, old = rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (np.arange(0, d_head, 2, dtype=np.float32) / d_head))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def family_gguf(folder: Path, path: Path, qtype=Q.F32) -> Path:
    """A GGUF copy of a Qwen3, Phi-3, Gemma 3 or llama3-RoPE Llama checkpoint folder, as llama.cpp's
    converter writes it: tensor names from gguf's own TensorNameMap, Gemma's norm gains stored as
    1 + w, Llama's Q/K rows permuted and its llama3 scaling as a rope_freqs tensor, the metadata keys
    of gguf.constants (no layer pattern for Gemma 3: llama.cpp's converter writes none)."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    model_type = cfg["model_type"]
    arch = GGUF_ARCH[model_type]
    n_layer, n_head = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    d_head = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    names = gguf.get_tensor_name_map(arch, n_layer)
    tensors = {}
    for name, arr in load_file(str(Path(folder) / "model.safetensors")).items():
        arr = arr.astype(np.float32)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, name
        if model_type == "gemma3_text" and name.endswith("norm.weight"):
            arr = arr + 1.0  # Gemma3Model.norm_shift
        if model_type == "llama" and new.endswith("attn_q.weight"):
            arr = permute(arr, n_head)
        elif model_type == "llama" and new.endswith("attn_k.weight"):
            arr = permute(arr, n_kv)
        tensors[new] = arr
    rope = cfg.get("rope_parameters") or {}
    rope = rope.get("full_attention", rope)
    if rope.get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(rope, d_head)
    name = gguf.MODEL_ARCH_NAMES[arch]
    w = gguf.GGUFWriter(str(path), name)
    w.add_block_count(n_layer)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_key_length(d_head)
    w.add_value_length(d_head)
    w.add_rope_dimension_count(d_head)
    w.add_rope_freq_base(float(rope.get("rope_theta", 10000.0)))
    w.add_vocab_size(cfg["vocab_size"])
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    if rope.get("rope_type") == "yarn":  # as convert_hf_to_gguf.py's Qwen2/Qwen3 set_gguf_parameters
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rope["factor"]))
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if model_type == "phi3":
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        w.add_sliding_window(cfg.get("sliding_window") or 0)
    if model_type == "gemma3_text":
        w.add_sliding_window(cfg["sliding_window"])
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    for tname, arr in tensors.items():
        if arr.ndim == 2 and qtype != Q.F32 and arr.shape[-1] % block == 0:
            w.add_tensor(tname, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(tname, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def load_packed(path: Path):
    """load_gguf(path) with the quantised kernels asked for, so its layers are packed as the window
    packs them (the request is switched off again after)."""
    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack

    qpack.ask_for_kernels()
    try:
        return load_gguf(path)
    finally:
        qpack.ask_for_kernels(False)
