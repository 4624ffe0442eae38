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
    texts give nearly alike (apart by about 3e-5 while float32 rounds each by about 1e-5) are
    refused: their effects were rounding shown to 4 decimals (about 8% off against float64)."""
    with pytest.raises(PT.InputError, match=r"differ by \S+, less than 0.001 of .* an effect would "
                                            r"measure rounding"):
        PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], "head_out", layers=[23],
                 target=45590, alt=36855)


@pytest.mark.parametrize("dc, dd, refused", [(7.8845, 7.88453, True), (6.12, -5.49, False),
                                              (0.0005, 0.0, True), (0.0025, 0.0, False),
                                              (-300.0, -300.2, True), (-300.0, -300.4, False)])
def test_the_spread_is_judged_against_the_diffs_size(dc, dd, refused):
    if refused:
        with pytest.raises(PT.InputError, match="nearly the same"):
            PT.check_spread(dc, dd)
    else:
        PT.check_spread(dc, dd)
