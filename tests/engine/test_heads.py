"""Head-role scores on hand-made patterns, TransformerLens parity of the detection patterns, find,
token resolution, the probe, and the figures the issue asks for on MiniLM."""

from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine.analysing import find as F, head_patterns as HP, heads as H, probes as P
from attnviz.engine.errors import Cancelled, InputError

# a causal 4-token head: rows sum to 1
A4 = np.array([
    [1.0, 0.0, 0.0, 0.0],
    [0.5, 0.5, 0.0, 0.0],
    [0.0, 0.8, 0.2, 0.0],
    [0.1, 0.1, 0.6, 0.2],
])


def _tl_patterns(ids):
    """TransformerLens head_detector.py, line by line in NumPy (torch.roll -> np.roll)."""
    ids = np.asarray(ids)
    T = len(ids)
    prev = np.zeros((T, T))
    prev[1:, :-1] = np.eye(T - 1)
    prev = np.tril(prev)
    token_pattern = np.tile(ids, (T, 1))
    eq = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq, 0)
    dup = np.tril(eq.astype(float))
    shifted = np.roll(dup, shift=1, axis=1)
    ind = np.tril(np.concatenate([np.zeros((T, 1)), shifted[:, 1:]], axis=1))
    return prev, dup, ind


def _tl_mul(attn, det, exclude_bos, exclude_current_token):
    a = np.array(attn, dtype=np.float64)
    if exclude_bos:
        a[:, 0] = 0
    if exclude_current_token:
        np.fill_diagonal(a, 0)
    return (a * det).sum() / a.sum()


@pytest.mark.parametrize("exclude_bos,exclude_current,expected", [
    (False, False, 1.9 / 4.0),  # cells (1,0) .5, (2,1) .8, (3,2) .6 over total mass 4
    (True, False, 1.4 / 2.4),  # column 0 gone: (1,0) and 1.6 of the mass
    (False, True, 1.9 / 2.1),  # diagonal gone: 1 + .5 + .2 + .2
    (True, True, 1.4 / 1.5),
])
def test_previous_token_mul_score_by_hand(exclude_bos, exclude_current, expected):
    s = HP.mul_score(A4, HP.previous_token_pattern(4), exclude_bos=exclude_bos,
                    exclude_current_token=exclude_current)
    assert s == pytest.approx(expected, abs=1e-12)
    assert s == pytest.approx(_tl_mul(A4, _tl_patterns([1, 2, 3, 4])[0], exclude_bos, exclude_current))


def test_exclusions_leave_the_callers_pattern_alone():
    a = A4.copy()
    HP.mul_score(a, HP.previous_token_pattern(4), exclude_bos=True, exclude_current_token=True)
    np.testing.assert_array_equal(a, A4)


def test_detection_patterns_match_transformerlens():
    rng = np.random.default_rng(3)
    for _ in range(20):
        ids = rng.integers(0, 4, size=rng.integers(2, 12))  # small vocabulary: many repeats
        prev, dup, ind = _tl_patterns(ids)
        np.testing.assert_array_equal(HP.previous_token_pattern(len(ids)), prev.astype(bool))
        np.testing.assert_array_equal(HP.duplicate_token_pattern(ids), dup.astype(bool))
        np.testing.assert_array_equal(HP.induction_pattern(ids), ind.astype(bool))


def test_duplicate_and_induction_cells_by_hand():
    ids = [7, 3, 7, 3, 7]
    dup = {tuple(c) for c in np.argwhere(HP.duplicate_token_pattern(ids))}
    ind = {tuple(c) for c in np.argwhere(HP.induction_pattern(ids))}
    assert dup == {(2, 0), (3, 1), (4, 0), (4, 2)}
    assert ind == {(2, 1), (3, 2), (4, 1), (4, 3)}


