"""The pair of runs that comparison and patching share: one shape, two traces, refusals in one line."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.pair import (
    check_same_shape, check_same_vocab, models_pair, texts_pair,
)
from attnviz.engine.computing.trace import Trace
from attnviz.engine.errors import InputError
from tiny import FIXTURES, tiny_llama
from attnviz.engine.computing.request import RunRequest

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    return {"a": load_model(tiny_llama(root / "a", seed=1, n_layer=2)),
            "b": load_model(tiny_llama(root / "b", seed=2, n_layer=2)),
            "deep": load_model(tiny_llama(root / "deep", seed=1, n_layer=3)),
            "gpt2": load_model(FIXTURES / "gpt2")}


def test_a_model_pair_runs_the_same_ids_through_both(models):
    pair = models_pair(models["a"], models["b"], IDS, lambda: Trace(z=True, resid=True))
    assert pair.T == len(IDS) and pair.n_layer == 2 and pair.n_head == 8
    assert (pair.a.ids == IDS).all() and (pair.b.ids == IDS).all()
    want_a = models["a"].run(ids=IDS, request=RunRequest(use_cache=False)).attentions
    want_b = models["b"].run(ids=IDS, request=RunRequest(use_cache=False)).attentions
    np.testing.assert_array_equal(pair.a.attentions, want_a)
    np.testing.assert_array_equal(pair.b.attentions, want_b)
    assert not np.array_equal(pair.a.attentions, pair.b.attentions)
    assert pair.a.trace.resid[-1] is not None and pair.b.trace.z[0] is not None


def test_a_text_pair_runs_two_id_lists_through_one_model(models):
    other = IDS.copy()
    other[2] = 7
    pair = texts_pair(models["a"], IDS, other, Trace)
    assert (pair.a.label, pair.b.label) == ("clean", "corrupt")
    np.testing.assert_array_equal(pair.a.attentions[:, :, :2, :2], pair.b.attentions[:, :, :2, :2])
    assert not np.array_equal(pair.a.attentions, pair.b.attentions)
    assert pair.swapped().a is pair.b


def test_different_lengths_are_refused_with_both(models):
    with pytest.raises(InputError, match="8 tokens .* 7"):
        texts_pair(models["a"], IDS, IDS[:7], Trace)


def test_different_shapes_are_refused_naming_both_numbers(models):
    with pytest.raises(InputError, match="2 layers .* 3"):
        check_same_shape(models["a"], models["deep"])
    with pytest.raises(InputError, match="8 query heads .* 4"):
        models_pair(models["a"], models["gpt2"], IDS, Trace)


def test_models_without_a_tokenizer_need_the_same_number_of_ids(models, tmp_path, minilm):
    check_same_vocab(models["a"], models["b"])
    wide = load_model(tiny_llama(tmp_path / "wide", seed=1, n_layer=2, vocab=60))
    with pytest.raises(InputError, match="50 token ids and wide 60"):
        check_same_vocab(models["a"], wide)
    with pytest.raises(InputError, match="a has no tokenizer"):
        check_same_vocab(models["a"], minilm)


def test_different_vocabularies_name_both_sizes_and_the_first_difference(minilm, smollm2):
    with pytest.raises(InputError, match=r"30,522 tokens.*49,152 tokens.*token 0 is"):
        check_same_vocab(minilm, smollm2)
    check_same_vocab(smollm2, smollm2)
