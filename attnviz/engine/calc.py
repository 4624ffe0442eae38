"""What multi-head attention costs: shapes, parameters, FLOPs and KV-cache size (MHA, GQA, MQA, MLA).

Conventions, stated once and repeated in every result (`CONVENTIONS`):
- weight shapes are `[out, in]`, the layout of `nn.Linear` and of the lesson ("Q is [128, 4096]");
- a multiply-add is 2 FLOPs; FLOPs are one forward step of one new token at the given context;
- the KV cache holds keys and values of every cached token in every layer, in the cache's dtype;
  fp8/int8/int4 caches are counted without their quantisation scales;
- a sliding-window layer caches at most `sliding_window` tokens;
- MLA (DeepSeek) caches one compressed latent (`kv_lora_rank`) plus the shared RoPE key
  (`qk_rope_head_dim`) per token per layer, the absorbed form its inference code uses;
- binary units: KiB = 1024 bytes, MiB = 1024 KiB, GiB = 1024 MiB.

Pure Python integers throughout (exact, never overflowing); the caller formats.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Iterable, Mapping

from attnviz.engine.errors import CalcError
from attnviz.engine.hf_config import default_d_head, keys, kv_heads_divide, pick, read_fields

CONVENTIONS = (
    "weight shapes are [out, in] (nn.Linear layout); a multiply-add is 2 FLOPs; KV cache = keys + "
    "values of every cached token and layer in the cache dtype (quantisation scales not counted); "
    "1 KiB = 1024 bytes"
)

# bits per cached element
KV_DTYPE_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}

# More than any machine holds: a result past this is a typo, not a model.
MAX_BYTES = 1 << 60  # 1 EiB
MAX_PARAMS = 1 << 60

# field -> the key `attnviz calc --json` prints it under: the names its output has always had,
# kept for the scripts that read it (the code says n_head, the JSON n_heads)
JSON_KEYS = {"n_head": "n_heads", "n_kv_head": "n_kv_heads", "n_layer": "n_layers",
             "d_head": "head_dim"}

MLA_ROPE_HEAD_DIM = 64  # DeepSeek-V2/V3's qk_rope_head_dim, where a config or flag leaves it out
BINARY_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


# ---------------------------------------------------------------------------------------------
# inputs

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

def _bad(field_name: str | None, message: str) -> CalcError:
    """A CalcError that also says which input it is about (`.field`, for a form to mark)."""
    err = CalcError(message)
    err.field = field_name
    return err


def _whole(name: str, value: Any, *, minimum: int = 1) -> int:
    """A positive whole number, or a CalcError naming the value."""
    if isinstance(value, str):
        text = value.strip().replace("_", "").replace(",", "")
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise _bad(name, f"{name} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(name, f"{name} must be a whole number, got {value!r}")
    if not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or value != int(value):
            raise _bad(name, f"{name} must be a whole number, got {value}")
        value = int(value)
    value = int(value)
    if value < minimum:
        what = "positive" if minimum == 1 else f">= {minimum}"
        raise _bad(name, f"{name} must be {what}, got {value}")
    return value


def _optional(name: str, value: Any) -> int | None:
    return None if value is None else _whole(name, value)


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
            raise _bad("sliding_window_layers",
                       f"sliding_window_layers {spec!r} is not 'all', 'even', 'odd' or a list of "
                       "layer indices") from None
    layers = [_whole("sliding_window_layers entry", i, minimum=0) for i in spec]
    for i in layers:
        if i >= n_layer:
            raise _bad("sliding_window_layers",
                       f"sliding_window_layers names layer {i}, but the model has {n_layer} "
                       f"layers (0..{n_layer - 1})")
    return frozenset(layers)


@dataclass(frozen=True)
class _Dims:
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


def _resolve(inp: CalcInputs) -> _Dims:
    d_model = _whole("d_model", inp.d_model)
    n_head = _whole("n_head", inp.n_head)
    n_layer = _whole("n_layer", inp.n_layer)
    head_dim = _optional("d_head", inp.d_head)
    n_kv_head = _optional("n_kv_head", inp.n_kv_head)
    for name in ("d_ff", "vocab_size", "max_positions"):
        _optional(name, getattr(inp, name))
    max_positions = _optional("max_positions", inp.max_positions)
    if inp.seq_len is None and max_positions is None:
        raise _bad("seq_len", "seq_len is needed (no max_positions to default to)")
    seq_len = _whole("seq_len", inp.seq_len if inp.seq_len is not None else max_positions)
    batch = _whole("batch", inp.batch)
    if inp.kv_dtype not in KV_DTYPE_BITS:
        raise _bad("kv_dtype",
                   f"kv_dtype {inp.kv_dtype!r} is not one of {', '.join(KV_DTYPE_BITS)}")
    if head_dim is None:
        head_dim = default_d_head(d_model, n_head)
        if head_dim is None:
            raise _bad("n_head",
                       f"n_head ({n_head}) does not divide d_model ({d_model}): d_model / "
                       f"n_head = {d_model / n_head:g}; give d_head explicitly or change n_head")
    mla = inp.mla
    if mla is not None:
        nope = _whole("qk_nope_head_dim", mla.qk_nope_head_dim or head_dim)
        mla = MLA(kv_lora_rank=_whole("kv_lora_rank", mla.kv_lora_rank),
                  qk_rope_head_dim=_whole("qk_rope_head_dim", mla.qk_rope_head_dim),
                  qk_nope_head_dim=nope,
                  v_head_dim=_whole("v_head_dim", mla.v_head_dim or nope),
                  q_lora_rank=_optional("q_lora_rank", mla.q_lora_rank))
        # every query head reads the same latent; as "KV heads" MLA counts as one shared group
        n_kv_head = n_head
        d_head, d_v = mla.qk_nope_head_dim + mla.qk_rope_head_dim, mla.v_head_dim
    else:
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        if not kv_heads_divide(n_head, n_kv_head):
            raise _bad("n_kv_head",
                       f"n_kv_head ({n_kv_head}) does not divide n_head ({n_head}): every KV "
                       "head must serve the same number of query heads")
        d_head = d_v = head_dim
    window = _optional("sliding_window", inp.sliding_window)
    if window is None and inp.sliding_window_layers not in (None, "all"):
        raise _bad("sliding_window_layers", f"sliding_window_layers {inp.sliding_window_layers!r} "
                   "given without a sliding_window size")
    window_layers = _window_layers(inp.sliding_window_layers, n_layer) if window else frozenset()
    arch = inp.arch
    for name in ("norms_per_layer", "type_vocab_size", "moe_experts", "moe_shared_experts",
                 "moe_top_k", "moe_dense_layers"):
        _whole(f"arch.{name}", getattr(arch, name), minimum=0)
    if arch.mlp not in ("gated", "plain"):
        raise CalcError(f"arch.mlp {arch.mlp!r} is not 'gated' or 'plain'")
    if arch.moe_experts and arch.moe_top_k > arch.moe_experts:
        raise CalcError(f"arch.moe_top_k ({arch.moe_top_k}) exceeds arch.moe_experts "
                        f"({arch.moe_experts})")
    return _Dims(d_model=d_model, n_head=n_head, n_kv_head=n_kv_head, d_head=d_head, d_v=d_v,
                 n_layer=n_layer, seq_len=seq_len, batch=batch,
                 kv_bits=KV_DTYPE_BITS[inp.kv_dtype], window=window,
                 window_layers=window_layers, mla=mla)


# ---------------------------------------------------------------------------------------------
# shapes and parameters

def _shapes(d: _Dims) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
    """Weight shapes [out, in] and the formula behind each."""
    D, H, K, dh, dv = d.d_model, d.n_head, d.n_kv_head, d.d_head, d.d_v
    if d.mla is None:
        shapes = {
            "W_Q_head": (dh, D), "W_K_head": (dh, D), "W_V_head": (dh, D),
            "W_Q": (H * dh, D), "W_K": (K * dh, D), "W_V": (K * dh, D),
            "W_QKV": ((H + 2 * K) * dh, D),
            "W_O": (D, H * dh),
        }
        formulas = {
            "W_Q_head": f"[d_head, d_model] = [{dh}, {D}]",
            "W_K_head": f"[d_head, d_model] = [{dh}, {D}]",
            "W_V_head": f"[d_head, d_model] = [{dh}, {D}]",
            "W_Q": f"[n_head·d_head, d_model] = [{H}·{dh}, {D}]",
            "W_K": f"[n_kv_head·d_head, d_model] = [{K}·{dh}, {D}]",
            "W_V": f"[n_kv_head·d_head, d_model] = [{K}·{dh}, {D}]",
            "W_QKV": f"[(n_head + 2·n_kv_head)·d_head, d_model] = [({H} + 2·{K})·{dh}, {D}]",
            "W_O": f"[d_model, n_head·d_head] = [{D}, {H}·{dh}]",
        }
        return shapes, formulas
    m = d.mla
    r, rope, nope, ql = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.q_lora_rank
    shapes: dict[str, tuple[int, int]] = {}
    formulas: dict[str, str] = {}
    if ql:
        shapes["W_DQ"] = (ql, D)
        formulas["W_DQ"] = f"[q_lora_rank, d_model] = [{ql}, {D}]"
        shapes["W_UQ"] = (H * dh, ql)
        formulas["W_UQ"] = f"[n_head·(qk_nope + qk_rope), q_lora_rank] = [{H}·{dh}, {ql}]"
    else:
        shapes["W_Q"] = (H * dh, D)
        formulas["W_Q"] = f"[n_head·(qk_nope + qk_rope), d_model] = [{H}·{dh}, {D}]"
    shapes["W_DKV"] = (r + rope, D)
    formulas["W_DKV"] = f"[kv_lora_rank + qk_rope, d_model] = [{r} + {rope}, {D}] (cached output)"
    shapes["W_UK_head"] = (nope, r)
    formulas["W_UK_head"] = f"[qk_nope, kv_lora_rank] = [{nope}, {r}]"
    shapes["W_UV_head"] = (dv, r)
    formulas["W_UV_head"] = f"[v_head_dim, kv_lora_rank] = [{dv}, {r}]"
    shapes["W_UKV"] = (H * (nope + dv), r)
    formulas["W_UKV"] = f"[n_head·(qk_nope + v_head_dim), kv_lora_rank] = [{H}·({nope} + {dv}), {r}]"
    shapes["W_O"] = (D, H * dv)
    formulas["W_O"] = f"[d_model, n_head·v_head_dim] = [{D}, {H}·{dv}]"
    return shapes, formulas


def _norm(arch: Arch, width: int) -> int:
    return width * (2 if arch.norm_bias else 1)


def _attn_params(d: _Dims, arch: Arch, shapes: dict[str, tuple[int, int]]) -> int:
    """Attention parameters of one layer: projections, their biases and norms."""
    weights = sum(o * i for name, (o, i) in shapes.items()
                  if not name.endswith("_head") and name != "W_QKV")
    if d.mla is not None:
        m = d.mla
        norms = m.kv_lora_rank + (m.q_lora_rank or 0)  # RMSNorm on each latent
        return weights + norms
    bias = 0
    if arch.qkv_bias:
        bias += (d.n_head + 2 * d.n_kv_head) * d.d_head
    if arch.o_bias:
        bias += d.d_model
    if arch.qk_norm:
        bias += 2 * d.d_head
    return weights + bias


def _mlp_params(arch: Arch, d_model: int, d_ff: int) -> int:
    if arch.mlp == "gated":
        return 3 * d_model * d_ff + (2 * d_ff + d_model if arch.mlp_bias else 0)
    return 2 * d_model * d_ff + (d_ff + d_model if arch.mlp_bias else 0)


def _model_params(inp: CalcInputs, d: _Dims, attn_per_layer: int) -> dict[str, int] | None:
    """Whole-model parameter count, or None when d_ff or vocab_size (or positions) are missing."""
    arch = inp.arch
    if inp.d_ff is None or inp.vocab_size is None:
        return None
    if arch.learned_positions and inp.max_positions is None:
        return None
    D, V = d.d_model, int(inp.vocab_size)
    d_ff = int(inp.d_ff)
    token_emb = V * D
    pos_emb = int(inp.max_positions) * D if arch.learned_positions else 0
    type_emb = arch.type_vocab_size * D
    embeddings = token_emb + pos_emb + type_emb + (_norm(arch, D) if arch.embed_norm else 0)
    norms = arch.norms_per_layer * _norm(arch, D)
    dense_layer = attn_per_layer + norms + _mlp_params(arch, D, d_ff)
    n_moe = d.n_layer - min(arch.moe_dense_layers, d.n_layer) if arch.moe_experts else 0
    expert = _mlp_params(arch, D, arch.moe_d_ff or d_ff)
    router = D * arch.moe_experts + (arch.moe_experts if arch.moe_router_bias else 0)
    moe_layer = attn_per_layer + norms + router + (arch.moe_experts + arch.moe_shared_experts) * expert
    layers = (d.n_layer - n_moe) * dense_layer + n_moe * moe_layer
    untied_head = V * D if arch.lm_head and not arch.tied_embeddings else 0
    head = (_norm(arch, D) if arch.final_norm else 0) + untied_head
    head += D * D + D if arch.pooler else 0
    total = embeddings + layers + head
    embedding_tables = token_emb + pos_emb + type_emb + untied_head
    out = {
        "embeddings": embeddings,
        "per_layer": dense_layer if n_moe == 0 else moe_layer,
        "layers": layers,
        "head": head,
        "total": total,
        "non_embedding": total - embedding_tables,
    }
    if n_moe:
        top_k = arch.moe_top_k or arch.moe_experts
        out["active"] = total - n_moe * (arch.moe_experts - top_k) * expert
    return out


# ---------------------------------------------------------------------------------------------
# KV cache and FLOPs

def _kv_elements_per_token_layer(d: _Dims, n_kv_head: int | None) -> int:
    """Cached elements per token per layer; n_kv_head None means the model as given."""
    if d.mla is not None:
        m = d.mla
        if n_kv_head is None:
            return m.kv_lora_rank + m.qk_rope_head_dim
        return n_kv_head * (d.d_head + d.d_v)  # plain K and V heads, as naive inference caches
    k = d.n_kv_head if n_kv_head is None else n_kv_head
    return 2 * k * d.d_head


def _cached_token_layers(d: _Dims, length: int) -> int:
    """Sum over layers of the tokens each layer keeps at this context length."""
    n_win = len(d.window_layers)
    capped = min(length, d.window) if d.window else length
    return (d.n_layer - n_win) * length + n_win * capped


def _bytes(bits: int) -> int:
    return -(-bits // 8)


@dataclass(frozen=True)
class Variant:
    """The model's cache with a given number of KV heads."""

    label: str
    n_kv_head: int | None  # None for MLA as given
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int
    kv_bytes_total: int
    reduction_vs_mha: float