def _rows(T, cells, rest=0):
    """Causal pattern: each row spreads evenly over its cells, else all on key `rest`."""
    a = np.zeros((T, T))
    for q in range(T):
        ks = [k for (qq, k) in cells if qq == q]
        if ks:
            a[q, ks] = 1.0 / len(ks)
        else:
            a[q, min(rest, q)] = 1.0
    return a


def test_perfect_induction_head_scores_share_of_rows_and_full_strength():
    ids = [7, 3, 7, 3, 7]
    cells = [tuple(c) for c in np.argwhere(HP.induction_pattern(ids))]
    attn = _rows(5, cells)[None, None]  # [1, 1, T, T]
    hs = H.score_heads(attn, ids)
    assert hs.scores["induction"][0, 0] == pytest.approx(3 / 5)  # 3 rows of 5 can match
    assert hs.coverage["induction"] == pytest.approx(3 / 5)
    assert hs.strength["induction"][0, 0] == pytest.approx(1.0)
    assert hs.scores["duplicate"][0, 0] == pytest.approx(0.0)
    assert hs.labels == [["induction"]]


def test_scores_stop_between_roles_once_stop_says_so_and_are_the_same_when_it_never_does():
    ids = [7, 3, 7, 3, 7]
    attn = _rows(5, [tuple(c) for c in np.argwhere(HP.induction_pattern(ids))])[None, None]
    asked = []

    def stop():  # a newer text arrives as the second role is reached
        asked.append(1)
        return len(asked) >= 2
    with pytest.raises(Cancelled):
        H.score_heads(attn, ids, stop=stop)
    assert len(asked) == 2  # (asked no further)
    never = H.score_heads(attn, ids, stop=lambda: False)
    whole = H.score_heads(attn, ids)
    assert never.labels == whole.labels
    for role in H.ROLES:
        np.testing.assert_array_equal(never.scores[role], whole.scores[role])


def test_self_sink_next_distance_entropy_by_hand():
    T = 4
    eye = np.eye(T)
    sink = np.zeros((T, T))
    sink[:, 0] = 1
    nxt = np.eye(T, k=1)
    nxt[-1, -1] = 1  # last row has no next token
    uniform = np.full((T, T), 1 / T)  # bidirectional
    attn = np.stack([eye, sink, nxt, uniform])[None]  # [1, 4, T, T]
    hs = H.score_heads(attn, [5, 6, 7, 8])
    np.testing.assert_allclose(hs.scores["self"][0], [1, 1 / 4, 1 / 4, 1 / 4])
    np.testing.assert_allclose(hs.scores["sink"][0], [1 / 4, 1, 0, 1 / 4])
    np.testing.assert_allclose(hs.scores["next"][0], [0, 0, 3 / 4, 3 / 16])
    # |q-k| averaged: one-hot next = 3 of 4 rows at distance 1; uniform = (1.5 + 1 + 1 + 1.5) / 4
    np.testing.assert_allclose(hs.scores["distance"][0], [0, 1.5, 3 / 4, 1.25])
    np.testing.assert_allclose(hs.scores["entropy"][0], [0, 0, 0, 2.0], atol=1e-12)
    assert hs.labels == [["self", "sink", "next", "mixed"]]


