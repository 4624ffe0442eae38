"""A Hugging Face config.json under attnviz's names: the one reader the engine (config.py, which
checks every value) and the calculator (calc.py, which takes any model type) share.

One vocabulary: `n_layer, n_head, n_kv_head, d_model, d_head, d_ff, vocab_size, max_positions`.
Configs spell these differently (`hidden_size`, GPT-2's `n_embd`, Falcon's `num_kv_heads`, a
llama2.c export's `dim`); the tables below are the only place those spellings are listed, and the
rules that are not a spelling (Qwen2's biases, sliding-window switch and windowed layers, a window of 0 or null being
none, Falcon's multi-query flag, GPT-2's default MLP width, d_model / n_head as the head width, KV
heads in equal groups) are the only copies of those rules. Pure Python, no NumPy.
"""

from __future__ import annotations

from typing import Any, Mapping

NAMES = ("n_layer", "n_head", "n_kv_head", "d_model", "d_head", "d_ff", "vocab_size",
         "max_positions", "type_vocab_size", "attention_bias", "mlp_bias")

# attnviz name -> the keys Hugging Face's own config class reads (first one set wins), for every
# model type ("") and where a model type differs. The engine reads exactly these: a key the
# class ignores must not change what the engine computes.
OWN_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "": {
        "n_layer": ("num_hidden_layers",), "n_head": ("num_attention_heads",),
        "n_kv_head": ("num_key_value_heads",), "d_model": ("hidden_size",), "d_head": ("head_dim",),
        "d_ff": ("intermediate_size",), "vocab_size": ("vocab_size",),
        "max_positions": ("max_position_embeddings",), "type_vocab_size": ("type_vocab_size",),
        "attention_bias": ("attention_bias",),
        "mlp_bias": ("mlp_bias",),
    },
    "gpt2": {
        "n_layer": ("n_layer", "num_hidden_layers"), "n_head": ("n_head", "num_attention_heads"),
        "d_model": ("n_embd", "hidden_size"), "d_ff": ("n_inner",),
        "max_positions": ("n_positions", "n_ctx"), "n_kv_head": (),
    },
    "bert": {"n_kv_head": ()},  # (): no KV heads of its own, every head has its K and V
    "roberta": {"n_kv_head": ()},
}

# Other spellings, read after the own keys by the calculator (Falcon, MPT, GPT-J, llama2.c...)
ALIASES: dict[str, tuple[str, ...]] = {
    "n_layer": ("n_layer", "n_layers", "num_layers"),
    "n_head": ("n_head", "n_heads"),
    "n_kv_head": ("num_kv_heads", "n_head_kv", "n_kv_heads"),
    "d_model": ("n_embd", "d_model", "dim"),
    "d_ff": ("n_inner", "ffn_hidden_size", "ffn_dim"),
    "max_positions": ("n_positions", "n_ctx", "max_sequence_length", "seq_length"),
    "attention_bias": ("bias",),  # Falcon: one flag for every linear layer
    "mlp_bias": ("bias",),
}

# model types whose MLP is 4 d_model wide when the config leaves its width out (n_inner: null)
D_FF_TIMES_D_MODEL = {"gpt2": 4, "falcon": 4}


def keys(name: str, model_type: str = "", *, aliases: bool = False) -> tuple[str, ...]:
    """The config.json keys `name` is read from, first one set wins: Hugging Face's own for this
    model type, then (aliases=True) the other spellings. () when the model type has no such field."""
    own = OWN_KEYS.get(model_type, {}).get(name, OWN_KEYS[""][name])
    if not aliases or not own:
        return own
    return own + tuple(k for k in ALIASES.get(name, ()) if k not in own)


def pick(raw: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str | None, Any]:
    """(the first of `names` set and not null in raw, its value); (names[0], None) when none is."""
    for key in names:
        if raw.get(key) is not None:
            return key, raw[key]
    return (names[0] if names else None), None


def attention_biases(model_type: str, attention_bias: bool) -> tuple[bool, bool]:
    """(biases on Q, K, V; a bias on O). Qwen2 has Q, K, V biases and no O bias whatever
    attention_bias says; every other model has both or neither."""
    if model_type == "qwen2":
        return True, False
    return attention_bias, attention_bias


