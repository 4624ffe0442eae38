"""The sentence a generation writes (long_jobs.new_text): the prompt as typed and what the new
tokens add, for a model with a tokenizer and for one that types ids."""

from attnviz.engine import load_model
from attnviz.ui.machinery.long_jobs import new_text
from tiny import FIXTURES


def test_a_model_without_a_tokenizer_appends_the_new_ids_as_typed():
    raw = load_model(FIXTURES / "llama_gqa")
    assert new_text(raw, "5,17 3", [5, 17, 3], [9, 4]) == "5,17 3, 9, 4"


def test_a_model_with_a_tokenizer_appends_what_the_new_tokens_add(smollm2):
    prompt = "The keys to the cabinet"
    ids = smollm2.encode(prompt)[0].tolist()
    more = smollm2.encode(" are on the table")[0].tolist()
    assert new_text(smollm2, prompt, ids, more) == prompt + " are on the table"
