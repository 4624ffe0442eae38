"""What a cold start skips gives the numbers it gave before, bit for bit: a quantised unembedding
streamed a block at a time (engine/computing/logits.py's Unembedding) against the whole table
dequantised to float32 first, a SentencePiece vocabulary's merge order read from the cache
folder against the one derived from its scores (engine/reading/gguf_vocab.py), and token labels
from special ids read once against a fresh tokenizer's (engine/reading/tokenizer.py)."""

import contextlib
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import predict as P
from attnviz.engine.computing import logits as L
from attnviz.engine.errors import NoPrediction
from attnviz.engine.reading import gguf_vocab as V
from attnviz.engine.reading.gguf_file import metadata, open_gguf
from attnviz.engine.reading.gguf_model import gguf_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny import FIXTURES  # noqa: E402
from gguf_files import Q, gguf_tensors, spm_vocab_kv, write_gguf, write_vocab_gguf  # noqa: E402
from attnviz.engine.computing.request import RunRequest

TEXT = "One, two, three, four, five"
SPM_CASES = json.loads((FIXTURES / "spm" / "tokens.json").read_text(encoding="utf-8"))["cases"]


def float32_head(head: L.LMHead) -> L.LMHead:
    """A reference head: the whole quantised table dequantised to float32 at once."""
    assert isinstance(head.w_u, L.Unembedding)
    return dataclasses.replace(head, w_u=np.ascontiguousarray(np.asarray(head.w_u.table, np.float32)))


def assert_same_numbers(model, streamed: L.LMHead, whole: L.LMHead, text=None, ids=None):
    """Logits of one row and of the lens rows, the prediction, the lens and the direct logit
    attribution: equal bit for bit, over enough passes that the streamed head starts keeping (and
    then reads) its float32 rows."""
    r = model.run(text, ids=ids, trace=P.prediction_trace())
    q = len(r.trace.ids) - 1
    one, rows = r.trace.resid[-1][q:q + 1], P.lens_rows(r.trace, q)  # [1, d_model], [n_layer, d_model]
    for _ in range(L.HOLD_AFTER // 2 + 2):  # two passes a turn
        assert np.array_equal(L.vocab_logits(streamed, one), L.vocab_logits(whole, one))
        assert np.array_equal(L.vocab_logits(streamed, rows), L.vocab_logits(whole, rows))
    a, b = P.predict(streamed, r.trace, q), P.predict(whole, r.trace, q)
    assert np.array_equal(a.logprobs, b.logprobs) and np.array_equal(a.top_ids, b.top_ids)
    la, lb = P.logit_lens(streamed, r.trace, q, int(a.top_ids[0])), P.logit_lens(whole, r.trace, q, int(a.top_ids[0]))
    assert np.array_equal(la.top_ids, lb.top_ids) and np.array_equal(la.target_logprobs, lb.target_logprobs)
    da = P.attribute(model, streamed, r.trace, q, int(a.top_ids[0]), int(a.top_ids[1]))
    db = P.attribute(model, whole, r.trace, q, int(a.top_ids[0]), int(a.top_ids[1]))
    assert np.array_equal(da.heads, db.heads) and da.logit_diff == db.logit_diff


def test_smollm2_streamed_unembedding_gives_the_whole_tables_logits(smollm2_again):
    model = smollm2_again()  # a head of its own, never used
    streamed = model.lm_head()
    assert isinstance(streamed.w_u, L.Unembedding) and streamed.w_u.rows_held == 0  # nothing held yet
    assert_same_numbers(model, streamed, float32_head(streamed), text=TEXT)
    assert streamed.w_u.rows_held == streamed.w_u.shape[0]  # held after HOLD_AFTER passes


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_1])
def test_a_tiny_gguf_streamed_in_small_blocks_gives_the_whole_tables_logits(tmp_path, monkeypatch, qtype):
    """Blocks of 7 rows (a last block shorter than the rest), the untied output head quantised."""
    monkeypatch.setattr(L, "VOCAB_BLOCK", 7)
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_model(write_gguf(tmp_path / "m.gguf", cfg, tensors, qtype))
    streamed = model.lm_head()
    assert streamed.w_u.shape[0] % 7
    assert_same_numbers(model, streamed, float32_head(streamed), ids=[3, 1, 4, 1, 5, 9, 2, 6])


def test_a_head_over_its_budget_streams_every_pass(smollm2_again):
    """An unembedding the memory budget cannot hold besides the layers never keeps float32 rows."""
    model = smollm2_again()
    head = model.lm_head()
    head = dataclasses.replace(head, w_u=L.Unembedding(head.w_u.table, hold=False))
    assert_same_numbers(model, head, float32_head(head), text=TEXT)
    assert head.w_u.rows_held == 0


