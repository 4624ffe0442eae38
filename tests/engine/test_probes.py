"""Syntactic and coreference probes on constructed heads whose answer is known: a head that follows
the grammar is labelled; heads that attend by position alone (the previous token, the first noun)
are right in one half of the items only and are not."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine import InputError
from attnviz.engine.analysing import probes as P
from attnviz.engine.computing.request import RunRequest


class _Result:
    def __init__(self, enc, att):
        self.offsets = enc.offsets
        self.input_ids = np.array(enc.ids)
        self.attentions = att


class ConstructedModel:
    """MiniLM's tokenizer, and three heads built by rule on the last token's row:
    H0 follows grammar (agreement: the noun with the verb's number; coreference: the name with the
    pronoun's gender), H1 to the nearer of the two words by position (agreement: the previous
    token; coreference: two back), H2 to the farther (four tokens back in both templates)."""

    name = "constructed"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def run(self, text, *, request=None):
        enc = self.tokenizer.encode(text)
        T = len(enc.ids)
        att = np.zeros((1, 3, T, T), np.float32)
        att[0, :, np.arange(T), np.arange(T)] = 1.0  # every other row: itself
        q = T - 2  # the last word, before [SEP]
        words = text.split()
        att[0, :, q] = 0
        att[0, 0, q, self._pos(enc, text, self._grammar(words))] = 1.0
        att[0, 1, q, q - (2 if words[-1] in ('she', 'he') else 1)] = 1.0  # the nearer word
        att[0, 2, q, q - 4] = 1.0  # the farther word in both probes' templates
        return _Result(enc, att)

    config = SimpleNamespace(n_layer=1)

    def iter_many(self, texts, stop=None, progress=None):  # Model.iter_many's: (index, result) for every text
        if progress is not None:  # one pass of one layer
            progress(0, 1)
            progress(1, 1)
        return ((i, self.run(t, request=RunRequest(use_cache=False, stop=stop))) for i, t in enumerate(texts))

    @staticmethod
    def _grammar(words):
        last = words[-1]
        if last in ("she", "he"):
            return next(w for w in words[:-1] if (w in P.WOMEN) == (last == "she") and
                        (w in P.WOMEN or w in P.MEN))
        plural = last in {v[1] for v in P.VERBS}
        nouns = {n[int(plural)] for n in P.NOUNS + P.ATTRACTORS}
        return next(w for w in words[:-1] if w in nouns)

    @staticmethod
    def _pos(enc, text, word):
        start = re.search(rf"\b{word}\b", text).start()  # the word, not a word holding it
        return next(i for i, (a, b) in enumerate(enc.offsets) if a <= start < b)


@pytest.fixture(scope="module")
def constructed(minilm):
    return ConstructedModel(minilm.tokenizer)


@pytest.mark.parametrize("kind", P.KINDS)
def test_grammar_head_is_labelled_and_positional_heads_are_not(constructed, kind):
    s = P.run_template_probe(constructed, kind)
    assert s.n_items + s.n_skipped == P.N_ITEMS and s.n_items >= 50
    assert s.score[0, 0] == pytest.approx(1.0) and s.accuracy[0, 0] == 1.0
    assert [(l, h) for l, h, *_ in s.labelled()] == [(0, 0)]
    for head in (1, 2):  # right in one half, wrong in the other
        assert abs(s.score[0, head]) < 0.2 and 0.3 < s.accuracy[0, head] < 0.7
        assert s.far[0, head] * s.near[0, head] < 0


def test_items_are_seeded_balanced_and_position_matched():
    for make in (P.agreement_items, P.coreference_items):
        items = make(60, seed=3)
        assert items == make(60, seed=3) and items != make(60, seed=4)
        assert sum(i.far for i in items) == 30 and len({i.text for i in items}) == 60
        for i in items:
            words = i.text.split()
            assert words[-1] == i.query and {i.target, i.foil} <= set(words)
            assert len(words) == len(items[0].text.split())  # same positions in every item
    agree = P.agreement_items(60)
    for i in agree:  # the verb agrees with its subject, and the attractor has the other number
        plural_verb = i.query in {v[1] for v in P.VERBS}
        plural_target = i.target in {n[1] for n in P.NOUNS + P.ATTRACTORS}
        plural_foil = i.foil in {n[1] for n in P.NOUNS + P.ATTRACTORS}
        assert plural_verb == plural_target != plural_foil


def test_words_the_vocabulary_lacks_are_skipped_and_counted():
    from attnviz.engine import load_model

    with pytest.raises(InputError, match="too few coreference items"):
        P.run_template_probe(load_model("attnviz-textbook"), "coreference")


def test_real_encoder_results_are_reported(minilm):
    """MiniLM: whatever it finds is reported with its numbers; the label rule holds for each."""
    s = P.run_template_probe(minilm, "agreement", n=20)
    for l, h, score, acc in s.labelled():
        assert score >= P.SCORE_MIN and acc >= P.ACCURACY_MIN and s.far[l, h] > 0 and s.near[l, h] > 0
    doc = s.to_json()
    assert doc["items"] == s.n_items and doc["definition"] == P.DEFINITIONS["agreement"]


def test_a_probe_stops_when_told_and_one_that_waits_inside_stop_scores_the_same(minilm):
    """stop() is asked between layers and sentences: True stops the probe (Cancelled), and a stop
    that runs another text meanwhile (the window's probe giving way to a keystroke's run) changes
    no number."""
    from attnviz.engine.errors import Cancelled

    asked = []

    def stop_at(k):  # says stop at its k-th question
        return lambda: asked.append(1) or len(asked) >= k
    for k in (1, minilm.config.n_layer + 3):  # before the first layer; after a few sentences
        asked.clear()
        with pytest.raises(Cancelled):
            P.run_template_probe(minilm, "agreement", n=20, stop=stop_at(k))
        assert len(asked) == k
    plain = P.run_template_probe(minilm, "agreement", n=20)
    asked.clear()

    def give_way():  # a typed text's run in the middle of the probe's pass, and after a sentence
        asked.append(1)
        if len(asked) in (2, minilm.config.n_layer + 1):
            minilm.run("The cat sat on the mat")
        return False
    waited = P.run_template_probe(minilm, "agreement", n=20, stop=give_way)
    assert len(asked) == minilm.config.n_layer + 20  # each layer of the one pass, then each sentence
    for name in ("score", "accuracy", "far", "near"):
        assert np.array_equal(getattr(plain, name), getattr(waited, name)), name
    assert (plain.n_items, plain.n_skipped) == (waited.n_items, waited.n_skipped)


def test_a_probes_progress_counts_each_layer_then_each_sentence_and_ends_at_its_total(minilm):
    """ProbeProgress: after each layer of the packed pass, then after each sentence scored, done
    growing by the steps that part did (a layer runs all n sentences) up to total, in words."""
    L, n, seen = minilm.config.n_layer, 20, []
    P.run_template_probe(minilm, "agreement", n=n, progress=seen.append)
    total = n * (L + 1)
    assert [p.done for p in seen] == [n * k for k in range(L + 1)] + [n * L + k for k in range(1, n + 1)]
    assert {p.total for p in seen} == {total}
    assert [p.words for p in seen[:2]] == [f"0 of {L} layers run", f"1 of {L} layers run"]
    assert seen[L].words == f"{L} of {L} layers run" and seen[L + 1].words == f"1 of {n} sentences scored"
    assert seen[-1] == P.ProbeProgress(total, total, f"{n} of {n} sentences scored")


def test_a_probe_over_several_passes_counts_them_in_turn(minilm, monkeypatch):
    from attnviz.engine.computing import model as model_module

    monkeypatch.setattr(model_module, "PACK_ROWS", 40)  # 20 short sentences: more than one pass
    L, n, seen = minilm.config.n_layer, 20, []
    P.run_template_probe(minilm, "agreement", n=n, progress=seen.append)
    passes = (seen[0].total // n - 1) // L  # total = n x (L x passes + 1)
    assert passes > 1 and seen[-1].done == seen[-1].total == n * (L * passes + 1)
    assert all(a.done < b.done for a, b in zip(seen, seen[1:]))  # never back, never still
    assert seen[0].words == f"pass 1 of {passes}: 0 of {L} layers run"
    assert f"pass {passes} of {passes}: {L} of {L} layers run" in [p.words for p in seen]