@dataclass(frozen=True)
class CalcResult:
    inputs: CalcInputs  # with n_kv_head, d_head and seq_len filled in
    attention_kind: str  # "MHA" | "GQA" | "MQA" | "MLA"
    d_head: int
    d_v: int
    group_size: int  # query heads per KV head
    shapes: dict[str, tuple[int, int]]  # weights, [out, in]
    activation_shapes: dict[str, tuple[int, ...]]
    attn_params_per_layer: int
    attn_params_total: int
    model_params: dict[str, int] | None
    flops: dict[str, Any]
    kv_bits_per_element: int
    kv_bytes_per_token_per_layer: int
    kv_bytes_per_token: int  # what one new token adds, all layers
    kv_tokens_cached: int  # sum over layers of cached tokens for one sequence
    kv_bytes_sequence: int  # one sequence of seq_len tokens
    kv_bytes_total: int  # the whole batch
    compare: dict[str, Variant]  # "mha", "gqa" (the model as given), "mqa"
    formulas: dict[str, str]
    warnings: tuple[str, ...]
    _dims: _Dims = field(repr=False, compare=False)

    def kv_series(self, lengths: Iterable[int]) -> dict[str, list[int]]:
        """KV-cache bytes of the batch at each context length, per comparison variant."""
        lengths = [_whole("context length", n) for n in lengths]
        d = self._dims
        return {key: [_bytes(_variant_bits(d, key) * _cached_token_layers(d, n) * d.batch)
                      for n in lengths]
                for key in self.compare}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the inputs, every output, the formulas and the conventions."""
        inputs = {JSON_KEYS.get(k, k): v for k, v in asdict(self.inputs).items()}
        if isinstance(inputs.get("sliding_window_layers"), tuple):
            inputs["sliding_window_layers"] = list(inputs["sliding_window_layers"])
        return {
            "inputs": inputs,
            "conventions": CONVENTIONS,
            "attention_kind": self.attention_kind,
            "d_head": self.d_head,
            "d_v": self.d_v,
            "group_size": self.group_size,
            "shapes": {k: list(v) for k, v in self.shapes.items()},
            "activation_shapes": {k: list(v) for k, v in self.activation_shapes.items()},
            "attn_params_per_layer": self.attn_params_per_layer,
            "attn_params_total": self.attn_params_total,
            "model_params": self.model_params,
            "flops": self.flops,
            "kv_bits_per_element": self.kv_bits_per_element,
            "kv_bytes_per_token_per_layer": self.kv_bytes_per_token_per_layer,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_sequence": self.kv_bytes_sequence,
            "kv_bytes_total": self.kv_bytes_total,
            "kv_total_human": format_bytes(self.kv_bytes_total),
            "compare": {k: {JSON_KEYS.get(f, f): x for f, x in asdict(v).items()}
                        for k, v in self.compare.items()},
            "formulas": self.formulas,
            "warnings": list(self.warnings),
        }


def _variant_bits(d: _Dims, key: str) -> int:
    """Bits per token per layer of a comparison variant."""
    n_kv = {"mha": d.n_head, "gqa": None, "mqa": 1}[key]
    return _kv_elements_per_token_layer(d, n_kv) * d.kv_bits


def _kind(d: _Dims) -> str:
    if d.mla is not None:
        return "MLA"
    if d.n_kv_head == d.n_head:
        return "MHA"
    return "MQA" if d.n_kv_head == 1 else "GQA"


def _flops(d: _Dims, shapes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Attention FLOPs of one new token attending to seq_len tokens (decode step)."""
    proj_per_layer = 2 * sum(o * i for name, (o, i) in shapes.items()
                             if not name.endswith("_head") and name != "W_QKV")
    ctx = _cached_token_layers(d, d.seq_len)  # keys each layer reads, summed over layers
    scores = 2 * d.n_head * d.d_head * ctx  # q·kᵀ
    mix = 2 * d.n_head * d.d_v * ctx  # weights · V
    proj = proj_per_layer * d.n_layer
    # the lesson's comparison: n_head narrow heads vs one head of width n_head·d_head
    width = d.n_head * d.d_head
    one_head = 2 * 4 * d.d_model * width * d.n_layer + 2 * 2 * width * ctx
    many_heads = 2 * 4 * d.d_model * width * d.n_layer + 2 * 2 * d.n_head * d.d_head * ctx
    return {
        "projections_per_token": proj,
        "qk_per_token": scores,
        "av_per_token": mix,
        "attention_per_token": proj + scores + mix,
        "softmax_elements_per_token": d.n_head * ctx,
        "heads_vs_one_head": {
            "n_heads_matmul_flops": many_heads,
            "one_head_matmul_flops": one_head,
            "ratio": many_heads / one_head,
            "n_heads_softmax_elements": d.n_head * ctx,
            "one_head_softmax_elements": ctx,
        },
    }