def test_a_generation_of_many_steps_keeps_the_copy_from_its_first_pass(smollm2_again):
    """More steps than filling the copy costs in streamed passes: held from the first pass, and
    the generated tokens are those of a head that streams every pass."""
    from attnviz.engine.computing.generate import generate

    model = smollm2_again()
    n = L.FILL_PASSES + 1
    held = generate(model, TEXT, max_new=n)
    head = model.lm_head()
    assert head.w_u.rows_held == head.w_u.shape[0]
    other = smollm2_again()
    streaming = other.lm_head()
    streaming.w_u.hold = False  # never keeps a copy: every pass streams
    assert generate(other, TEXT, max_new=n).new_ids == held.new_ids and len(held.new_ids) == n
    assert streaming.w_u.rows_held == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf.quants quantising a NaN row
def test_a_non_finite_unembedding_row_is_named_when_a_pass_meets_it(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    tensors["output.weight"][5] = np.nan
    model = load_model(write_gguf(tmp_path / "m.gguf", cfg, tensors, Q.Q8_0))
    head = model.lm_head()
    with pytest.raises(NoPrediction, match=r"the unembedding cannot be used for prediction: tensor "
                                           r"output.weight row 5 \(token id 5\) holds non-finite"):
        L.vocab_logits(head, np.ones((1, cfg["hidden_size"]), np.float32))


@pytest.fixture
def spm(tmp_path, monkeypatch):
    """Mistral's 32,000-piece SentencePiece vocabulary in a GGUF, its cache folder in tmp_path."""
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    path = write_vocab_gguf(tmp_path / "spm.gguf", spm_vocab_kv(True, True))
    reader = open_gguf(path)
    return path, [metadata(reader, f"tokenizer.ggml.{k}") for k in ("tokens", "scores", "token_type")]


def test_the_cached_merge_order_is_the_derived_one(spm, monkeypatch):
    _, (tokens, scores, types) = spm
    want = V.score_merges(tokens, scores, types)
    assert V.cached_merges(tokens, scores, types) == want  # derived, and written
    files = list((V.cache_root() / "vocab").glob("merges-*.npy"))
    assert len(files) == 1

    def refuse(*_):
        raise AssertionError("derived again: the cache was not read")

    monkeypatch.setattr(V, "merge_ids", refuse)
    assert V.cached_merges(tokens, scores, types) == want  # read back
    other = list(scores)
    other[100] += 1.0  # another vocabulary: another key
    with pytest.raises(AssertionError, match="derived again"):
        V.cached_merges(tokens, other, types)


@pytest.mark.parametrize("damage", ["garbage", "out of range", "wrong shape"])
def test_a_damaged_cache_file_is_made_again(spm, damage):
    _, (tokens, scores, types) = spm
    want = V.score_merges(tokens, scores, types)
    V.cached_merges(tokens, scores, types)
    (file,) = (V.cache_root() / "vocab").glob("merges-*.npy")
    if damage == "garbage":
        file.write_bytes(b"\x93NUMPY not really")
    elif damage == "out of range":
        np.save(file, np.array([[0, len(tokens)]], np.int32))
    else:
        np.save(file, np.zeros((4, 3), np.int32))
    assert V.cached_merges(tokens, scores, types) == want
    assert V.cached_merges(tokens, scores, types) == want  # (rewritten)


def test_a_cache_folder_that_cannot_be_written_only_loses_the_saving(spm, tmp_path, monkeypatch):
    _, (tokens, scores, types) = spm
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("ATTNVIZ_CACHE", str(blocker))
    assert V.cached_merges(tokens, scores, types) == V.score_merges(tokens, scores, types)


def test_the_cache_keeps_the_newest_vocabularies_only(spm, monkeypatch):
    _, (tokens, scores, types) = spm
    monkeypatch.setattr(V, "KEPT_VOCABULARIES", 2)
    for k in range(4):
        other = list(scores)
        other[0] += k
        V.cached_merges(tokens, other, types)
    assert len(list((V.cache_root() / "vocab").glob("merges-*"))) == 2


def test_a_tokenizer_built_from_the_cache_encodes_as_one_built_without_it(spm):
    path, _ = spm
    fresh, _ = gguf_tokenizer(open_gguf(path))  # derives and writes the merge order
    cached, _ = gguf_tokenizer(open_gguf(path))  # reads it
    for case in SPM_CASES:
        a, b = fresh.encode(case["text"]), cached.encode(case["text"])
        assert (a.ids, a.offsets) == (b.ids, b.offsets) and a.ids == case["prefix"]


def test_the_prediction_and_the_lens_from_one_pass_are_those_of_two(smollm2):
    """predict's table reads the unembedding once for its prediction and its lens: the same bits
    as a pass for each, with the lens's target given or the prediction's top-1."""
    r = smollm2.run(TEXT, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = smollm2.lm_head()
    for q, target in ((None, None), (3, 11)):
        pred, lens = P.prediction_and_lens(head, r.trace, q, 10, target)
        want_pred = P.predict(head, r.trace, q, 10)
        want_lens = P.logit_lens(head, r.trace, q, int(want_pred.top_ids[0]) if target is None else target)
        assert np.array_equal(pred.logprobs, want_pred.logprobs) and np.array_equal(pred.top_ids, want_pred.top_ids)
        for field in ("top_ids", "top_logprobs", "target_logprobs", "target_ranks"):
            assert np.array_equal(getattr(lens, field), getattr(want_lens, field)), field
        assert lens.target == want_lens.target


def test_labels_read_the_special_tokens_once_and_give_what_a_fresh_tokenizer_gives(spm):
    """A label asks which ids are special; the tokenizer reads its thousands of added tokens once,
    not per label: the labels are those a fresh tokenizer gives for each id alone, special ones
    included, and the set special_ids() hands out is the caller's own."""
    from attnviz.engine.reading.tokenizer import TextTokenizer

    path, (tokens, _, types) = spm
    tok, _ = gguf_tokenizer(open_gguf(path))
    special = [i for i, t in enumerate(types) if t in (V.CONTROL, V.UNKNOWN)]
    ids = special + [300, 1000, 31999, 5, 300]
    assert special and set(special) <= tok.special_ids()
    mine = tok.special_ids()
    mine.add(1000)  # the caller's set: the tokenizer's own stays as it was
    assert 1000 not in tok.special_ids()
    got = tok.labels_for_ids(ids)
    for k, i in enumerate(ids):
        fresh = TextTokenizer(tok.raw).labels_for_ids([i])
        assert (got[0][k], got[1][k]) == (fresh[0][0], fresh[1][0])


def test_the_vocabularys_build_runs_no_collection_and_leaves_the_collector_as_it_was(spm, monkeypatch):
    """gguf_tokenizer pauses the garbage collector for its build (a million objects, no cycle) and
    leaves it on or off as it found it."""
    import gc
    import threading

    reader = open_gguf(spm[0])
    was_on = gc.isenabled()  # (the window's runner switches it off for the process: put back below)
    gc.enable()
    collections = []  # on this thread (another may ask for one: gc.collect)
    gc.callbacks.append(lambda phase, info: collections.append(info["generation"])
                        if phase == "start" and threading.current_thread() is threading.main_thread() else None)
    try:
        assert gc.isenabled()
        for _ in range(3):
            gguf_tokenizer(reader)
            assert gc.isenabled()
        gc.collect()  # (the callback sees a collection outside)
        assert collections.count(2) >= 1
        collections.clear()
        gguf_tokenizer(reader)
        assert collections in ([], [0])  # (at most the one its allocations set off once it is on)
        with monkeypatch.context() as m:
            m.setattr(V, "collector_paused", contextlib.nullcontext)
            collections.clear()
            gguf_tokenizer(reader)
            assert len(collections) > 10  # what it saves
        gc.disable()
        gguf_tokenizer(reader)
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.pop()
    if not was_on:  # (the pause itself, nested, on threads, after an error: test_collector_paused.py)
        gc.disable()


def same_encoding(a, b) -> bool:
    return (a.ids, a.tokens, a.labels, a.offsets, a.special) == (b.ids, b.tokens, b.labels, b.offsets, b.special)


@pytest.mark.parametrize("space_prefix", [True, False])
def test_a_tokenizer_built_for_a_text_encodes_it_as_the_whole_one(tmp_path, monkeypatch, space_prefix):
    """A one-shot command's SentencePiece tokenizer holds only the tokens and merges its text can
    meet (gguf_text_vocab.sentencepiece_for_text; tests/engine/test_gguf_text_vocab.py): that text, and any text within it, encode as with every merge
    (ids, pieces, labels, offsets), with and without the model's special tokens; byte fallback,
    control tokens in the text and scripts without their own tokens included (the llama.cpp
    cases of tests/fixtures/spm)."""
    monkeypatch.setenv("ATTNVIZ_CACHE", str(tmp_path / "cache"))
    reader = open_gguf(write_vocab_gguf(tmp_path / "spm.gguf", spm_vocab_kv(space_prefix, True)))
    whole, _ = gguf_tokenizer(reader)
    texts = [case["text"] for case in SPM_CASES[::6]] + ["One, two, three, four, five",
                                                         "<s> x</s>y <unk>ü", "  spaced  out  "]
    for text in texts:
        one, _ = gguf_tokenizer(reader, text=text)
        assert not one.for_every_text
        within = text[len(text) // 3:]
        for t, special in ((text, True), (text, False), (within, True)):
            assert same_encoding(one.encode(t, add_special_tokens=special),
                                 whole.encode(t, add_special_tokens=special)), repr(t)
        assert not one.for_every_text  # (no text it covers built every merge)
        ids = whole.encode(text).ids
        assert one.decode(ids) == whole.decode(ids)
        assert one.labels_for_ids(ids) == whole.labels_for_ids(ids)
    one, _ = gguf_tokenizer(reader, text="One, two")
    assert same_encoding(one.encode("three, four"), whole.encode("three, four"))  # another text
    assert not one.for_every_text  # (built for that text the same way)
    assert one.raw.to_str() == whole.raw.to_str() and one.for_every_text  # every merge, and kept
