"""Compare's B keeps its KV cache in step with A's (pair.Follower): a model compared with itself
shows exactly 0, both where B's run of a keystroke was stopped (B's cache a key behind A's: B then
runs the key it missed first, as A ran it) and where B opens after A has typed (both caches
cleared, so A's next run computes every row in one chunk, as B's first run does). Without that the same
model differs in the last bits (the control runs below show it)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.effects import Ablation, window_run
from attnviz.engine.analysing.pair import MAX_BEHIND, Follower
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing import trace as TR
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import Cancelled, ModelLoadError
from gguf_files import gguf_tensors, load_packed, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]
FIRST = 4  # the text as typed before the keystrokes


@pytest.fixture(scope="module")
def same_model(tmp_path_factory):
    """One tiny grouped-query Llama file in Q8_0 blocks (every matrix: the one-row steps and the
    block take its keystrokes), loaded three times: A, B and a control B."""
    qm.warm([Q.Q8_0])
    folder = tmp_path_factory.mktemp("follower")
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            tensors[f"blk.{i}.{name}.weight"] = (rng.standard_normal((64, cfg["hidden_size"])) * 0.2).astype(np.float32)
    path = write_gguf(folder / "m.gguf", dict(cfg, intermediate_size=64), tensors, Q.Q8_0)
    return [load_packed(path) for _ in range(3)]


def typed(a, k):
    """A's keystroke run of IDS[:k], as the window's (a WindowRun keeping what prediction reads)."""
    return window_run(a, "", ids=np.asarray(IDS[:k]))


def differs(a_trace, b_trace) -> bool:
    """Whether any pattern or residual-stream value of the two runs differs in any bit."""
    if a_trace.attentions.tobytes() != b_trace.attentions.tobytes():
        return True
    return any(x.tobytes() != y.tobytes() for x, y in zip(a_trace.resid, b_trace.resid, strict=True))


def followed(follower, a_trace, **kw):
    """B's trace of A's run that filled `a_trace` (follower.follow), A's trace being that one (no
    fresh run of A's was needed)."""
    a_again, trace = follower.follow(a_trace, C.compare_trace, **kw)
    assert a_again is a_trace
    return trace


def replayed(b, a_trace):
    """B's run of A's ids with B's cache, as a follower makes it, but alone: a run of A's that B
    missed is not run first."""
    trace = C.compare_trace()
    trace.want.update(a_trace.want)
    trace.one_row = a_trace.one_row
    b.run(ids=a_trace.ids, trace=trace)
    return trace


def naive(b, run):
    """B's run as Compare made it before the follower: the newest ids alone, with A's steps."""
    trace = C.compare_trace()
    trace.one_row = run.clean.one_row
    b.run(ids=run.clean.ids, trace=trace)
    return trace


def test_a_stopped_comparison_leaves_b_in_step_and_the_same_model_shows_zero(same_model):
    a, b, control = same_model
    for m in same_model:
        m.clear_cache()
    follower = Follower(a, b)
    skipped = FIRST + 3  # the keystroke whose comparison a newer key stops
    noisy = False
    for k in range(FIRST, len(IDS) + 1):
        run = typed(a, k)
        follower.note(run.clean, run.result.cache_used)
        if k == skipped:
            with pytest.raises(Cancelled):
                follower.follow(run.clean, C.compare_trace, stop=lambda: True)
            assert follower.behind == 1  # B's cache a key behind A's
            continue
        trace = followed(follower, run.clean)
        assert follower.behind == 0
        assert not differs(run.clean, trace), k  # the same model: exactly 0
        diff = run.clean.attentions - trace.attentions
        assert not diff.any()
        noisy |= differs(run.clean, naive(control, run))
    assert noisy, "the control B (a key behind from the stopped key on) should differ in the last bits"


def test_b_opened_after_a_has_typed_shows_zero(same_model):
    a, b, control = same_model
    for m in same_model:
        m.clear_cache()
    for k in range(FIRST, len(IDS) + 1):  # A typed a key at a time, no B yet; B too, as a
        last = typed(a, k)  # checkpoint's model kept from when it was A
        typed(b, k)
    # the control: B's first run, every row in one chunk, against A's rows typed a key at a time
    assert differs(last.clean, naive(control, last)), "rows typed a key at a time should differ"
    follower = Follower(a, b)  # B opens: A's cache cleared, A's text run again
    run = typed(a, len(IDS))
    assert run.result.cache_reused == 0
    follower.note(run.clean, run.result.cache_used)
    assert not differs(run.clean, followed(follower, run.clean))
    for k in (len(IDS) - 1, len(IDS)):  # the next keystrokes (a letter deleted, typed again)
        run = typed(a, k)
        follower.note(run.clean, run.result.cache_used)
        assert not differs(run.clean, followed(follower, run.clean))


