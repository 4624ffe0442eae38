"""`attnviz quantize`'s SmolLM2 files against llama.cpp (llama-cpp-python) on the same token ids
(tests/make_llamacpp_fixtures.py wrote the reference in the dev venv; CI has no llama.cpp).

The tolerances are the measured ones: on the F32 file llama.cpp computes in float32 as attnviz
does (within 4e-3 in log-probability); on a quantized file llama.cpp also rounds the activations
to 8 bits a block (0.43 at most, 0.083 on average over the top 16, the same top-1 everywhere)."""

import hashlib

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.predict import prediction_trace
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.request import RunRequest
from tests.tiny import FIXTURES

REFERENCE = FIXTURES / "quantize" / "smollm2_q8_0_llamacpp.npz"


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def logprobs(model, ids) -> np.ndarray:  # -> [T, vocab]
    trace = prediction_trace()
    model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    return log_softmax(model.lm_head().logits(trace.resid[-1]))


def test_smollm2_written_at_q8_0_runs_in_llama_cpp_as_in_attnviz(smollm2_q8_0_gguf, reference):
    path = smollm2_q8_0_gguf.path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(reference["gguf_sha256"]), (
        "the writer's Q8_0 file changed: rerun tests/make_llamacpp_fixtures.py in the dev venv")
    model = load_model(path)
    ids = reference["ids"]
    assert model.run(str(reference["text"])).input_ids.tolist() == ids.tolist()
    full = logprobs(model, ids)
    diff = np.abs(np.take_along_axis(full, reference["lp_ids"], axis=-1) - reference["lp"])
    assert diff.max() < 0.5 and diff.mean() < 0.1, (diff.max(), diff.mean())
    assert (full.argmax(-1) == reference["lp_ids"][:, 0]).all()  # the same top-1 at every position


def test_llama_cpp_on_the_f32_file_computes_what_attnviz_computes(smollm2, reference):
    """llama.cpp on attnviz's F32 file of SmolLM2 (the generator checked that attnviz on that file
    equals attnviz on the shipped one) against attnviz on the shipped file."""
    ids = reference["ids"]
    full = logprobs(smollm2, ids)
    got = np.take_along_axis(full, reference["f32_lp_ids"], axis=-1)
    np.testing.assert_allclose(got, reference["f32_lp"], atol=1e-2, rtol=0)
    assert (full.argmax(-1) == reference["f32_lp_ids"][:, 0]).all()