def calculate(inputs: CalcInputs | None = None, **values: Any) -> CalcResult:
    """Everything the calculator shows for one question; CalcError names any bad value.

    `calculate(CalcInputs(...))`, or `calculate(d_model=4096, n_head=32, n_layer=32, ...)`,
    or both (keywords override fields of the given inputs).
    """
    if inputs is None:
        try:
            inputs = CalcInputs(**values)
        except TypeError as exc:
            raise CalcError(f"calculator inputs: {exc}") from None
    elif values:
        inputs = replace(inputs, **values)
    d = _resolve(inputs)
    arch = inputs.arch
    warnings: list[str] = []

    shapes, formulas = _shapes(d)
    if d.mla is not None:
        formulas["d_head"] = (f"qk_nope + qk_rope = {d.mla.qk_nope_head_dim} + "
                              f"{d.mla.qk_rope_head_dim} = {d.d_head} (values: {d.d_v})")
    elif d.n_head * d.d_head == d.d_model:
        formulas["d_head"] = f"d_model / n_head = {d.d_model} / {d.n_head} = {d.d_head}"
    else:
        formulas["d_head"] = (f"d_head given = {d.d_head} (n_head·d_head = "
                              f"{d.n_head * d.d_head} ≠ d_model {d.d_model})")
    T = d.seq_len
    activation_shapes = {
        "x": (T, d.d_model),
        "q_head": (T, d.d_head),
        "scores_head": (T, T),
        "head_output": (T, d.d_v),
        "concat": (T, d.n_head * d.d_v),
        "scores": (d.n_head, T, T),
    }
    formulas["x"] = f"[T, d_model] = [{T}, {d.d_model}]"
    formulas["head_output"] = f"[T, d_head] = [{T}, {d.d_v}]"
    formulas["concat"] = f"[T, n_head·d_head] = [{T}, {d.n_head}·{d.d_v}]"
    formulas["scores"] = f"[n_head, T, T] = [{d.n_head}, {T}, {T}]"

    attn_per_layer = _attn_params(d, arch, shapes)
    formulas["attn_params_per_layer"] = (
        "W_Q + W_K + W_V + W_O" + (" + biases" if arch.qkv_bias or arch.o_bias else "")
        if d.mla is None else "W_DQ + W_UQ + W_DKV + W_UKV + W_O + latent norms")
    model_params = _model_params(inputs, d, attn_per_layer)
    if model_params is not None and model_params["total"] > MAX_PARAMS:
        raise CalcError(f"{model_params['total']:,} parameters is beyond any real memory "
                        f"(limit 2^60); check d_model ({d.d_model}), d_ff ({inputs.d_ff}), "
                        f"vocab_size ({inputs.vocab_size}) and n_layer ({d.n_layer})")

    bits_tl = _kv_elements_per_token_layer(d, None) * d.kv_bits
    tokens_cached = _cached_token_layers(d, T)
    kv_total_bits = bits_tl * tokens_cached * d.batch
    if _bytes(kv_total_bits) > MAX_BYTES:
        raise _bad("seq_len",
                   f"KV cache of {_bytes(kv_total_bits):,} bytes (batch {d.batch} × {T} tokens × "
                   f"{d.n_layer} layers) is beyond any real memory (limit 1 EiB); check seq_len "
                   f"({T}) and batch ({d.batch})")
    if d.mla is None:
        formulas["kv_bytes_per_token_per_layer"] = (
            f"2 (K and V) · n_kv_head · d_head · bytes = 2·{d.n_kv_head}·{d.d_head}·"
            f"{d.kv_bits / 8:g}")
    else:
        formulas["kv_bytes_per_token_per_layer"] = (
            f"(kv_lora_rank + qk_rope) · bytes = ({d.mla.kv_lora_rank} + "
            f"{d.mla.qk_rope_head_dim})·{d.kv_bits / 8:g}")
    formulas["kv_bytes_per_token"] = "per token per layer · n_layer"
    if d.window:
        formulas["kv_bytes_sequence"] = (
            f"per token per layer · (full layers·T + window layers·min(T, window)) = "
            f"{bits_tl / 8:g} · ({d.n_layer - len(d.window_layers)}·{T} + "
            f"{len(d.window_layers)}·{min(T, d.window)})")
    else:
        formulas["kv_bytes_sequence"] = f"per token · T = {bits_tl * d.n_layer / 8:g} · {T}"
    formulas["kv_bytes_total"] = f"sequence · batch = sequence · {d.batch}"

    compare = {}
    mha_bits = _variant_bits(d, "mha")
    for key in ("mha", "gqa", "mqa"):
        bits = _variant_bits(d, key)
        if key == "gqa":
            n_kv = None if d.mla else d.n_kv_head
            heads = f"{d.n_kv_head} KV head" + "s" * (d.n_kv_head != 1)
            label = f"as given: {_kind(d)}" + ("" if d.mla else f" ({heads})")
        else:
            n_kv = d.n_head if key == "mha" else 1
            label = f"MHA ({d.n_head} KV heads)" if key == "mha" else "MQA (1 KV head)"
        compare[key] = Variant(
            label=label, n_kv_head=n_kv,
            kv_bytes_per_token_per_layer=_bytes(bits),
            kv_bytes_per_token=_bytes(bits * d.n_layer),
            kv_bytes_total=_bytes(bits * tokens_cached * d.batch),
            reduction_vs_mha=mha_bits / bits)
    formulas["reduction_vs_mha"] = "MHA cache / this cache = n_head / n_kv_head"

    if not arch.causal:
        warnings.append("encoder (bidirectional): no KV cache in normal use; the figures are what "
                        "a decoder of this shape would cache")
    if inputs.max_positions is not None and T > int(inputs.max_positions):
        warnings.append(f"seq_len {T} is longer than the model's {inputs.max_positions} positions")
    if d.window and T > d.window:
        warnings.append(f"{len(d.window_layers)} of {d.n_layer} layers keep only the last "
                        f"{d.window} tokens")

    resolved = replace(inputs, n_kv_head=d.n_kv_head if d.mla is None else inputs.n_kv_head,
                       d_head=d.d_head if d.mla is None else inputs.d_head, seq_len=T,
                       mla=d.mla)
    return CalcResult(
        inputs=resolved, attention_kind=_kind(d), d_head=d.d_head, d_v=d.d_v,
        group_size=d.n_head // d.n_kv_head, shapes=shapes, activation_shapes=activation_shapes,
        attn_params_per_layer=attn_per_layer, attn_params_total=attn_per_layer * d.n_layer,
        model_params=model_params, flops=_flops(d, shapes),
        kv_bits_per_element=d.kv_bits,
        kv_bytes_per_token_per_layer=_bytes(bits_tl),
        kv_bytes_per_token=_bytes(bits_tl * d.n_layer),
        kv_tokens_cached=tokens_cached,
        kv_bytes_sequence=_bytes(bits_tl * tokens_cached),
        kv_bytes_total=_bytes(kv_total_bits),
        compare=compare, formulas=formulas, warnings=tuple(warnings), _dims=d)


