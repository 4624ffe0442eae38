"""Guided samples: each sample says what to look for, and its guide finds the head
that shows it best for the loaded model from the result itself; no head numbers in the code."""

import numpy as np
import pytest

from attnviz.engine.analysing import heads as H
from attnviz.engine import load_model
from attnviz.engine.reading import textbook
from attnviz.engine.analysing.samples import SAMPLES, SPECIFICITY_MIN, Sample, guide, sample_for_text
from attnviz.engine.reading.token_text import plain
from attnviz.engine.errors import InputError


@pytest.fixture(scope="module")
def book():
    return load_model(textbook.TEXTBOOK_NAME)


def test_every_sample_says_in_one_line_what_to_look_for():
    assert len({s.title for s in SAMPLES}) == len(SAMPLES)
    for s in SAMPLES:
        assert s.look_for and "\n" not in s.look_for and len(s.look_for) < 160
        assert (s.find is None) != (not s.roles), s.title  # one rule each
        assert all(r in H.ROLES for r in s.roles + s.closest)
        assert not set(s.roles) & set(s.closest)
        assert sample_for_text(s.text) is s
    assert sample_for_text(SAMPLES[0].text + " ") is None  # an edited sample is the user's text


def test_guide_finds_the_constructed_induction_head(book):
    # the textbook's heads are built by hand: whichever one it built as induction must be found
    text = "the cat sat on the mat . the cat sat on the mat"
    built = [lh for lh, (role, _) in textbook.HEADS.items() if role == "induction"]
    g = guide(Sample("t", text, "", roles=("induction",)), book.run(text), H.unknown_token_ids(book))
    assert g.claimed and [(g.layer, g.head)] == built
    assert g.message.startswith(f"L{g.layer} H{g.head}: induction strength")


def test_guide_says_no_head_clears_rather_than_inventing_one(book):
    # no word repeats: no head can be a duplicate / induction head, whatever its weights
    text = "the cat sat on a red mat"
    r = book.run(text)
    g = guide(Sample("t", text, "", roles=("induction", "duplicate")), r, H.unknown_token_ids(book))
    hs = H.score_result(r, unknown_ids=H.unknown_token_ids(book))
    # the roles panel's statement, from its one home (heads.no_head_clears), for the first role tried
    assert not g.claimed and g.message.startswith(H.no_head_clears(hs, "induction", "this sample"))
    assert g.message.endswith("Nor does any clear the duplicate token bar.")
    # no row has an induction cell, so no head has a strength: none is named (argmax would say L0 H0)
    assert (g.layer, g.head) == (None, None) and "L0 H0" not in g.message


def test_minilms_repeated_names_guide_says_the_score_misses_its_bar_not_the_strength(minilm):
    """MiniLM's strongest duplicate-token head on the repeated-names sample clears the strength
    threshold but its score does not beat chance by the margin: the line says that, not a strength
    over 0.5 beside "(0.5, and chance + 0.1)" that reads as a head that clears it."""
    s = next(x for x in SAMPLES if x.title == "Repeated names")
    r = minilm.run(s.text)
    g = guide(s, r, H.unknown_token_ids(minilm))
    hs = H.score_result(r, unknown_ids=H.unknown_token_ids(minilm))
    l, h, strength = hs.best_strength("duplicate")
    score, chance = hs.scores["duplicate"][l, h], hs.chance["duplicate"][l, h]
    assert strength >= 0.5 and score - chance < H.CHANCE_MARGIN  # (the case this test is about)
    assert not g.claimed and (g.layer, g.head) == (l, h)
    assert (f"the strongest, L{l} H{h}, has strength {strength:.3f}, over the threshold 0.5, but "
            f"score {score:.3f}, under its chance score {chance:.3f} + 0.1 = {chance + 0.1:.3f}.") \
        in g.message, g.message


