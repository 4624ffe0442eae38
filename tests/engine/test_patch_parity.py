"""Activation patching against Hugging Face forward hooks (tests/make_patch_fixtures.py): every kind
of patch (resid, head_out, head_out_by_pos, head_pattern, mlp_out), both directions, the last and an
earlier position, a typed target/alt, on SmolLM2 (its float32 layers and the quantised kernels)
and on the tiny random families (Gemma 3, Qwen3, Phi-3, Mistral with a window, GPT-2)."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT
from tiny import FIXTURES

REF = FIXTURES / "patch" / "smollm2.npz"
FAMILY_REF = FIXTURES / "patch" / "families.npz"
TEXTS = {"ioi": ("When Mary and John went to the store, John gave a drink to",
                 "When Mary and John went to the store, Mary gave a drink to"),
         "names": ("Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax",
                   "Dr Zorblax Brandwick met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax")}
FAMILIES = ("gemma3", "qwen3", "phi3", "mistral_window", "gpt2")
WHATS = ("resid", "head_out", "head_out_by_pos", "head_pattern", "mlp_out")
# patched logit differences: transformers (float32 on SmolLM2, float64 on the families) and the
# engine agree within 3.3e-5 on SmolLM2 (either path; differences up to 13.7), and within 4e-6 of
# each family's largest difference (4.1e-5 of Gemma 3's 10.3, 1e-6 to 2e-6 of the others' 2 to 2.6)
ATOL = 1e-4
FAMILY_RTOL = 2e-5


def load(path):
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def ref():
    return load(REF)


@pytest.fixture(scope="module")
def family_ref():
    return load(FAMILY_REF)


def diffs(result):  # effect -> diff_patched
    m = result.metric
    return m.diff_corrupt + result.effect * (m.diff_clean - m.diff_corrupt)


def as_fixture(result, layers, P):  # -> the patched differences as the fixture holds them
    d = diffs(result)[layers]
    return d[:, :P + 1] if result.what in ("resid", "mlp_out", "head_out_by_pos") else d


def pair_ids(ref, pair):
    return (ref["ids_clean"], ref["ids_corrupt"]) if pair == "ioi" else (ref["names_clean"], ref["names_corrupt"])


def test_the_ids_are_attnviz_tokens(smollm2, ref):
    for pair, texts in TEXTS.items():
        for text, ids in zip(texts, pair_ids(ref, pair)):
            assert smollm2.tokenizer.encode(text, add_special_tokens=False).ids == ids.tolist()


def test_the_pair_and_its_metric_match(smollm2, ref):
    got = PT.patch(smollm2, ref["ids_clean"], ref["ids_corrupt"], "resid", layers=[0])
    assert (got.metric.target, got.metric.alt) == (int(ref["target"]), int(ref["alt"]))
    assert got.metric.diff_clean == pytest.approx(float(ref["diff_clean"]), abs=ATOL)
    assert got.metric.diff_corrupt == pytest.approx(float(ref["diff_corrupt"]), abs=ATOL)
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
    np.testing.assert_allclose(as_fixture(got, layers, len(ref["ids_clean"]) - 1), ref[key],
                               rtol=0, atol=ATOL)
    assert np.ptp(ref[key]) > 0.1  # the patches change the answer: a test that can fail


def check_case(model, ref, n):
    c = {k[len(f"case{n}_"):]: v for k, v in ref.items() if k.startswith(f"case{n}_")}
    what, P, layers = str(c["what"]), int(c["position"]), c["layers"].tolist()
    target, alt = (int(i) for i in c["metric"])
    typed = bool(c["typed"])
    got = PT.patch(model, *pair_ids(ref, str(c["pair"])), what, position=P,
                   direction=str(c["direction"]), layers=layers,
                   target=target if typed else None, alt=alt if typed else None)
    assert (got.metric.target, got.metric.alt) == (target, alt)
    np.testing.assert_allclose([got.metric.diff_clean, got.metric.diff_corrupt], c["diffs"], rtol=0, atol=ATOL)
    np.testing.assert_allclose(as_fixture(got, layers, P), c["diff"], rtol=0, atol=ATOL)
    assert np.ptp(c["diff"]) > 0.1


# (case, model): the cases of make_patch_fixtures.SMOL_CASES, each once, on SmolLM2's float32 layers
# (smollm2) or through the quantised kernels as the window runs it (smollm2_packed)
CASES = [(0, "smollm2"), (1, "smollm2_packed"), (2, "smollm2_packed"), (3, "smollm2"),
         (4, "smollm2_packed"), (5, "smollm2_packed")]


@pytest.mark.parametrize("n, model", CASES)
def test_each_kind_of_patch_matches_transformers(request, ref, n, model):
    """0: noise resid, 1: noise head_pattern, 2: denoise head_out at position 10, 3: denoise
    mlp_out at position 10, 4: denoise head_out_by_pos, 5: noise head_out with a typed target/alt
    on the names pair (29 tokens)."""
    check_case(request.getfixturevalue(model), ref, n)


@pytest.mark.parametrize("family", FAMILIES)
def test_families_patch_as_transformers(family_ref, family):
    model = load_model(FIXTURES / family)
    ids = family_ref["ids_clean"], family_ref["ids_corrupt"]
    layers = list(range(model.config.n_layer))
    atol = FAMILY_RTOL * max(np.abs(v).max() for k, v in family_ref.items()
                             if k.startswith(f"{family}_") and not k.endswith("_metric"))
    for direction in ("denoise", "noise"):
        P = int(family_ref[f"{direction}_position"])
        key = f"{family}_{direction}"
        for what in WHATS:
            got = PT.patch(model, *ids, what, position=P, direction=direction)
            assert (got.metric.target, got.metric.alt) == tuple(family_ref[f"{key}_metric"])
            np.testing.assert_allclose([got.metric.diff_clean, got.metric.diff_corrupt],
                                       family_ref[f"{key}_diffs"], rtol=0, atol=atol)
            np.testing.assert_allclose(as_fixture(got, layers, P), family_ref[f"{key}_{what}"],
                                       rtol=0, atol=atol, err_msg=f"{key} {what}")
            assert np.ptp(family_ref[f"{key}_{what}"]) > 0.1, (key, what)


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
