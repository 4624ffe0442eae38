"""Comparing two models on one token list: every metric against a direct NumPy computation from the
two runs' patterns, residual streams and logits, and a run against itself on every family."""

import math

import numpy as np
import pytest
from blas_rows import assert_same
from safetensors.numpy import load_file, save_file
from tiny import FIXTURES, tiny_llama

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing import compare_tokens as NT
from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.analysing.probes import probe_ids
from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.computing.request import RunRequest

IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], dtype=np.int64)
FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").exists())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    return load_model(tiny_llama(root / "a", seed=1)), load_model(tiny_llama(root / "b", seed=2))


def nudged(family, folder):
    """A family fixture and a copy with every weight nudged: a pair of one shape."""
    src = FIXTURES / family
    (folder / "config.json").write_text((src / "config.json").read_text())
    rng = np.random.default_rng(5)
    tensors = {k: (v + rng.standard_normal(v.shape).astype(v.dtype) * 0.05) if v.dtype.kind == "f" else v
               for k, v in load_file(src / "model.safetensors").items()}
    save_file(tensors, folder / "model.safetensors")
    return load_model(src), load_model(folder)


@pytest.fixture(scope="module")
def bert_pair(tmp_path_factory):
    return nudged("bert", tmp_path_factory.mktemp("bert_b"))


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    return nudged("llama_gqa", tmp_path_factory.mktemp("llama_b"))


def naive_jsd(p, q):  # two rows over the visible keys -> bits, term by term
    total = 0.0
    for pk, qk in zip(p, q):
        m = (pk + qk) / 2
        if pk > 0:
            total += 0.5 * pk * math.log2(pk / m)
        if qk > 0:
            total += 0.5 * qk * math.log2(qk / m)
    return total


def naive_heads(pair, causal):
    A, B = pair.a.attentions.astype(np.float64), pair.b.attentions.astype(np.float64)
    L, Hh, T, _ = A.shape
    mean, top = np.zeros((L, Hh)), np.zeros((L, Hh))
    for l in range(L):
        for h in range(Hh):
            rows = range(1, T) if causal else range(T)
            vals = [naive_jsd(A[l, h, q, :q + 1 if causal else T], B[l, h, q, :q + 1 if causal else T])
                    for q in rows]
            mean[l, h], top[l, h] = sum(vals) / len(vals), max(vals)
    return mean, top


def test_row_jsd_is_in_bits_zero_for_equal_rows_and_one_for_disjoint_ones():
    assert C.row_jsd([0.5, 0.5, 0], [0.5, 0.5, 0]) == 0.0
    assert C.row_jsd([1.0, 0.0], [0.0, 1.0]) == 1.0
    assert C.row_jsd([1.0, 0.0], [0.5, 0.5]) == pytest.approx(naive_jsd([1.0, 0.0], [0.5, 0.5]), abs=1e-15)