def window_applies(model_type: str, use_sliding_window: bool) -> bool:
    """Whether config.json's sliding_window is used: Qwen configs carry one that is off unless
    use_sliding_window is true."""
    return use_sliding_window or not model_type.startswith("qwen")


def sliding_window(raw: Mapping[str, Any], model_type: str, use_sliding_window: bool) -> Any:
    """config.json's sliding_window as found (unchecked) where the model uses it; None for no window:
    absent, null or 0, or a window the model type switches off (`window_applies`)."""
    window = raw.get("sliding_window")
    if window is None or window == 0 or not window_applies(model_type, use_sliding_window):
        return None
    return window


# Qwen2Config's and Qwen3Config's max_window_layers where config.json leaves it out
QWEN_MAX_WINDOW_LAYERS = 28


def first_window_layer(raw: Mapping[str, Any], model_type: str) -> Any:
    """The first layer config.json's sliding window is on, as found (unchecked): Qwen models window
    only the layers from max_window_layers on (Hugging Face: `layer_idx >= max_window_layers`;
    28 where absent), every other model type each layer (0). A config's own layer_types wins."""
    if not model_type.startswith("qwen"):
        return 0
    value = raw.get("max_window_layers")
    return QWEN_MAX_WINDOW_LAYERS if value is None else value


def windowed_layers(n_layer: int, first: int) -> tuple[int, ...]:
    """The layers a window without layer_types is on: from `first_window_layer` to the last."""
    return tuple(range(min(first, n_layer), n_layer))


def default_d_ff(model_type: str, d_model: Any) -> int | None:
    """The MLP width of a config that leaves it out (GPT-2's n_inner: null): 4 d_model for the model
    types of D_FF_TIMES_D_MODEL, else None (no default: the width must be given)."""
    factor = D_FF_TIMES_D_MODEL.get(model_type)
    return factor * d_model if factor and isinstance(d_model, int) else None


def default_d_head(d_model: int, n_head: int) -> int | None:
    """The head width of a config without head_dim: d_model / n_head; None when n_head does not
    divide d_model (then head_dim must be given)."""
    return None if d_model % n_head else d_model // n_head


def kv_heads_divide(n_head: int, n_kv_head: int) -> bool:
    """Whether n_kv_head key/value heads can serve n_head query heads in equal groups (MHA, GQA, MQA):
    n_kv_head must be a divisor of n_head."""
    return n_kv_head <= n_head and n_head % n_kv_head == 0


def multi_query(raw: Mapping[str, Any]) -> bool:
    """Falcon-7B, GPT-BigCode: one K/V head shared by all, whatever num_kv_heads says."""
    return bool(raw.get("multi_query")) and not raw.get("new_decoder_architecture")


def read_fields(raw: Mapping[str, Any], *, aliases: bool = True) -> dict[str, Any]:
    """config.json -> {attnviz name: value as found, None when absent}, the spellings of the tables
    and the rules applied (Qwen's biases and window, multi-query, GPT-2's MLP width), nothing
    checked. Also `model_type` (lower case), `qkv_bias`, `o_bias` and `sliding_window` (None: no
    window, also for 0 and where no layer has it). The engine checks each value itself through `keys` and applies the same
    rules (`sliding_window`, `default_d_ff`, `default_d_head`, `kv_heads_divide`) to the checked values (config.py)."""
    model_type = str(raw.get("model_type") or "").lower()
    out: dict[str, Any] = {"model_type": model_type}
    for name in NAMES:
        out[name] = pick(raw, keys(name, model_type, aliases=aliases))[1]
    if multi_query(raw):
        out["n_kv_head"] = 1
    if out["d_ff"] is None:
        out["d_ff"] = default_d_ff(model_type, out["d_model"])
    out["qkv_bias"], out["o_bias"] = attention_biases(model_type, bool(out["attention_bias"]))
    window = sliding_window(raw, model_type, bool(raw.get("use_sliding_window", False)))
    first = first_window_layer(raw, model_type)
    if (window is not None and raw.get("layer_types") is None and isinstance(out["n_layer"], int)
            and isinstance(first, int) and not windowed_layers(out["n_layer"], first)):
        window = None  # a Qwen model with fewer layers than max_window_layers windows none
    out["sliding_window"] = window
    return out
