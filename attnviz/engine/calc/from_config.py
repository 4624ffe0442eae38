"""Calculator inputs from a model's own config.json (or an engine ModelConfig): the sizes, and the
family's biases, norms, tying, MoE, MLA and sliding-window layers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from attnviz.engine.calc.inputs import ARCH_STYLES, MLA, MLA_ROPE_HEAD_DIM, Arch, CalcInputs, input_error
from attnviz.engine.calc.sizing import calculate
from attnviz.engine.errors import CalcError, ModelLoadError
from attnviz.engine.reading.hf_config import first_window_layer, keys, pick, read_fields, windowed_layers
from attnviz.engine.reading.validate import read_json_object

# Hugging Face defaults for tie_word_embeddings where config.json leaves it out
_TIED_BY_DEFAULT = {"gpt2": True, "gemma": True, "gemma2": True, "gemma3_text": True,
                    "falcon": True, "bert": False}


def calc_inputs_from_config(cfg: Any, *, seq_len: int | None = None, batch: int = 1,
                            kv_dtype: str = "fp16") -> CalcInputs:
    """Calculator inputs from a Hugging Face config.json dict (or an engine ModelConfig).

    The sizes are read by hf_config.read_fields, the reader the engine uses, with every spelling
    it knows (hidden_size/n_embd/dim, num_key_value_heads/num_kv_heads...); then sliding-window
    layers, MLA (kv_lora_rank...), MoE (num_local_experts, n_routed_experts...) and the family's
    biases, norms and tying.
    """
    raw = getattr(cfg, "raw", cfg)
    if not isinstance(raw, Mapping):
        raise CalcError(f"expected a config.json dict or a ModelConfig, got {type(cfg).__name__}")
    raw = dict(raw)
    if isinstance(raw.get("text_config"), Mapping) and "hidden_size" not in raw:
        raw.update(raw["text_config"])  # multimodal wrappers keep the language model inside
    c = read_fields(raw)
    model_type = c["model_type"]
    d_model, n_head, n_layer, n_kv = c["d_model"], c["n_head"], c["n_layer"], c["n_kv_head"]
    missing = [keys(name, model_type)[0] for name in ("d_model", "n_head", "n_layer")
               if c[name] is None]
    if missing:
        raise CalcError(f"config.json (model_type {model_type or '?'}) has no {', '.join(missing)}")
    d_head, d_ff, max_positions = c["d_head"], c["d_ff"], c["max_positions"]

    # architecture
    architectures = raw.get("architectures") or [""]
    if model_type in ("bert", "roberta") or str(architectures[0]).startswith(("Bert", "Roberta")):
        arch = replace(ARCH_STYLES["bert"], type_vocab_size=int(
            2 if c["type_vocab_size"] is None else c["type_vocab_size"]))
        n_kv = None
    elif model_type == "gpt2":
        arch = ARCH_STYLES["gpt2"]
        n_kv = None
    else:
        arch = Arch(
            qkv_bias=c["qkv_bias"], o_bias=c["o_bias"], mlp_bias=bool(c["mlp_bias"]),
            qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"),
            norms_per_layer=4 if model_type in ("gemma2", "gemma3", "gemma3_text") else 2,
        )
        if model_type == "falcon":
            arch = replace(arch, mlp="plain", norm_bias=True,
                           norms_per_layer=2 if raw.get("new_decoder_architecture") else 1)
    tied = raw.get("tie_word_embeddings", _TIED_BY_DEFAULT.get(model_type, False))
    arch = replace(arch, tied_embeddings=bool(tied))

    # mixture of experts
    experts = pick(raw, ("num_local_experts", "n_routed_experts", "num_experts"))[1]
    if experts:
        moe_ff = raw.get("moe_intermediate_size")
        arch = replace(
            arch, moe_experts=int(experts), moe_shared_experts=int(raw.get("n_shared_experts") or 0),
            moe_top_k=int(pick(raw, ("num_experts_per_tok", "num_experts_per_token"))[1] or 0),
            moe_d_ff=moe_ff, moe_dense_layers=int(raw.get("first_k_dense_replace") or 0),
            moe_router_bias=raw.get("topk_method") == "noaux_tc")

    # multi-head latent attention
    mla = None
    if raw.get("kv_lora_rank"):
        mla = MLA(kv_lora_rank=raw["kv_lora_rank"], qk_rope_head_dim=raw.get("qk_rope_head_dim", MLA_ROPE_HEAD_DIM),
                  qk_nope_head_dim=raw.get("qk_nope_head_dim"), v_head_dim=raw.get("v_head_dim"),
                  q_lora_rank=raw.get("q_lora_rank"))
        n_kv = None
        d_head = None

    # sliding window: which layers use it
    window, window_layers = c["sliding_window"], None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise input_error("sliding_window", f"config.json's sliding_window must be a whole number of tokens "
                                     f"(or null), got {window!r}")
    layer_types = getattr(cfg, "layer_types", None) or raw.get("layer_types")  # the engine's first
    if window and isinstance(layer_types, (list, tuple)) and layer_types:
        window_layers = tuple(i for i, t in enumerate(layer_types) if "sliding" in str(t))
        if not window_layers:
            window, window_layers = None, None  # (no layer windowed: no size, no layers named)
        elif len(window_layers) == len(layer_types):
            window_layers = None  # every layer: as a config without layer_types says it
    elif window and model_type == "gemma2":
        window_layers = "even"
    elif window and raw.get("sliding_window_pattern") and isinstance(n_layer, int):
        every = int(raw["sliding_window_pattern"])  # Gemma 3: every k-th layer is global
        window_layers = tuple(i for i in range(n_layer) if (i + 1) % every)
    elif window and isinstance(n_layer, int) and (first := first_window_layer(raw, model_type)):
        # Qwen: from max_window_layers on
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise input_error("max_window_layers", "config.json's max_window_layers must be a whole "
                              f"number of layers, got {first!r}")
        window_layers = windowed_layers(n_layer, first)  # (read_fields: none is no window)
    if window and isinstance(max_positions, int) and window >= max_positions and window_layers is None:
        window = None  # a window as long as the context (Mistral v0.2: 32768) caps nothing

    return CalcInputs(
        d_model=d_model, n_head=n_head, n_layer=n_layer, n_kv_head=n_kv, d_head=d_head,
        d_ff=d_ff, vocab_size=c["vocab_size"], max_positions=max_positions,
        seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
        sliding_window=window, sliding_window_layers=window_layers, mla=mla, arch=arch)


CONFIG_FILES = "a config.json, a folder holding one, or a .gguf"  # what calc_inputs_from_file reads


class UnreadableConfig(ModelLoadError):
    """A file calc_inputs_from_file cannot read as a config.json (nor is it a GGUF): its message
    says why, and a caller adds what it takes (CONFIG_FILES)."""


def calc_inputs_from_file(path: Path | str) -> CalcInputs:
    """Calculator inputs from a model on disk: a config.json, a folder holding one (or a single
    GGUF), or a GGUF file, whose header is read by gguf_config as loading the model reads it (the
    Calculator tab is given that config's raw dict). A file that is none of these is an
    UnreadableConfig."""
    from attnviz.engine.reading.gguf_file import gguf_config, gguf_in_folder, is_gguf, open_gguf

    path = Path(path).expanduser()
    if path.is_dir():
        path = gguf_in_folder(path)
        if path.is_dir():
            path = path / "config.json"
    if is_gguf(path) or path.suffix.lower() == ".gguf":  # (one that is not says why, as a load does)
        return calc_inputs_from_config(gguf_config(open_gguf(path)).raw)
    try:
        raw = read_json_object(path)
    except ModelLoadError as exc:
        raise UnreadableConfig(str(exc)) from exc
    return calc_inputs_from_config(raw)


def kv_cache_needed(cfg: Any, T: int, kv_dtype: str = "fp32") -> int:
    """Bytes of KV cache a model needs for one sequence of T tokens, as llama.cpp and transformers
    allocate it: every token on global layers, the last min(T, window) on local ones (the
    calculator's count, on the model's own config)."""
    return calculate(calc_inputs_from_config(cfg, seq_len=T, kv_dtype=kv_dtype)).kv_bytes_sequence
