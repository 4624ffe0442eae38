"""What multi-head attention costs: shapes, parameters, FLOPs and KV-cache size (MHA, GQA, MQA, MLA).

Conventions, stated once and repeated in every result (`CONVENTIONS`):
- weight shapes are `[out, in]`, the layout of `nn.Linear` and of the lesson ("Q is [128, 4096]");
- a multiply-add is 2 FLOPs; FLOPs are one decode step (one new token reading the cached context)
  summed over all layers, matrix products only, the output projection included; under MLA in the
  absorbed form its latent cache implies (`flops`);
- the KV cache holds keys and values of every cached token in every layer, in the cache's dtype;
  fp8/int8/int4 caches are counted without their quantisation scales;
- a sliding-window layer caches at most `sliding_window` tokens;
- MLA (DeepSeek) caches one compressed latent (`kv_lora_rank`) plus the shared RoPE key
  (`qk_rope_head_dim`) per token per layer, the absorbed form its inference code uses;
- binary units: KiB = 1024 bytes, MiB = 1024 KiB, GiB = 1024 MiB.

Pure Python integers throughout (exact, never overflowing); the caller formats.

The package, by concept: `inputs` (the question and its validation), `sizing` (the maths,
`calculate`), `flops` (one decode step's FLOPs), `from_config` (inputs from a config.json),
`format` (how numbers are written).
"""

from attnviz.engine.calc.format import (
    BINARY_UNITS, compare_cells, compare_note, exact_bytes, exact_count, format_bytes, format_count,
    latent_readers, per_token_header, plural, shown_variants, tokens, window_layers_text,
)
from attnviz.engine.calc.from_config import calc_inputs_from_config, calc_inputs_from_file, kv_cache_needed
from attnviz.engine.calc.inputs import (
    ARCH_STYLES, KV_DTYPE_BITS, MLA, MLA_ROPE_HEAD_DIM, Arch, CalcInputs, arch_from_dict,
)
from attnviz.engine.calc.sizing import (
    CONVENTIONS, JSON_KEYS, MAX_BYTES, MAX_PARAMS, CalcResult, Variant, calculate, context_lengths,
)

__all__ = [
    "ARCH_STYLES", "BINARY_UNITS", "CONVENTIONS", "JSON_KEYS", "KV_DTYPE_BITS", "MAX_BYTES",
    "MAX_PARAMS", "MLA", "MLA_ROPE_HEAD_DIM", "Arch", "CalcInputs", "CalcResult", "Variant",
    "arch_from_dict", "calc_inputs_from_config", "calc_inputs_from_file", "calculate", "compare_cells", "compare_note", "context_lengths",
    "exact_bytes", "exact_count", "format_bytes", "format_count", "kv_cache_needed", "latent_readers",
    "per_token_header", "shown_variants", "window_layers_text", "plural", "tokens",
]
