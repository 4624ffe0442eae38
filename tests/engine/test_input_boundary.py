"""Text and ids at the engine boundary: `Model.run` takes any str (lone surrogates become
U+FFFD with a notice), refuses anything else with InputError, never returns a 0-token result, and
never returns NaN patterns."""

import numpy as np
import pytest

from attnviz.engine import InputError, ModelLoadError, load_model
from attnviz.engine.computing.text_input import clean_text, parse_typed_ids
from attnviz.engine.computing.patterns import check_finite, check_index
from tiny import byte_level_tokenizer_json, llama_config, llama_tensors, tiny_llama, tiny_text_model, write_model
from attnviz.engine.computing.request import RunRequest

SURROGATE_NOTICE = "lone surrogate"


@pytest.fixture(scope="module")
def text_model(tmp_path_factory):
    return load_model(tiny_text_model(tmp_path_factory.mktemp("bytes") / "m"))


@pytest.fixture(scope="module")
def ids_model(tmp_path_factory):
    return load_model(tiny_llama(tmp_path_factory.mktemp("ids") / "m"))  # no tokenizer.json


def assert_valid(result, model):
    T = result.n_tokens
    assert T >= 1
    assert result.attentions.shape == (model.config.n_layer, model.config.n_head, T, T)
    assert np.isfinite(result.attentions).all()
    np.testing.assert_allclose(result.attentions.sum(-1), 1.0, atol=1e-4)
    assert len(result.tokens) == len(result.labels) == len(result.offsets) == T


# ---- text: lone surrogates -----------------------------------------------------------------------

def test_clean_text_replaces_each_lone_surrogate_one_for_one():
    assert clean_text("plain text") == ("plain text", None)
    text, notice = clean_text("a\ud800b\udfff\udc80")
    assert text == "a\ufffdb\ufffd\ufffd" and len(text) == 5  # offsets still index the original
    assert SURROGATE_NOTICE in notice and notice.startswith("3 ")
    assert clean_text("\ud83d")[1].startswith("1 lone surrogate ")


@pytest.mark.parametrize("text", ["keys\ud800 are", "\udcff", "a\ud83d\ude00b", "\ud800" * 40])
def test_surrogates_run_with_a_notice_on_minilm(minilm, text):
    r = minilm.run(text)  # was: TypeError: TextInputSequence must be str (from tokenizers)
    assert_valid(r, minilm)
    assert r.text == text.translate({c: 0xFFFD for c in range(0xD800, 0xE000)})
    assert SURROGATE_NOTICE in r.notice
    for (a, b), special in zip(r.offsets, [t in ("[CLS]", "[SEP]") for t in r.tokens]):
        assert special or 0 <= a < b <= len(text)


def test_surrogates_on_a_byte_level_decoder_keep_offsets_aligned(text_model):
    r = text_model.run("ab\udc00cd")
    assert_valid(r, text_model)
    assert r.text == "ab\ufffdcd" and "1 lone surrogate" in r.notice
    # byte-level: U+FFFD is 3 UTF-8 bytes, 3 tokens, each spanning the one character
    assert [r.text[a:b] for a, b in r.offsets] == ["a", "b", "\ufffd", "\ufffd", "\ufffd", "c", "d"]


def test_clean_text_gives_no_notice_and_keeps_the_cache(text_model):
    a = text_model.run("the cat")
    assert a.notice is None
    b = text_model.run("the cat sat")
    assert b.notice is None and b.cache_reused > 0


# ---- text: what is not text ----------------------------------------------------------------------

@pytest.mark.parametrize("bad, match", [
    (b"bytes", "must be a str, got bytes .*decode it first"),
    (bytearray(b"x"), "must be a str, got bytearray"),
    (42, "must be a str, got int 42"),
    (["a", "b"], "must be a str, got list"),
    (np.array(["a"]), "must be a str, got ndarray"),
])
def test_non_str_text_is_an_input_error(minilm, bad, match):
    with pytest.raises(InputError, match=match):
        minilm.run(bad)


