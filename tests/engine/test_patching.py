"""Activation patching: Patch edits at named points, the metric, the five maps, on every family."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT
from attnviz.engine.analysing.pair import texts_pair
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.trace import Patch, Trace
from attnviz.engine.errors import Cancelled, InputError
from blas_rows import assert_same, exact
from tiny import FIXTURES

FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").exists())
T = 9


def texts(model, swap=3):
    rng = np.random.default_rng(0)
    clean = rng.integers(0, model.config.vocab_size, T)
    corrupt = clean.copy()
    corrupt[swap] = (corrupt[swap] + 5) % model.config.vocab_size
    return clean, corrupt


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    model = load_model(FIXTURES / request.param)
    try:
        head = PT.check_model(model)
    except InputError as exc:  # an encoder: refused, with the reason
        assert str(exc).endswith("predicts no next token, and patching measures how the next token's prediction changes")
        pytest.skip(f"{request.param}: {exc}")
    clean, corrupt = texts(model)
    pair = texts_pair(model, clean, corrupt, PT.source_trace)
    return model, head, pair, PT.metric_of(model, head, pair)


def test_families_without_an_lm_head_are_refused_saying_why():
    model = load_model(FIXTURES / "bert")
    clean, corrupt = texts(model)
    with pytest.raises(InputError, match="is an encoder, so it predicts no next token, and patching measures how the next token's prediction changes"):
        PT.patch(model, clean, corrupt, "resid")


def test_patching_the_residual_at_layer_0_at_every_position_gives_exactly_1(family):
    model, head, pair, metric = family
    every = np.arange(T)
    d = PT.patched_diff(model, head, pair.b.trace, [Patch("resid", 0, every, pair.a.trace.resid[0])],
                        metric)
    # (bits where the BLAS computes a row alike in any call: tests/blas_rows.py)
    assert_same(metric.effect(d), 1.0, abs_=1e-5)
    assert_same(d, metric.diff_clean)


def test_noise_direction_full_patch_gives_0(family):
    model, head, pair, metric = family
    every = np.arange(T)
    d = PT.patched_diff(model, head, pair.a.trace, [Patch("resid", 0, every, pair.b.trace.resid[0])],
                        metric)
    assert_same(metric.effect(d), 0.0, abs_=1e-5)


def test_last_layer_heads_and_mlp_patched_give_the_clean_block_on_the_corrupted_stream(family):
    """Issue 41, item 3 says: "patching every head's output and every MLP output of the last layer
    at every position gives the clean logits". That is false as written: the last block adds its
    heads' and MLP's outputs to the residual stream entering it, and the skip connection carries the
    corrupted run's stream past them, so the final norm reads corrupted stream + clean change. This
    test pins what is true instead: (1) with the stream entering the last block patched too, the
    logits are the clean ones; (2) without it, the final-norm input is exactly the corrupted stream
    entering the block plus the clean block's whole change (docs/patching.md says so to users)."""
    model, head, pair, metric = family
    cfg, L = model.config, model.config.n_layer - 1
    every = np.arange(T)
    a, b = pair.a.trace, pair.b.trace
    parts = [Patch("z", L, every, a.z[L][h], h) for h in range(cfg.n_head)]
    parts.append(Patch("mlp_out", L, every, a.mlp_out[L]))
    full = forward(cfg, model.weights, b.ids, Trace(patterns=False, resid=True, start=L, base=b,
                                                  edits=parts + [Patch("resid", L, every, a.resid[L])]))
    np.testing.assert_allclose(full.resid[-1], a.resid[-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(head.logits(full.resid[-1]), head.logits(a.resid[-1]), rtol=0, atol=1e-4)
    only = forward(cfg, model.weights, b.ids, Trace(patterns=False, resid=True, start=L, base=b,
                                                  edits=parts))
    np.testing.assert_allclose(only.resid[-1], b.resid[L] + (a.resid[-1] - a.resid[L]), rtol=0, atol=1e-5)


def test_clean_equal_to_corrupt_is_refused_as_the_same_tokens(family):
    """Before the diffs are compared: their spread (0) is not what the user must change."""
    model, head, pair, metric = family
    same = texts_pair(model, pair.a.ids, pair.a.ids, PT.source_trace)
    said = rf"^the clean and corrupted texts are the same {T} tokens: patching needs a corrupted text that differs"
    with pytest.raises(InputError, match=said):
        PT.metric_of(model, head, same)
    with pytest.raises(InputError, match=said):
        PT.patch(model, pair.a.ids, list(pair.a.ids), "head_out")


@pytest.mark.parametrize("what", PT.WHATS)
def test_every_map_equals_its_patches_run_one_at_a_time(family, what):
    model, head, pair, metric = family
    cfg = model.config
    got = PT.patch(model, pair.a.ids, pair.b.ids, what, rows=20, pair=pair)
    assert got.effect.shape == PT.effect_shape(what, cfg.n_layer, cfg.n_head, T)
    assert got.metric == metric and np.isfinite(got.effect).all()
    for layer in range(cfg.n_layer):
        for job in PT.jobs(what, layer, cfg.n_head, T - 1):
            e = Patch(job.point, layer, job.positions, PT.job_value(pair.a.trace, layer, job, T - 1),
                      job.head)
            want = metric.effect(PT.patched_diff(model, head, pair.b.trace, [e], metric))
            assert got.effect[job.index] == pytest.approx(want, abs=2e-5)


def test_positions_before_the_swap_change_nothing_and_the_swap_position_restores_all(family):
    model, head, pair, metric = family
    got = PT.patch(model, pair.a.ids, pair.b.ids, "resid", pair=pair)
    np.testing.assert_allclose(got.effect[0, :3], 0.0, atol=1e-5)  # the texts agree there
    assert got.effect[0, 3] == pytest.approx(1.0, abs=1e-5)  # the one token that differs
    by_pos = PT.patch(model, pair.a.ids, pair.b.ids, "head_out_by_pos", pair=pair)
    np.testing.assert_allclose(by_pos.effect[0, :3], 0.0, atol=1e-5)


def test_a_position_before_the_last_runs_up_to_it_and_later_positions_are_0(family):
    model, head, pair, metric = family
    got = PT.patch(model, pair.a.ids, pair.b.ids, "mlp_out", position=6, pair=pair)
    assert got.metric.position == 6
    assert (got.effect[:, 7:] == 0).all() and np.isfinite(got.effect).all()


@pytest.mark.parametrize("what", ["resid", "mlp_out", "head_out_by_pos"])
def test_in_the_noise_direction_positions_after_p_give_1(family, what):
    """A noised piece after P leaves the clean run's diff at P: effect (diff_clean - diff_corrupt)
    / (diff_clean - diff_corrupt) = 1, as the patch run in full says."""
    model, head, pair, metric = family
    got = PT.patch(model, pair.a.ids, pair.b.ids, what, position=6, direction="noise", pair=pair)
    assert (got.effect[:, 7:] == 1.0).all()
    L = model.config.n_layer - 1
    point, value, h = {"resid": ("resid", pair.b.trace.resid[L][[8]], None),
                       "mlp_out": ("mlp_out", pair.b.trace.mlp_out[L][[8]], None),
                       "head_out_by_pos": ("z", pair.b.trace.z[L][0][[8]], 0)}[what]
    d = PT.patched_diff(model, head, pair.a.trace, [Patch(point, L, np.array([8]), value, h)],
                        got.metric)
    assert got.metric.effect(d) == pytest.approx(1.0, abs=1e-5)


def test_noise_runs_the_clean_text_with_the_corrupted_values(family):
    model, head, pair, metric = family
    got = PT.patch(model, pair.a.ids, pair.b.ids, "resid", direction="noise", pair=pair)
    near = 1e-5 if exact() else 1e-4  # (an effect over a small clean - corrupt difference: rounding grows)
    assert got.effect[0, 3] == pytest.approx(0.0, abs=near)
    np.testing.assert_allclose(got.effect[0, :3], 1.0, atol=near)


def test_defaults_and_refusals_of_the_metric(family):
    model, head, pair, metric = family
    lc = head.logits(pair.a.trace.resid[-1][-1:])[0]
    lb = head.logits(pair.b.trace.resid[-1][-1:])[0]
    assert metric.target == int(np.argmax(lc))
    order = np.argsort(-lb, kind="stable")
    assert metric.alt == int(order[1] if order[0] == metric.target else order[0])
    assert metric.diff_clean == pytest.approx(float(lc[metric.target] - lc[metric.alt]), abs=1e-5)
    V = model.config.vocab_size
    with pytest.raises(InputError, match=f"target token id {V} is outside the vocabulary 0..{V - 1}"):
        PT.metric_of(model, head, pair, target=V)
    with pytest.raises(InputError, match="same token"):
        PT.metric_of(model, head, pair, target=1, alt=1)
    with pytest.raises(InputError, match="position 9 is outside the 9 tokens"):
        PT.patch(model, pair.a.ids, pair.b.ids, "resid", position=9)


def test_a_position_before_the_first_difference_is_refused_as_that(family):
    """Under the causal mask a position before the first token the texts differ in sees none of
    them: both runs agree there, and the refusal says so (not float32 rounding) and names it."""
    model, head, pair, metric = family
    want = (r"the clean and corrupted texts first differ at token 3 '.*'/'.*', after position 2: under "
            r"the causal mask position 2 sees no later token, so both runs are the same there and no "
            r"patch can move the diff; pick a position from 3 to 8$")
    with pytest.raises(InputError, match=want):
        PT.patch(model, pair.a.ids, pair.b.ids, "resid", position=2)
    with pytest.raises(InputError, match=want):
        PT.metric_of(model, head, pair, 2)
    assert PT.metric_of(model, head, pair, 3).position == 3


def test_lengths_and_empty_texts_are_refused_in_one_line():
    model = load_model(FIXTURES / "llama_gqa")
    with pytest.raises(InputError, match="clean text is 9 tokens and the corrupted text 8"):
        PT.patch(model, np.arange(9), np.arange(8), "resid")
    with pytest.raises(InputError, match="clean text is empty"):
        PT.patch(model, np.arange(0), np.arange(0), "resid")
    with pytest.raises(InputError, match="what 'heads'"):
        PT.patch(model, np.arange(9), np.arange(9), "heads")


def test_progress_comes_first_and_cancel_stops_between_batches():
    model = load_model(FIXTURES / "llama_gqa")
    clean, corrupt = texts(model)
    seen = []
    got = PT.patch(model, clean, corrupt, "head_out_by_pos", rows=30, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, 2 * T * 8) and seen[-1] == (2 * T * 8, 2 * T * 8)
    assert len(seen) > 3 and got.runs == 2 * T * 8
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(Cancelled):
        PT.patch(model, clean, corrupt, "head_out_by_pos", rows=30, cancelled=cancelled)


def test_the_largest_effects_come_first():
    model = load_model(FIXTURES / "llama_gqa")
    clean, corrupt = texts(model)
    got = PT.patch(model, clean, corrupt, "head_out")
    top = PT.ranked(got, 5)
    assert len(top) == 5
    sizes = [abs(e) for _, e in top]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == np.abs(got.effect).max()
    assert got.effect[top[0][0]] == top[0][1]


def test_in_the_noise_direction_the_largest_changes_come_first():
    """Noising, an untouched piece gives 1 (the clean answer kept) and a piece that carries the
    answer gives 0: the ranking is by |effect - 1|, the change from the unpatched run."""
    model = load_model(FIXTURES / "llama_gqa")
    clean, corrupt = texts(model)
    got = PT.patch(model, clean, corrupt, "resid", direction="noise")
    top = PT.ranked(got, 3)
    change = np.abs(got.effect - 1.0)
    assert [abs(e - 1.0) for _, e in top] == sorted(np.sort(change.ravel())[::-1][:3].tolist(),
                                                     reverse=True)
    assert top[0][0] == (0, 3) and top[0][1] == pytest.approx(0.0, abs=1e-4)  # the swapped token


def test_a_patch_is_recorded_where_it_is_put_in():
    model = load_model(FIXTURES / "llama_gqa")
    clean, corrupt = texts(model)
    pair = texts_pair(model, clean, corrupt, PT.source_trace)
    value = np.full((2, model.config.d_model), 0.5, np.float32)
    t = forward(model.config, model.weights, pair.b.ids,
                Trace(z=True, resid=True, mlp_out=True, start=1, base=pair.b.trace,
                      edits=[Patch("mlp_out", 1, np.array([2, 4]), value),
                             Patch("pattern", 1, np.arange(T), pair.a.trace.attentions[1, 3], 3)]))
    np.testing.assert_array_equal(t.mlp_out[1][[2, 4]], value)
    np.testing.assert_array_equal(t.attentions[1, 3], pair.a.trace.attentions[1, 3])
    np.testing.assert_array_equal(t.attentions[1, 2], pair.b.trace.attentions[1, 2])
    assert t.mlp_out[0] is pair.b.trace.mlp_out[0]  # the layer before is the base run's


def test_corrupt_proposes_the_indirect_object_swap_and_says_what_it_swapped(smollm2):
    text = "When Mary and John went to the store, John gave a drink to"
    p = PT.propose_corrupt(smollm2, text)
    assert p.text == "When Mary and John went to the store, Mary gave a drink to"
    assert p.describe() == "swapped 'John' (characters 38..41) for 'Mary'"
    assert text[38] + text[41] == "Jn" and text[38:42] == "John"  # (from 0, both ends the word's)
    assert len(smollm2.encode(p.text)[0]) == len(smollm2.encode(text)[0])
    p = PT.propose_corrupt(smollm2, "the cat sat on the mat")  # a repeated word, no name
    assert (p.old, p.start) == ("the", 15) and len(smollm2.encode(p.text)[0]) == 6
    with pytest.raises(InputError, match="no name or repeated word"):
        PT.propose_corrupt(smollm2, "The keys to the cabinet are")
