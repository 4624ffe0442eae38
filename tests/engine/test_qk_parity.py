"""QK attribution against transformers on SmolLM2 (tests/fixtures/qk/smollm2.npz, written by
tests/make_qk_fixtures.py from hooks on HF's decoder layers): each query-side total equals that
component's query contribution times HF's whole key, each key-side total HF's whole query times
that component's key contribution, and the score is HF's."""

import numpy as np
import pytest

from attnviz.engine.analysing import qk as Q
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

REF = FIXTURES / "qk" / "smollm2.npz"


def test_query_and_key_sides_match_transformers(smollm2):
    ref = np.load(REF)
    r = smollm2.run(ids=ref["ids"].tolist(), trace=Q.qk_trace(),
                    request=RunRequest(use_cache=False))
    for n, (layer, head, q, k) in enumerate(ref["cells"]):
        a = Q.qk_attribution(smollm2, r.trace, int(layer), int(head), int(q), int(k))
        tol = 1e-4 * max(1.0, abs(ref["score"][n]))
        assert a.score == pytest.approx(ref["score"][n], abs=tol)
        np.testing.assert_allclose(a.query_side, ref[f"query_side_{n}"], atol=tol)
        np.testing.assert_allclose(a.key_side, ref[f"key_side_{n}"], atol=tol)
        assert np.abs(ref[f"key_side_{n}"]).max() > 0.1  # a cell with something to split