def test_neither_or_both(minilm):
    with pytest.raises(InputError, match="give text or ids to run"):
        minilm.run()
    with pytest.raises(InputError, match="not both"):
        minilm.run("a", ids=[1])


# ---- empty input ---------------------------------------------------------------------------------

def test_empty_text_on_a_model_with_special_tokens_is_valid(minilm):
    r = minilm.run("")
    assert r.tokens == ["[CLS]", "[SEP]"] and r.notice is None
    assert_valid(r, minilm)


def test_empty_text_on_a_decoder_without_bos_is_an_input_error(text_model):
    """SmolLM2 adds no BOS: an empty text is 0 tokens, and a 0-token result is never returned.
    The window shows its empty state for an empty sentence (window.py `_on_compute_failed`)."""
    for text in ("",):
        with pytest.raises(InputError, match="gives no tokens; type something"):
            text_model.run(text)
    assert_valid(text_model.run(" "), text_model)  # a space is a token


def test_empty_text_on_a_model_without_tokenizer(ids_model):
    for text in ("", "   ", ",,"):
        with pytest.raises(InputError, match="type token ids"):
            ids_model.run(text)


@pytest.mark.parametrize("ids", [[], (), np.zeros(0, dtype=np.int64), np.zeros(0), iter([])])
def test_empty_ids_are_an_input_error(minilm, ids):
    with pytest.raises(InputError, match="no token ids given"):
        minilm.run(ids=ids)


# ---- ids -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("ids, match", [
    ([5, -1], "token id -1 at position 1 is outside this model's vocabulary 0..30521"),
    ([30522], "token id 30522 at position 0 is outside"),
    ([2 ** 80], "outside"),
    (np.array([3, 40000]), "token id 40000 at position 1 is outside"),
    (np.array([-2], dtype=np.int8), "token id -2 at position 0"),
    ([1.0], "position 0 holds float 1.0"),
    ([True, 5], "position 0 holds bool"),
    ([np.float32(3)], "position 0 holds float32"),
    (["5"], "position 0 holds str '5'"),
    ([None], "position 0 holds NoneType"),
    ([[1], [2, 3]], "position 0 holds list"),
    (np.array([[1, 2]]), "flat list of integers"),
    (np.array([1.5]), "position 0 holds"),
    ("123", "flat list of integers, got str '123'"),
    (b"12", "flat list of integers, got bytes"),
    (7, "list of integers, got int 7"),
    (None, "give text or ids"),
])
def test_bad_ids_are_input_errors_with_the_position(minilm, ids, match):
    with pytest.raises(InputError, match=match):
        minilm.run(ids=ids)


def test_good_ids_in_any_integer_form(minilm):
    want = minilm.run(ids=[1996, 6309]).attentions
    for ids in ((1996, 6309), np.array([1996, 6309], dtype=np.int32), np.array([1996, 6309], np.uint16),
                [np.int64(1996), 6309], range(1996, 1998)):
        r = minilm.run(ids=ids)
        assert r.input_ids.dtype == np.int64 and r.input_ids.tolist()[0] == 1996
        if not isinstance(ids, range):
            np.testing.assert_array_equal(r.attentions, want)


def test_ids_longer_than_the_positions_truncate_or_say_so(text_model):
    ids = list(range(100))
    with pytest.raises(InputError, match="100 tokens is longer than this model's 64 positions"):
        text_model.run(ids=ids)
    r = text_model.run(ids=ids, request=RunRequest(truncate=True))
    assert r.truncated and r.n_tokens == 64 and r.n_tokens_full == 100
    assert_valid(r, text_model)


# ---- typed ids (a model without tokenizer.json) ----------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("5, 17 3", [5, 17, 3]), ("  7 ", [7]), ("+4", [4]), ("-1", [-1]), ("", []),
    ("٣", None), ("²", None), ("5,x", None), ("1.5", None), ("0x10", None),
])
def test_parse_typed_ids(text, want):
    assert parse_typed_ids(text) == want


