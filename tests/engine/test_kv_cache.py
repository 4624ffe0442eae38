"""The engine's KV cache: a causal model reuses the tokens shared with its previous run.

Every cached run is checked against a full recompute on a fresh model object within 1e-5.
"""

import threading

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.calc import calc_inputs_from_config, calculate
from attnviz.engine.computing.trace import Trace
from held_run import HeldRun
from tiny import FIXTURES
from tiny import tiny_llama
from attnviz.engine.computing.request import RunRequest

ATOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("kv")
    return {
        "llama_gqa": tiny_llama(root / "gqa", seed=3, n_head=8, n_kv_head=2),
        "mistral_window": tiny_llama(root / "win", seed=4, n_head=4, n_kv_head=2, n_layer=3,
                                     model_type="mistral", sliding_window=4),
        "gpt2": FIXTURES / "gpt2",
        "qwen2": FIXTURES / "qwen2",  # q/k/v biases
        # one KV head: a cut of its K [1, T, d_head] is contiguous (the earlier runs' arrays must
        # not be shared with the current one's, which appends in place)
        "llama_mqa": tiny_llama(root / "mqa", seed=5, n_head=4, n_kv_head=1),
    }


def edits(vocab, max_len, seed):
    """A seeded sequence of token-id lists, each an edit of the one before it."""
    rng = np.random.default_rng(seed)
    new = lambda n: [int(i) for i in rng.integers(0, vocab, n)]  # noqa: E731

    def other(i):  # any id but i
        return int((i + 1 + rng.integers(0, vocab - 1)) % vocab)

    ids: list[int] = []
    steps = [
        lambda s: new(int(rng.integers(5, 12))),                       # empty -> non-empty
        lambda s: s + new(1),                                          # append one
        lambda s: s + new(int(rng.integers(2, 6))),                    # append several
        lambda s: s[:-int(rng.integers(1, 3))],                        # delete at the end
        lambda s: s,                                                   # identical text
        lambda s: (lambda j: s[:j] + [other(s[j])] + s[j + 1:])(int(rng.integers(1, len(s)))),
        lambda s: (lambda j: s[:j] + new(2) + s[j:])(int(rng.integers(1, len(s)))),  # insert
        lambda s: s[:int(rng.integers(1, len(s)))],                    # shorter: a strict prefix
        lambda s: [other(s[0])] + new(int(rng.integers(4, 10))),       # replace everything
        lambda s: [],                                                  # everything deleted
        lambda s: new(3),                                              # empty -> non-empty
    ]
    for step in steps:
        ids = step(ids)[:max_len]
        yield ids
    for _ in range(25):  # then random typing
        kind = rng.integers(0, 5)
        if kind == 0 or len(ids) < 2:
            ids = ids + new(int(rng.integers(1, 4)))
        elif kind == 1:
            ids = ids[:-1]
        elif kind == 2:
            j = int(rng.integers(0, len(ids)))
            ids = ids[:j] + [other(ids[j])] + ids[j + 1:]
        elif kind == 3:
            ids = ids + new(1)
        else:
            ids = list(ids)
        ids = ids[:max_len]
        yield ids


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def kv_formula(cfg, T):
    return cfg.n_layer * cfg.n_kv_head * cfg.d_head * 2 * 4 * T


