"""Model configuration: a frozen dataclass read from a Hugging Face `config.json`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.hf_config import (
    attention_biases, default_d_ff, default_d_head, keys, kv_heads_divide, sliding_window,
)
from attnviz.engine.layers import ACTIVATIONS
from attnviz.engine.validate import Fields, exists, is_number, json_kind, read_json_object, show

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
    "type_vocab_size": 1 << 16,
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


WHAT = {  # what each size counts, for messages
    "n_layer": "layers, n_layer",
    "n_head": "attention heads, n_head",
    "n_kv_head": "key/value heads, n_kv_head",
    "d_model": "hidden size, d_model",
    "d_head": "width of one head, d_head",
    "d_ff": "MLP width, d_ff",
    "vocab_size": "vocabulary and embedding rows",
    "max_positions": "positions",
    "type_vocab_size": "token types",
    "sliding_window": "keys a query sees",
}


def _rope_theta(f: Fields) -> float:
    """RoPE base from `rope_theta` (older configs) or `rope_parameters` (newer ones)."""
    params = f.obj("rope_parameters")
    for key, p in (("rope_parameters", params), ("rope_scaling", f.obj("rope_scaling"))):
        kind_key = "rope_type" if "rope_type" in p else "type"
        kind = p.get(kind_key, "default")
        if kind is not None and not isinstance(kind, str):
            raise f.error(f"{f.name(key)}.{kind_key}", "a string such as 'default'", kind)
        if kind not in ("default", None):
            raise ModelLoadError(f"{f.source}: {f.name(key)}.{kind_key} {kind!r} is not supported "
                                 "yet (only the default RoPE)")
    if params.get("rope_theta") is not None:
        return f.positive_value("rope_parameters.rope_theta", params["rope_theta"], 10000.0)
    return f.positive("rope_theta", default=10000.0)


def config_from_dict(raw: dict, source: str = "config.json",
                     names: dict[str, str] | None = None) -> ModelConfig:
    """Read a config.json dict into a ModelConfig, every field checked: types, ranges, known
    activations, and that the sizes fit together. Each failure is one ModelLoadError naming `source`,
    the field (as `names` maps it, e.g. to a GGUF key), the value found and what was expected."""
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{source} holds {json_kind(raw)}, expected a JSON object {{...}}")
    f = Fields(raw, source, names)
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise ModelLoadError(f"{source}: {f.name('model_type')} {show(model_type)} is not supported "
                             f"(supported: {known})")
    family = FAMILIES[model_type]

    def size(name: str, **kw) -> int:
        return f.whole(*keys(name, model_type), high=LIMITS[name], what=WHAT[name], **kw)

    d_model = size("d_model")
    n_head = size("n_head")
    values = dict(
        n_layer=size("n_layer"), n_head=n_head, d_model=d_model,
        vocab_size=size("vocab_size"), max_positions=size("max_positions"),
    )
    if family == "bert":
        values.update(
            n_kv_head=n_head, d_ff=size("d_ff"), causal=False,
            norm_eps=f.positive("layer_norm_eps", default=1e-12),
            activation=f.choice("hidden_act", choices=ACTIVATIONS, default="gelu"),
            type_vocab_size=size("type_vocab_size", default=2),
        )
        position = raw.get("position_embedding_type")
        if position not in (None, "absolute"):
            raise ModelLoadError(f"{source}: BERT position_embedding_type {show(position)} is not "
                                 "supported (only 'absolute')")
    elif family == "gpt2":
        values.update(
            n_kv_head=n_head, d_ff=size("d_ff", default=default_d_ff(model_type, d_model)),
            causal=True,
            norm_eps=f.positive("layer_norm_epsilon", default=1e-5),
            activation=f.choice("activation_function", choices=ACTIVATIONS, default="gelu_new"),
            attn_scale_by_layer=f.flag("scale_attn_by_inverse_layer_idx", False),
        )
    else:  # llama family: llama, mistral, qwen2
        qkv_bias, o_bias = attention_biases(model_type, f.flag("attention_bias", False))
        window = sliding_window(raw, model_type, f.flag("use_sliding_window", False))
        if window is not None:
            window = f.whole("sliding_window", high=LIMITS["max_positions"], what=WHAT["sliding_window"])
        values.update(
            n_kv_head=size("n_kv_head", default=n_head), d_ff=size("d_ff"), causal=True,
            norm_eps=f.positive("rms_norm_eps", default=1e-6),
            rope_theta=_rope_theta(f), qkv_bias=qkv_bias, o_bias=o_bias,
            mlp_bias=f.flag("mlp_bias", False),
            activation=f.choice("hidden_act", choices=ACTIVATIONS, default="silu"),
            sliding_window=window,
        )
        rotary = raw.get("partial_rotary_factor")
        if rotary is not None and not is_number(rotary):
            raise f.error("partial_rotary_factor", "a number", rotary)
        if rotary is not None and rotary != 1.0:
            raise ModelLoadError(f"{source}: {f.name('partial_rotary_factor')} = {show(rotary)}: "
                                 "RoPE on part of each head is not supported yet (only 1.0)")
    d_head = _head_dim(f, family, model_type, values)
    n_kv_head = values["n_kv_head"]
    if not kv_heads_divide(n_head, n_kv_head):
        heads = f.name(f.pick(*keys("n_head", model_type))[0])
        raise f.error(f.pick(*keys("n_kv_head", model_type))[0], f"a divisor of {heads} = "
                      f"{n_head} (query heads share key/value heads in equal groups)", n_kv_head)
    return ModelConfig(family=family, model_type=model_type, d_head=d_head, raw=dict(raw), **values)


def _head_dim(f: Fields, family: str, model_type: str, values: dict) -> int:
    """d_head: `head_dim` where the config gives it (Gemma, Qwen3: n_head * d_head != d_model, in the
    Llama family only), else d_model / n_head, which must divide."""
    d_model, n_head = values["d_model"], values["n_head"]
    width_key = f.pick(*keys("d_model", model_type))[0]
    width, heads = f.name(width_key), f.name(f.pick(*keys("n_head", model_type))[0])
    d_head = f.whole(*keys("d_head", model_type), high=LIMITS["d_head"], what=WHAT["d_head"],
                     default=None)
    if d_head is None:
        d_head = default_d_head(d_model, n_head)
        if d_head is None:
            raise f.error(width_key, f"a multiple of {heads} = {n_head} (there is no "
                          "head_dim, so each head is hidden size / heads wide)", d_model)
    elif family != "llama" and d_head * n_head != d_model:
        raise f.error("head_dim", f"{width} / {heads} = {d_model} / {n_head} ({family.upper()}'s "
                      "attention projections are hidden size wide)", d_head)
    if family == "llama" and d_head % 2:
        raise f.error("head_dim" if "head_dim" in f.raw else width_key,
                      f"an even head width (RoPE rotates the two halves of each head; "
                      f"here d_head = {d_head})", f.raw.get("head_dim", d_model))
    return d_head


def read_config(folder: Path) -> ModelConfig:
    """config.json of a checkpoint folder, read and checked (a FIFO or device is refused unopened)."""
    path = Path(folder) / "config.json"
    if not exists(path):
        raise ModelLoadError(f"{folder} has no config.json")
    return config_from_dict(read_json_object(path), source=str(path))
