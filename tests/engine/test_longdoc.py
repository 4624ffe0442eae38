"""Long texts: attention computed in row blocks from each layer's q, k and row log-sum-exp gives the
dense path's patterns, residual stream, overview cells, columns, head scores and Find; a long run
reports progress per layer and stops when cancelled; a dense request over the limit is refused."""

import threading

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.analysing import head_patterns, heads
from attnviz.engine.computing import long_patterns, longdoc
from attnviz.engine.analysing.find import find, find_long
from attnviz.engine.computing.layers import attention_pattern, causal_mask, mask_bias, repeat_kv
from attnviz.engine.computing.longdoc import LongTrace, run_long
from attnviz.engine.errors import Cancelled
from attnviz.engine.computing.trace import Trace
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

NAMES = ["gpt2", "bert", "llama_gqa", "llama_mqa", "mistral_window", "qwen2", "gemma3", "qwen3", "phi3"]


@pytest.fixture(scope="module")
def runs():
    """Each fixture on 37 ids from a 12-token alphabet (repeats for duplicate and induction):
    (model, ids, dense patterns, long patterns in blocks of 5 rows)."""
    out = {}
    for name in NAMES:
        model = load_model(FIXTURES / name)
        T = min(model.config.max_positions, 37)
        ids = np.random.default_rng(1).integers(0, 12, T)
        dense = model.run(ids=ids, request=RunRequest(use_cache=False)).attentions
        out[name] = (model, ids, dense, run_long(model, ids=ids, row_block=5).patterns)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_row_blocks_give_the_dense_softmax_of_the_same_q_and_k(runs, name):
    model, ids, dense, lp = runs[name]
    for i in range(lp.n_layer):
        window = lp.window[i]
        bias = mask_bias(causal_mask(lp.T, window)) if lp.causal else None
        want = attention_pattern(lp.q[i], repeat_kv(lp.k[i], lp.n_group), lp.scale[i], bias)
        np.testing.assert_allclose(lp.rows(i, 0, lp.T), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_row_blocks_give_the_dense_patterns(runs, name):
    """End to end, each layer reads the previous layers' outputs: float32 rounding in a different
    summation order adds up over Gemma 3's six sandwich-normed layers to 1.03e-5 at one weight."""
    model, ids, dense, lp = runs[name]
    assert (lp.n_layer, lp.n_head, lp.T) == dense.shape[:3]
    np.testing.assert_allclose(lp.dense(), dense, atol=2e-5 if name == "gemma3" else 1e-5, rtol=0)
    np.testing.assert_allclose(lp.rows(1, 7, 19, heads=[0, lp.n_head - 1], cols=(3, 30)),
                               dense[1][[0, -1], 7:19, 3:30], atol=1e-5, rtol=0)
    np.testing.assert_allclose(lp.column(4), dense[..., 4], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "mistral_window"])
def test_the_residual_stream_of_a_long_run_equals_the_dense_run(runs, name):
    model, ids, _, _ = runs[name]
    dense = model.run(ids=ids, trace=Trace(resid=True, z=True), request=RunRequest(use_cache=False)).trace
    long = run_long(model, ids=ids, row_block=3)  # result.trace is not kept: rerun with records
    trace = LongTrace(row_block=3, resid=True, z=True)
    model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    assert long.result.attentions is None and trace.attentions is None
    for a, b in zip(trace.resid + trace.z, dense.resid + dense.z):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_overview_cells_are_the_max_or_mean_of_their_blocks(runs, reduce):
    model, ids, dense, lp = runs["llama_gqa"]
    T = lp.T
    fold = np.maximum.reduceat if reduce == "max" else np.add.reduceat
    rows, cols = (np.arange(8) * T) // 8, (np.arange(6) * T) // 6
    want = fold(fold(dense[1], cols, axis=2), rows, axis=1)
    if reduce == "mean":
        want = want / np.outer(np.diff([*rows, T]), np.diff([*cols, T]))
    np.testing.assert_allclose(lp.overview(1, (8, 6), reduce), want, atol=1e-5, rtol=0)
    # one head, a region no larger than the cells: the exact weights
    np.testing.assert_allclose(lp.overview(0, (50, 50), reduce, heads=[3], region=(10, 30, 2, 25)),
                               dense[0, [3], 10:30, 2:25], atol=1e-5, rtol=0)


