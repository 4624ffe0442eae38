"""The engine's messages a person reads (the guide bar's line, the Patching tab's swap, one-line
refusals) name tokens as the window labels them, between quotes and without repr's escapes: a
token with a leading space, a quote and a backslash ("·'\\") stays one, and a byte piece reads
"<E6 9D>" or "<C3>", never its raw piece ("Ã")."""

import json

import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.find import resolve_token
from attnviz.engine.analysing.pair import check_same_vocab
from attnviz.engine.analysing.patching import propose_corrupt
from attnviz.engine.analysing.predict import vocab_token
from attnviz.engine.analysing.samples import Sample, guide
from attnviz.engine.errors import InputError
from tiny import tiny_text_decoder

TEXT = "\u6770 x '\\' ok"  # SmolLM2: <E6 9D> <B0>杰 ·x ·'\ ' ·ok


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A byte-level decoder whose every byte is a token ("\\" one, "'" one, "Ã" the byte C3)."""
    return load_model(tiny_text_decoder(tmp_path_factory.mktemp("tiny")))


def test_the_guides_line_names_query_and_key_as_labelled(smollm2):
    r = smollm2.run(TEXT)
    assert r.labels[3] == "\u00b7'\\" and r.labels[0] == "<E6 9D>"
    g = guide(Sample("t", TEXT, "", find=("'\\", "<E6 9D>")), r)
    assert ": '\u00b7'\\' \u2192 '<E6 9D>' weight " in g.message, g.message


def test_a_vocabulary_that_differs_names_the_token_as_labelled(tiny, tmp_path):
    folder = tiny_text_decoder(tmp_path / "b")
    doc = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    vocab["\\"], vocab["\u00c3"] = vocab["\u00c3"], vocab["\\"]  # the backslash and byte C3 swap ids
    (folder / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    other = load_model(folder)
    i = min(vocab["\\"], vocab["\u00c3"])
    first, second = ("\\", "<C3>") if tiny.tokenizer.raw.token_to_id("\\") == i else ("<C3>", "\\")
    with pytest.raises(InputError) as err:
        check_same_vocab(tiny, other)
    assert f"token {i} is '{first}' in one and '{second}' in the other" in str(err.value)


def test_the_proposed_swap_names_its_words_between_quotes(tiny):
    p = propose_corrupt(tiny, "my cat's toy, a dog's bowl, her cat's bed")
    assert p.old == "cat's" and p.describe() == f"swapped '{p.old}' (characters {p.start}..{p.end - 1}) for '{p.new}'"


def test_a_typed_token_is_quoted_as_typed_in_refusals(tiny):
    r = tiny.run("x '\\' y")
    with pytest.raises(InputError, match=r"^token 'it's\\' is not in the text"):
        resolve_token(r, "it's\\")
    with pytest.raises(InputError) as err:
        vocab_token(tiny, "'\\")
    assert str(err.value).startswith("''\\' is 2 tokens (''', '\\'), not one")
