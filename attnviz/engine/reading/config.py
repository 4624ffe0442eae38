"""Model configuration: a frozen dataclass read from a Hugging Face `config.json`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.hf_config import (
    QWEN_MAX_WINDOW_LAYERS, attention_biases, default_d_ff, default_d_head, first_window_layer, keys,
    kv_heads_divide, sliding_window, windowed_layers,
)
from attnviz.engine.reading.validate import (
    Fields, exists, is_number, is_whole, json_kind, read_json_object, refusal, show,
)

# model_type -> family whose forward pass it uses
FAMILIES = {
    "bert": "bert",
    "gpt2": "gpt2",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "qwen3",
    "phi3": "llama",
    "gemma3_text": "gemma3",
    "gemma3": "gemma3",  # the multimodal config: its text_config is read
}

# Gemma3TextConfig's defaults (transformers 5.24): what a Gemma 3 config.json means by leaving a key
# out (the multimodal checkpoints' text_config gives only a few keys)
GEMMA3_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0, "sliding_window_pattern": 6,
}
LOCAL, GLOBAL = "sliding_attention", "full_attention"  # layer_types entries

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


# the MLP activations the forward pass has (engine/computing/layers.ACTIVATIONS holds their functions)
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "silu", "swish", "relu")


def group_size(n_head: int, n_kv_head: int) -> int:
    """Query heads per KV head (1: multi-head; n_head: multi-query; between: grouped-query). The
    one place this is computed: the config, the forward pass, long texts and the calculator call it."""
    return n_head // n_kv_head


ROPE_KINDS = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class Rope:
    """What one layer's RoPE needs, as the config gives it (engine/computing/rope.py makes its
    tables)."""
    theta: float  # the base: inv_freq_i = theta^(-2i / d_head)
    kind: str = "default"  # one of ROPE_KINDS
    factor: float = 1.0  # linear, llama3: how much longer the context is made
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int = 8192  # llama3: the context the model was trained on first
    freq_divisors: tuple[float, ...] = ()  # "factors": one divisor per frequency (a GGUF's rope_freqs)
    beta_fast: float = 32.0  # yarn: rotations over the original context above which a frequency is kept
    beta_slow: float = 1.0  # yarn: ... below which it is divided by factor (a ramp between the two)
    truncate: bool = True  # yarn: the ramp's ends rounded to whole dimensions
    attention_factor: float = 1.0  # yarn: cos and sin are multiplied by it (0.1 ln(factor) + 1)

    def __hash__(self) -> int:  # the fields' hash, as dataclass makes it, computed once
        h = self.__dict__.get("_hash")  # (a run's constants look a layer's Rope up several times)
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:  # (a pickle carries the fields alone: str hashes vary by process)
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def describe(self) -> str:
        """One line: 'base 10,000' or 'base 1,000,000, linear ÷ 8'."""
        base = f"base {self.theta:,.0f}"
        if self.kind == "linear":
            return f"{base}, linear ÷ {self.factor:g}"
        if self.kind == "factors":
            return f"{base}, per-frequency factors (rope_freqs)"
        if self.kind == "llama3":
            return (f"{base}, llama3 ÷ {self.factor:g} (low {self.low_freq_factor:g}, high "
                    f"{self.high_freq_factor:g}, original {self.original_max_positions:,})")
        if self.kind == "yarn":
            return (f"{base}, yarn ÷ {self.factor:g} (original {self.original_max_positions:,}, "
                    f"beta {self.beta_fast:g}/{self.beta_slow:g}, attention x {self.attention_factor:.4g})")
        return base


@dataclass(frozen=True)
class ModelConfig:
    family: str  # 'bert' | 'gpt2' | 'llama' | 'qwen3' | 'gemma3'
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
    rope: Rope | None = None  # global layers' RoPE (every layer's, without local layers)
    rope_local: Rope | None = None  # local (sliding-window) layers' RoPE where it differs (Gemma 3)
    layer_types: tuple[str, ...] = ()  # per layer LOCAL or GLOBAL; () for a model without RoPE
    qk_norm: bool = False  # RMSNorm on each head's q and k before RoPE (Qwen3, Gemma 3)
    query_pre_attn_scalar: float | None = None  # scores x this^-0.5 instead of d_head^-0.5 (Gemma)
    raw: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def n_group(self) -> int:
        """Query heads per KV head."""
        return group_size(self.n_head, self.n_kv_head)

    def is_local(self, i: int) -> bool:
        """Whether layer i attends through a sliding window."""
        return bool(self.layer_types) and self.layer_types[i] == LOCAL

    def window(self, i: int) -> int | None:
        """Layer i's sliding window (keys a query sees, itself included), None for a global layer."""
        return self.sliding_window if self.is_local(i) else None

    def rope_of(self, i: int) -> Rope | None:
        """Layer i's RoPE: local layers may have their own base (Gemma 3: 10,000)."""
        return self.rope_local if self.is_local(i) and self.rope_local is not None else self.rope

    def layer_kind(self, i: int) -> str | None:
        """'local (window 512)' or 'global' for layer i of a model with a sliding window; None
        for a model without one (every layer sees every earlier token)."""
        if self.sliding_window is None:
            return None
        return f"local (window {self.sliding_window:,})" if self.is_local(i) else "global"

    def layer_kinds(self) -> tuple[str, ...]:
        """Each layer's layer_kind, "" for none."""
        return tuple(self.layer_kind(i) or "" for i in range(self.n_layer))


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


