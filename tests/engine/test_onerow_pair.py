"""A one-row run's layers on two threads (engine/computing/onerow_pair.py, taken by onerow_stack
where the kernels take two threads) against the one-thread call: the same bits for each kernel
kind (odd numbers of row groups, more chunks than groups), SmolLM2's generation steps and
keystrokes and tiny Llamas of other block types; a partner that comes late, or after the call,
changes nothing; a thread that fails stops the other's wait and the call raises."""

import sys
import threading
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm  # (first: it asks numba for plain error text)
from attnviz.engine.computing import onerow_block, onerow_pair, onerow_stack
from attnviz.engine.reading import qpack
from test_onerow_block import _k_rows
from test_onerow_stack import IDS, TEXTS, _covered, _keystrokes, _same_runs, _same_steps, _steps

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not onerow_pair.AVAILABLE, reason="onerow_pair runs on x86-64 alone")


def _blocks(qtype, n_out, n_in, rng):
    """Random rows of `qtype` [n_out, n_in] as GGUF blocks (K types: _k_rows' sane scales)."""
    import gguf
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return _k_rows(qtype, n_out, n_in, rng)[0]
    return gguf.quants.quantize((rng.standard_normal((n_out, n_in)) * 0.1).astype(np.float32), qtype)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q4_0, Q.Q8_0, Q.Q5_1, Q.Q6_K], ids=lambda q: q.name)
@pytest.mark.parametrize("groups,chunks", [(7, 3), (7, 8), (1, 2), (5, 1)])
def test_a_matrix_in_chunks_on_two_threads_equals_its_serial_kernel(qtype, groups, chunks):
    """y = x Wᵀ taken in `chunks` chunks of W's row groups by two threads at once, one from the
    first chunk on and one from the last: the bits of the kernel the one-thread call runs
    (onerow_block._matvec), whichever thread took which chunk."""
    rng = np.random.default_rng(groups * 10 + chunks)
    p = qpack.pack(_blocks(qtype, groups * qpack.LANES, 512, rng), qtype)
    x = rng.standard_normal((1, p.n_in)).astype(np.float32)
    want = np.empty((1, p.n_out), np.float32)
    kind = onerow_block._kind(p)
    onerow_block._matvec(kind, *p.args, x, want)
    for _ in range(3):
        y, sync = np.full((1, p.n_out), np.nan, np.float32), onerow_pair.sync_for(1)
        none = np.empty((0, 1, 1), np.float32)
        answers = []

        def stage(back):  # (the partner's chunks from the last one on, as a pair call's)
            answers.append(onerow_pair._matrix_stage(sync, 0, chunks, kind, *p.args, x, y, none, 0, back))
        partner = threading.Thread(target=stage, args=(True,))
        partner.start()
        stage(False)
        partner.join()
        assert answers == [True, True]
        assert y.tobytes() == want.tobytes()


def test_the_caller_from_the_first_chunk_and_the_partner_from_the_last_take_each_once():
    """However a stage's n takes fall between the two threads (f the caller's, n - f the
    partner's), their chunks are each of the n once."""
    for n in range(1, 10):
        for f in range(n + 1):
            front = [onerow_pair._ends(j, n, False) for j in range(f)]
            back = [onerow_pair._ends(j, n, True) for j in range(n - f)]
            assert sorted(front + back) == list(range(n)), (n, f, front, back)