@pytest.mark.parametrize("name", ["llama_gqa", "mistral_window", "gpt2", "qwen2", "llama_mqa"])
@pytest.mark.parametrize("seed", [0, 1])
def test_edits_match_full_recompute(folders, name, seed):
    model = load_model(folders[name])
    fresh = load_model(folders[name])  # never caches here: use_cache=False
    cfg = model.config
    prev: list[int] = []
    seen: list[list[int]] = []  # every run before this one (the cache keeps the last few)
    for ids in edits(min(cfg.vocab_size, 48), min(cfg.max_positions, 40), seed):
        if not ids:  # everything deleted: refused (nothing to show), the cache left as it was
            with pytest.raises(InputError, match="no token ids"):
                model.run(ids=ids)
            continue
        got = model.run(ids=ids)
        want = fresh.run(ids=ids, request=RunRequest(use_cache=False))
        T = len(ids)
        assert got.attentions.shape == want.attentions.shape == (cfg.n_layer, cfg.n_head, T, T)
        if T:
            assert np.abs(got.attentions - want.attentions).max() <= ATOL, (ids, prev)
        # at least the last run's common prefix; at most the longest any earlier run shares
        p, best = common_prefix(prev, ids), max((common_prefix(h, ids) for h in seen), default=0)
        assert p <= got.cache_reused <= best, (prev, ids)
        assert got.cache_computed == T - got.cache_reused
        assert (want.cache_reused, want.cache_computed, want.cache_bytes) == (0, T, 0)
        assert got.cache_bytes == kv_formula(cfg, T)
        assert got.cache_used and not want.cache_used
        prev = ids
        seen.append(ids)


def test_window_shorter_than_text_is_used(folders):
    model = load_model(folders["mistral_window"])
    ids = list(range(3, 23))
    model.run(ids=ids[:12])
    r = model.run(ids=ids)
    assert (r.cache_reused, r.cache_computed) == (12, 8)
    q, k = np.nonzero(r.attentions[0, 0] > 0)
    assert np.all(q - k < 4) and np.all(k <= q)  # the window: 4 keys at most per row
    np.testing.assert_allclose(r.attentions, model.run(ids=ids, request=RunRequest(use_cache=False)).attentions, atol=ATOL)


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2"])
def test_cache_bytes_match_the_calculator(folders, name):
    model = load_model(folders[name])
    cfg = model.config
    T = 23
    r = model.run(ids=list(range(1, T + 1)), trace=Trace(kv=True))
    calc = calculate(calc_inputs_from_config(cfg, seq_len=T, kv_dtype="fp32"))
    assert r.cache_bytes == kv_formula(cfg, T) == calc.kv_bytes_sequence == calc.kv_bytes_total
    assert r.cache_bytes == sum(a.nbytes for a in r.trace.k + r.trace.v)
    assert len(r.trace.k) == cfg.n_layer  # the last layer's K and V too
    assert r.trace.k[0].shape == (cfg.n_kv_head, T, cfg.d_head)


def test_window_model_keeps_every_token(folders):
    """The engine keeps K/V of all T tokens (an edit anywhere needs them); the calculator counts the
    rolling buffer of `window` tokens a generation server would keep."""
    model = load_model(folders["mistral_window"])
    cfg = model.config
    T = 20
    r = model.run(ids=list(range(1, T + 1)))
    inputs = calc_inputs_from_config(cfg, seq_len=T, kv_dtype="fp32")
    assert r.cache_bytes == kv_formula(cfg, T)
    assert calculate(inputs).kv_bytes_sequence == kv_formula(cfg, cfg.sliding_window)
    assert calculate(inputs, sliding_window=None).kv_bytes_sequence == r.cache_bytes


def test_bert_never_caches():
    model = load_model(FIXTURES / "bert")
    assert not model.config.causal
    for ids in ([2, 5, 7, 9], [2, 5, 7, 9, 11], [2, 5, 7, 9, 11]):
        r = model.run(ids=ids)
        assert (r.cache_reused, r.cache_computed, r.cache_bytes) == (0, len(ids), 0)
        assert r.attentions.flags.writeable
    model.clear_cache()
    assert model.run(ids=[2, 5]).cache_bytes == 0


