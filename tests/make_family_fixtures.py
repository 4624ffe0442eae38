"""Generate tiny random checkpoints of Gemma 3, Qwen3 and Phi-3, and of Llama with scaled RoPE, with
their Hugging Face reference attention: the parity fixtures of the newer families.

Dev venv only (torch + transformers; never the project venv). From the repository root:

    .devvenv/bin/python tests/make_family_fixtures.py

Same recipe as tests/make_fixtures.py (its `randomise`, `forward_attn`, `load_back`): each folder is
`save_pretrained(..., safe_serialization=True)` of a randomly initialised model, and
`expected.npz` holds ids_i / attn_i for T = 1, 7, 20, from the checkpoint loaded back in float32
with eager attention. Every window here is 8 tokens, so the 20-token input crosses it.

| name                | what it pins down |
|---------------------|-------------------|
| `gemma3`            | Gemma3ForCausalLM as transformers 5 writes it (layer_types, rope_parameters per layer type): 7 layers, layer 5 global, the rest local (window 8), MQA, head_dim 16 != d_model / n_head, query_pre_attn_scalar = head_dim (what llama.cpp assumes, so the GGUF copy matches) |
| `gemma3_old`        | a config in the older style of the published Gemma 3 checkpoints (rope_theta, rope_local_base_freq, sliding_window_pattern 2, rope_scaling linear x 8 on the global layers), query_pre_attn_scalar 24 != head_dim |
| `qwen3`             | Qwen3ForCausalLM: per-head q/k RMSNorm, no biases, head_dim 24 (n_head * head_dim != d_model), tied embeddings |
| `phi3`              | Phi3ForCausalLM: fused qkv_proj and gate_up_proj, sliding_window 8 |
| `llama_rope_llama3` | Llama with rope_type llama3 (factor 8, original 16 positions) |
| `llama_rope_linear` | Llama with rope_type linear (factor 4) |
| `qwen3_yarn`        | Qwen3 with rope_type yarn (factor 4, original 16 positions: the ramp between kept and divided frequencies falls inside d_head, and cos/sin are scaled by 0.1 ln 4 + 1) |

`.devvenv/bin/python tests/make_family_fixtures.py NAME ...` remakes only those (each keeps its seed).
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM,
    Qwen3Config, Qwen3ForCausalLM,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_fixtures import SEQ_LENS, forward_attn, load_back, randomise  # noqa: E402

FIXTURES = HERE / "fixtures"
WINDOW = 8


def _gemma3(**kw):
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=7,
                num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                sliding_window=WINDOW, query_pre_attn_scalar=16, rms_norm_eps=1e-6,
                rope_theta=1_000_000.0, rope_local_base_freq=10_000.0, sliding_window_pattern=6)
    return Gemma3TextConfig(**{**base, **kw})


def _llama(rope):
    return LlamaConfig(vocab_size=48, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
                       rope_parameters=rope)


# name -> (class, config, config.json rewrite or None)
SPECS = {
    "gemma3": (Gemma3ForCausalLM, _gemma3(), None),
    "gemma3_old": (Gemma3ForCausalLM, _gemma3(
        num_hidden_layers=4, num_key_value_heads=2, query_pre_attn_scalar=24, sliding_window_pattern=2,
        rope_scaling={"rope_type": "linear", "factor": 8.0}), "old"),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(
        vocab_size=48, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=24, intermediate_size=48, max_position_embeddings=64, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 7000.0}), None),
    "phi3": (Phi3ForCausalLM, Phi3Config(
        vocab_size=48, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, max_position_embeddings=64, original_max_position_embeddings=64,
        sliding_window=WINDOW, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), None),
    "llama_rope_llama3": (LlamaForCausalLM, _llama(
        {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), None),
    "llama_rope_linear": (LlamaForCausalLM, _llama(
        {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}), None),
    "qwen3_yarn": (Qwen3ForCausalLM, Qwen3Config(
        vocab_size=48, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=48, max_position_embeddings=64, tie_word_embeddings=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16}), None),
}


def old_style(folder, config):
    """Rewrite a Gemma 3 config.json the way the published checkpoints spell it (transformers 4.50):
    rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern; no layer_types."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    rope = cfg.pop("rope_parameters")
    cfg.pop("layer_types")
    cfg.pop("_sliding_window_pattern", None)
    cfg["rope_theta"] = rope["full_attention"]["rope_theta"]
    cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    scaling = {k: v for k, v in rope["full_attention"].items() if k != "rope_theta"}
    cfg["rope_scaling"] = scaling if scaling.get("rope_type") != "default" else None
    cfg["sliding_window_pattern"] = config.sliding_window_pattern
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def make(name, index):
    cls, config, rewrite = SPECS[name]
    seed = 3000 + index
    torch.manual_seed(seed)
    folder = FIXTURES / name
    shutil.rmtree(folder, ignore_errors=True)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    randomise(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    if rewrite == "old":
        old_style(folder, config)
    ref = load_back(cls, folder)
    # what the reload read must be what the in-memory model had (the rewrite changed nothing)
    assert getattr(ref.config, "layer_types", None) == getattr(config, "layer_types", None), name
    assert ref.config.rope_parameters == config.rope_parameters, (ref.config.rope_parameters,
                                                                  config.rope_parameters)
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, T in enumerate(SEQ_LENS):
        ids = rng.integers(0, config.vocab_size, size=T).astype(np.int64)
        attn = forward_attn(ref, ids.tolist(), False)
        same = forward_attn(model, ids.tolist(), False)
        assert np.abs(same - attn).max() < 1e-6, f"{name}: reload changed the model"
        arrays[f"ids_{i}"] = ids
        arrays[f"attn_{i}"] = attn
    T = SEQ_LENS[-1]
    q, k = np.indices((T, T))
    for layer, kind in enumerate(getattr(ref.config, "layer_types", None) or ()):
        outside = (q - k) >= WINDOW
        mass = arrays["attn_2"][layer][:, outside].max()
        assert (mass == 0) == (kind == "sliding_attention"), (name, layer, kind, mass)
    np.savez_compressed(folder / "expected.npz", **arrays)
    print(f"{name:18s} {ref.config.model_type:12s} layers {getattr(ref.config, 'layer_types', '-')}")


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    transformers.utils.logging.set_verbosity_error()
    wanted = sys.argv[1:] or list(SPECS)
    for index, name in enumerate(SPECS):
        if name in wanted:
            make(name, index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