def test_guide_uses_scores_it_is_given(book, monkeypatch):
    """Scores computed once per result (the window's state holds them) are used, not computed again."""
    text = "the cat sat on the mat . the cat sat on the mat"
    r = book.run(text)
    hs = H.score_result(r, unknown_ids=H.unknown_token_ids(book))
    calls = []
    real = H.score_result
    monkeypatch.setattr(H, "score_result", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    s = Sample("t", text, "", roles=("induction",))
    assert guide(s, r, scores=hs) == guide(s, r, H.unknown_token_ids(book)) and len(calls) == 1


def test_guide_on_unknown_heavy_text_claims_no_identity_role(book):
    text = "Zorblax Quintrel Zorblax Quintrel Zorblax Quintrel"  # every word <|unk|>
    g = guide(Sample("t", text, "", roles=("induction", "duplicate")), book.run(text),
              H.unknown_token_ids(book))
    assert not g.claimed and "unknown" in g.message
    # no head has a strength there: none is named as the strongest (no arbitrary L0 H0)
    assert (g.layer, g.head) == (None, None) and "L0 H0" not in g.message, g.message


def test_textbooks_repeated_names_guide_names_no_head():
    """The textbook vocabulary knows too few of the repeated-names sample's words to label a
    duplicate-token head: the guide says so once, and names no head (none has a strength)."""
    book = load_model(textbook.TEXTBOOK_NAME)
    s = next(x for x in SAMPLES if x.title == "Repeated names")
    r = book.run(s.text)
    g = guide(s, r, H.unknown_token_ids(book))
    assert (g.layer, g.head, g.claimed) == (None, None, False)
    hs = H.score_result(r, unknown_ids=H.unknown_token_ids(book))
    assert g.message == hs.notice[0].upper() + hs.notice[1:] + ".", g.message


def _direct_specificity(att, q, k):  # [n_layer, n_head, T, T] -> [n_layer, n_head], a plain loop
    n_layer, n_head, T, _ = att.shape
    causal = not np.triu(att[0, 0], 1).any()
    out = np.zeros((n_layer, n_head))
    for l in range(n_layer):
        for h in range(n_head):
            others = [att[l, h, i, k] for i in range(T) if i != q and (i >= k or not causal)]
            out[l, h] = att[l, h, q, k] - np.mean(others)
    return out


@pytest.mark.parametrize("which", ["minilm", "smollm2"])
def test_guides_on_real_models_match_a_direct_computation(which, request):
    model = request.getfixturevalue(which)
    unknown = H.unknown_token_ids(model)
    for s in SAMPLES:
        r = model.run(s.text)
        g = guide(s, r, unknown)
        if s.find is not None:
            labels = [plain(x).lower() for x in r.labels]
            q, k = labels.index(s.find[0]), labels.index(s.find[1])
            spec = _direct_specificity(r.attentions.astype(np.float64), q, k)
            assert (g.layer, g.head) == np.unravel_index(np.argmax(spec), spec.shape)
            assert g.claimed == (spec.max() >= SPECIFICITY_MIN)
        else:
            sc = H.score_result(r, unknown_ids=unknown)
            role = next((x for x in s.roles if sc.cleared(x)), None)
            assert g.claimed == (role is not None)
            near = next((x for x in s.closest if sc.cleared(x)), None) if role is None else None
            if near is not None:  # not the role looked for: said so, and shown as the closest
                kind = H.TITLES[s.roles[0]].replace(" ", "-")
                assert g.message.startswith(f"No {kind} head on this sample; the closest: ")
                assert (g.layer, g.head, sc.strength[near][g.layer, g.head]) == sc.cleared(near)[0]
            if role is not None:  # the strongest head that clears the first role any head clears
                st = sc.strength[role]
                ok = H.passes(role, st, sc.scores[role], sc.chance[role])
                assert ok[g.layer, g.head]
                assert st[g.layer, g.head] == st[ok].max()
        assert f"L{g.layer} H{g.head}" in g.message


def test_minilms_induction_sample_shows_its_duplicate_token_head_as_the_closest_not_a_finding(minilm):
    """MiniLM has no induction head on the made-up-names sample; its duplicate-token head L2 H9
    clears the duplicate bar. The guide says there is no induction head and names L2 H9 as the
    closest, a duplicate-token head, unclaimed (not claimed as if it were what the sample shows)."""
    s = next(x for x in SAMPLES if "induction" in x.title)
    r = minilm.run(s.text)
    hs = H.score_result(r, unknown_ids=H.unknown_token_ids(minilm))
    assert not hs.cleared("induction") and hs.cleared("duplicate")  # (the case this test is about)
    l, h, strength = hs.cleared("duplicate")[0]
    g = guide(s, r, H.unknown_token_ids(minilm))
    assert (g.layer, g.head, g.claimed) == (l, h, False)
    assert g.message == (f"No induction head on this sample; the closest: L{l} H{h}, a "
                         f"duplicate-token head (strength {strength:.2f}, score "
                         f"{hs.scores['duplicate'][l, h]:.2f}, chance {hs.chance['duplicate'][l, h]:.2f}).")


def test_smollm2_induction_sample_points_at_an_induction_head(smollm2):
    s = next(x for x in SAMPLES if "induction" in x.title)
    g = guide(s, smollm2.run(s.text), H.unknown_token_ids(smollm2))
    assert g.claimed and "induction strength" in g.message


def test_the_guides_count_of_heads_agrees_with_the_labels_the_roles_panel_counts(smollm2):
    """The guide says how many more heads clear the role's bar; a head that clears it but is labelled
    by a stronger role is named with its label, so the guide's count and the Head roles panel's
    count of labels ('4 induction') do not seem to disagree."""
    s = next(x for x in SAMPLES if "induction" in x.title)
    r = smollm2.run(s.text)
    g = guide(s, r, H.unknown_token_ids(smollm2))
    sc = H.score_result(r, unknown_ids=H.unknown_token_ids(smollm2))
    cleared = sc.cleared("induction")
    other = [(l, h) for l, h, _ in cleared if sc.labels[l][h] != "induction"]
    assert other, "the sample has a head that clears induction but is labelled by another role"
    assert f"{len(cleared) - 1} more heads clear it" in g.message
    for l, h in other:
        assert f"L{l} H{h} is labelled {sc.labels[l][h]}" in g.message or \
            f"L{l} H{h} {sc.labels[l][h]}" in g.message


def test_a_changed_run_never_names_a_head_switched_off_and_says_it_is_off(minilm):
    """Switching off the guide's head: its pattern is still drawn (only its output is removed), so it
    still scores best; the changed run's guide names the strongest head still on and says the one
    it named before is switched off (it named it again, as if it were the finding)."""
    from attnviz.engine.analysing.effects import Ablation, window_run

    unknown = H.unknown_token_ids(minilm)
    for s in (next(x for x in SAMPLES if x.title == "Long paragraph"), SAMPLES[0]):  # roles; Find
        clean = guide(s, minilm.run(s.text), unknown)
        assert clean.claimed
        off = (clean.layer, clean.head)
        r = window_run(minilm, s.text, ablation=Ablation(heads=(off,))).result
        g = guide(s, r, unknown)
        assert (g.layer, g.head) != off and g.layer is not None
        what = "the previous token bar" if s.roles else "the bar for 'are' \u2192 'keys'"
        assert g.message.endswith(f". Switched off in this run: L{off[0]} H{off[1]}, which clears "
                                  f"{what}."), g.message
        if s.roles:
            assert g.message.startswith(f"L{g.layer} H{g.head}: previous token strength")
            hs = H.score_result(r, unknown_ids=unknown)
            assert hs.cleared("previous")[0][:2] == off  # (the case this test is about)


class _Run:  # what a Find guide reads of a result: its patterns and its token labels
    def __init__(self, attentions, labels):
        self.attentions, self.labels, self.tokens = attentions, labels, labels
        self.n_tokens = len(labels)


def test_a_find_guide_reads_a_specificity_that_rounds_to_zero_without_a_minus():
    # 'are' gives 'keys' 0.300, the other queries that see it 0.302 and 0.300: specificity -0.001
    att = np.array([[1.0, 0.0, 0.0, 0.0], [0.698, 0.302, 0.0, 0.0],
                    [0.4, 0.3, 0.3, 0.0], [0.3, 0.3, 0.2, 0.2]])[None, None]
    sample = next(s for s in SAMPLES if s.find == ("are", "keys"))
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert not g.claimed and "over the other queries' mean is +0.00." in g.message, g.message


def test_a_find_guide_writes_a_negative_specificity_with_the_bars_minus():
    # 'are' gives 'keys' 0.1, the other queries that see it 0.5 each: specificity -0.40, shown in
    # the window's guide with the minus every colour bar writes
    att = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0],
                    [0.6, 0.1, 0.3, 0.0], [0.2, 0.5, 0.2, 0.1]])[None, None]
    sample = next(s for s in SAMPLES if s.find == ("are", "keys"))
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert "over the other queries' mean is \u22120.40." in g.message, g.message