def test_labels_follow_thresholds_and_min_rows():
    # previous weight p on every row's previous token, the rest on the first token
    def head(p, T=8):
        a = np.zeros((T, T))
        a[0, 0] = 1
        for q in range(1, T):
            a[q, q - 1] += p
            a[q, 0] += 1 - p
        return a

    T = 8
    hs = H.score_heads(np.stack([head(0.9), head(0.3), head(0.45)])[None], np.arange(T))
    # row 1's previous token is the first token, so it holds all of row 1: raw (1 + 6p) / 8;
    # strength divides out the 7/8 of rows that have a previous token
    assert hs.scores["previous"][0, 0] == pytest.approx((1 + 6 * 0.9) / 8)
    assert hs.strength["previous"][0, 0] == pytest.approx((1 + 6 * 0.9) / 7)
    # sink: rows 0 and 1 whole, rows 2..7 the remaining 1 - p
    assert hs.scores["sink"][0, 1] == pytest.approx((2 + 6 * 0.7) / 8)
    # p = 0.45: previous strength 0.529 clears 0.5, but sink 0.6625 is stronger
    assert hs.strength["previous"][0, 2] == pytest.approx((1 + 6 * 0.45) / 7)
    assert hs.labels == [["previous", "sink", "sink"]]
    # a head between both thresholds' reach: nothing clears, so "mixed"
    a = np.zeros((T, T))
    a[0, 0] = 1
    a[1, 0], a[1, 1] = 0.7, 0.3
    for q in range(2, T):
        a[q, q - 1], a[q, 0], a[q, q] = 0.4, 0.3, 0.3
    np.testing.assert_allclose(a.sum(-1), 1)
    hs = H.score_heads(a[None, None], np.arange(T))
    assert hs.labels == [["mixed"]]
    # one duplicate row is not evidence: below MIN_ROWS the duplicate strength stays 0
    ids = [1, 2, 3, 1]
    a = _rows(4, [(3, 0)], rest=1)
    hs = H.score_heads(a[None, None], ids)
    assert hs.scores["duplicate"][0, 0] == pytest.approx(1 / 4)
    assert hs.strength["duplicate"][0, 0] == 0.0
    assert "duplicate" in hs.unclaimed_roles()
    # and the statement says so, rather than naming a "strongest" head at strength 0.000
    line = H.no_head_clears(hs, "duplicate")
    assert line == ("No head is labelled duplicate token on this text: only 1 query row has a cell "
                    "of its detection pattern, and a strength needs at least 3; the probe (Head "
                    "roles \u2192 Score on \u2192 probe: random tokens, repeated twice) repeats "
                    "every token.")
    # the command line names its own flag
    assert H.no_head_clears(hs, "duplicate", probe="the induction probe (--probe)").endswith(
        "; the induction probe (--probe) repeats every token.")
    streamed = H.score_blocks([(0, 0, a[None])], 1, 1, ids, causal=True)  # the long view's scores
    assert H.no_head_clears(streamed, "duplicate") == line


def _one_head(role, strength, score, chance):
    """HeadScores of one head with these numbers for `role` (enough rows to have a strength)."""
    one = lambda v: np.array([[v]])  # noqa: E731
    return H.HeadScores(scores={role: one(score)}, strength={role: one(strength)},
                        coverage={role: 1 / 6}, labels=[["mixed"]], chance={role: one(chance)},
                        rows={role: 3})


def test_no_head_clears_says_which_bar_the_strongest_head_misses():
    # MiniLM on the repeated-names sample: strength over the threshold, score not 0.1 over chance;
    # the line says the score is what fails, beside chance + 0.1, not the threshold it clears
    line = H.no_head_clears(_one_head("duplicate", 0.6, 0.1, 0.009), "duplicate", "this sample")
    assert line == ("No head of this model clears the duplicate token bar on this sample: the "
                    "strongest, L0 H0, has strength 0.600, over the threshold 0.5, but score 0.100, "
                    "under its chance score 0.009 + 0.1 = 0.109.")
    # both missed
    assert ("has strength 0.300, under the threshold 0.5, and score 0.050, under its chance score "
            "0.010 + 0.1 = 0.110.") in H.no_head_clears(_one_head("induction", 0.3, 0.05, 0.01), "induction")
    # the threshold missed, the chance margin cleared
    assert ("has strength 0.300, under the threshold 0.5, though score 0.300, over its chance "
            "score 0.010 + 0.1 = 0.110.") in H.no_head_clears(_one_head("self", 0.3, 0.3, 0.01), "self")
    # a miss the third decimal would round away is written with more decimals, never 0.500 < 0.5
    assert "strength 0.49996, under the threshold 0.5" in H.no_head_clears(
        _one_head("previous", 0.49996, 0.3, 0.01), "previous")
    assert "score 0.10899, under its chance score 0.00900 + 0.1 = 0.10900" in H.no_head_clears(
        _one_head("previous", 0.6, 0.10899, 0.009), "previous")
    # no head with any strength: none is the strongest (argmax would name L0 H0 at 0.000)
    assert H.no_head_clears(_one_head("previous", 0.0, float("nan"), 0.01), "previous") == (
        "No head has any previous token strength on this text.")


