"""Model configuration: a frozen dataclass read from a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnviz.engine.errors import ModelLoadError

# model_type -> family whose forward pass it uses
FAMILIES = {
    "bert": "bert",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
}

# Bounds beyond any real checkpoint: a config past them is corrupt, not a big model.
LIMITS = {
    "n_layer": 1024,
    "n_head": 4096,
    "n_kv_head": 4096,
    "d_model": 1 << 17,
    "d_head": 4096,
    "d_ff": 1 << 20,
    "vocab_size": 1 << 24,
    "max_positions": 1 << 24,
}


@dataclass(frozen=True)
class ModelConfig:
    family: str  # 'bert' | 'gpt2' | 'llama'
    model_type: str
    n_layer: int
    n_head: int
    n_kv_head: int
    d_model: int
    d_head: int
    d_ff: int
    vocab_size: int
    max_positions: int
    causal: bool
    norm_eps: float
    rope_theta: float | None = None
    qkv_bias: bool = True
    o_bias: bool = True
    mlp_bias: bool = True
    activation: str = "gelu"
    type_vocab_size: int = 0
    sliding_window: int | None = None
    attn_scale_by_layer: bool = False  # GPT-2 scale_attn_by_inverse_layer_idx
    raw: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def n_group(self) -> int:
        """Query heads per KV head."""
        return self.n_head // self.n_kv_head


def _get(raw: dict, *names: str, default: Any = None) -> Any:
    for name in names:
        if raw.get(name) is not None:
            return raw[name]
    return default


def _rope_theta(raw: dict) -> float:
    """RoPE base from `rope_theta` (older configs) or `rope_parameters` (newer ones)."""
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or {}
    for p in (params, scaling):
        kind = p.get("rope_type", p.get("type", "default"))
        if kind not in ("default", None):
            raise ModelLoadError(f"RoPE type {kind!r} is not supported yet (only the default RoPE)")
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    return float(theta)


def config_from_dict(raw: dict) -> ModelConfig:
    """Read a config.json dict into a ModelConfig; unknown types and absurd sizes raise."""
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise ModelLoadError(f"model_type {model_type!r} is not supported (supported: {known})")
    family = FAMILIES[model_type]
    if family == "bert":
        d_model = _get(raw, "hidden_size")
        n_head = _get(raw, "num_attention_heads")
        values = dict(
            n_layer=_get(raw, "num_hidden_layers"), n_head=n_head, n_kv_head=n_head,
            d_model=d_model, d_ff=_get(raw, "intermediate_size"),
            vocab_size=_get(raw, "vocab_size"), max_positions=_get(raw, "max_position_embeddings"),
            causal=False, norm_eps=float(_get(raw, "layer_norm_eps", default=1e-12)),
            activation=_get(raw, "hidden_act", default="gelu"),
            type_vocab_size=int(_get(raw, "type_vocab_size", default=2)),
        )
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ModelLoadError(
                f"BERT position_embedding_type {raw['position_embedding_type']!r} is not supported")
    elif family == "gpt2":
        d_model = _get(raw, "n_embd", "hidden_size")
        n_head = _get(raw, "n_head", "num_attention_heads")
        values = dict(
            n_layer=_get(raw, "n_layer", "num_hidden_layers"), n_head=n_head, n_kv_head=n_head,
            d_model=d_model,
            d_ff=_get(raw, "n_inner", default=4 * d_model if isinstance(d_model, int) else None),
            vocab_size=_get(raw, "vocab_size"), max_positions=_get(raw, "n_positions", "n_ctx"),
            causal=True, norm_eps=float(_get(raw, "layer_norm_epsilon", default=1e-5)),
            activation=_get(raw, "activation_function", default="gelu_new"),
            attn_scale_by_layer=bool(raw.get("scale_attn_by_inverse_layer_idx", False)),
        )
    else:  # llama family: llama, mistral, qwen2
        d_model = _get(raw, "hidden_size")
        n_head = _get(raw, "num_attention_heads")
        bias = bool(raw.get("attention_bias", False))
        qkv_bias = True if model_type == "qwen2" else bias
        window = raw.get("sliding_window")
        if model_type == "qwen2" and not raw.get("use_sliding_window", False):
            window = None
        values = dict(
            n_layer=_get(raw, "num_hidden_layers"), n_head=n_head,
            n_kv_head=_get(raw, "num_key_value_heads", default=n_head),
            d_model=d_model, d_ff=_get(raw, "intermediate_size"),
            vocab_size=_get(raw, "vocab_size"),
            max_positions=_get(raw, "max_position_embeddings"),
            causal=True, norm_eps=float(_get(raw, "rms_norm_eps", default=1e-6)),
            rope_theta=_rope_theta(raw), qkv_bias=qkv_bias,
            o_bias=bias and model_type != "qwen2", mlp_bias=bool(raw.get("mlp_bias", False)),
            activation=_get(raw, "hidden_act", default="silu"),
            sliding_window=int(window) if window else None,
        )
        if raw.get("partial_rotary_factor", 1.0) != 1.0:
            raise ModelLoadError("partial_rotary_factor != 1 is not supported yet")
    explicit_head_dim = raw.get("head_dim")
    for key in ("n_layer", "n_head", "n_kv_head", "d_model", "d_ff", "vocab_size", "max_positions"):
        _check_size(key, values[key])
    if explicit_head_dim is not None:
        _check_size("d_head", explicit_head_dim)
        d_head = int(explicit_head_dim)
    else:
        if values["d_model"] % values["n_head"]:
            raise ModelLoadError(
                f"hidden size {values['d_model']} is not divisible by {values['n_head']} heads "
                "and config.json gives no head_dim")
        d_head = values["d_model"] // values["n_head"]
    if values["n_head"] % values["n_kv_head"]:
        raise ModelLoadError(
            f"{values['n_head']} query heads cannot be grouped over {values['n_kv_head']} KV heads")
    return ModelConfig(family=family, model_type=model_type, d_head=d_head, raw=dict(raw), **values)


def _check_size(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"config.json: {name} must be a whole number, got {value!r}")
    if not 1 <= value <= LIMITS[name]:
        raise ModelLoadError(f"config.json: {name} = {value} is outside 1..{LIMITS[name]}")


def read_config(folder: Path) -> ModelConfig:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise ModelLoadError(f"{folder} has no config.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return config_from_dict(raw)