def _guarded(a):  # a copy of a between two more (a chunk's rows out of range land in them, not past a)
    buf = np.concatenate([a, a, a])
    return buf, buf[len(a):2 * len(a)]


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0], ids=lambda q: q.name)  # (_chunks' two loops)
@pytest.mark.parametrize("groups", [7, 3])
def test_a_stages_shares_split_anywhere_do_each_chunk_once_from_their_ends(qtype, groups):
    """One thread runs a stage's two shares of n chunks in turn (_chunks with S4's update: out =
    (out + attn) + y on a chunk's rows), the taken counter set before each as the other share's
    takes leave it: k takes from the last chunk back (the partner's) and n - k from the first on
    (the caller's), for every k, either share first. After the first share exactly the rows of its
    chunks are written, the k last or the n - k first (for every k: so its j-th take is the j-th
    chunk from its end); after both, every row once, and nothing beside y and out's rows."""
    rng = np.random.default_rng(groups)
    p = qpack.pack(_blocks(qtype, groups * qpack.LANES, 64, rng), qtype)
    q, scale, offset = p.args
    (_, q), (_, scale) = _guarded(q), _guarded(scale)
    x = rng.standard_normal((1, p.n_in)).astype(np.float32)
    want = np.empty((1, p.n_out), np.float32)
    kind = onerow_block._kind(p)
    onerow_block._matvec(kind, q, scale, offset, x, want)
    row = qpack.LANES  # (rows a group)
    taken, done = onerow_pair.LINE, 2 * onerow_pair.LINE  # (stage 0's counters)

    def share(sync, takes, n, back, y, out, attn):
        sync[taken] = n - takes  # (the other share's takes, counted first)
        onerow_pair._chunks(sync, 0, onerow_pair._chunk(sync, 0), n, kind, q, scale, offset, x, y,
                            out, attn, True, back)

    for n in range(1, 9):  # (groups 3: chunks past the third have fewer groups, some none)
        for k in range(n + 1):
            for first_back in (True, False):
                sync = onerow_pair.sync_for(1)
                (ys, y), (outs, out) = (_guarded(np.full(p.n_out, v, np.float32)) for v in (np.nan, 0.0))
                attn = _guarded(np.ones(p.n_out, np.float32))[1]
                y, out, attn = (a.reshape(1, p.n_out) for a in (y, out, attn))
                takes = k if first_back else n - k
                share(sync, takes, n, first_back, y, out, attn)
                ends = (groups * (n - takes) // n, groups) if first_back else (0, groups * takes // n)
                rows = np.zeros(p.n_out, bool)
                rows[ends[0] * row:ends[1] * row] = True
                case = (n, k, first_back)
                assert sync[done] == takes, case
                assert np.isnan(y[0, ~rows]).all() and (out[0, ~rows] == 0).all(), case
                assert y[0, rows].tobytes() == want[0, rows].tobytes(), case
                share(sync, n - takes, n, not first_back, y, out, attn)
                assert sync[done] == n, case
                assert y.tobytes() == want.tobytes(), case
                assert out.tobytes() == (np.float32(1) + want).tobytes(), case
                assert np.isnan(ys[:p.n_out]).all() and np.isnan(ys[2 * p.n_out:]).all(), case
                assert not outs[:p.n_out].any() and not outs[2 * p.n_out:].any(), case


@pytest.fixture
def threads(monkeypatch):
    """set(n): a one-row run's kernels on n threads (1: the one-thread call, 2: the pair, compiled
    for every scale type the stack was, every call on it: no fallback); calls: the pair's calls
    as (first, end) layers."""
    calls = []
    monkeypatch.setattr(onerow_stack, "FALLBACK", False)
    real = onerow_stack._pair

    def pair(x, a, b, *rest):
        calls.append((a, b))
        return real(x, a, b, *rest)
    monkeypatch.setattr(onerow_stack, "_pair", pair)

    def set_threads(n):
        monkeypatch.setattr(onerow_stack, "_threads", lambda weights=0: n)
        for scale in list(onerow_stack._COMPILED):
            onerow_stack.compile_stack(scale)
    set_threads.calls = calls
    return set_threads


def test_smollm2s_generation_steps_on_two_threads_equal_one_bit_for_bit(smollm2_packed, threads):
    ids = np.random.default_rng(5).integers(100, 40000, 40).tolist()
    runs = {}
    for n in (2, 1):
        threads(n)
        runs[n] = _steps(smollm2_packed, ids, 12, True)
    assert threads.calls == [(0, 30)] * 28
    _same_steps(runs[2], runs[1])


@pytest.mark.parametrize("want", [{"z": True, "resid": True}, {}], ids=["z+resid", "patterns"])
def test_smollm2s_keystrokes_on_two_threads_equal_one_bit_for_bit(smollm2_packed, threads, want):
    from attnviz.engine.computing.trace import Trace
    runs = {}
    for n in (2, 1):
        threads(n)
        smollm2_packed.clear_cache()
        runs[n] = [smollm2_packed.run(text, trace=Trace(**want)).trace for text in TEXTS]
    assert len(threads.calls) >= 2 and set(threads.calls) == {(0, 30)}
    for t, t1 in zip(runs[2], runs[1], strict=True):
        assert t.attentions.tobytes() == t1.attentions.tobytes()
        for x, y in zip([*t.z, *t.resid, *t.k, *t.v], [*t1.z, *t1.resid, *t1.k, *t1.v], strict=True):
            assert (x is None and y is None) or x.tobytes() == y.tobytes()
    smollm2_packed.clear_cache()


def test_an_early_hand_over_on_two_threads_shows_the_same_layers(smollm2_packed, threads):
    from attnviz.engine.computing.request import RunRequest
    runs = {}
    for n in (2, 1):
        threads(n)
        runs[n] = _keystrokes(smollm2_packed, TEXTS, RunRequest(early=(12, lambda part: None)))
    assert set(threads.calls) == {(0, 12), (12, 30)}
    _same_runs(runs[2], runs[1])


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q5_1], ids=lambda q: q.name)
def test_tiny_llamas_steps_on_two_threads_equal_one(tmp_path, threads, qtype):
    """4 query heads over 2 KV heads (a chunk a KV head), every matrix in blocks of the type."""
    qm.warm([qtype])
    model = _covered(tmp_path, qtype)
    runs = {}
    for n in (2, 1):
        threads(n)
        runs[n] = _steps(model, IDS, 8, True)
    assert threads.calls == [(0, model.config.n_layer)] * 8
    _same_steps(runs[2], runs[1])


