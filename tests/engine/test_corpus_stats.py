"""Per-text head statistics and top examples against naive loops, duplicate and induction against
`attnviz heads`' own scores, the batch merge of top examples, and the heads' behaviour distances."""

import numpy as np
import pytest

from attnviz.engine.analysing import corpus_stats as S, heads as H
from attnviz.engine.errors import InputError


def _patterns(rng, n_layer=2, n_head=3, T=7, causal=True):  # -> [n_layer, n_head, T, T], rows sum to 1
    a = rng.random((n_layer, n_head, T, T)).astype(np.float32) ** 4
    if causal:
        a *= np.tril(np.ones((T, T), dtype=np.float32))
    return (a / a.sum(axis=-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("causal", [True, False])
def test_statistics_equal_a_naive_loop_over_heads_and_rows(causal):
    rng = np.random.default_rng(1)
    a = _patterns(rng, causal=causal)
    ids = np.array([5, 6, 7, 5, 6, 9, 9])
    got = S.text_statistics(a, ids)
    L, Hn, T, _ = a.shape
    for l in range(L):
        for h in range(Hn):
            rows = a[l, h].astype(np.float64)
            assert got["first_token_mass"][l, h] == pytest.approx(np.mean([r[0] for r in rows]), abs=1e-7)
            ent = np.mean([-sum(p * np.log(p) for p in r if p > 0) for r in rows])
            assert got["entropy"][l, h] == pytest.approx(ent, abs=1e-5)
            dist = np.mean([sum(r[k] * abs(q - k) for k in range(T)) for q, r in enumerate(rows)])
            assert got["mean_distance"][l, h] == pytest.approx(dist, abs=1e-5)
            prev = np.mean([rows[q, q - 1] for q in range(1, T)])
            assert got["previous"][l, h] == pytest.approx(prev, abs=1e-7)


def test_duplicate_and_induction_are_the_scores_attnviz_heads_reports(minilm):
    result = minilm.run("the cat sat on the mat and the cat sat on the mat again")
    unk = H.unknown_token_ids(minilm)
    got = S.text_statistics(result.attentions, result.input_ids, unk)
    hs = H.score_result(result, unknown_ids=unk)
    for role in ("duplicate", "induction"):
        np.testing.assert_array_equal(got[role], hs.scores[role])
        assert got[role].max() > 0.1  # the repeat gives these roles something to score


def test_a_text_with_too_many_unknown_tokens_has_no_duplicate_or_induction_score(minilm):
    result = minilm.run("\u2603 \u2604 \u2603 \u2604 the")  # snowmen and comets: [UNK] to MiniLM
    unk = H.unknown_token_ids(minilm)
    assert H.score_result(result, unknown_ids=unk).notice  # `heads` labels neither role here
    got = S.text_statistics(result.attentions, result.input_ids, unk)
    assert np.isnan(got["duplicate"]).all() and np.isnan(got["induction"]).all()
    assert np.isfinite(got["previous"]).all()


def test_a_one_token_text_is_refused_with_its_count():
    with pytest.raises(InputError, match="at least 2 tokens.*gives 1"):
        S.text_statistics(np.ones((1, 1, 1, 1), np.float32), np.array([3]))


def _brute_examples(a, text_id, k):
    """Every allowed cell sorted by (-weight, query, key): the rule written out."""
    L, Hn, T, _ = a.shape
    out = []
    for l in range(L):
        for h in range(Hn):
            selfish = np.mean(np.diag(a[l, h])) > 0.5
            cells = [(-float(a[l, h, q, kk]), q, kk) for q in range(T) for kk in range(1, T)
                     if not (selfish and q == kk) and a[l, h, q, kk] > 0]
            for w, q, kk in sorted(cells)[:k]:
                out.append((l, h, text_id, q, kk, -w))
    return out


def _rows(ex):
    return list(zip(ex.layer.tolist(), ex.head.tolist(), ex.text_id.tolist(), ex.query_pos.tolist(),
                    ex.key_pos.tolist(), ex.weight.astype(np.float64).tolist()))


def test_top_examples_leave_out_the_sink_and_a_self_heads_diagonal():
    rng = np.random.default_rng(2)
    a = _patterns(rng)
    a[1, 2] = 0.9 * np.eye(7, dtype=np.float32) + 0.1 * np.eye(7, k=-1, dtype=np.float32)
    a[1, 2, 0, 0] = 1.0
    a[0, 0, :, 0] += 5.0  # a sink head: its weight on key 0 must never be an example
    a[0, 0] /= a[0, 0].sum(axis=-1, keepdims=True)
    ex = S.text_examples(a, 3, k=4)
    assert _rows(ex) == _brute_examples(a, 3, 4)
    assert not (ex.key_pos == 0).any()
    self_head = (ex.layer == 1) & (ex.head == 2)
    assert (ex.query_pos[self_head] != ex.key_pos[self_head]).all() and self_head.sum() == 4


@pytest.mark.parametrize("chunk_heads", [1, 4, 100])
def test_top_examples_taken_a_few_heads_at_a_time_are_those_of_all_heads_at_once(monkeypatch,
                                                                                  chunk_heads):
    # the heads go through in chunks of EXAMPLE_CHUNK_CELLS cells (a long text's temporaries stay
    # small): one head, chunks that cross a layer's end (4 of 3 heads per layer), all at once
    rng = np.random.default_rng(4)
    a = _patterns(rng, n_layer=3, n_head=3, T=9)
    a[2, 1] = 0.8 * np.eye(9, dtype=np.float32) + 0.2 / 9  # a self head in the last chunk
    monkeypatch.setattr(S, "EXAMPLE_CHUNK_CELLS", chunk_heads * 81)
    ex = S.text_examples(a, 7, k=6)
    assert _rows(ex) == _brute_examples(a, 7, 6)
    self_head = (ex.layer == 2) & (ex.head == 1)
    assert self_head.sum() == 6 and (ex.query_pos[self_head] != ex.key_pos[self_head]).all()


def test_the_top_examples_of_batches_merge_into_the_top_examples_of_all_texts():
    rng = np.random.default_rng(3)
    texts = [_patterns(rng, T=int(t)) for t in rng.integers(3, 9, size=12)]
    k = 5
    per_text = [S.text_examples(a, i, k) for i, a in enumerate(texts)]
    batches = [S.merge_examples(per_text[i:i + 5], k) for i in range(0, 12, 5)]
    merged = S.merge_examples(batches, k)
    brute = sorted((r for i, a in enumerate(texts) for r in _brute_examples(a, i, 10 ** 6)),
                   key=lambda r: (r[0], r[1], -r[5], r[2], r[3], r[4]))
    want = []
    for key in sorted({(r[0], r[1]) for r in brute}):
        want += [r for r in brute if (r[0], r[1]) == key][:k]
    assert _rows(merged) == want


def test_ties_in_weight_go_to_the_lower_query_then_key():
    a = np.zeros((1, 1, 4, 4), np.float32)
    a[0, 0, :, 0] = 0.5
    a[0, 0, 1, 1] = a[0, 0, 2, 1] = a[0, 0, 3, 2] = a[0, 0, 2, 2] = 0.25
    a[0, 0, 0, 0] = 1.0
    a[0, 0, 3, 3] = 0.25
    ex = S.text_examples(a, 0, k=3)
    assert list(zip(ex.query_pos.tolist(), ex.key_pos.tolist())) == [(1, 1), (2, 1), (2, 2)]


def test_heads_with_the_same_means_are_at_distance_zero_and_distances_are_a_metric_scale():
    means = {n: np.array([[0.9, 0.9, 0.1], [0.5, 0.0, 1.0]]) for n in S.HEAD_STATS}
    means["entropy"] = np.array([[0.1, 0.1, 2.0], [1.0, 0.5, 0.0]])
    d = S.js_distance(S.head_profiles(means))
    assert d.shape == (6, 6)
    np.testing.assert_allclose(d, d.T)
    assert d[0, 1] == 0.0 and (np.diag(d) == 0).all()
    assert (d >= 0).all() and (d <= 1).all()
    assert d[0, 2] > 0.5  # opposite behaviour on every statistic: far apart


def test_classical_mds_recovers_the_distances_of_points_in_a_plane():
    rng = np.random.default_rng(4)
    pts = rng.normal(size=(9, 2))
    dist = np.linalg.norm(pts[:, None] - pts[None, :], axis=-1)
    xy = S.classical_mds(dist, 2)
    np.testing.assert_allclose(np.linalg.norm(xy[:, None] - xy[None, :], axis=-1), dist, atol=1e-9)


def test_a_missing_statistic_is_left_out_and_a_head_missing_one_is_not_placed():
    """Never a 0 in a missing mean's place: a statistic no head has is out of every distance (the
    heads placed as without it), a head missing one of the others has no place (a NaN row)."""
    rng = np.random.default_rng(2)
    means = {n: rng.uniform(0.05, 0.95, size=(2, 3)) for n in S.HEAD_STATS}
    means["induction"] = np.full((2, 3), np.nan)
    xy = S.place_heads(means)
    p = S.head_profiles(means)
    assert np.isnan(p[:, S.PROFILE_STATS.index("induction")]).all()
    want = S.classical_mds(S.js_distance(np.delete(p, S.PROFILE_STATS.index("induction"), axis=1)), 2)
    np.testing.assert_allclose(xy, want, atol=1e-12)
    means["previous"][1, 2] = np.nan
    xy = S.place_heads(means)
    assert np.isnan(xy[5]).all() and np.isfinite(xy[:5]).all()
