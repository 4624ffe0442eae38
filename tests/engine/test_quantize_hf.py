"""`attnviz quantize`'s SmolLM2 Q8_0 file against transformers' GGUF loader on the same file
(tests/make_quantize_fixtures.py wrote the reference in the dev venv; no torch here)."""

import hashlib

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.predict import prediction_trace
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.reading.gguf_write import write_gguf
from tests.tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

REFERENCE = FIXTURES / "quantize" / "smollm2_q8_0.npz"


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_smollm2_q8_0_matches_transformers_reading_the_same_file(smollm2_q8_0_gguf, reference):
    path = smollm2_q8_0_gguf.path
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == str(reference["gguf_sha256"]), (
        "the writer's Q8_0 file changed: rerun tests/make_quantize_fixtures.py in the dev venv")
    model = load_model(path)
    ids = reference["ids"]
    assert model.run(str(reference["text"])).input_ids.tolist() == ids.tolist()
    trace = prediction_trace()
    result = model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    np.testing.assert_allclose(result.attentions, reference["attn"], atol=1e-4, rtol=0)
    logprobs = log_softmax(model.lm_head().logits(trace.resid[-1]))  # [T, vocab]
    np.testing.assert_allclose(np.take_along_axis(logprobs, reference["lp_ids"], axis=-1),
                               reference["lp"], atol=1e-4, rtol=0)
    assert (logprobs.argmax(-1) == reference["lp_ids"][:, 0]).all()  # the same top-1 everywhere


FAMILIES = FIXTURES / "quantize" / "families_f32.npz"
with np.load(FAMILIES, allow_pickle=False) as _z:
    HF_FAMILIES = [str(f) for f in _z["families"]]


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_a_family_written_at_f32_runs_in_attnviz_as_in_transformers(tmp_path, family):
    """transformers' GGUF loader on the file attnviz writes, for the families it reads as their
    safetensors (tests/make_quantize_fixtures.py says why the others are left out)."""
    with np.load(FAMILIES, allow_pickle=False) as z:
        digest, ids, want = str(z[f"{family}_sha256"]), z[f"{family}_ids"], z[f"{family}_attn"]
    path = write_gguf(FIXTURES / family, "F32", tmp_path / f"{family}.gguf").path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, (
        "the writer's file changed: rerun tests/make_quantize_fixtures.py in the dev venv")
    np.testing.assert_allclose(load_model(path).run(ids=ids).attentions, want, atol=1e-4, rtol=0)