def test_cleared_best_and_json():
    T = 5
    attn = np.stack([np.eye(T), np.eye(T, k=-1) + np.diag([1, 0, 0, 0, 0])])[None]
    hs = H.score_heads(attn, np.arange(T), tokens=list("abcde"))
    assert hs.cleared("self") == [(0, 0, 1.0)]
    assert hs.best("previous")[:2] == (0, 1)
    assert set(hs.unclaimed_roles()) == {"next", "sink", "duplicate", "induction"}
    js = hs.to_json()
    assert js["labels"] == [["self", "previous"]]
    assert set(js["scores"]) == set(H.SCORE_NAMES)
    assert js["scores"]["previous"][0][1] == pytest.approx(4 / 5)
    assert all(name in js["definitions"] for name in H.SCORE_NAMES)


def test_all_excluded_gives_nan_score_and_zero_strength():
    a = np.array([[1.0, 0.0], [0.4, 0.6]])[None, None]
    hs = H.score_heads(a, [1, 2], exclude_bos=True, exclude_current_token=True)
    assert np.isnan(hs.scores["previous"][0, 0])
    assert hs.strength["previous"][0, 0] == 0.0
    assert hs.to_json()["scores"]["previous"] == [[None]]


def test_bad_shapes_raise_input_errors():
    with pytest.raises(InputError, match="at least 2 tokens"):
        H.score_heads(np.ones((1, 1, 1, 1)), [3])
    with pytest.raises(InputError, match="3 token ids for 4"):
        H.score_heads(np.ones((1, 1, 4, 4)) / 4, [1, 2, 3])
    with pytest.raises(InputError, match="no detection pattern"):
        H.detection_pattern("entropy", [1, 2])


def _fake_result(labels, att):
    return SimpleNamespace(labels=labels, tokens=labels, attentions=att)


def test_find_ranks_every_head_by_weight():
    att = np.zeros((2, 2, 3, 3))
    att[0, 0, 2, 1], att[0, 1, 2, 1], att[1, 0, 2, 1], att[1, 1, 2, 1] = 0.2, 0.7, 0.7, 0.05
    hits = F.find(_fake_result(["a", "b", "c"], att), 2, 1)
    assert [(h.layer, h.head) for h in hits] == [(0, 1), (1, 0), (0, 0), (1, 1)]  # tie: lower layer
    assert hits[0].weight == pytest.approx(0.7)
    with pytest.raises(InputError, match="key position 3 is outside the 3 tokens"):
        F.find(_fake_result(["a", "b", "c"], att), 0, 3)


def test_find_refuses_a_key_a_causal_query_cannot_see():
    att = np.tril(np.ones((1, 2, 3, 3))) / np.arange(1, 4)[:, None]  # causal: rows spread over k <= q
    with pytest.raises(InputError, match="the key 'c'@2 comes after the query 'a'@0: in a causal model"):
        F.find(_fake_result(["a", "b", "c"], att), 0, 2)
    assert len(F.find(_fake_result(["a", "b", "c"], att), 2, 0)) == 2
    bidirectional = np.full((1, 2, 3, 3), 1 / 3)
    assert len(F.find(_fake_result(["a", "b", "c"], bidirectional), 0, 2)) == 2

