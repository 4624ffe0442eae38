"""Activation patching against Hugging Face forward hooks on SmolLM2 (tests/make_patch_fixtures.py):
the residual entering a decoder layer at one position, and one head's slice of o_proj's input."""

import numpy as np
import pytest

from attnviz.engine.analysing import patching as PT
from tiny import FIXTURES

REF = FIXTURES / "patch" / "smollm2.npz"


@pytest.fixture(scope="module")
def ref():
    with np.load(REF, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def diffs(result):  # effect -> diff_patched
    m = result.metric
    return m.diff_corrupt + result.effect * (m.diff_clean - m.diff_corrupt)


def test_the_pair_and_its_metric_match(smollm2, ref):
    got = PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], "resid", layers=[0])
    assert (got.metric.target, got.metric.alt) == (int(ref["target"]), int(ref["alt"]))
    assert got.metric.diff_clean == pytest.approx(float(ref["diff_clean"]), abs=1e-3)
    assert got.metric.diff_corrupt == pytest.approx(float(ref["diff_corrupt"]), abs=1e-3)
    # layer 0's row: the clean answer comes back whole where the texts differ, nothing elsewhere
    # (float32 rounding of the re-run rows, about 1e-7 here)
    differ = ref["ids_clean"] != ref["ids_corrupt"]
    assert differ.sum() == 1
    np.testing.assert_allclose(got.effect[0], differ.astype(float), rtol=0, atol=1e-5)


@pytest.mark.parametrize("what, layers, key", [("resid", "resid_layers", "resid_diff"),
                                               ("head_out", "head_layers", "head_diff")])
def test_patched_logit_differences_match_transformers(smollm2, ref, what, layers, key):
    layers = ref[layers].tolist()
    got = PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], what, layers=layers,
                   target=int(ref["target"]), alt=int(ref["alt"]))
    np.testing.assert_allclose(diffs(got)[layers], ref[key], rtol=0, atol=1e-3)
    assert np.ptp(ref[key]) > 0.1  # the patches change the answer: a test that can fail


def test_targets_the_two_texts_score_alike_are_refused(smollm2, ref):
    """At the indirect-object pair's last token, a target and alt whose logit difference the two
    texts give nearly alike are refused, whether the diffs are large (7.8845 and 7.88447: effects
    of +12327 that float64 puts at 11363) or both near 0 (+0.00018 and -0.0013: rounding of about
    5e-6 a diff gave effects off by 0.003); the default pair ('Mary' against 'John') is not."""
    for target, alt in ((45590, 36855), (2489, 37338)):
        with pytest.raises(PT.InputError, match=r"differ by \S+, under \S+ \(5e-05 x .* an effect "
                                                r"would measure float32 rounding"):
            PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], "head_out", layers=[23],
                     target=target, alt=alt)
    got = PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], "head_out", layers=[0])
    assert got.metric.diff_clean - got.metric.diff_corrupt > 10


def test_the_spread_floor_scales_with_the_unembedding_and_stream_not_the_diffs():
    PT.check_spread(0.0, 0.001, size=10.0)  # floor 5e-4
    for dc, dd, size in ((0.0, 0.0004, 10.0), (7.0, 7.004, 100.0), (1.0, float("nan"), 1.0)):
        with pytest.raises(PT.InputError, match="nearly the same"):
            PT.check_spread(dc, dd, size)