def test_overview_refuses_a_bad_region_or_reduction(runs):
    lp = runs["gpt2"][3]
    with pytest.raises(InputError, match="max.*mean"):
        lp.overview(0, (4, 4), "median")
    with pytest.raises(InputError, match="rows 5:5"):
        lp.overview(0, (4, 4), region=(5, 5, 0, 3))
    with pytest.raises(InputError, match="layer 9"):
        lp.rows(9, 0, 3)


@pytest.mark.parametrize("name", ["gpt2", "bert", "mistral_window"])
def test_find_on_a_long_run_ranks_heads_as_on_the_dense_patterns(runs, name):
    model, ids, dense, lp = runs[name]

    class Dense:
        attentions = dense

    want, got = find(Dense, 20, 6), find_long(lp, 20, 6)
    assert [(h.layer, h.head) for h in got] == [(h.layer, h.head) for h in want]
    np.testing.assert_allclose([h.specificity for h in got], [h.specificity for h in want], atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("exclude", [(False, False), (True, True), (True, False)])
def test_head_scores_streamed_over_row_blocks_equal_the_dense_scores(runs, name, exclude):
    model, ids, dense, lp = runs[name]
    want = heads.score_heads(dense, ids, *exclude, unknown_ids={3})
    dense_blocks = ((layer, a, dense[layer, :, a:a + 4]) for layer in range(lp.n_layer)
                    for a in range(0, lp.T, 4))
    long_blocks = ((layer, a, rows) for layer in range(lp.n_layer) for a, rows in lp.blocks(layer, 6))
    for blocks, tol in ((dense_blocks, 1e-9), (long_blocks, 1e-5)):
        got = heads.score_blocks(blocks, lp.n_layer, lp.n_head, ids, model.config.causal, *exclude,
                                 unknown_ids={3})
        for name_ in heads.SCORE_NAMES:
            np.testing.assert_allclose(got.scores[name_], want.scores[name_], atol=tol, rtol=0)
        for role in heads.ROLES:
            np.testing.assert_allclose(got.chance[role], want.chance[role], atol=tol, rtol=0)
        assert got.coverage == want.coverage and got.labels == want.labels


def test_detection_rows_are_rows_of_the_detection_pattern():
    ids = np.array([5, 1, 5, 2, 1, 5, 7, 1])
    unknown = ids == 7
    for role in heads.ROLES:
        full = heads.detection_pattern(role, ids, unknown)
        np.testing.assert_array_equal(head_patterns.detection_rows(role, ids, 2, 6, unknown), full[2:6])


def test_a_long_run_reports_each_layer_and_stops_when_cancelled(runs):
    model, ids = runs["llama_gqa"][:2]
    seen = []
    run_long(model, ids=ids, progress=lambda i, n: seen.append((i, n)))
    n = model.config.n_layer
    assert seen == [(i, n) for i in range(n + 1)]

    def stop_at_1(i, n):
        if i == 1:
            raise Cancelled("newer text")

    with pytest.raises(Cancelled):
        run_long(model, ids=ids, progress=stop_at_1)


def test_a_dense_run_over_the_limit_is_refused_naming_its_size(runs, monkeypatch):
    model, ids = runs["gpt2"][:2]
    monkeypatch.setattr(longdoc, "DENSE_LIMIT", 1000)
    with pytest.raises(InputError, match=r"\[2, 4, 37, 37\] float32 = 42.8 KiB, over the 1,000 bytes limit: the window shows a text this long in its long view"):
        model.run(ids=ids, request=RunRequest(use_cache=False))
    run_long(model, ids=ids)  # the long path holds no dense patterns


STORY = ("When Mary and John went to the market on Saturday morning, John bought fresh bread and "
         "cheese while Mary looked for apples, and later they walked home along the river, talking "
         "about the old bridge that the town plans to repair next summer. The mayor said that the "
         "work would start in June and last until the first snow of the winter. ")


def test_smollm2_row_blocks_give_the_dense_patterns_at_600_tokens(smollm2):
    text = "".join(f"Chapter {i}. " + STORY.replace("Saturday", day)
                   for i, day in enumerate(["Monday", "Tuesday", "Friday", "Sunday"] * 3))
    ids = smollm2.tokenizer.encode(text).ids[:600]
    assert len(ids) == 600
    dense = smollm2.run(ids=ids, request=RunRequest(use_cache=False)).attentions
    lp = run_long(smollm2, ids=ids).patterns
    for layer in range(lp.n_layer):
        np.testing.assert_allclose(lp.rows(layer, 0, 600), dense[layer], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["llama_gqa", "mistral_window", "bert"])
def test_a_long_run_shared_over_threads_in_small_blocks_gives_the_dense_patterns(runs, name, monkeypatch):
    """Row chunks of 8 for the projections and the MLP and blocks of 16 rows for attention, on two
    threads: the residual stream of one thread within float32 rounding (products of other shapes
    sum in another order; streams of size ~10), and the dense path's patterns."""
    from attnviz.engine import parallel
    from attnviz.engine.computing import rowblocks

    model, ids, dense, _ = runs[name]
    monkeypatch.setattr(parallel, "ROW_CHUNK", 8)
    monkeypatch.setattr(rowblocks, "BLOCK_BYTES", 1)  # group_rows' floor: 16 rows a block
    one, two = (LongTrace(workers=w, resid=True) for w in (1, 2))
    for trace in (one, two):
        model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    for a, b in zip(two.resid, one.resid):
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-5)
    lp = longdoc.patterns_of(two, model.config)
    np.testing.assert_allclose(lp.dense(), dense, atol=1e-5, rtol=0)