def _rope(f: Fields, key: str, p: dict, theta: float) -> Rope:
    """One RoPE from a rope_parameters / rope_scaling object `p` found at `key`: its type (default,
    linear or llama3; any other is refused by name), base and scaling numbers. `theta` is the base
    when `p` gives none."""
    kind_key = "rope_type" if "rope_type" in p else "type"
    kind = p.get(kind_key) or "default"
    if not isinstance(kind, str):
        raise f.error(f"{f.name(key)}.{kind_key}", "a string such as 'default'", kind)
    if kind not in ROPE_KINDS:
        raise ModelLoadError(f"{f.source} sets {f.name(key)}.{kind_key} to {kind!r}, which is not "
                             f"supported (supported: {', '.join(ROPE_KINDS)})")
    if p.get("rope_theta") is not None:
        theta = f.positive_value(f"{f.name(key)}.rope_theta", p["rope_theta"], None)
    if kind == "default":
        return Rope(theta)

    def number(name):
        value = p.get(name)
        if value is None:
            raise f.error(f"{f.name(key)}.{name}", "a positive finite number", Fields.MISSING)
        return f.positive_value(f"{f.name(key)}.{name}", value, None)

    if kind == "yarn":
        return _yarn(f, key, p, theta, number)
    factor = number("factor")
    if kind == "linear":
        return Rope(theta, kind, factor)
    low, high = number("low_freq_factor"), number("high_freq_factor")
    if high <= low:
        raise f.error(f"{f.name(key)}.high_freq_factor", f"more than low_freq_factor = {low:g}", high)
    original = p.get("original_max_position_embeddings")
    if not is_whole(original) or original < 1:
        raise f.error(f"{f.name(key)}.original_max_position_embeddings", "a whole number >= 1",
                      Fields.MISSING if original is None else original)
    return Rope(theta, kind, factor, low, high, int(original))


def _yarn(f: Fields, key: str, p: dict, theta: float, number) -> Rope:
    """YaRN as transformers reads it: original_max_position_embeddings from the scaling object, else
    the config's own field, else max_position_embeddings; factor, else the ratio of the two;
    attention_factor, else 0.1 ln(factor) + 1 (or the ratio of mscale and mscale_all_dim's)."""
    name = f"{f.name(key)}.original_max_position_embeddings"
    original = p.get("original_max_position_embeddings",
                     f.raw.get("original_max_position_embeddings", f.raw.get("max_position_embeddings")))
    if not is_whole(original) or original < 1:
        raise f.error(name, "a whole number >= 1", Fields.MISSING if original is None else original)
    if p.get("factor") is not None or f.raw.get("max_position_embeddings") is None:
        factor = number("factor")  # (missing: says so, naming the field)
    else:
        factor = f.positive("max_position_embeddings", default=None) / int(original)

    def optional(field, default):
        return default if p.get(field) is None else number(field)

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is not None:
        attention = number("attention_factor")
    elif p.get("mscale") and p.get("mscale_all_dim"):
        attention = mscale(factor, number("mscale")) / mscale(factor, number("mscale_all_dim"))
    else:
        attention = mscale(factor)
    truncate = p.get("truncate", True)
    if not isinstance(truncate, bool):
        raise f.error(f"{f.name(key)}.truncate", "true or false", truncate)
    return Rope(theta, "yarn", factor, original_max_positions=int(original),
                beta_fast=optional("beta_fast", 32.0), beta_slow=optional("beta_slow", 1.0),
                truncate=truncate, attention_factor=float(attention))


