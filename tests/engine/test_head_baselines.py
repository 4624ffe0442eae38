"""Head-role claims that must earn their place: unknown tokens are never repeats, every score has
the head's own chance score beside it, a label must beat it, and Find ranks by specificity."""

import numpy as np
import pytest

from attnviz.engine.analysing import find as F, head_patterns as HP, heads as H

EMOJI_CJK = "I love 🍕 and 寿司! 我喜欢猫，因为它们很可爱。 😀👍🏽 café"


class _Result:
    def __init__(self, labels, att, ids=None):
        self.labels = self.tokens = list(labels)
        self.attentions = np.asarray(att, dtype=np.float32)
        self.input_ids = np.arange(len(labels)) if ids is None else np.asarray(ids)


def test_unknown_tokens_are_never_repeats():
    ids = np.array([5, 100, 7, 100, 5])
    unk = ids == 100
    d = HP.duplicate_token_pattern(ids, unk)
    assert d[4, 0] and not d[3, 1]  # 5 repeats 5; [UNK] does not repeat [UNK]
    assert not HP.induction_pattern(ids, unk)[3, 2]


def test_minilm_unknown_heavy_text_labels_no_identity_role(minilm):
    r = minilm.run(EMOJI_CJK)
    unk = H.unknown_token_ids(minilm)
    assert unk == {minilm.tokenizer.raw.token_to_id("[UNK]")}
    n_unk = int(np.isin(r.input_ids, list(unk)).sum())
    assert n_unk / r.n_tokens > H.UNKNOWN_LIMIT
    hs = H.score_result(r, unknown_ids=unk)
    assert hs.notice and f"{n_unk} of the {r.n_tokens} tokens are unknown" in hs.notice
    for role in H.IDENTITY_ROLES:
        assert not hs.cleared(role) and not any(role in row for row in hs.labels)
    # without the unknown ids, the [UNK]s look like repeats: the bug this guards against
    assert H.score_result(r).coverage["duplicate"] > hs.coverage["duplicate"]


def test_textbook_unknown_sample_labels_no_repeat_head():
    from attnviz.engine import load_model

    m = load_model("attnviz-textbook")
    r = m.run("violet anchor nine tulip gravel comet lantern otter violet anchor nine tulip")
    unk = H.unknown_token_ids(m)
    assert unk and np.isin(r.input_ids, list(unk)).mean() > H.UNKNOWN_LIMIT
    hs = H.score_result(r, unknown_ids=unk)
    assert hs.notice
    assert not any(role in row for row in hs.labels for role in H.IDENTITY_ROLES)


def test_a_uniform_head_equals_its_chance_and_gets_no_label():
    """A causal head spreading evenly over k <= q scores 0.52 on 'sink' at T=4 (above the 0.5
    threshold), which is exactly what chance gives it: no label."""
    T = 4
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    att = uniform[None, None]
    hs = H.score_heads(att, np.arange(T))
    assert hs.strength["sink"][0, 0] >= H.THRESHOLDS["sink"]
    assert hs.chance["sink"][0, 0] == pytest.approx(hs.scores["sink"][0, 0])
    assert hs.labels == [[H.MIXED]] and not hs.cleared("sink")
    # a real sink clears both
    sink = np.zeros((T, T))
    sink[:, 0] = 1
    hs = H.score_heads(sink[None, None], np.arange(T))
    assert hs.labels == [["sink"]]
    assert hs.scores["sink"][0, 0] - hs.chance["sink"][0, 0] >= H.CHANCE_MARGIN


def test_chance_matches_a_direct_count():
    rng = np.random.default_rng(0)
    T = 7
    att = rng.random((2, 3, T, T)) * np.tril(np.ones((T, T)))
    att /= att.sum(-1, keepdims=True)
    ids = rng.integers(0, 3, T)
    d = HP.duplicate_token_pattern(ids)
    got = HP.chance_score(att, d, np.tril(np.ones((T, T), bool)))
    mass = att.sum(-1)  # every row's mass is 1 here
    frac = d.sum(-1) / np.arange(1, T + 1)
    np.testing.assert_allclose(got, (mass * frac).sum(-1) / mass.sum(-1), rtol=1e-6)


def test_find_ranks_by_specificity_not_weight():
    """Head 0 sends every query to key 1 (weight 0.9 from query 3 too); head 1 sends only query 3
    there (weight 0.6). Head 1 is the one that says something about query 3."""
    T = 4
    att = np.zeros((1, 2, T, T))
    att[0, 0, :, 0] = 1.0
    att[0, 0, 1:, :] = 0
    att[0, 0, 1:, 1] = 0.9
    att[0, 0, 1:, 0] = 0.1
    att[0, 1] = np.eye(T)
    att[0, 1, 3] = [0.4, 0.6, 0, 0]
    hits = F.find(_Result(list("abcd"), att), 3, 1)
    assert (hits[0].layer, hits[0].head) == (0, 1)
    assert hits[0].specificity == pytest.approx(0.6 - 0.5)  # other queries that see key 1: b, c
    assert hits[1].weight == pytest.approx(0.9) and hits[1].specificity == pytest.approx(0.0)