@pytest.mark.parametrize("reduce", ["max", "mean"])
def test_an_overview_on_two_threads_is_the_same_float32s_as_on_one(runs, reduce, monkeypatch):
    from attnviz.engine.computing import rowblocks

    lp = runs["mistral_window"][3]
    monkeypatch.setattr(rowblocks, "BLOCK_BYTES", 1)  # blocks of 16 rows: 3 blocks of 37
    for shown in (None, [1], [0, lp.n_head - 1]):
        one = lp.overview(1, (30, 7), reduce, heads=shown, workers=1)
        two = lp.overview(1, (30, 7), reduce, heads=shown, workers=2)
        np.testing.assert_array_equal(one, two)


def test_fold_segments_is_a_reduceat_over_segments_of_any_width():
    x = np.random.default_rng(0).standard_normal((200, 3, 5)).astype(np.float32)
    for edges in ([0, 1, 2, 40, 41, 199, 200], [0, 7, 14, 21, 200], list(range(0, 201, 25))):
        starts, stops = np.array(edges[:-1]), np.array(edges[1:])
        np.testing.assert_array_equal(long_patterns.fold_segments(x, starts, stops, np.maximum),
                                      np.maximum.reduceat(x, starts, axis=0))
        np.testing.assert_allclose(long_patterns.fold_segments(x, starts, stops, np.add),
                                   np.add.reduceat(x, starts, axis=0), rtol=1e-5, atol=1e-5)