def test_typed_ids_misuse_is_an_input_error(ids_model):
    with pytest.raises(InputError, match="token id -1 at position 0 is outside"):
        ids_model.run("-1")
    with pytest.raises(InputError, match="too large to be a token id"):
        ids_model.run("9" * 5000)  # int() would refuse this many digits with a ValueError
    with pytest.raises(InputError, match="type token ids"):
        ids_model.run("٣")  # an Arabic-Indic digit: int() takes it, the prompt does not
    r = ids_model.run("3, 7")
    assert r.text == "3, 7" and r.notice is None and r.input_ids.tolist() == [3, 7]


# ---- the model's own files, checked at run time too ------------------------------------------------

def test_tokenizer_ids_beyond_the_embedding_are_a_clear_error(tmp_path):
    """A tokenizer.json with more tokens than the model's embedding rows (the loader refuses it
    too): a run never reaches an IndexError."""
    from attnviz.engine.reading.tokenizer import TextTokenizer

    model = load_model(tiny_llama(tmp_path / "small", vocab=50))
    (tmp_path / "tokenizer.json").write_text(byte_level_tokenizer_json(), encoding="utf-8")
    model.tokenizer = TextTokenizer(tmp_path / "tokenizer.json")
    with pytest.raises(ModelLoadError, match=r"token id \d+ .* 50 embedding rows .* does not match"):
        model.run("zzz")


def test_nan_patterns_are_refused_naming_the_first_layer(tmp_path, text_model):
    att = np.full((3, 2, 4, 4), 0.25, dtype=np.float32)
    check_finite(text_model.name, att)
    att[1, 1, 2, 0] = np.nan
    att[2, 0, 0, 0] = np.inf
    with pytest.raises(ModelLoadError, match="layer 1 gives non-finite attention weights"):
        check_finite(text_model.name, att)
    # a NaN weight in layer 1: refused at load, or at the first run naming the layer
    cfg = llama_config()
    t = llama_tensors(cfg)
    t["model.layers.1.self_attn.q_proj.weight"][0, 0] = np.nan
    folder = write_model(tmp_path / "nan", cfg, t)
    with pytest.raises(ModelLoadError, match="layer 1|NaN|non-finite"):
        load_model(folder).run(ids=[1, 2, 3])


def test_a_non_finite_run_clears_the_kv_cache(tmp_path, monkeypatch):
    """Model.run is the one place non-finite weights are refused: the run raises naming the layer,
    and the keys and values it cached are dropped, so the next run recomputes every row."""
    model = load_model(tiny_llama(tmp_path / "m"))
    model.run(ids=[1, 2, 3])
    assert model.run(ids=[1, 2, 3]).cache_reused == 3  # cached
    from attnviz.engine.computing import model as model_module

    forward = model_module.forward

    def broken(config, weights, ids, trace, *rest):  # the forward pass, with a NaN in layer 1
        forward(config, weights, ids, trace, *rest)
        trace.attentions = trace.attentions.copy()
        trace.attentions[1, 0, -1, 0] = np.nan  # the new token's row

    monkeypatch.setattr(model_module, "forward", broken)
    with pytest.raises(ModelLoadError, match="layer 1 gives non-finite attention weights"):
        model.run(ids=[1, 2, 3, 4])
    monkeypatch.undo()
    again = model.run(ids=[1, 2, 3, 4])
    assert again.cache_reused == 0 and np.isfinite(again.attentions).all()


def test_an_index_out_of_range_counts_the_layers_in_words():
    with pytest.raises(InputError) as err:
        check_index("layer", 99, 1)
    assert str(err.value) == "layer 99 is out of range: the model has 1 layer (0..0)"
    with pytest.raises(InputError) as err:
        check_index("head", 12, 12, "MiniLM", " per layer")
    assert str(err.value) == "head 12 is out of range: MiniLM has 12 heads per layer (0..11)"
    from attnviz.engine.reading.checkpoint_list import check_index as checkpoint_index

    with pytest.raises(InputError, match="this model has 1 checkpoint [(]"):
        checkpoint_index(1, 1)