def test_the_fallback_takes_one_thread_while_the_pair_does_not_pay_then_tries_it_again():
    """Times as a run's calls would take them: a one-thread call first (the reference), the pair
    while it pays, a one-thread call every PROBE pair calls, BACKOFF one-thread calls once the
    faster of PAIR_RUNS pair calls is slower than PAYS times one thread's, twice as many when it
    fails again, BACKOFF again once it has paid."""
    P = onerow_pair
    fb, ways = P.Fallback(), []

    def calls(n, pair_ms, one_ms=10.0):
        for _ in range(n):
            two = fb.take_pair()
            ways.append("pair" if two else "one")
            fb.record(two, (pair_ms if two else one_ms) / 1e3)
    calls(1 + P.PROBE + 1 + 3, 8.0)
    assert ways == ["one"] + ["pair"] * P.PROBE + ["one"] + ["pair"] * 3
    ways.clear()
    calls(P.PAIR_RUNS + P.BACKOFF + P.PAIR_RUNS + 2 * P.BACKOFF + 1, 15.0)  # (the partner's core busy)
    assert ways == (["pair"] * P.PAIR_RUNS + ["one"] * P.BACKOFF + ["pair"] * P.PAIR_RUNS
                    + ["one"] * 2 * P.BACKOFF + ["pair"])
    ways.clear()
    calls(P.PAIR_RUNS - 1, 8.0)  # (free again: the faster of the last two pays)
    calls(P.PAIR_RUNS, 15.0)
    assert ways == ["pair"] * (2 * P.PAIR_RUNS - 1)
    ways.clear()
    calls(P.BACKOFF + 1, 8.0)
    assert ways == ["one"] * P.BACKOFF + ["pair"]
    assert 8.0 <= P.PAYS * 10.0 < 15.0 and P.MAX_BACKOFF >= 2 * P.BACKOFF


def test_a_new_generation_measures_one_thread_again_before_it_takes_the_pair():
    """A generation's steps at growing positions, then a new one from an earlier position: the
    one-thread reference of the long steps (slow) is not held against the new short ones."""
    P = onerow_pair
    fb, ways = P.Fallback(), []
    for p, one_ms, pair_ms in [(500, 30.0, 25.0), (501, 30.0, 25.0), (10, 5.0, 8.0), (11, 5.0, 8.0)]:
        two = fb.take_pair(p)
        ways.append("pair" if two else "one")
        fb.record(two, (pair_ms if two else one_ms) / 1e3)
    assert ways == ["one", "pair", "one", "pair"]
    for p in range(12, 12 + P.PAIR_RUNS):  # (8 ms pairs against 5 ms: it backs off)
        fb.record(fb.take_pair(p), 8.0 / 1e3)
    assert not fb.take_pair(12 + P.PAIR_RUNS)


