"""The calculator's maths: weight and activation shapes, parameters, FLOPs and KV-cache bytes of
one question (`calculate`), as exact Python integers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable

from attnviz.engine.calc.flops import decode_flops
from attnviz.engine.calc.format import format_bytes, latent_readers, plural, tokens, window_layers_text
from attnviz.engine.calc.inputs import Arch, CalcInputs, Dims, input_error, resolve, whole
from attnviz.engine.reading.config import group_size
from attnviz.engine.errors import CalcError

CONVENTIONS = (
    "weight shapes are [out, in] (nn.Linear layout); a multiply-add is 2 FLOPs; KV cache = keys + "
    "values of every cached token and layer in the cache dtype (quantisation scales not counted); "
    "1 KiB = 1024 bytes"
)

# More than any machine holds: a result past this is a typo, not a model.
MAX_BYTES = 1 << 60  # 1 EiB
MAX_PARAMS = 1 << 60

# field -> the key `attnviz calc --json` prints it under: the names its output has always had,
# kept for the scripts that read it (the code says n_head, the JSON n_heads)
JSON_KEYS = {"n_head": "n_heads", "n_kv_head": "n_kv_heads", "n_layer": "n_layers",
             "d_head": "head_dim"}


# ---------------------------------------------------------------------------------------------
# shapes and parameters

def _shapes(d: Dims) -> tuple[dict[str, tuple[int, int]], dict[str, str]]:
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


def _attn_params(d: Dims, arch: Arch, shapes: dict[str, tuple[int, int]]) -> int:
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


def _model_params(inp: CalcInputs, d: Dims, attn_per_layer: int) -> dict[str, int] | None:
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


def _kv_elements_per_token_layer(d: Dims, n_kv_head: int | None) -> int:
    """Cached elements per token per layer; n_kv_head None means the model as given."""
    if d.mla is not None:
        m = d.mla
        if n_kv_head is None:
            return m.kv_lora_rank + m.qk_rope_head_dim
        return n_kv_head * (d.d_head + d.d_v)  # plain K and V heads, as naive inference caches
    k = d.n_kv_head if n_kv_head is None else n_kv_head
    return 2 * k * d.d_head


def _cached_token_layers(d: Dims, length: int) -> int:
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

    @property
    def name(self) -> str:
        """The label less its KV-head count ("as given: GQA"), for a table whose column counts them."""
        return self.label.split(" (")[0]


@dataclass(frozen=True)
class CalcResult:
    inputs: CalcInputs  # with n_kv_head, d_head and seq_len filled in
    attention_kind: str  # "MHA" | "GQA" | "MQA" | "MLA"
    d_head: int
    d_v: int
    group_size: int | None  # query heads per KV head; None under MLA (every head reads one latent)
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
    _dims: Dims = field(repr=False, compare=False)

    @property
    def window_layer_count(self) -> int:
        """How many layers keep only the last `inputs.sliding_window` tokens (0 without a window)."""
        return len(self._dims.window_layers)

    def kv_series(self, lengths: Iterable[int]) -> dict[str, list[int]]:
        """KV-cache bytes of the batch at each context length, per comparison variant."""
        lengths = [whole("context length", n) for n in lengths]
        d = self._dims
        return {key: [_bytes(_variant_bits(d, key) * _cached_token_layers(d, n) * d.batch)
                      for n in lengths]
                for key in self.compare}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the inputs, every output, the formulas and the conventions."""
        inputs = {JSON_KEYS.get(k, k): v for k, v in asdict(self.inputs).items()}
        # one type whatever the input's form ("all", "0,2", a tuple, None): the windowed layers
        inputs["sliding_window_layers"] = sorted(self._dims.window_layers)
        inputs["sliding_window_layers_text"] = (
            window_layers_text(self.inputs.sliding_window_layers) if self._dims.window else None)
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


def _variant_bits(d: Dims, key: str) -> int:
    """Bits per token per layer of a comparison variant."""
    n_kv = {"mha": d.n_head, "gqa": None, "mqa": 1}[key]
    return _kv_elements_per_token_layer(d, n_kv) * d.kv_bits