def test_a_find_guide_writes_its_arrow_as_the_window_does():
    # the guide's line is shown in the window, whose token pairs read 'a' → 'b' (the grid's
    # read-outs, Compare's): the claimed line and the closest-head line alike
    sample = next(s for s in SAMPLES if s.find == ("are", "keys"))
    for att in (np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0],  # 'are' singles out 'keys'
                          [0.1, 0.8, 0.1, 0.0], [0.5, 0.2, 0.2, 0.1]])[None, None],
                np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0],  # it does not
                          [0.6, 0.1, 0.3, 0.0], [0.2, 0.5, 0.2, 0.1]])[None, None]):
        g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
        assert "'·are' \u2192 '·keys'" in g.message and "->" not in g.message, g.message


# each role in the words a person writes before "head", with its article
KINDS = {"previous": "a previous-token", "next": "a next-token", "self": "a self (current-token)",
         "sink": "a first-token sink", "duplicate": "a duplicate-token", "induction": "an induction"}


class _OneHeadScores:
    """Scores in which only L0 H0 clears, and only the bar of `role`."""

    def __init__(self, role):
        self.role = role
        self.scores = {r: np.full((1, 1), 0.6) for r in H.ROLES}
        self.chance = {r: np.full((1, 1), 0.1) for r in H.ROLES}

    def cleared(self, role):
        return [(0, 0, 0.9)] if role == self.role else []