def context_lengths(max_len: int, n: int = 256, extra: Iterable[int] = ()) -> list[int]:
    """Context lengths 1..max_len for a plot: n even steps plus `extra` points (window edges)."""
    max_len = _whole("max_len", max_len)
    points = {1, max_len}
    points.update(max(1, round(max_len * i / n)) for i in range(1, n + 1))
    points.update(int(x) for x in extra if 1 <= int(x) <= max_len)
    return sorted(points)


# ---------------------------------------------------------------------------------------------
# formatting

def format_bytes(n: int) -> str:
    """`2147483648` -> `2 GiB`; `1152` -> `1.12 KiB`; binary units, labelled so."""
    if n < 1024:
        return f"{n} bytes"
    value, unit = float(n), 0
    while value >= 1024 and unit < len(BINARY_UNITS) - 1:
        value /= 1024
        unit += 1
    text = f"{value:.0f}" if value == int(value) else f"{value:.3g}" if value < 100 else f"{value:.1f}"
    return f"{text} {BINARY_UNITS[unit]}"


def exact_bytes(n: int) -> str:
    """`1152` -> `1,152 bytes (1.12 KiB)`: exact, and binary units from 1 KiB."""
    return f"{n:,} bytes" + (f" ({format_bytes(n)})" if n >= 1024 else "")


