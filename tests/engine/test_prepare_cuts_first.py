"""Model.prepare cuts a text over the model's positions before it labels the tokens: the labels
shown for the tokens kept are those the whole text's labels gave them (a character split over
several byte tokens included; a closing [SEP] kept), and a long paste labels only the tokens kept."""

from __future__ import annotations

import pytest

from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading import tokenizer as tokenizer_module

CUT = RunRequest(truncate=True)
# words, digits, punctuation and characters of several bytes (byte-level BPE splits them over tokens)
UNIT = "The keys to the cabinet are on the table, 42 of them: 杰克 ate crème brûlée ☕ at 3 o'clock. "


def over(model, extra: int = 7) -> str:
    """A text a few tokens over `model`'s positions."""
    text = UNIT
    while len(model.tokenizer.encode(text).ids) <= model.config.max_positions + extra:
        text += UNIT
    return text


def labelled(monkeypatch) -> list[int]:
    """The pieces each call of the labelling function (token_text.readable_tokens) is given."""
    seen, real = [], tokenizer_module.readable_tokens

    def spy(pieces, kind, special=None):
        seen.append(len(pieces))
        return real(pieces, kind, special)
    monkeypatch.setattr(tokenizer_module, "readable_tokens", spy)
    return seen


@pytest.fixture(params=["toy", "minilm"])
def model(request):
    return request.getfixturevalue(request.param)


def test_a_text_just_over_the_context_shows_the_labels_the_whole_text_gave(model):
    text = over(model)
    whole = model.tokenizer.encode(text)  # every token labelled, then cut as the run cuts
    limit = model.config.max_positions
    keep = list(range(limit))
    if whole.special[-1]:
        keep[-1] = len(whole.ids) - 1
    prep = model.prepare(text, request=CUT)
    assert prep.truncated and prep.n_full == len(whole.ids) > limit
    assert prep.ids.tolist() == [whole.ids[i] for i in keep]
    assert prep.labels == [whole.labels[i] for i in keep]
    assert prep.tokens == [whole.tokens[i] for i in keep]
    assert prep.offsets == [whole.offsets[i] for i in keep]
    if model.config.model_type == "bert":  # (uncased WordPiece: its accents are stripped)
        assert prep.labels[-1] == "[SEP]"
    else:
        assert any(not label.isascii() for label in prep.labels)


def test_a_long_paste_labels_only_the_tokens_it_keeps(model, monkeypatch):
    text = UNIT * 400  # thousands of tokens, far over either model's positions
    limit = model.config.max_positions
    seen = labelled(monkeypatch)
    prep = model.prepare(text, request=CUT)
    assert prep.n_full > 4 * limit and len(prep.labels) == limit
    assert sum(seen) <= limit, f"labelled {sum(seen)} tokens to keep {limit}"


def test_ids_over_the_context_label_only_those_kept(model, monkeypatch):
    limit = model.config.max_positions
    ids = model.tokenizer.encode(UNIT * 400, add_special_tokens=False).ids
    whole = model.labels(ids)
    seen = labelled(monkeypatch)
    prep = model.prepare(ids=ids, request=CUT)
    assert prep.labels == whole[:limit]
    assert sum(seen) <= limit