@pytest.mark.parametrize("role", H.ROLES)
def test_the_guide_names_every_role_as_a_kind_of_head_in_english(role):
    """Where no head clears the role a sample looks for, the guide names that role and the closest
    head's role as kinds of head: "No induction head on this sample; the closest: L0 H0, a
    duplicate-token head", for every role the heads module scores."""
    from types import SimpleNamespace

    assert set(KINDS) == set(H.ROLES)
    other = next(r for r in H.ROLES if r != role)
    g = guide(Sample("t", "x y", "", roles=(role,), closest=(other,)), SimpleNamespace(n_tokens=2),
              scores=_OneHeadScores(other))
    looked = KINDS[role].split(" ", 1)[1]
    assert g.message.startswith(f"No {looked} head on this sample; the closest: L0 H0, {KINDS[other]} "
                                "head (strength 0.90, score 0.60, chance 0.10)."), g.message


def test_a_find_guide_names_a_closest_head_only_from_half_its_bar():
    """A head short of the Find bar (0.1 over the other queries' mean) is named as the closest from
    half of it up ('are' gives 'keys' 0.47 against 0.5 and 0.3: +0.07), its numbers beside it;
    below, no head is named: which ranks first among heads that give the pair what the other
    queries do is noise."""
    sample = next(s for s in SAMPLES if s.find == ("are", "keys"))
    att = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0],
                    [0.33, 0.47, 0.2, 0.0], [0.2, 0.3, 0.3, 0.2]])[None, None]
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert (g.layer, g.head, g.claimed) == (0, 0, False)
    assert g.message == ("No head singles out '·are' \u2192 '·keys' here (by 0.1 over the other queries). "
                         "Closest: L0 H0: '·are' \u2192 '·keys' weight 0.47, +0.07 against the other "
                         "queries' mean 0.40."), g.message
    att[0, 0, 2] = [0.39, 0.43, 0.18, 0.0]  # +0.03
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert (g.layer, g.head, g.claimed) == (None, None, False) and "L0 H0" not in g.message, g.message
    att[0, 0, 2] = [0.33, 0.4496, 0.2204, 0.0]  # +0.0496: short of 0.05, which 2 decimals would print
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert g.message.endswith("over the other queries' mean is +0.0496."), g.message
    att[0, 0, 2] = [0.30, 0.4996, 0.2004, 0.0]  # +0.0996: closest, short of 0.1
    g = guide(sample, _Run(att, ["The", "·keys", "·are", "·here"]))
    assert "+0.0996 against the other queries' mean 0.40" in g.message and not g.claimed, g.message