def _ropes(f: Fields, default_theta: float) -> tuple[Rope, Rope | None]:
    """(global RoPE, local RoPE or None) from `rope_parameters` (newer configs: one object, or one
    per layer type) or `rope_theta` + `rope_scaling` (+ `rope_local_base_freq`, Gemma 3)."""
    params = f.obj("rope_parameters")
    if isinstance(params.get(GLOBAL), dict) or isinstance(params.get(LOCAL), dict):
        glob = _rope(f, f"rope_parameters.{GLOBAL}", params.get(GLOBAL) or {}, default_theta)
        local = params.get(LOCAL)
        if local is not None and not isinstance(local, dict):
            raise f.error(f"rope_parameters.{LOCAL}", "an object {...}", local)
        return glob, _rope(f, f"rope_parameters.{LOCAL}", local, 10_000.0) if local else None
    theta = f.positive("rope_theta", default=default_theta)
    if params:
        glob = _rope(f, "rope_parameters", params, theta)
    else:
        glob = _rope(f, "rope_scaling", f.obj("rope_scaling"), theta)
    if f.raw.get("rope_local_base_freq") is not None:
        return glob, Rope(f.positive("rope_local_base_freq", default=10_000.0))
    return glob, None


def _refuse_softcapping(f: Fields) -> None:
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = f.raw.get(key)
        if value is not None:
            raise ModelLoadError(f"{f.source} sets {f.name(key)} to {show(value)}, but soft-capped "
                                 "logits are not supported yet (expected null)")


def _layer_types(f: Fields, n_layer: int, window: int | None, every: int | None,
                 first: int = 0) -> tuple[str, ...]:
    """Which layers are local: `layer_types` when the config lists them, else every `every`-th
    layer global and the rest local (Gemma 3's sliding_window_pattern), else where there is a window
    the layers from `first` on (hf_config.first_window_layer: Qwen's max_window_layers), and all
    global where there is none. The list is checked: one known entry per layer."""
    listed = f.raw.get("layer_types")
    if listed is None:
        if every is None:
            local = windowed_layers(n_layer, first) if window is not None else ()
            return tuple(LOCAL if i in local else GLOBAL for i in range(n_layer))
        return tuple(GLOBAL if (i + 1) % every == 0 else LOCAL for i in range(n_layer))
    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
        raise f.error("layer_types", f"a list of '{LOCAL}' or '{GLOBAL}', one per layer", listed)
    if len(listed) != n_layer:
        raise f.error("layer_types", f"a list of one entry per layer ({n_layer}, num_hidden_layers), "
                      f"not {len(listed)}", listed)
    bad = next((t for t in listed if t not in (LOCAL, GLOBAL)), None)
    if bad is not None:
        raise ModelLoadError(f"{f.source} lists {bad!r} in {f.name('layer_types')}, but each entry must "
                             f"be '{LOCAL}' or '{GLOBAL}'")
    return tuple(listed)


def _model_type(f: Fields) -> str:
    """The config's model_type, refused in one sentence where attnviz has no forward pass for it."""
    model_type = f.raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        if "model_type" not in f.raw:
            raise refusal(f.source, f.name("model_type"), None, f"one of the supported types ({known})")
        raise ModelLoadError(f"{f.source} sets {f.name('model_type')} to {show(model_type)}, which is not "
                             f"supported (supported: {known})")
    return model_type