def test_use_cache_false_leaves_the_cache_alone(folders):
    model = load_model(folders["llama_gqa"])
    a = [4, 8, 15, 16, 23, 42]
    first = model.run(ids=a)
    other = model.run(ids=[9, 9, 9], request=RunRequest(use_cache=False))
    assert (other.cache_reused, other.cache_computed) == (0, 3)
    # the cache's bytes, still held, are reported beside a flag saying this run did not use them
    assert other.cache_bytes == first.cache_bytes and first.cache_used and not other.cache_used
    assert other.attentions.flags.writeable  # not the cache's array
    r = model.run(ids=a + [1])
    assert (r.cache_reused, r.cache_computed) == (len(a), 1)  # the cached text is still a's, untouched:
    np.testing.assert_allclose(r.attentions, model.run(ids=a + [1],
                                                       request=RunRequest(use_cache=False)).attentions, atol=ATOL)


def test_same_ids_reuse_everything_and_shorter_cuts(folders):
    model = load_model(folders["llama_gqa"])
    ids = list(range(10, 30))
    first = model.run(ids=ids)
    again = model.run(ids=ids)
    assert (again.cache_reused, again.cache_computed) == (20, 0)
    np.testing.assert_array_equal(again.attentions, first.attentions)
    short = model.run(ids=ids[:7])
    assert (short.cache_reused, short.cache_computed) == (7, 0)
    assert short.cache_bytes == kv_formula(model.config, 7)
    np.testing.assert_array_equal(short.attentions, first.attentions[:, :, :7, :7])
    after = model.run(ids=ids[:7] + [3])  # the cut is what the cache holds now
    assert (after.cache_reused, after.cache_computed) == (7, 1)
    np.testing.assert_allclose(after.attentions, model.run(ids=ids[:7] + [3],
                                                           request=RunRequest(use_cache=False)).attentions,
                               atol=ATOL)


def test_results_cannot_corrupt_the_cache(folders):
    model = load_model(folders["llama_gqa"])
    ids = list(range(1, 15))
    r = model.run(ids=ids)
    with pytest.raises(ValueError):
        r.attentions[0, 0, 0, 0] = 5.0
    with pytest.raises(ValueError):
        r.attentions.flags.writeable = True
    r.input_ids[0] = 7  # the cache keeps its own copy of the ids
    again = model.run(ids=ids + [3])
    assert again.cache_reused == len(ids)
    want = model.run(ids=ids + [3], request=RunRequest(use_cache=False)).attentions
    np.testing.assert_allclose(again.attentions, want, atol=ATOL)


def test_clear_cache(folders):
    model = load_model(folders["llama_gqa"])
    model.run(ids=[1, 2, 3, 4])
    model.clear_cache()
    r = model.run(ids=[1, 2, 3, 4, 5])
    assert (r.cache_reused, r.cache_computed) == (0, 5)


def test_busy_lock_computes_in_full_without_the_cache(folders):
    model = load_model(folders["llama_gqa"])
    model.run(ids=[5, 6, 7])
    held = HeldRun(model, [5, 6, 7, 1])  # another thread's run holds the cache
    held.start()
    try:
        r = model.run(ids=[5, 6, 7, 8])
    finally:
        held.end()
    assert (r.cache_reused, r.cache_computed) == (0, 4)
    after = model.run(ids=[5, 6, 7, 9])  # the full run left the cache as it was: [5, 6, 7]
    assert (after.cache_reused, after.cache_computed) == (3, 1)
    np.testing.assert_allclose(r.attentions, model.run(ids=[5, 6, 7, 8],
                                                       request=RunRequest(use_cache=False)).attentions,
                               atol=ATOL)