def _kind(d: Dims) -> str:
    if d.mla is not None:
        return "MLA"
    if d.n_kv_head == d.n_head:
        return "MHA"
    return "MQA" if d.n_kv_head == 1 else "GQA"


def _given(inputs: CalcInputs | None, values: dict[str, Any]) -> CalcInputs:
    """The inputs asked about: `inputs`, its fields overridden by `values`, or `values` alone."""
    if inputs is None:
        try:
            return CalcInputs(**values)
        except TypeError as exc:
            raise CalcError(f"calculator inputs: {exc}") from None
    return replace(inputs, **values) if values else inputs


def _d_head_formula(d: Dims) -> str:
    if d.mla is not None:
        return (f"qk_nope + qk_rope = {d.mla.qk_nope_head_dim} + "
                f"{d.mla.qk_rope_head_dim} = {d.d_head} (values: {d.d_v})")
    if d.n_head * d.d_head == d.d_model:
        return f"d_model / n_head = {d.d_model} / {d.n_head} = {d.d_head}"
    return (f"d_head given = {d.d_head} (n_head·d_head = "
            f"{d.n_head * d.d_head} ≠ d_model {d.d_model})")


def _activations(d: Dims) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """One sequence's activation shapes, and the formulas of those the calculator explains."""
    T = d.seq_len
    shapes = {
        "x": (T, d.d_model),
        "q_head": (T, d.d_head),
        "scores_head": (T, T),
        "head_output": (T, d.d_v),
        "concat": (T, d.n_head * d.d_v),
        "scores": (d.n_head, T, T),
    }
    dv = "d_head" if d.mla is None else "v_head_dim"  # a head's output is as wide as its values
    formulas = {
        "x": f"[T, d_model] = [{T}, {d.d_model}]",
        "head_output": f"[T, {dv}] = [{T}, {d.d_v}]",
        "concat": f"[T, n_head·{dv}] = [{T}, {d.n_head}·{d.d_v}]",
        "scores": f"[n_head, T, T] = [{d.n_head}, {T}, {T}]",
    }
    return shapes, formulas


def _checked_model_params(inputs: CalcInputs, d: Dims, attn_per_layer: int) -> dict[str, int] | None:
    model_params = _model_params(inputs, d, attn_per_layer)
    if model_params is not None and model_params["total"] > MAX_PARAMS:
        raise CalcError(f"{model_params['total']:,} parameters is beyond any real memory "
                        f"(limit 2^60); check d_model ({d.d_model:,}), d_ff ({inputs.d_ff:,}), "
                        f"vocab_size ({inputs.vocab_size:,}) and n_layer ({d.n_layer:,})")
    return model_params


def _check_kv_total(d: Dims, kv_total_bits: int) -> None:
    if _bytes(kv_total_bits) > MAX_BYTES:
        raise input_error("seq_len",
                   f"KV cache of {_bytes(kv_total_bits):,} bytes (batch {d.batch:,} × {d.seq_len:,} tokens × "
                   f"{d.n_layer:,} layers) is beyond any real memory (limit 1 EiB); check seq_len "
                   f"({d.seq_len:,}), batch ({d.batch:,}) and n_layer ({d.n_layer:,})")


def _kv_formulas(d: Dims, bits_tl: int) -> dict[str, str]:
    """How each KV-cache figure is made, with this question's numbers."""
    T = d.seq_len
    formulas = {}
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
    formulas["kv_bytes_total"] = f"sequence · batch = sequence · {d.batch:,}"
    return formulas


def _reduction_formula(d: Dims) -> str:
    """How each comparison row's reduction against MHA is made; under MLA the latent's differs."""
    rule = "MHA cache / this cache = n_head / n_kv_head"
    if d.mla is None:
        return rule
    m = d.mla
    mha, latent = _kv_elements_per_token_layer(d, d.n_head), _kv_elements_per_token_layer(d, None)
    return (f"{rule} (MHA, MQA); as given (MLA): n_head·(d_head + v_head_dim) / (kv_lora_rank + "
            f"qk_rope) = {d.n_head}·({d.d_head} + {d.d_v}) / ({m.kv_lora_rank} + {m.qk_rope_head_dim}) "
            f"= {mha:,} / {latent:,} elements per token per layer")