def test_a_run_of_a_apart_from_its_cache_is_followed_apart_from_b_s(same_model):
    """A's run that computed apart from its cache (result.cache_used False) is run by B apart from
    its cache too: B's cache keeps the runs A's keeps."""
    a, b, _ = same_model
    for m in same_model:
        m.clear_cache()
    follower = Follower(a, b)
    run = typed(a, FIRST + 2)
    follower.note(run.clean, run.result.cache_used)
    followed(follower, run.clean)
    apart = C.compare_trace()
    result = a.run(ids=np.asarray(IDS[:FIRST + 3]), trace=apart, request=RunRequest(use_cache=False))
    follower.note(apart, result.cache_used)
    assert not differs(apart, followed(follower, apart))
    run = typed(a, FIRST + 3)  # A's cache held FIRST + 2 tokens: one row computed
    assert run.result.cache_reused == FIRST + 2
    follower.note(run.clean, run.result.cache_used)
    assert not differs(run.clean, followed(follower, run.clean))


def test_a_run_of_a_stopped_after_its_clean_run_is_followed(same_model):
    """Under an ablation, A's job stopped in its changed run (a newer key) has its clean run in A's
    cache already: window_run's `ran` notes it as it is in, and B runs it before the next key's.
    The control runs only the runs window_run returns, and differs from then on."""
    a, b, control = same_model
    for m in same_model:
        m.clear_cache()
    follower = Follower(a, b)
    off = Ablation(heads=((1, 0),))
    stopped = FIRST + 3
    noisy = False
    for k in range(FIRST, len(IDS) + 1):
        noted = []

        def ran(clean, result, noted=noted):
            follower.note(clean, result.cache_used)
            noted.append(clean)
        if k == stopped:  # the newer key comes as the changed run starts
            request = RunRequest(stop=lambda noted=noted: bool(noted))
            with pytest.raises(Cancelled):
                window_run(a, "", ids=np.asarray(IDS[:k]), request=request, ablation=off, ran=ran)
            assert follower.behind == 1
            continue
        run = window_run(a, "", ids=np.asarray(IDS[:k]), ablation=off, ran=ran)
        assert noted == [run.clean]
        assert not differs(run.clean, followed(follower, run.clean)), k
        noisy |= differs(run.clean, replayed(control, run.clean))
    assert noisy, "the control, a key behind from the stopped key on, should differ in the last bits"


def test_a_run_keeping_each_layers_input_is_followed_keeping_them_too(same_model):
    """The Anatomy panel shown mid-session, then hidden: A's runs keep every layer's input, so A's
    cached runs (which kept none) give no rows and A's next run computes every row in one chunk.
    B's runs keep what A's keep, so B's cache gives no rows either and the same model shows 0."""
    a, b, control = same_model
    follower = Follower(a, b)
    control.clear_cache()
    shown = range(FIRST + 4, FIRST + 8)
    noisy = False
    for k in range(FIRST, len(IDS) + 1):
        request = RunRequest(truncate=True, inputs=k in shown)
        run = window_run(a, "", ids=np.asarray(IDS[:k]), request=request)
        if k == shown[0]:
            assert run.result.cache_reused == 0  # (A's cached runs kept no inputs)
        follower.note(run.clean, run.result.cache_used)
        trace = followed(follower, run.clean)
        assert trace.reused == run.result.cache_reused
        assert not differs(run.clean, trace), k
        control_trace = naive(control, run)  # B's trace as Compare made it: the residual stream alone
        noisy |= differs(run.clean, control_trace)
    assert noisy, "the control, its cache reused where A's was not, should differ in the last bits"


