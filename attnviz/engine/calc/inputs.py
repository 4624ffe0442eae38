"""The calculator's inputs (one question: a model's shape, a context, a cache dtype) and their
validation: every bad value raises a CalcError that names it (`.field` says which input, for a form
to mark), and `resolve` turns valid inputs into the resolved sizes the maths uses (`Dims`)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from attnviz.engine.errors import CalcError
from attnviz.engine.reading.hf_config import default_d_head, kv_heads_divide

# bits per cached element
KV_DTYPE_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}

MLA_ROPE_HEAD_DIM = 64  # DeepSeek-V2/V3's qk_rope_head_dim, where a config or flag leaves it out


@dataclass(frozen=True)
class Arch:
    """What a whole-model parameter count needs beyond attention. Defaults: a Llama-style decoder."""

    mlp: str = "gated"  # "gated": gate, up, down (SwiGLU/GeGLU); "plain": up, down (GELU)
    norm_bias: bool = False  # LayerNorm with a bias (2·d_model) vs RMSNorm / bias-free (d_model)
    norms_per_layer: int = 2  # 1 for parallel blocks (Falcon-7B, PaLM), 4 for Gemma 2
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head norm on q and k (Qwen3, Gemma 3): 2·d_head per layer
    learned_positions: bool = False  # a [max_positions, d_model] position table (GPT-2, BERT)
    type_vocab_size: int = 0  # BERT token-type embeddings
    embed_norm: bool = False  # BERT: LayerNorm after the embeddings
    final_norm: bool = True
    lm_head: bool = True  # an output projection to the vocabulary (BertModel has none)
    tied_embeddings: bool = False  # the output head shares the token embedding
    pooler: bool = False  # BERT pooler: [d_model, d_model] + bias
    causal: bool = True  # False: an encoder, which keeps no KV cache in normal use
    moe_experts: int = 0  # routed experts per MoE layer (0: dense model)
    moe_shared_experts: int = 0
    moe_top_k: int = 0  # routed experts each token uses
    moe_d_ff: int | None = None  # hidden size of one expert (default d_ff)
    moe_dense_layers: int = 0  # the first k layers keep a dense MLP of width d_ff
    moe_router_bias: bool = False  # DeepSeek-V3's per-expert score-correction bias


ARCH_STYLES = {
    "llama": Arch(),
    "gpt2": Arch(mlp="plain", norm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                 learned_positions=True, tied_embeddings=True),
    "bert": Arch(mlp="plain", norm_bias=True, qkv_bias=True, o_bias=True, mlp_bias=True,
                 learned_positions=True, type_vocab_size=2, embed_norm=True, final_norm=False,
                 lm_head=False, pooler=True, causal=False),
}


def arch_from_dict(spec: Mapping[str, Any] | None) -> Arch:
    """`{"style": "llama", "tied_embeddings": true}` -> Arch; unknown keys raise CalcError."""
    spec = dict(spec or {})
    style = spec.pop("style", "llama")
    if style not in ARCH_STYLES:
        raise CalcError(f"arch style {style!r} is not one of {', '.join(ARCH_STYLES)}")
    known = {f.name for f in fields(Arch)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise CalcError(f"unknown arch field(s) {', '.join(unknown)}")
    return replace(ARCH_STYLES[style], **spec)


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V rebuilt from a cached latent."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int | None = None  # default: d_head, else d_model / n_head
    v_head_dim: int | None = None  # default: qk_nope_head_dim
    q_lora_rank: int | None = None  # None: queries projected directly from d_model


@dataclass(frozen=True)
class CalcInputs:
    """One calculator question. Only d_model, n_head and n_layer are required."""

    d_model: int
    n_head: int
    n_layer: int
    n_kv_head: int | None = None  # default n_head (MHA)
    d_head: int | None = None  # default d_model / n_head
    d_ff: int | None = None
    vocab_size: int | None = None
    max_positions: int | None = None
    seq_len: int | None = None  # default max_positions
    batch: int = 1
    kv_dtype: str = "fp16"
    sliding_window: int | None = None
    # which layers use the window: None or "all", "even", "odd", or layer indices
    sliding_window_layers: str | tuple[int, ...] | None = None
    mla: MLA | None = None
    arch: Arch = field(default_factory=Arch)


# ---------------------------------------------------------------------------------------------
# validation


def input_error(field_name: str | None, message: str) -> CalcError:
    """A CalcError that also says which input it is about (`.field`, for a form to mark)."""
    err = CalcError(message)
    err.field = field_name
    return err


def whole(name: str, value: Any, *, minimum: int = 1) -> int:
    """A positive whole number, or a CalcError naming the value."""
    if isinstance(value, str):
        text = value.strip().replace("_", "").replace(",", "")
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise input_error(name, f"{name} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise input_error(name, f"{name} must be a whole number, got {value!r}")
    if not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise input_error(name, f"{name} must be a whole number, got {value:,}")
        value = int(value)
    value = int(value)
    if value < minimum:
        what = "positive" if minimum == 1 else f">= {minimum}"
        raise input_error(name, f"{name} must be {what}, got {value:,}")
    return value


def optional(name: str, value: Any) -> int | None:
    return None if value is None else whole(name, value)


def _window_layers(spec: Any, n_layer: int) -> frozenset[int]:
    """Layer indices that use the sliding window."""
    if spec is None or spec == "all":
        return frozenset(range(n_layer))
    if spec == "even":
        return frozenset(range(0, n_layer, 2))
    if spec == "odd":
        return frozenset(range(1, n_layer, 2))
    if isinstance(spec, str):
        try:
            spec = [int(part) for part in spec.replace(" ", "").split(",") if part]
        except ValueError:
            raise input_error("sliding_window_layers",
                       f"sliding_window_layers {spec!r} is not 'all', 'even', 'odd' or a list of "
                       "layer indices") from None
    layers = [whole("sliding_window_layers entry", i, minimum=0) for i in spec]
    for i in layers:
        if i >= n_layer:
            raise input_error("sliding_window_layers",
                       f"sliding_window_layers names layer {i:,}, but the model has {n_layer:,} "
                       f"layers (0..{n_layer - 1})")
    return frozenset(layers)


def _divisors(n: int) -> str:
    """'one of 1, 2 or 4': the divisors of n, as a message lists them (the few smallest and largest
    where there are many)."""
    if n > 10**10:  # (no model has this many heads: the search would only take time)
        return f"a divisor of {n:,}"
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    every = small + [n // k for k in reversed(small) if n // k != k]
    if len(every) == 1:
        return "1"
    if len(every) > 8:
        return f"a divisor of {n:,} ({', '.join(f'{k:,}' for k in every[:4])}, ..., {every[-1]:,})"
    return f"one of {', '.join(f'{k:,}' for k in every[:-1])} or {every[-1]:,}"


@dataclass(frozen=True)
class Dims:
    """Validated, resolved inputs."""

    d_model: int
    n_head: int
    n_kv_head: int
    d_head: int  # query/key width per head (MLA: nope + rope)
    d_v: int  # value width per head
    n_layer: int
    seq_len: int
    batch: int
    kv_bits: int
    window: int | None
    window_layers: frozenset[int]
    mla: MLA | None


def resolve(inp: CalcInputs) -> Dims:
    d_model = whole("d_model", inp.d_model)
    n_head = whole("n_head", inp.n_head)
    n_layer = whole("n_layer", inp.n_layer)
    head_dim = optional("d_head", inp.d_head)
    n_kv_head = optional("n_kv_head", inp.n_kv_head)
    for name in ("d_ff", "vocab_size", "max_positions"):
        optional(name, getattr(inp, name))
    max_positions = optional("max_positions", inp.max_positions)
    if inp.seq_len is None and max_positions is None:
        raise input_error("seq_len", "seq_len is needed (no max_positions to default to)")
    seq_len = whole("seq_len", inp.seq_len if inp.seq_len is not None else max_positions)
    batch = whole("batch", inp.batch)
    if inp.kv_dtype not in KV_DTYPE_BITS:
        raise input_error("kv_dtype",
                   f"kv_dtype {inp.kv_dtype!r} is not one of {', '.join(KV_DTYPE_BITS)}")
    mla = inp.mla
    if head_dim is None and (mla is None or not mla.qk_nope_head_dim):  # (MLA's ranks give its width)
        head_dim = default_d_head(d_model, n_head)
        if head_dim is None:
            raise input_error("n_head",
                       f"n_head ({n_head:,}) does not divide d_model ({d_model:,}): d_model / "
                       f"n_head = {d_model / n_head:,.6g}; give d_head explicitly or change n_head")
    if mla is not None:
        nope = whole("qk_nope_head_dim", mla.qk_nope_head_dim or head_dim)
        mla = MLA(kv_lora_rank=whole("kv_lora_rank", mla.kv_lora_rank),
                  qk_rope_head_dim=whole("qk_rope_head_dim", mla.qk_rope_head_dim),
                  qk_nope_head_dim=nope,
                  v_head_dim=whole("v_head_dim", mla.v_head_dim or nope),
                  q_lora_rank=optional("q_lora_rank", mla.q_lora_rank))
        # every query head reads the same latent: no KV heads, so no group size (sizing says so);
        # n_kv_head = n_head only fills the field, which no MLA figure reads
        n_kv_head = n_head
        d_head, d_v = mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim
    else:
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if not kv_heads_divide(n_head, n_kv_head):
            raise input_error("n_kv_head",
                       f"n_kv_head ({n_kv_head:,}) does not divide n_head ({n_head:,}): every KV "
                       f"head must serve the same number of query heads, so n_kv_head must be "
                       f"{_divisors(n_head)}")
        d_head = d_v = head_dim
    window = optional("sliding_window", inp.sliding_window)
    if window is None and inp.sliding_window_layers not in (None, "all"):
        raise input_error("sliding_window_layers", f"sliding_window_layers {inp.sliding_window_layers!r} "
                   "given without a sliding_window size")
    window_layers = _window_layers(inp.sliding_window_layers, n_layer) if window else frozenset()
    arch = inp.arch
    for name in ("norms_per_layer", "type_vocab_size", "moe_experts", "moe_shared_experts",
                 "moe_top_k", "moe_dense_layers"):
        whole(f"arch.{name}", getattr(arch, name), minimum=0)
    if arch.mlp not in ("gated", "plain"):
        raise CalcError(f"arch.mlp {arch.mlp!r} is not 'gated' or 'plain'")
    if arch.moe_experts and arch.moe_top_k > arch.moe_experts:
        raise CalcError(f"arch.moe_top_k ({arch.moe_top_k}) exceeds arch.moe_experts "
                        f"({arch.moe_experts})")
    return Dims(d_model=d_model, n_head=n_head, n_kv_head=n_kv_head, d_head=d_head, d_v=d_v,
                 n_layer=n_layer, seq_len=seq_len, batch=batch,
                 kv_bits=KV_DTYPE_BITS[inp.kv_dtype], window=window,
                 window_layers=window_layers, mla=mla)