def test_resolve_token_by_text_position_and_errors():
    r = _fake_result(["[CLS]", "The", "keys", "the", "are"], np.zeros((1, 1, 5, 5)))
    assert F.resolve_token(r, "keys") == 2
    assert F.resolve_token(r, "ARE") == 4
    assert F.resolve_token(r, "the@3") == 3
    assert F.resolve_token(r, "The@1") == 1
    assert F.resolve_token(r, "@2") == 2
    with pytest.raises(InputError, match=r"occurs 2 times \(at positions 1, 3\).*The@1, the@3"):
        F.resolve_token(r, "the")
    with pytest.raises(InputError, match="'cabinet' is not in the text.*keys@2"):
        F.resolve_token(r, "cabinet")
    with pytest.raises(InputError, match="position 2 holds 'keys', not 'the'"):
        F.resolve_token(r, "the@2")
    with pytest.raises(InputError, match="position 9 .* outside the 5 tokens"):
        F.resolve_token(r, "the@9")
    with pytest.raises(InputError, match="'the@²' is not in the text"):  # not int("²")
        F.resolve_token(r, "the@²")


# ---------------------------------------------------------------- MiniLM (real weights)

SENTENCES = [
    "The keys to the cabinet are on the table.",
    "She walked to the store because she needed some milk for breakfast.",
    "The quick brown fox jumps over the lazy dog near the river bank.",
]


@pytest.mark.parametrize("text", SENTENCES)
def test_minilm_best_previous_token_head_clears_0_9(minilm, text):
    hs = H.score_result(minilm.run(text))
    layer, head, score = hs.best("previous")
    assert score >= 0.9, (layer, head, score)
    assert hs.labels[layer][head] == "previous"


def test_minilm_find_are_to_keys(minilm):
    r = minilm.run("The keys to the cabinet are on the table.")
    q, k = F.resolve_token(r, "are"), F.resolve_token(r, "keys")
    assert (r.labels[q], r.labels[k]) == ("are", "keys")
    hits = F.find(r, q, k)
    assert len(hits) == minilm.config.n_layer * minilm.config.n_head
    assert hits[0].weight == pytest.approx(float(r.attentions[hits[0].layer, hits[0].head, q, k]))
    assert hits[0].weight >= 0.5, hits[:3]


def test_minilm_probe_is_framed_and_reports_its_induction_score(minilm):
    ids, note = P.probe_ids(minilm, n=25, seed=0)
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]
    body = ids[1:-1]
    assert body[:25] == body[25:] and len(set(body[:25])) == 25
    assert not {0, 100, 101, 102, 103} & set(body)
    tok = minilm.tokenizer.raw
    assert not any(tok.id_to_token(i).startswith("[") for i in body)
    assert ids == P.probe_ids(minilm, n=25, seed=0)[0]
    assert ids != P.probe_ids(minilm, n=25, seed=1)[0]
    assert "repeated twice" in note and "[CLS]" in note
    r, _ = P.run_probe(minilm)
    hs = H.score_result(r)
    layer, head, score = hs.best("induction")
    # MiniLM is a bidirectional encoder: no head is expected to clear the induction threshold,
    # and the scores say so rather than inventing one
    assert 0.0 <= score < H.THRESHOLDS["induction"] * hs.coverage["induction"], (layer, head, score)
    assert "induction" in hs.unclaimed_roles()
    assert not any("induction" in row for row in hs.labels)


def test_probe_is_cut_to_fit_the_positions(minilm):
    ids, note = P.probe_ids(minilm, n=10_000)
    assert len(ids) <= minilm.config.max_positions
    assert f"{(len(ids) - 2) // 2} token ids" in note


# ---------------------------------------------------------------- command line


def test_two_tokens_label_no_head(minilm):
    hs = H.score_result(minilm.run(""))  # [CLS] [SEP]
    assert all(label == H.MIXED for row in hs.labels for label in row)


@pytest.mark.parametrize("unknown, words", [([True, False, False], "1 of the 3 tokens is unknown"),
                                            ([True, True, False], "2 of the 3 tokens are unknown")])
def test_the_unknown_tokens_line_agrees_with_its_count(unknown, words):
    share, why = H.unknown_notice(np.array(unknown))
    assert why is not None and why.startswith(words), why