def test_a_heads_key_block_table_gives_its_later_overviews_within_float32_rounding(runs, monkeypatch):
    """Once one head's whole pattern has been drawn, its table of key-block maxima is kept and a
    later region's cells read it, computing only the keys at each block's two ends: the cells of
    computing every key within float32 rounding (the table's scores come from other products),
    a windowed layer's included; the dense pattern's block maxima within 1e-5."""
    calls = []  # every block of scores computed key by key (what the table spares)
    real = long_patterns.scores_t

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(long_patterns, "TABLE_MIN_T", 1)
    monkeypatch.setattr(long_patterns, "TABLE_KEYS", 2)
    monkeypatch.setattr(long_patterns, "scores_t", counted)
    for name in ("llama_gqa", "mistral_window"):
        _, _, dense, lp = runs[name]
        T = lp.T
        fresh, plain = (long_patterns.LongPatterns(q=lp.q, k=lp.k, lse=lp.lse, scale=lp.scale, window=lp.window,
                                             causal=lp.causal, n_group=lp.n_group) for _ in range(2))
        for layer in range(lp.n_layer):
            head = lp.n_head - 1
            drawn = len(calls)
            whole = fresh.overview(layer, (37, 9), "max", heads=[head])  # keys in cells of 4 or 5
            assert len(calls) > drawn  # the whole pattern's scores were computed (and the table filled)
            assert (layer, head) in fresh.tables and len(fresh.tables) <= long_patterns.TABLES_KEPT
            np.testing.assert_array_equal(whole, plain.overview(layer, (37, 9), "max", heads=[head]))
            for region, shape in [((0, T, 0, T), (6, 5)), ((5, 30, 3, 33), (7, 4)), ((20, 37, 0, 37), (3, 4))]:
                before = len(calls)
                got = fresh.overview(layer, shape, "max", heads=[head], region=region)
                assert len(calls) == before  # read from the table: no key computed block by block
                np.testing.assert_allclose(got, plain.overview(layer, shape, "max", heads=[head], region=region),
                                           rtol=1e-6, atol=1e-7)
                r0, r1, c0, c1 = region
                H, W = shape
                want = np.maximum.reduceat(np.maximum.reduceat(
                    dense[layer, head, r0:r1, c0:c1], (np.arange(W) * (c1 - c0)) // W, axis=1),
                    (np.arange(H) * (r1 - r0)) // H, axis=0)
                np.testing.assert_allclose(got[0], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["llama_gqa", "mistral_window", "gemma3"])
def test_a_long_run_reusing_an_earlier_runs_prefix_equals_a_fresh_run(runs, name):
    """The new text's first tokens are the earlier run's (a keystroke at the end, an edit in the
    middle, a shorter text): their q, k, v and log-sum-exp are taken, the rest computed, and the
    run equals one from scratch (patterns, row log-sum-exp, the last layer's q; Gemma 3's sandwich
    norms carry float32 rounding further, as above); the earlier run is left as it was."""
    model, ids, _, _ = runs[name]
    first = run_long(model, ids=ids[:30])
    kept = [a.copy() for a in first.patterns.k + first.patterns.q]
    for new in (ids, np.concatenate([ids[:12], ids[20:]]), ids[:20], ids[:30]):
        got = run_long(model, ids=new, reuse=first)
        want = run_long(model, ids=new)
        shared = int(np.argmin(np.append(new[:30] == ids[:len(new[:30])], False)))
        assert got.result.cache_reused == min(shared, len(new) - 1)
        np.testing.assert_allclose(got.patterns.dense(), want.patterns.dense(),
                                   atol=2e-5 if name == "gemma3" else 1e-5, rtol=0)
        for a, b in zip(got.patterns.lse + got.patterns.q[-1:], want.patterns.lse + want.patterns.q[-1:]):
            np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-5)  # (values up to ~5; float32 rounding)
    for a, b in zip(first.patterns.k + first.patterns.q, kept):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_head_scores_with_the_layers_shared_out_to_threads_equal_one_threads(runs, name):
    """score_layers (a long text's scores in the window, on every core) gives exactly what
    score_blocks gives on one thread: each layer's sums are its own, added in the same order."""
    model, ids, dense, lp = runs[name]
    one = heads.score_blocks(((layer, a, rows) for layer in range(lp.n_layer) for a, rows in lp.blocks(layer, 6)),
                             lp.n_layer, lp.n_head, ids, model.config.causal, True, True, unknown_ids={3})
    seen = set()

    def layer_blocks(layer):
        seen.add((layer, threading.get_ident()))
        return lp.blocks(layer, 6)
    many = heads.score_layers(layer_blocks, lp.n_layer, lp.n_head, ids, model.config.causal, True, True,
                              unknown_ids={3}, threads=3)
    assert sorted(layer for layer, _ in seen) == list(range(lp.n_layer))
    for key in heads.SCORE_NAMES:
        np.testing.assert_array_equal(many.scores[key], one.scores[key])
    for role in heads.ROLES:
        np.testing.assert_array_equal(many.chance[role], one.chance[role])
        np.testing.assert_array_equal(many.strength[role], one.strength[role])
    assert many.labels == one.labels and many.coverage == one.coverage


def test_a_threads_error_stops_the_others_and_is_raised(runs):
    model, ids, dense, lp = runs["llama_gqa"]
    taken = []

    def layer_blocks(layer):
        taken.append(layer)
        if layer == 1:
            raise Cancelled("a newer text")
        return lp.blocks(layer, 6)
    before = threading.active_count()
    with pytest.raises(Cancelled, match="a newer text"):
        heads.score_layers(layer_blocks, lp.n_layer, lp.n_head, ids, True, threads=2)
    assert 1 in taken and threading.active_count() == before  # the helper thread has ended