def test_two_threads_share_one_model(folders):
    model = load_model(folders["llama_gqa"])
    fresh = load_model(folders["llama_gqa"])
    rng = np.random.default_rng(7)
    seqs = [[int(i) for i in rng.integers(0, 50, 30)] for _ in range(2)]
    want = {t: [fresh.run(ids=seqs[t][:n], request=RunRequest(use_cache=False)).attentions for n in range(10, 31)]
            for t in range(2)}
    start = threading.Barrier(2)
    errors = []

    def typing(t):
        try:
            start.wait()
            for n, expect in zip(range(10, 31), want[t]):
                got = model.run(ids=seqs[t][:n]).attentions
                assert np.abs(got - expect).max() <= ATOL
        except Exception as exc:  # reported below: pytest does not see other threads' failures
            errors.append(exc)

    threads = [threading.Thread(target=typing, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_local_layers_need_their_window_but_the_engine_holds_every_token():
    """A tiny Gemma-3-shaped model (7 layers, 6 local with a window of 8, 1 global), 20 tokens:
    the model needs 6 x 8 + 1 x 20 tokens of K and V (llama.cpp and transformers allocate that,
    the calculator counts it); the engine holds all 20 on every layer, to reuse prefixes."""
    from attnviz.engine.calc import kv_cache_needed

    model = load_model(FIXTURES / "gemma3")
    cfg = model.config
    assert sum(cfg.is_local(i) for i in range(cfg.n_layer)) == 6 and cfg.sliding_window == 8
    per_token_layer = cfg.n_kv_head * cfg.d_head * 2 * 4  # K and V, float32
    r = model.run(ids=list(range(1, 21)))
    assert r.cache_bytes == 20 * 7 * per_token_layer
    assert kv_cache_needed(cfg, 20) == (6 * 8 + 1 * 20) * per_token_layer
    assert kv_cache_needed(cfg, 5) == 5 * 7 * per_token_layer  # shorter than the window


def test_appended_positions_are_written_in_place_without_changing_earlier_views():
    """A generation step's K and V go after the cached ones in the same array while it has room;
    a view handed out before never changes, and another prefix gets an array of its own."""
    from attnviz.engine.computing.trace import KV_ROOM, append_positions

    rng = np.random.default_rng(0)
    first = np.ascontiguousarray(rng.standard_normal((2, 5, 3), dtype=np.float32))
    a = append_positions(first, 5, rng.standard_normal((2, 1, 3), dtype=np.float32))  # copied, with room
    kept = a.copy()
    b = append_positions(a, 6, rng.standard_normal((2, 2, 3), dtype=np.float32))  # in place
    assert b.base is a.base and b.shape == (2, 8, 3) and b.nbytes == 2 * 8 * 3 * 4
    np.testing.assert_array_equal(a, kept)  # a view handed out earlier is unchanged
    np.testing.assert_array_equal(b[:, :6], kept)
    b_before = b.copy()
    c = append_positions(b, 7, np.zeros((2, 1, 3), np.float32))  # a shorter prefix: a new array
    assert c.base is not b.base
    np.testing.assert_array_equal(b, b_before)  # b's position 7 is not overwritten
    np.testing.assert_array_equal(c[:, :7], b[:, :7])
    d = append_positions(b, 8, np.zeros((2, KV_ROOM, 3), np.float32))  # no room left: a new array
    assert d.base is not b.base and d.shape == (2, 8 + KV_ROOM, 3)


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2"])
def test_a_runs_first_layers_are_handed_over_early_and_equal_the_runs_own(folders, name):
    """RunRequest(early=(k, fn)): fn gets layers 0..k-1 before the run goes on, the same numbers the
    run returns for them, on a full run and on a cached step; and nothing when the cache held
    every token (nothing was computed)."""
    model = load_model(folders[name])
    V = model.config.vocab_size
    seen = []
    full = model.run(ids=list(range(1, 9)), request=RunRequest(early=(1, seen.append)))
    assert len(seen) == 1 and seen[0].attentions.shape == (1,) + full.attentions.shape[1:]
    np.testing.assert_array_equal(seen[0].attentions, full.attentions[:1])
    step = model.run(ids=list(range(1, 9)) + [V - 1], request=RunRequest(early=(1, seen.append)))
    assert step.cache_reused == 8 and len(seen) == 2
    np.testing.assert_array_equal(seen[1].attentions, step.attentions[:1])
    assert seen[1].n_tokens == 9 and seen[1].cache_reused == 8
    model.run(ids=list(range(1, 9)) + [V - 1], request=RunRequest(early=(1, seen.append)))  # all cached: no call
    assert len(seen) == 2
    model.run(ids=[1, 2, 3], request=RunRequest(early=(model.config.n_layer, seen.append)))  # every layer: the run itself
    assert len(seen) == 2


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2"])
def test_a_stopped_run_stops_at_a_layer_and_leaves_the_cache_with_the_last_whole_run(folders, name):
    """RunRequest(stop=fn): fn is asked before each layer; once it says True the run raises
    Cancelled there, having computed no later layer, and the KV cache still holds the last whole
    run: the next runs equal a fresh model's."""
    from attnviz.engine.errors import Cancelled

    model, fresh = load_model(folders[name]), load_model(folders[name])
    V, n_layer = model.config.vocab_size, model.config.n_layer
    base = list(range(1, 9))
    model.run(ids=base)  # the cache holds 8 tokens
    asked, seen = [], []

    def stop():
        asked.append(1)
        return len(asked) > 1  # go through layer 0, stop before layer 1

    with pytest.raises(Cancelled, match="before layer 1"):
        model.run(ids=base + [V - 1, V - 2], request=RunRequest(stop=stop, early=(1, seen.append)))
    assert len(asked) == 2 and len(seen) == 1  # layer 0 done (handed over early), then stopped
    for ids in (base + [V - 1], base + [V - 3, 5], base[:5]):
        got, want = model.run(ids=ids), fresh.run(ids=ids, request=RunRequest(use_cache=False))
        np.testing.assert_allclose(got.attentions, want.attentions, atol=ATOL)
    assert model.run(ids=base[:5] + [7]).cache_reused == 5
    calls = []
    # never stops: every layer (a new first token: no kept run shares a prefix)
    full = model.run(ids=[V - 4] + base, request=RunRequest(stop=lambda: calls.append(1) and False))
    assert len(calls) == n_layer and full.attentions.shape[0] == n_layer


def test_a_run_starts_from_the_earlier_run_with_the_longest_prefix(folders):
    """Typing into a byte-level BPE re-splits the last word as it grows: ids ending X, then X Y,
    then Z (the letters merged), then X W. The last run shares two tokens with the one before it;
    the run before that shares three: the cache starts from it and computes one row."""
    model, fresh = load_model(folders["llama_gqa"]), load_model(folders["llama_gqa"])
    base = [3, 9, 4, 7]
    for ids, reused in ((base + [11], 0), (base + [11, 12], 5), (base + [13], 4), (base + [11, 14], 5)):
        got = model.run(ids=ids)
        assert (got.cache_reused, got.cache_computed) == (reused, len(ids) - reused), ids
        np.testing.assert_allclose(got.attentions, fresh.run(ids=ids,
                                                             request=RunRequest(use_cache=False)).attentions,
                                   atol=ATOL)
    # a token deleted and typed again: its run is kept whole, nothing is computed
    model.run(ids=base + [11])
    again = model.run(ids=base + [11, 14])
    assert (again.cache_reused, again.cache_computed) == (6, 0)
    np.testing.assert_allclose(again.attentions, fresh.run(ids=base + [11, 14],
                                                           request=RunRequest(use_cache=False)).attentions,
                               atol=ATOL)
    # the current run is what the model holds: its bytes are this text's K and V
    assert again.cache_bytes == kv_formula(model.config, 6)


@pytest.mark.parametrize("name", ["llama_mqa", "llama_gqa"])
def test_an_earlier_run_is_never_written_by_a_later_one(folders, name):
    """A shorter text cuts the current run and keeps the whole one among the earlier runs; the next
    token is then appended to the cut in place: the whole run's rows stay as they were."""
    model, fresh = load_model(folders[name]), load_model(folders[name])
    whole = [5, 6, 7, 8, 9, 10]
    model.run(ids=whole)
    model.run(ids=whole[:4])  # cut to 4 tokens
    model.run(ids=whole[:4] + [20])  # appended after the cut
    model.run(ids=whole[:4] + [20, 21])  # and in place after that
    back = model.run(ids=whole)
    assert (back.cache_reused, back.cache_computed) == (6, 0)
    np.testing.assert_allclose(back.attentions, fresh.run(ids=whole,
                                                          request=RunRequest(use_cache=False)).attentions, atol=ATOL)
    on = model.run(ids=whole + [11])  # a new token reads the whole run's cached keys and values
    assert (on.cache_reused, on.cache_computed) == (6, 1)
    np.testing.assert_allclose(on.attentions, fresh.run(ids=whole + [11],
                                                        request=RunRequest(use_cache=False)).attentions, atol=ATOL)


def test_the_earlier_runs_kept_are_few_and_small(folders, monkeypatch):
    from attnviz.engine.computing import trace

    model = load_model(folders["llama_gqa"])
    runs = [[1, 2, 3, 10 + j] for j in range(trace.EARLIER_RUNS + 2)]  # each shares [1, 2, 3] only
    for ids in runs:
        last = model.run(ids=ids)
    assert last.cache_earlier[0] == trace.EARLIER_RUNS
    assert model.run(ids=runs[0]).cache_reused == 3  # the oldest was let go
    assert model.run(ids=runs[-3]).cache_reused == 4  # a newer one is kept
    # a run whose ids the current run holds is dropped: it could give nothing more
    model.clear_cache()
    model.run(ids=[1, 2, 3])
    assert model.run(ids=[1, 2, 3, 4]).cache_earlier == (0, 0)
    assert model.run(ids=[7, 8]).cache_earlier[0] == 1  # [1, 2, 3, 4] kept
    # the byte limit: with no room, no earlier run is kept and a text typed again is computed again
    monkeypatch.setattr(trace, "EARLIER_BYTES", 0)
    model.run(ids=[40, 41, 42])
    assert model.run(ids=[45, 41, 42]).cache_earlier == (0, 0)
    assert model.run(ids=[40, 41, 42]).cache_reused == 0
    monkeypatch.undo()
    model.run(ids=[40, 41, 42])
    model.clear_cache()  # forgets the earlier runs too
    assert model.run(ids=[40, 41, 42]).cache_reused == 0


def test_the_room_grows_with_the_positions_so_a_long_generation_copies_rarely():
    """append_positions one position at a time: a new array only when the room is used up, its
    room a quarter of its positions (at least KV_ROOM), so T positions are copied O(log T) times;
    the values are every position's and the view's nbytes count the positions held, not the room."""
    from attnviz.engine.computing.trace import KV_ROOM, ROOM_SHARE, append_positions, kv_room

    assert kv_room(1) == kv_room(KV_ROOM * ROOM_SHARE + ROOM_SHARE - 1) == KV_ROOM
    assert kv_room(KV_ROOM * ROOM_SHARE + ROOM_SHARE) == KV_ROOM + 1
    assert kv_room(4000) == 4000 // ROOM_SHARE
    T = 4000
    rows = np.random.default_rng(1).standard_normal((2, T, 3), dtype=np.float32)
    a, copies, ends = rows[:, :1].copy(), 0, []
    for p in range(1, T):
        before = a.base
        a = append_positions(a, p, rows[:, p:p + 1])
        if a.base is not before:
            copies += 1
            ends.append(a.base.shape[1])
            assert a.base.shape[1] == p + 1 + kv_room(p + 1)
    np.testing.assert_array_equal(a, rows)
    assert a.shape == (2, T, 3) and a.nbytes == rows.nbytes
    assert ends[:4] == [1 + 1 + KV_ROOM, 66 + 1 + KV_ROOM, 131 + 1 + KV_ROOM, 196 + 1 + KV_ROOM]
    assert copies <= 20 < T // KV_ROOM  # (fixed room: one copy every KV_ROOM positions)
    whole = append_positions(np.empty((2, 0, 3), np.float32), 0, rows)  # from scratch: KV_ROOM
    assert whole.base.shape == (2, T + KV_ROOM, 3) and whole.nbytes == rows.nbytes