def test_b_keeps_the_earlier_runs_a_keeps(same_model, monkeypatch):
    """A's cached runs weigh what B's weigh (the same records): under a bound on the earlier runs'
    bytes that A's run passes and a run without z would not, B drops the earlier runs A drops and
    reuses the rows A reuses (a re-split word back to the run two keys before)."""
    a, b, _ = same_model
    run = window_run(a, "", ids=np.asarray(IDS[:10]))
    held = sum(x.nbytes for x in (*run.clean.k, *run.clean.v, *run.clean.z, *run.clean.resid,
                                  run.clean.attentions))
    monkeypatch.setattr(TR, "EARLIER_BYTES", held - sum(x.nbytes for x in run.clean.z) // 2)
    follower = Follower(a, b)
    reused = []
    for ids in (IDS[:10], IDS[:9] + [7], IDS[:9] + [7, 7], IDS[:11]):
        run = window_run(a, "", ids=np.asarray(ids))
        follower.note(run.clean, run.result.cache_used)
        trace = followed(follower, run.clean)
        assert not differs(run.clean, trace), ids
        reused.append((run.result.cache_reused, trace.reused))
    assert reused[-1] == (9, 9), reused  # (the first run of 10 tokens dropped on both sides)


def two_keys_followed(a, b):
    """A follower of a and b after two of A's keys, B's runs of both made -> the follower."""
    follower = Follower(a, b)
    for k in (FIRST, FIRST + 1):
        run = typed(a, k)
        follower.note(run.clean, run.result.cache_used)
        followed(follower, run.clean)
    return follower


def test_a_cache_out_of_step_is_found_and_both_run_afresh(same_model, caplog):
    """B's cache emptied behind the follower's back: B's run takes fewer tokens from its cache than
    A's did, which is logged, and both models run the text afresh (every row in one chunk)."""
    a, b, _ = same_model
    follower = two_keys_followed(a, b)
    b.clear_cache()
    run = typed(a, FIRST + 2)
    follower.note(run.clean, run.result.cache_used)
    with caplog.at_level("WARNING"):
        a_trace, trace = follower.follow(run.clean, C.compare_trace)
    assert "took 0 tokens from its cache" in caplog.text
    assert a_trace is not run.clean and a_trace.reused == trace.reused == 0
    assert list(a_trace.ids) == IDS[:FIRST + 2]
    assert not differs(a_trace, trace)
    run = typed(a, FIRST + 3)  # and the next key follows from there
    assert run.result.cache_reused == FIRST + 2
    follower.note(run.clean, run.result.cache_used)
    assert not differs(run.clean, followed(follower, run.clean))


def test_a_cache_cleared_between_two_runs_of_a_clears_b_s_too(same_model, caplog):
    """A's cache emptied between two of A's runs (a benchmark's pass clearing the model it types
    into, a run A refused): B's cache is cleared before B runs the later one, so B takes no more
    from its cache than A did, nothing is run afresh, and the same model shows 0."""
    a, b, _ = same_model
    follower = two_keys_followed(a, b)
    a.clear_cache()
    with caplog.at_level("WARNING"):
        for k in (FIRST + 2, FIRST + 3):
            run = typed(a, k)
            follower.note(run.clean, run.result.cache_used)
            trace = followed(follower, run.clean)  # (B's run, not a run afresh of both)
            assert trace.reused == run.result.cache_reused == (0 if k == FIRST + 2 else k - 1)
            assert not differs(run.clean, trace)
    assert "afresh" not in caplog.text


def test_a_run_b_refuses_is_reported_and_the_next_comparison_runs_both_afresh(same_model, monkeypatch):
    """B refuses one text (non-finite patterns: Model.run's ModelLoadError, B's cache cleared): the
    error is raised for that text, and the next comparison, of the text with that token deleted,
    runs both models afresh and shows 0; the keys after it follow as before."""
    a, b, _ = same_model
    follower = Follower(a, b)
    real = b.run

    def run(*args, ids=None, **kw):  # B's layers give non-finite values on token 7
        if 7 in list(ids):
            b.clear_cache()
            raise ModelLoadError("m gives non-finite attention patterns in layer 0")
        return real(*args, ids=ids, **kw)
    monkeypatch.setattr(b, "run", run)
    shown = []
    for ids in (IDS[:5], IDS[:5] + [7], IDS[:5], IDS[:6], IDS[:7]):
        typed_run = window_run(a, "", ids=np.asarray(ids))
        follower.note(typed_run.clean, typed_run.result.cache_used)
        try:
            a_trace, trace = follower.follow(typed_run.clean, C.compare_trace)
        except ModelLoadError:
            assert follower.behind == 0  # (nothing of it is replayed later)
            shown.append("refused")
            continue
        assert not differs(a_trace, trace), ids
        shown.append("afresh" if a_trace is not typed_run.clean else "followed")
        assert list(a_trace.ids) == ids
    assert shown == ["followed", "refused", "afresh", "followed", "followed"]


def test_b_far_behind_runs_the_text_afresh_once(same_model, monkeypatch):
    """Keys typed faster than B follows (each key's comparison stopped before B ran): once B is more
    than MAX_BEHIND of A's runs behind, the comparison runs the text afresh on each model once
    instead of B's runs of every key; it shows 0, and the keys after it follow as before."""
    a, b, _ = same_model
    follower = Follower(a, b)
    real, b_runs = b.run, []

    def run(*args, **kw):
        b_runs.append(kw["ids"])
        return real(*args, **kw)
    monkeypatch.setattr(b, "run", run)
    for k in range(FIRST, FIRST + MAX_BEHIND + 1):  # no comparison of these came
        typed_run = typed(a, k)
        follower.note(typed_run.clean, typed_run.result.cache_used)
        assert follower.behind <= MAX_BEHIND
    typed_run = typed(a, FIRST + MAX_BEHIND + 1)
    follower.note(typed_run.clean, typed_run.result.cache_used)
    a_trace, trace = follower.follow(typed_run.clean, C.compare_trace)
    assert len(b_runs) == 1 and a_trace.reused == trace.reused == 0
    assert list(a_trace.ids) == list(trace.ids) == IDS[:FIRST + MAX_BEHIND + 1]
    assert not differs(a_trace, trace)
    typed_run = typed(a, FIRST + MAX_BEHIND + 2)
    follower.note(typed_run.clean, typed_run.result.cache_used)
    assert not differs(typed_run.clean, followed(follower, typed_run.clean))
    assert len(b_runs) == 2


def test_a_stopped_comparison_clears_no_cache(same_model, monkeypatch):
    """A comparison that a newer key has stopped before it runs the text afresh (B refused the text
    before) clears neither cache: a stale job leaves the caches to the newest one."""
    a, b, _ = same_model
    follower = Follower(a, b)

    def refuse(*args, **kw):
        raise ModelLoadError("m gives non-finite attention patterns in layer 0")
    monkeypatch.setattr(b, "run", refuse)
    run = typed(a, FIRST)
    with pytest.raises(ModelLoadError):
        follower.follow(run.clean, C.compare_trace)
    run = typed(a, FIRST + 1)
    with pytest.raises(Cancelled):
        follower.follow(run.clean, C.compare_trace, stop=lambda: True)
    assert typed(a, FIRST + 2).result.cache_reused == FIRST + 1  # A's cache kept


def test_a_stopped_run_of_a_that_made_an_earlier_run_current_is_not_missed(same_model, caplog):
    """A run of A stopped by a newer key after its cache made an earlier run current (KVCache.reuse
    does, before the layers) is never noted: B's cache keeps the old order. A later text with an
    equally long prefix in both runs then takes its rows from another kept run in B than in A, the
    same number of them: the follower sees the caches' counts of such promotions differ and runs
    the text afresh, so the same model still shows exactly 0."""
    a, b, _ = same_model
    f = Follower(a, b)

    def step(ids, inputs=False):
        run = window_run(a, "", ids=np.asarray(ids), request=RunRequest(truncate=True, inputs=inputs))
        f.note(run.clean, run.result.cache_used)
        return f.follow(run.clean, C.compare_trace)
    for k in range(4, 9):
        assert not differs(*step(IDS[:k]))
    assert not differs(*step(IDS[:7] + [11], inputs=True))  # (its rows in one chunk: inputs wanted)
    with pytest.raises(Cancelled):  # A's run of IDS[:9], stopped before its first layer
        window_run(a, "", ids=np.asarray(IDS[:9]), request=RunRequest(truncate=True, stop=lambda: True))
    a_trace, b_trace = step(IDS[:7] + [12])
    assert not differs(a_trace, b_trace)
    assert any("afresh" in r.getMessage() for r in caplog.records)


def test_b_that_is_a_s_own_model_shows_a_s_rows_without_running_afresh(same_model, caplog, monkeypatch):
    """B the very Model object A is (a checkpoint entry that is A's own): one cache, A's run in it;
    B's trace of each key takes A's rows from it whole, one run a key, nothing run afresh."""
    a = same_model[0]
    f = Follower(a, a)
    for k in range(FIRST, FIRST + 5):
        run = typed(a, k)
        f.note(run.clean, run.result.cache_used)
        real, runs = a.run, []

        def counting(*args, **kw):
            runs.append(len(kw["ids"]))
            return real(*args, **kw)
        monkeypatch.setattr(a, "run", counting)
        a_trace, b_trace = f.follow(run.clean, C.compare_trace)
        monkeypatch.setattr(a, "run", real)
        assert a_trace is run.clean and runs == [k] and b_trace.reused == k
        assert not differs(a_trace, b_trace)
    assert not any("afresh" in r.getMessage() for r in caplog.records)


def test_a_run_afresh_stopped_by_a_newer_key_leaves_a_s_cache_as_it_was(same_model):
    """B more than MAX_BEHIND runs behind: the comparison runs the text afresh, and a newer key
    stops A's run of it. A's cache is still the one its typing filled (the grid's next keystroke
    computes one row, not the whole text), and the next comparison runs afresh again and shows 0."""
    a, b, _ = same_model
    follower = Follower(a, b)
    for k in range(FIRST, FIRST + MAX_BEHIND + 2):  # keys whose comparisons never ran
        run = typed(a, k)
        follower.note(run.clean, run.result.cache_used)
    asked = iter([False] + [True] * 100)  # fresh as the job starts, a newer key during A's run
    with pytest.raises(Cancelled):
        follower.follow(run.clean, C.compare_trace, stop=lambda: next(asked))
    k = FIRST + MAX_BEHIND + 2
    run = typed(a, k)
    assert run.result.cache_reused == k - 1
    follower.note(run.clean, run.result.cache_used)
    a_trace, b_trace = follower.follow(run.clean, C.compare_trace)
    assert a_trace is not run.clean and not differs(a_trace, b_trace)


def test_a_text_b_keeps_refusing_costs_no_run_of_a(same_model, monkeypatch):
    """B refuses every text holding token 7 (as a quantized B may give non-finite values on one
    token): while the text holds it, each key's comparison runs B first and stops at its refusal,
    A's cache and runs left alone; once the token is gone the text is run afresh and shows 0."""
    a, b, _ = same_model
    follower = Follower(a, b)
    real_b, real_a, a_runs = b.run, a.run, []

    def run_b(*args, ids=None, **kw):
        if 7 in list(ids):
            b.clear_cache()
            raise ModelLoadError("m gives non-finite attention patterns in layer 0")
        return real_b(*args, ids=ids, **kw)

    def run_a(*args, **kw):  # A's runs inside the comparison (its typing runs go by real_a)
        a_runs.append(len(kw["ids"]))
        return real_a(*args, **kw)
    monkeypatch.setattr(b, "run", run_b)
    texts = [IDS[:5] + [7] + IDS[5:k] for k in range(5, 9)]
    for ids in texts:
        typed_run = window_run(a, "", ids=np.asarray(ids))
        follower.note(typed_run.clean, typed_run.result.cache_used)
        monkeypatch.setattr(a, "run", run_a)
        with pytest.raises(ModelLoadError):
            follower.follow(typed_run.clean, C.compare_trace)
        monkeypatch.setattr(a, "run", real_a)
        assert typed_run.result.cache_reused == (0 if ids is texts[0] else len(ids) - 1)
    assert a_runs == []
    typed_run = window_run(a, "", ids=np.asarray(IDS[:6]))  # the token deleted
    follower.note(typed_run.clean, typed_run.result.cache_used)
    a_trace, trace = follower.follow(typed_run.clean, C.compare_trace)
    assert a_trace is not typed_run.clean and not differs(a_trace, trace)


def test_b_that_is_a_s_own_model_follows_a_run_apart_from_the_cache(same_model):
    """B the very Model object A is, and a run of A made apart from its cache (another run held
    it): B's run of it goes apart too, every row in one chunk as A's, and shows 0 (with the cache,
    B would take the previous run's rows)."""
    a = same_model[0]
    f = Follower(a, a)
    for k in range(FIRST, FIRST + 3):
        run = typed(a, k)
        f.note(run.clean, run.result.cache_used)
        f.follow(run.clean, C.compare_trace)
    run = window_run(a, "", ids=np.asarray(IDS[:FIRST + 3]), request=RunRequest(use_cache=False))
    assert not run.result.cache_used
    f.note(run.clean, False)
    a_trace, b_trace = f.follow(run.clean, C.compare_trace, cached=False)
    assert not differs(a_trace, b_trace)