def exact_count(n: int) -> str:
    """`6738415616` -> `6,738,415,616 (6.74 B)`."""
    return f"{n:,}" + (f" ({format_count(n)})" if n >= 1000 else "")


def shown_variants(r: "CalcResult") -> list[str]:
    """The keys of `r.compare` to show (window and command line alike): a model that is MHA (or
    MQA) as given would list that variant twice with the same numbers (a curve hidden under its
    own, a second table row), so it is shown once, as given."""
    given = r.compare["gqa"].n_kv_head
    return [k for k in r.compare if k == "gqa" or r.compare[k].n_kv_head != given]


def compare_cells(v: "Variant") -> tuple[str, str, str, str]:
    """One KV layout's row of the comparison (the window's table and the command line's): KV heads,
    cache per token, cache at seq_len x batch, reduction vs MHA ("4×")."""
    return ("latent" if v.n_kv_head is None else str(v.n_kv_head), format_bytes(v.kv_bytes_per_token),
            format_bytes(v.kv_bytes_total), f"{v.reduction_vs_mha:.3g}\u00d7")


def format_count(n: int | float) -> str:
    """`124439808` -> `124.4 M`; `6738415616` -> `6.74 B`."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.3g} {suffix}" if value < 100 else f"{value:.1f} {suffix}"
    return f"{n:g}" if isinstance(n, float) else str(n)


# ---------------------------------------------------------------------------------------------
# from a model's own config.json

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
        raise _bad("sliding_window", f"config.json's sliding_window must be a whole number of tokens "
                                     f"(or null), got {window!r}")
    layer_types = raw.get("layer_types")
    if window and isinstance(layer_types, list) and layer_types:
        window_layers = tuple(i for i, t in enumerate(layer_types) if "sliding" in str(t))
        if not window_layers:
            window = None
    elif window and model_type == "gemma2":
        window_layers = "even"
    elif window and raw.get("sliding_window_pattern") and isinstance(n_layer, int):
        every = int(raw["sliding_window_pattern"])  # Gemma 3: every k-th layer is global
        window_layers = tuple(i for i in range(n_layer) if (i + 1) % every)
    if window and isinstance(max_positions, int) and window >= max_positions and window_layers is None:
        window = None  # a window as long as the context (Mistral v0.2: 32768) caps nothing

    return CalcInputs(
        d_model=d_model, n_head=n_head, n_layer=n_layer, n_kv_head=n_kv, d_head=d_head,
        d_ff=d_ff, vocab_size=c["vocab_size"], max_positions=max_positions,
        seq_len=seq_len, batch=batch, kv_dtype=kv_dtype,
        sliding_window=window, sliding_window_layers=window_layers, mla=mla, arch=arch)