def _compare(d: Dims, tokens_cached: int) -> dict[str, Variant]:
    """The same model's KV cache with every head its own K/V (MHA), as given, and one (MQA)."""
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
    return compare


def _warnings(inputs: CalcInputs, d: Dims) -> tuple[str, ...]:
    T = d.seq_len
    warnings: list[str] = []
    if not inputs.arch.causal:
        warnings.append("encoder (bidirectional): no KV cache or decode step in normal use; the "
                        "figures are what a decoder of this shape would cache and compute")
    if inputs.max_positions is not None and T > int(inputs.max_positions):
        warnings.append(f"seq_len {T:,} is longer than the model's {inputs.max_positions:,} positions")
    if d.window and T > d.window:
        warnings.append(f"{len(d.window_layers)} of {plural(d.n_layer, 'layer')} keep"
                        + "s" * (len(d.window_layers) == 1) + f" only the last {tokens(d.window)}")
    return tuple(warnings)


def calculate(inputs: CalcInputs | None = None, **values: Any) -> CalcResult:
    """Everything the calculator shows for one question; CalcError names any bad value.

    `calculate(CalcInputs(...))`, or `calculate(d_model=4096, n_head=32, n_layer=32, ...)`,
    or both (keywords override fields of the given inputs).
    """
    inputs = _given(inputs, values)
    d = resolve(inputs)
    arch = inputs.arch

    shapes, formulas = _shapes(d)
    formulas["d_head"] = _d_head_formula(d)
    formulas["group_size"] = (
        f"n_head / n_kv_head = {d.n_head} / {d.n_kv_head}" if d.mla is None else
        f"none: {latent_readers(d.n_head)} one shared latent (no KV heads to group)")
    activation_shapes, activation_formulas = _activations(d)
    formulas.update(activation_formulas)

    attn_per_layer = _attn_params(d, arch, shapes)
    formulas["attn_params_per_layer"] = (
        "W_Q + W_K + W_V + W_O" + (" + biases" if arch.qkv_bias or arch.o_bias else "")
        if d.mla is None else "W_DQ + W_UQ + W_DKV + W_UKV + W_O + latent norms")
    model_params = _checked_model_params(inputs, d, attn_per_layer)

    bits_tl = _kv_elements_per_token_layer(d, None) * d.kv_bits
    tokens_cached = _cached_token_layers(d, d.seq_len)
    kv_total_bits = bits_tl * tokens_cached * d.batch
    _check_kv_total(d, kv_total_bits)
    formulas.update(_kv_formulas(d, bits_tl))
    compare = _compare(d, tokens_cached)
    formulas["reduction_vs_mha"] = _reduction_formula(d)

    resolved = replace(inputs, n_kv_head=d.n_kv_head if d.mla is None else inputs.n_kv_head,
                       d_head=d.d_head if d.mla is None else inputs.d_head, seq_len=d.seq_len,
                       mla=d.mla)
    return CalcResult(
        inputs=resolved, attention_kind=_kind(d), d_head=d.d_head, d_v=d.d_v,
        group_size=None if d.mla else group_size(d.n_head, d.n_kv_head), shapes=shapes, activation_shapes=activation_shapes,
        attn_params_per_layer=attn_per_layer, attn_params_total=attn_per_layer * d.n_layer,
        model_params=model_params, flops=decode_flops(d, tokens_cached),
        kv_bits_per_element=d.kv_bits,
        kv_bytes_per_token_per_layer=_bytes(bits_tl),
        kv_bytes_per_token=_bytes(bits_tl * d.n_layer),
        kv_tokens_cached=tokens_cached,
        kv_bytes_sequence=_bytes(bits_tl * tokens_cached),
        kv_bytes_total=_bytes(kv_total_bits),
        compare=compare, formulas=formulas, warnings=_warnings(inputs, d), _dims=d)


def context_lengths(max_len: int, n: int = 256, extra: Iterable[int] = ()) -> list[int]:
    """Context lengths 1..max_len for a plot: n even steps plus `extra` points (window edges)."""
    max_len = whole("max_len", max_len)
    points = {1, max_len}
    points.update(max(1, round(max_len * i / n)) for i in range(1, n + 1))
    points.update(int(x) for x in extra if 1 <= int(x) <= max_len)
    return sorted(points)
