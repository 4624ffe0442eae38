"""A keystroke's head numbers reuse the earlier positions' rows of the last comparison (the window's
typing path: compare.head_numbers with `known`): the numbers are bit for bit those of a fresh
comparison, rows are reused only where both sides' ids, patterns and residual stream are unchanged,
and a row's JSD over the keys it sees does not depend on how many tokens follow it."""

import numpy as np
import pytest
from tiny import tiny_llama

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import Pair, Run, models_pair
from test_compare import IDS, bert_pair, naive_heads  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("reuse")
    return load_model(tiny_llama(root / "a", seed=1)), load_model(tiny_llama(root / "b", seed=2))


def typed(a, b, ids):
    """Both models on `ids` with their KV caches, as the window's typing runs: a Pair."""
    sides = []
    for label, m in (("A", a), ("B", b)):
        trace = C.compare_trace()
        m.run(ids=ids, trace=trace)
        sides.append(Run(label, m, np.asarray(ids, dtype=np.int64), trace))
    return Pair(*sides)


def test_typing_reuses_the_earlier_rows_and_gives_a_fresh_comparisons_bits(tiny):
    a, b = tiny
    a.clear_cache()
    b.clear_cache()
    known = None
    for k in range(2, len(IDS) + 1):
        pair = typed(a, b, IDS[:k])
        p = C.reusable_rows(known, pair)
        assert p == (0 if known is None else k - 1)  # an appended token: every earlier row kept
        doc, known = C.head_numbers(pair, known)
        assert doc == C.compare_with(pair, predictions=False)[0]  # the same floats, bit for bit
    mean, top = naive_heads(pair, causal=True)
    np.testing.assert_allclose(doc["heads_jsd"], mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(doc["heads_jsd_max"], top, rtol=1e-9, atol=1e-12)


def test_an_edit_reuses_only_the_rows_before_it(tiny):
    a, b = tiny
    first = typed(a, b, IDS)
    _, known = C.head_numbers(first)
    edited = IDS.copy()
    edited[5] = 7  # a token changed in the middle: rows 5.. change on both sides
    pair = typed(a, b, edited)
    assert C.reusable_rows(known, pair) == 5
    assert C.head_numbers(pair, known)[0] == C.compare_with(pair, predictions=False)[0]
    shorter = typed(a, b, IDS[:7])  # a deleted tail: the rows before the last are kept
    assert C.reusable_rows(known, shorter) == 6
    assert C.head_numbers(shorter, known)[0] == C.compare_with(shorter, predictions=False)[0]


def test_rows_whose_inputs_differ_are_computed_again(tiny):
    """Rows are kept only where the bits they came from are the same: another B, or a side's
    pattern or residual stream that differs at an earlier position, gives nothing kept."""
    a, b = tiny
    _, known = C.head_numbers(typed(a, b, IDS[:8]))
    assert C.reusable_rows(known, typed(a, a, IDS)) == 0  # another model B
    pair = typed(a, b, IDS)
    assert C.reusable_rows(known, pair) == 8
    nudged = pair.b.trace.attentions.copy()
    nudged[1, 0, 3, 2] = np.nextafter(nudged[1, 0, 3, 2], 1)  # one bit of one pattern value
    other = Pair(pair.a, _traced(pair.b, nudged))
    assert C.reusable_rows(known, other) == 0
    resid = [r.copy() for r in pair.a.trace.resid]
    resid[2][4, 0] = np.nextafter(resid[2][4, 0], np.inf)  # A's residual stream at position 4
    other = Pair(_traced(pair.a, pair.a.trace.attentions, resid), pair.b)
    assert C.reusable_rows(known, other) == 0
    assert C.head_numbers(other, known)[0] == C.compare_with(other, predictions=False)[0]


def _traced(run, attentions, resid=None):
    """`run` with its trace's patterns (and residual stream) replaced, on a copy of the trace."""
    import copy

    trace = copy.copy(run.trace)
    trace.attentions = attentions
    if resid is not None:
        trace.resid = resid
    return Run(run.label, run.model, run.ids, trace)


def test_an_encoder_reuses_nothing(bert_pair):  # noqa: F811 (the fixture)
    """Every row of an encoder sees every key: a new token changes them all."""
    a, b = bert_pair
    ids = np.arange(2, 9)
    _, known = C.head_numbers(models_pair(a, b, ids[:6], C.compare_trace))
    pair = models_pair(a, b, ids, C.compare_trace)
    assert C.reusable_rows(known, pair) == 0
    assert C.head_numbers(pair, known)[0] == C.compare_with(pair, predictions=False)[0]


def test_a_rows_jsd_over_its_keys_does_not_depend_on_the_keys_after_it():
    """visible_jsd sums a row's terms key by key: the same row padded with more zero keys (a longer
    text) gives the same bits, and the value is the row's JSD over its visible keys."""
    rng = np.random.default_rng(3)
    T = 40
    p, q = rng.random((2, 3, T, T))
    p, q = (np.tril(x) / np.tril(x).sum(-1, keepdims=True) for x in (p, q))
    rows = np.arange(1, T)
    whole = C.visible_jsd(p[:, rows], q[:, rows], rows)
    for t in (9, 17, 33):  # the first t tokens' rows, as a shorter text had them
        short = C.visible_jsd(p[:, 1:t, :t], q[:, 1:t, :t], rows[:t - 1])
        assert short.tobytes() == whole[:, :t - 1].tobytes()
    np.testing.assert_allclose(whole, C.row_jsd(p[:, rows], q[:, rows]), rtol=1e-12, atol=1e-15)