def test_heads_jsd_is_the_mean_and_max_row_jsd_of_a_decoder_from_row_1(tiny):
    pair = models_pair(*tiny, IDS, C.compare_trace)
    mean, top = naive_heads(pair, causal=True)
    np.testing.assert_allclose(C.heads_jsd(pair), mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(C.heads_jsd_max(pair), top, rtol=1e-9, atol=1e-12)
    assert (C.heads_jsd(pair) > 0).all() and (C.heads_jsd_max(pair) <= 1).all()


def test_an_encoder_averages_every_row_over_every_key(bert_pair):
    pair = models_pair(*bert_pair, np.arange(2, 9), C.compare_trace)
    mean, top = naive_heads(pair, causal=False)
    np.testing.assert_allclose(C.heads_jsd(pair), mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(C.heads_jsd_max(pair), top, rtol=1e-9, atol=1e-12)
    assert C.heads_jsd(pair).min() > 0


def test_a_decoder_needs_two_tokens(tiny):
    with pytest.raises(InputError, match="at least 2 tokens.*gives 1"):
        C.heads_jsd(models_pair(*tiny, IDS[:1], C.compare_trace))


def test_resid_cos_is_the_mean_cosine_after_each_block(tiny):
    pair = models_pair(*tiny, IDS, C.compare_trace)
    want = []
    for l in range(pair.n_layer):
        xa, xb = pair.a.trace.resid[l + 1].astype(np.float64), pair.b.trace.resid[l + 1].astype(np.float64)
        want.append(np.mean([x @ y / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(xa, xb)]))
    got = C.resid_cos(pair)
    assert got.shape == (pair.n_layer,)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert (got < 1).all()



def test_layers_in_one_pass_or_one_at_a_time_give_the_same_bits(tiny, monkeypatch):
    """A keystroke's comparison reduces every layer's rows in one pass, a long text's a few layers
    at a time: each row is reduced on its own, so each head's numbers are the same bits either way."""
    pair = models_pair(*tiny, IDS, C.compare_trace)
    assert C.layers_per_pass(pair.n_head * len(IDS) ** 2) >= pair.n_layer  # (one pass here)
    whole = C.jsd_rows(pair), C.resid_cos(pair)
    monkeypatch.setattr(C, "PASS_ELEMENTS", 1)  # one layer a pass
    assert C.layers_per_pass(pair.n_head * len(IDS) ** 2) == 1
    for got, want in zip((C.jsd_rows(pair), C.resid_cos(pair)), whole):
        assert got.shape == want.shape and got.tobytes() == want.tobytes()
    rows = C.query_rows(len(IDS), True)
    per_layer = np.stack([C.visible_jsd(pair.a.attentions[l][:, rows], pair.b.attentions[l][:, rows], rows)
                          for l in range(pair.n_layer)])
    assert per_layer.tobytes() == whole[0].tobytes()

def direct_logprobs(model, x):  # final-norm input [T, d_model] -> log-probs [T, vocab], by hand
    cfg, head = model.config, model.weights.head
    x = x.astype(np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + cfg.norm_eps) * head.norm[0]
    logits = normed @ np.asarray(head.unembed[0:cfg.vocab_size], dtype=np.float64).T
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def test_kld_top1_and_flips_from_the_two_runs_logits(llama_pair):
    pair = models_pair(*llama_pair, IDS, C.compare_trace)
    la = direct_logprobs(pair.a.model, pair.a.trace.resid[-1])
    lb = direct_logprobs(pair.b.model, pair.b.trace.resid[-1])
    want = [sum(math.exp(a) * (a - b) for a, b in zip(ra, rb)) for ra, rb in zip(la, lb)]
    doc = C.compare(pair)
    np.testing.assert_allclose(doc["kld"], want, rtol=1e-4, atol=1e-7)
    s = sorted(want)
    assert doc["kld_stats"]["mean"] == pytest.approx(sum(want) / len(want), rel=1e-4)
    assert doc["kld_stats"]["median"] == pytest.approx((s[5] + s[6]) / 2, rel=1e-4)
    assert doc["kld_stats"]["max"] == pytest.approx(s[-1], rel=1e-4)
    assert doc["kld_stats"]["p99"] == pytest.approx(s[-2] + 0.89 * (s[-1] - s[-2]), rel=1e-4)  # 0.99 * 11
    top_a, top_b = la.argmax(axis=1), lb.argmax(axis=1)
    assert doc["same_top1"] == pytest.approx((top_a == top_b).mean())
    assert [f["position"] for f in doc["flips"]] == [t for t in range(len(IDS)) if top_a[t] != top_b[t]]
    assert doc["flips"] and all(f["a_id"] == top_a[f["position"]] and f["b_id"] == top_b[f["position"]]
                                and f["a_token"] == str(f["a_id"]) for f in doc["flips"])
    assert 0 < doc["same_top1"] < 1


def test_induction_on_the_probe_names_the_heads_a_checkpoint_lost(ckpts):
    late, early = ckpts.model(ckpts.last), ckpts.model(0)
    probe = C.probe_pair(late, early)
    assert probe.a.ids.tolist() == probe_ids(late)[0]
    doc = C.induction(probe)
    for side, model in (("a", late), ("b", early)):  # the Head roles panel's score on the probe
        want = H.score_heads(model.run(ids=probe.a.ids, request=RunRequest(use_cache=False)).attentions, probe.a.ids,
                             unknown_ids=H.unknown_token_ids(model)).strength["induction"]
        np.testing.assert_array_equal(doc[side], want)
    a, b = np.array(doc["a"]), np.array(doc["b"])
    t = H.THRESHOLDS["induction"]  # the Head roles panel's induction bar
    assert doc["threshold"] == t == 0.5
    assert doc["lost"] == [[l, h] for l, h in np.argwhere((a >= t) & (b < t)).tolist()]
    assert doc["survived"] == [[l, h] for l, h in np.argwhere((a >= t) & (b >= t)).tolist()]
    assert doc["lost"]  # the last checkpoint's induction heads are not there at step 0
    assert C.induction(C.probe_pair(early, late))["lost"] == []  # step 0 has none to lose
    asked = []  # stop(), asked before each layer of both runs: no changes nothing, yes stops
    assert C.induction(C.probe_pair(late, early, stop=lambda: asked.append(1) and False)) == doc
    assert len(asked) == 2 * late.config.n_layer
    with pytest.raises(Cancelled, match="before layer 0"):
        C.probe_pair(late, early, stop=lambda: True)


def test_a_model_without_a_tokenizer_runs_a_raw_repeated_probe(tiny):
    ids = C.induction_probe(tiny[0])
    assert len(ids) == 50 and ids[:25] == ids[25:] and len(set(ids[:25])) == 25
    assert C.raw_probe_ids(10, n=25)[:25] == C.raw_probe_ids(10, n=25)[25:]


def assert_identity(doc, predicts=True):
    assert np.array(doc["heads_jsd"]).max() == 0.0 and np.array(doc["heads_jsd_max"]).max() == 0.0
    assert set(doc["resid_cos"]) == {1.0}
    if predicts:
        assert doc["kld_stats"] == {"mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0.0}
        assert set(doc["kld"]) == {0.0} and doc["same_top1"] == 1.0 and doc["flips"] == []
    else:
        assert doc["kld"] is None and doc["same_top1"] is None and doc["flips"] is None
    assert doc["induction"]["lost"] == [] and doc["induction"]["a"] == doc["induction"]["b"]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_run_against_itself_is_exact_on_every_family(family):
    model = load_model(FIXTURES / family)
    ids = np.load(FIXTURES / family / "expected.npz")["ids_2"]
    doc = C.compare(models_pair(model, model, ids, C.compare_trace), C.probe_pair(model, model))
    assert_identity(doc, predicts=model.config.causal)


def test_real_models_against_themselves_are_exact(minilm, smollm2, toy):
    for model, text in ((minilm, "The cat sat on the mat because it was tired."),
                        (smollm2, "Alice met Bob. Then Alice gave the book to"),
                        (toy, "the cat sat on the mat")):
        ids = model.run(text, request=RunRequest(use_cache=False)).input_ids
        doc = C.compare(models_pair(model, model, ids, C.compare_trace), C.probe_pair(model, model))
        assert_identity(doc, predicts=model.config.causal)
    assert doc["induction"]["survived"]  # the toy model's induction heads survive themselves


def test_moved_most_ranks_heads_by_jsd():
    jsd = np.array([[0.1, 0.5], [0.3, 0.5]])
    assert C.moved_most(jsd, 3) == [(0, 1, 0.5), (1, 1, 0.5), (1, 0, 0.3)]
    # a head whose JSD is exactly 0 did not move: never listed, even to fill n
    assert C.moved_most(np.array([[0.0, 2e-9], [0.0, 0.0]]), 3) == [(0, 1, 2e-9)]
    assert C.moved_most(np.zeros((2, 2)), 3) == []


def test_a_decoder_without_an_unembedding_has_no_next_token_numbers(tiny):
    doc = C.compare(models_pair(*tiny, IDS, C.compare_trace))
    assert doc["kld"] is None and doc["kld_stats"] is None and doc["same_top1"] is None
    assert doc["induction"] is None and len(doc["heads_jsd"]) == 2


def test_a_keystrokes_comparison_reuses_the_shared_prefix_exactly(llama_pair):
    first = models_pair(*llama_pair, IDS[:8], C.compare_trace)
    _, known = C.compare_with(first)
    longer = np.concatenate([IDS[:8], [7, 7]])
    pair = models_pair(*llama_pair, longer, C.compare_trace)
    doc, seen = C.compare_with(pair, known=known)
    assert_same(doc, C.compare(pair))  # (bits where the BLAS computes a row alike in any call)
    assert (seen[0] == longer).all()
    assert NT.shared_prefix(IDS, longer) == 8 and NT.shared_prefix(IDS, IDS) == len(IDS)


def test_the_comparison_holds_no_float32_unembedding_and_its_logits_are_the_heads_own(
        smollm2, shared_quantized):
    from attnviz.engine.computing.logits import vocab_logits

    q8, q4 = shared_quantized(smollm2, "Q8_0"), shared_quantized(smollm2, "Q4_0")
    ha, hb = NT.pair_heads(smollm2, q8)
    assert not isinstance(ha.w_u, np.ndarray) and hb.w_u is ha.w_u  # the file's table, read once
    ha4, hb4 = NT.pair_heads(smollm2, q4)
    assert not isinstance(hb4.w_u, np.ndarray) and hb4.w_u is not ha4.w_u
    x = np.random.default_rng(3).standard_normal((3, 576)).astype(np.float32)
    y = x + np.float32(0.01)
    for h1, h2 in ((ha, hb), (ha4, hb4)):
        za, zb = NT.pair_logits(h1, h2, x, y)
        np.testing.assert_array_equal(za, vocab_logits(h1, x))  # bit for bit
        np.testing.assert_array_equal(zb, vocab_logits(h2, y))
        np.testing.assert_array_equal(za, vocab_logits(smollm2.lm_head(), x))  # = the float32 head's
    doc = C.compare(models_pair(smollm2, q8, IDS, C.compare_trace))
    assert 0 < doc["kld_stats"]["max"] < 0.5


def test_reuse_takes_only_positions_whose_inputs_are_the_same_bits():
    """reusable(): the leading positions with the same ids whose final-norm inputs on both sides are
    bit for bit those the known numbers came from; one differing bit (B's row 3, a -0 for a +0)
    or id ends the reuse there; the last position is always computed."""
    rng = np.random.default_rng(0)
    xa, xb = rng.standard_normal((2, 6, 4)).astype(np.float32)
    ids = np.array([5, 6, 7, 8, 9, 10])
    nt = NT.NextTokens(np.zeros(6), np.zeros(6, np.int64), np.zeros(6, np.int64))
    known = (ids, nt, xa.copy(), xb.copy())
    longer_a, longer_b = np.vstack([xa, xa[:2]]), np.vstack([xb, xb[:2]])
    assert NT.reusable(known, np.append(ids, [1, 2]), longer_a, longer_b) == 6
    assert NT.reusable(known, ids, xa, xb) == 5  # the same text: its last position again
    b3 = longer_b.copy()
    b3[3, 2] = np.nextafter(b3[3, 2], np.float32(np.inf))
    assert NT.reusable(known, np.append(ids, [1, 2]), longer_a, b3) == 3
    zero = longer_a.copy()
    zero[1, 0], known[2][1, 0] = -0.0, 0.0
    assert NT.reusable(known, np.append(ids, [1, 2]), zero, longer_b) == 1
    other = np.append(ids, [1, 2])
    other[4] = 99
    assert NT.reusable(known, other, longer_a, longer_b) == 1
    assert NT.reusable(None, ids, xa, xb) == 0


def test_a_keystroke_through_the_kv_cache_keeps_the_prefixs_logits_bit_for_bit(llama_pair):
    """As the window types: each side runs its text through its own KV cache, the next keystroke
    appends a token. The prefix's final-norm inputs, and so its logits, are bit for bit those of
    the run before, on both sides, so the numbers reused there are the numbers of these rows; the
    whole result equals the numbers computed from scratch for every position (NumPy below)."""
    from attnviz.engine.analysing.pair import Pair, Run
    from attnviz.engine.computing.logits import vocab_logits

    a, b = llama_pair
    for m in (a, b):
        m.clear_cache()

    def typed(ids):
        sides = []
        for label, m in (("A", a), ("B", b)):
            trace = C.compare_trace()
            m.run(ids=ids, trace=trace, request=RunRequest(use_cache=True))
            sides.append(Run(label, m, ids, trace))
        return Pair(*sides)

    first = typed(IDS[:8])
    numbers0, seen = NT.next_token_numbers(first)
    second = typed(IDS[:9])
    ha, hb = NT.pair_heads(a, b)
    for side, h in ((0, ha), (1, hb)):
        old = (first.a, first.b)[side].trace.resid[-1][:8]
        new = (second.a, second.b)[side].trace.resid[-1][:8]
        assert NT.same_rows(old, new) == 8
        np.testing.assert_array_equal(vocab_logits(h, new), vocab_logits(h, old))
    assert NT.reusable(seen, second.a.ids, second.a.trace.resid[-1], second.b.trace.resid[-1]) == 8
    numbers, _ = NT.next_token_numbers(second, known=seen)
    # direct: float64 log-softmax of each side's logits, KL(A || B) per position, top-1 ids
    la = vocab_logits(ha, second.a.trace.resid[-1]).astype(np.float64)
    lb = vocab_logits(hb, second.b.trace.resid[-1]).astype(np.float64)
    la -= np.log(np.exp(la - la.max(-1, keepdims=True)).sum(-1, keepdims=True)) + la.max(-1, keepdims=True)
    lb -= np.log(np.exp(lb - lb.max(-1, keepdims=True)).sum(-1, keepdims=True)) + lb.max(-1, keepdims=True)
    kl = (np.exp(la) * (la - lb)).sum(-1)
    np.testing.assert_allclose(numbers["kld"], kl, rtol=1e-6, atol=1e-9)
    assert numbers["kld"][:8] == numbers0["kld"]
    flips = np.flatnonzero(la.argmax(-1) != lb.argmax(-1))
    assert [f["position"] for f in numbers["flips"]] == flips.tolist()