def test_models_recording_at_once_lose_no_count_of_the_calls_taken():
    """Four models' Fallbacks (one a thread, as models generating at once) record their calls at
    the same time, the interpreter switching threads as often as it can: TAKEN counts every one."""
    P, n, calls = onerow_pair, 4, 5000
    before, go, was = dict(P.TAKEN), threading.Barrier(n), sys.getswitchinterval()

    def model(i):
        fb = P.Fallback()
        go.wait()
        for k in range(calls):
            fb.record((k + i) % 2 == 0, 1e-3 * (1 + k % 3))
    sys.setswitchinterval(1e-6)
    try:
        runs = [threading.Thread(target=model, args=(i,)) for i in range(n)]
        for t in runs:
            t.start()
        for t in runs:
            t.join()
    finally:
        sys.setswitchinterval(was)
    assert {k: P.TAKEN[k] - before[k] for k in before} == {"pair": n * calls // 2, "one": n * calls // 2}


def test_a_busy_partner_core_sends_the_steps_to_one_thread_and_back_with_the_same_bits(
        smollm2_packed, threads, monkeypatch):
    """SmolLM2's steps with the fallback: each pair call made slow while the partner's core is
    "busy" (a wait after it, as a chunk the partner holds adds), and each one-thread call a wait
    that the pair, once free, beats: the steps take one thread for BACKOFF calls after PAIR_RUNS
    slow pair calls, then the pair again for good (but the PROBE's one-thread call); every step's
    numbers are the one-thread run's."""
    P = onerow_pair
    ids = np.random.default_rng(9).integers(100, 40000, 40).tolist()
    threads(1)
    want = _steps(smollm2_packed, ids, 12, True)
    threads(2)
    monkeypatch.setattr(onerow_stack, "FALLBACK", True)
    ways, pair, one = [], onerow_stack._pair, onerow_stack._layers
    before = dict(P.TAKEN)

    def slow_pair(*args):
        ways.append("pair")
        pair(*args)
        time.sleep(0.3 if ways.count("pair") <= P.PAIR_RUNS else 0.0)  # (the partner's core busy)

    def slow_one(*args):
        ways.append("one")
        one(*args)
        time.sleep(0.1)
    monkeypatch.setattr(onerow_stack, "_pair", slow_pair)
    monkeypatch.setattr(onerow_stack, "_layers", slow_one)
    got = _steps(smollm2_packed, ids, 12, True)
    n = len(ids) - 12  # (each step after the prompt's run of 12 rows: a run of one new row)
    assert ways == (["one"] + ["pair"] * P.PAIR_RUNS + ["one"] * P.BACKOFF + ["pair"] * P.PROBE + ["one"]
                    + ["pair"] * n)[:n]
    assert {k: P.TAKEN[k] - before[k] for k in before} == {w: ways.count(w) for w in ("pair", "one")}
    _same_steps(got, want)


def test_a_late_partner_leaves_the_call_to_the_caller(smollm2_packed, threads):
    """The partner busy (a job queued before the call's) when a step starts: the caller runs the
    step alone, without waiting for it, with the same bits; the partner's turn comes after."""
    ids = np.random.default_rng(8).integers(100, 40000, 20).tolist()
    threads(1)
    want = _steps(smollm2_packed, ids, 18, True)
    threads(2)
    woke = threading.Event()
    onerow_pair.PARTNER.start(lambda: (time.sleep(5.0), woke.set()), (), onerow_pair.sync_for(0))
    got = _steps(smollm2_packed, ids, 18, True)
    assert not woke.is_set()  # (the steps done while the partner slept)
    _same_steps(got, want)
    assert woke.wait(10)


def _one_call(model, threads):
    """A step's pair call, its arguments kept: (compiled, args, sync) after the call ran."""
    kept = []
    real = onerow_pair.Partner.run

    def run(self, compiled, args, sync, partner_args=None):
        kept.append((compiled, args, sync))
        return real(self, compiled, args, sync, partner_args)
    threads(2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onerow_pair.Partner, "run", run)
        _steps(model, IDS[:10], 9, True)  # (the prefill, then one step)
    return kept[-1]


def test_a_thread_that_comes_after_the_call_takes_nothing(smollm2_packed, threads):
    """Every chunk of a finished call is taken: a thread running it again (its x changed) writes
    nothing, neither x nor the pattern rows nor K and V."""
    compiled, args, sync = _one_call(smollm2_packed, threads)
    x, rows, kv = args[0], args[20], args[18]
    x[:] = 7.0
    before = [a.copy() for a in (x, rows, kv)]
    assert compiled(*args)
    for a, b in zip((x, rows, kv), before):
        assert a.tobytes() == b.tobytes()


def test_a_failed_thread_stops_the_others_wait(smollm2_packed, threads):
    """A chunk taken by a thread that then fails is never done: the other waits for it until the
    call is marked aborted, then returns False; Partner.run raises for a call that returned it."""
    compiled, args, sync = _one_call(smollm2_packed, threads)
    sync[:] = 0
    sync[onerow_pair.LINE] = 1  # (stage 0's chunk 0 taken, never done)
    timer = threading.Timer(0.2, lambda: sync.__setitem__(onerow_pair.ABORTED, 1))
    timer.start()
    assert compiled(*args) is False
    timer.join()
    sync[:] = 0
    sync[onerow_pair.ABORTED] = 1
    with pytest.raises(RuntimeError, match="partner thread failed"):
        onerow_pair.Partner().run(compiled, args, sync)


def test_an_error_on_the_callers_thread_marks_the_call_aborted():
    sync = onerow_pair.sync_for(1)

    def fails(*_):
        raise ValueError("on this thread")
    with pytest.raises(ValueError, match="on this thread"):
        onerow_pair.Partner().run(fails, (), sync)
    assert sync[onerow_pair.ABORTED] == 1


def test_a_caller_that_fails_waits_for_the_partner_to_leave_the_call():
    """The caller's share raising while the partner is still in its own: the caller raises only
    once the partner has left (its chunk's writes never land after the call is over)."""
    sync, said, inside = onerow_pair.sync_for(1), [], threading.Event()

    def share(*_):
        if threading.current_thread().name == "attnviz-pair":
            inside.set()
            time.sleep(0.2)
            said.append("partner left")
            return True
        assert inside.wait(10)  # (the partner in its share when this one fails)
        raise ValueError("on this thread")
    with pytest.raises(ValueError, match="on this thread"):
        onerow_pair.Partner().run(share, (), sync)
    assert said == ["partner left"] and sync[onerow_pair.LEFT] == 1


@pytest.mark.parametrize("over", [True, False], ids=["after-the-call", "during-it"])
def test_a_partner_that_fails_after_the_call_is_over_marks_nothing(over, caplog):
    """The partner's call failing once the caller has left it (its arrays made read-only by then:
    no matching signature) is no failure of the call; failing while the caller is in it is."""
    partner, sync, ran, done = onerow_pair.Partner(), onerow_pair.sync_for(1), [], threading.Event()

    def fails():
        ran.append(1)
        sync[onerow_pair.OVER] = int(over)
        raise TypeError("no matching definition")
    partner.start(fails, (), sync)
    for _ in range(500):
        if ran:
            break
        time.sleep(0.01)
    partner.start(done.set, (), onerow_pair.sync_for(0))  # (the partner's next job: the first handled)
    assert done.wait(5) and ran == [1]
    assert sync[onerow_pair.ABORTED] == (0 if over else 1)
    assert any(r.levelname == "ERROR" for r in caplog.records) is not over


def test_the_partner_holds_nothing_of_a_call_once_it_is_over(smollm2_packed, threads, monkeypatch):
    """A generation's cache let go after its steps on the pair: its KV buffer goes too (the partner
    thread, waiting for its next call, keeps no reference to the last one's arrays)."""
    import gc
    import weakref

    from attnviz.engine.computing.generate import _StepTrace
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.computing.trace import KVCache

    threads(2)
    seen = []
    real = onerow_stack._pair

    def pair(x, a, b, full_last, compiled, stack, *args):
        seen.append(weakref.ref(args[14]))  # (kv: every layer's K and V)
        return real(x, a, b, full_last, compiled, stack, *args)
    monkeypatch.setattr(onerow_stack, "_pair", pair)
    ids = np.random.default_rng(7).integers(100, 40000, 12).tolist()
    cache = KVCache()
    for t in range(8, 12):
        smollm2_packed.run(ids=np.asarray(ids[:t]), trace=_StepTrace(False, cache),
                           request=RunRequest(labels=False))
    assert seen and seen[-1]() is not None
    del cache
    deadline = time.monotonic() + 10
    while seen[-1]() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert seen[-1]() is None