def config_from_dict(raw: dict, source: str = "config.json",
                     names: dict[str, str] | None = None) -> ModelConfig:
    """Read a config.json dict into a ModelConfig, every field checked: types, ranges, known
    activations, and that the sizes fit together. Each failure is one ModelLoadError naming `source`,
    the field (as `names` maps it, e.g. to a GGUF key), the value found and what was expected."""
    if not isinstance(raw, dict):
        raise ModelLoadError(f"{source} holds {json_kind(raw)}, expected a JSON object {{...}}")
    if raw.get("model_type") == "gemma3":  # multimodal: the language model is text_config
        text = raw.get("text_config")
        if not isinstance(text, dict):
            raise Fields(raw, source, names).error("text_config", "an object {...} (Gemma 3's "
                                                   "language model)", text)
        names = {k: f"text_config.{k}" for k in {**GEMMA3_DEFAULTS, **text}} | (names or {})
        raw = {**text, "model_type": "gemma3_text"}
    if raw.get("model_type") == "gemma3_text":
        raw = {**GEMMA3_DEFAULTS, **{k: v for k, v in raw.items() if v is not None or k not in (
            "rope_theta", "rope_local_base_freq", "query_pre_attn_scalar")}}
    f = Fields(raw, source, names)
    model_type = _model_type(f)
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
            raise ModelLoadError(f"{source} sets position_embedding_type to {show(position)}, which is "
                                 "not supported for BERT (only 'absolute')")
    elif family == "gpt2":
        values.update(
            n_kv_head=n_head, d_ff=size("d_ff", default=default_d_ff(model_type, d_model)),
            causal=True,
            norm_eps=f.positive("layer_norm_epsilon", default=1e-5),
            activation=f.choice("activation_function", choices=ACTIVATIONS, default="gelu_new"),
            attn_scale_by_layer=f.flag("scale_attn_by_inverse_layer_idx", False),
        )
    else:  # the RoPE families: llama (llama, mistral, qwen2, phi3), qwen3, gemma3
        gemma = family == "gemma3"
        qkv_bias, o_bias = attention_biases(model_type, f.flag("attention_bias", False))
        if gemma:  # checked whenever given: 0 is no window only where local layers are optional
            window = raw.get("sliding_window")
        else:
            window = sliding_window(raw, model_type, f.flag("use_sliding_window", False))
        first = 0
        if window is not None:
            window = f.whole("sliding_window", high=LIMITS["max_positions"], what=WHAT["sliding_window"])
            if first_window_layer(raw, model_type):  # Qwen: checked only where the window is on
                first = f.whole("max_window_layers", low=0, high=LIMITS["n_layer"],
                                default=QWEN_MAX_WINDOW_LAYERS, what="the first layer with the window")
        every = (f.whole("sliding_window_pattern", high=LIMITS["n_layer"], default=None,
                         what="every how many layers one is global") if gemma else None)
        glob, local = _ropes(f, 10000.0)
        _refuse_softcapping(f)
        if f.flag("use_bidirectional_attention", False):
            raise ModelLoadError(f"{source} sets {f.name('use_bidirectional_attention')} to true, but "
                                 "bidirectional attention is not supported (expected false, for causal)")
        values.update(
            n_kv_head=size("n_kv_head", default=n_head), d_ff=size("d_ff"), causal=True,
            norm_eps=f.positive("rms_norm_eps", default=1e-6),
            rope_theta=glob.theta, rope=glob, rope_local=local, qkv_bias=qkv_bias, o_bias=o_bias,
            mlp_bias=f.flag("mlp_bias", False),
            activation=f.choice("hidden_activation" if gemma else "hidden_act", choices=ACTIVATIONS,
                                default="gelu_pytorch_tanh" if gemma else "silu"),
            sliding_window=window,
            layer_types=_layer_types(f, values["n_layer"], window, every, first),
            qk_norm=model_type in ("qwen3", "gemma3_text"),
            query_pre_attn_scalar=f.positive("query_pre_attn_scalar", default=256) if gemma else None,
        )
        if LOCAL not in values["layer_types"]:
            values["sliding_window"] = None  # no layer uses it
        elif window is None:
            raise f.error("sliding_window", "a whole number of tokens (layer_types has local "
                          "layers)", raw.get("sliding_window"))
        rotary = raw.get("partial_rotary_factor", f.obj("rope_parameters").get("partial_rotary_factor"))
        if rotary is not None and not is_number(rotary):
            raise f.error("partial_rotary_factor", "a number", rotary)
        if rotary is not None and rotary != 1.0:
            raise ModelLoadError(f"{source} sets {f.name('partial_rotary_factor')} to {show(rotary)}, "
                                 "but RoPE on part of each head is not supported yet (expected 1.0)")
    d_head = _head_dim(f, family, model_type, values)
    n_kv_head = values["n_kv_head"]
    if not kv_heads_divide(n_head, n_kv_head):
        heads = f.name(f.pick(*keys("n_head", model_type))[0])
        raise f.error(f.pick(*keys("n_kv_head", model_type))[0], f"a divisor of {heads} = "
                      f"{n_head} (query heads share key/value heads in equal groups)", n_kv_head)
    return ModelConfig(family=family, model_type=model_type, d_head=d_head, raw=dict(raw), **values)


def _head_dim(f: Fields, family: str, model_type: str, values: dict) -> int:
    """d_head: `head_dim` where the config gives it (Gemma, Qwen3: n_head * d_head != d_model, in the
    RoPE families only), else d_model / n_head, which must divide."""
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
    elif family in ("bert", "gpt2") and d_head * n_head != d_model:
        raise f.error("head_dim", f"{width} / {heads} = {d_model} / {n_head} ({family.upper()}'s "
                      "attention projections are hidden size wide)", d_head)
    if family not in ("bert", "gpt2") and d_head % 2:
        raise f.error("head_dim" if "head_dim" in f.raw else width_key,
                      f"an even head width (RoPE rotates the two halves of each head; "
                      f"here d_head = {d_head})", f.raw.get("head_dim", d_model))
    return d_head


def read_config(folder: Path) -> ModelConfig:
    """config.json of a checkpoint folder, read and checked (a FIFO or device is refused unopened)."""
    path = Path(folder) / "config.json"
    if not exists(path):
        raise ModelLoadError(f"{folder} is not a model folder: it has no config.json (a model "
                             "folder holds config.json and .safetensors weights; a GGUF model is "
                             "one .gguf file)")
    return config_from_dict(read_json_object(path), source=str(path))