def test_the_textbooks_agreement_guide_names_no_head(book):
    """The textbook decoder's best head for 'are' -> 'keys' gives it 1.5e-6 over the other queries:
    no answer and no closest head (L0 H1 is not named, nothing for 'Show me'); the line says the
    pair is not singled out, nor nearly, with the largest difference as written (+0.00)."""
    s = next(x for x in SAMPLES if x.title == "Agreement")
    g = guide(s, book.run(s.text))
    assert (g.layer, g.head, g.claimed) == (None, None, False), g
    assert g.message == ("No head singles out 'are' \u2192 'keys' here (by 0.1 over the other queries), nor "
                         "comes close (by 0.05): the most any head gives 'are' \u2192 'keys' over the other "
                         "queries' mean is +0.00."), g.message


def test_a_find_sample_whose_words_the_model_lacks_says_so(book):
    """The textbook decoder reads 'trophy' as <|unk|>: the Pronouns guide says so, and that no head
    can be ranked for a word the model does not know (not a ranking for <|unk|>)."""
    s = next(x for x in SAMPLES if x.title == "Pronouns")
    r = book.run(s.text)
    k = r.labels.index("<|unk|>")
    with pytest.raises(InputError) as said:
        guide(s, r)
    assert str(said.value) == (
        "This sample looks for 'it' \u2192 'trophy', one token to one token, but this model reads 'trophy' "
        f"as <|unk|>@{k}, a token that does not spell it. No head can be ranked for a word the model "
        "does not know: open a model whose vocabulary has 'trophy'.")


def test_a_find_sample_takes_the_whole_word_not_pieces_of_others_and_says_what_to_pick(toy):
    """The toy decoder reads 'fit' and 'suitcase' with an 'it' piece, and 'it' as ·it: the Pronouns
    guide takes ·it (not three 'it's to pick from in a bar that cannot pick), and says that 'trophy'
    is 5 pieces here, naming them and what to pick in Find."""
    s = next(x for x in SAMPLES if x.title == "Pronouns")
    r = toy.run(s.text)
    assert [lab for lab in r.labels if lab.strip("\u00b7") == "it"] == ["it", "it", "\u00b7it"]  # the case
    q = r.labels.index("\u00b7it")
    pieces = [f"{r.labels[i]}@{i}" for i in range(2, 7)]
    assert "".join(p.split("@")[0] for p in pieces) == "\u00b7trophy"
    with pytest.raises(InputError) as said:
        guide(s, r)
    assert str(said.value) == (
        "This sample looks for 'it' \u2192 'trophy', one token to one token, but this model reads 'trophy' "
        f"as 5 tokens ({', '.join(pieces)}). In Find (a tab of the Head roles panel), pick \u00b7it@{q} "
        "as the query and a piece of 'trophy' as the key.")
