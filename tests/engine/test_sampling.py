"""A draw at a temperature (generate.choose) is the token the definition draws with the same
generator: the whole vocabulary sorted most likely first (the lowest id first among equals), cut
where the running sum reaches top_p of the whole sum, renormalised, one uniform number. choose
sorts only what it needs; the token and the generator's state must come out the same for every
seed, temperature and top_p, with ties in the values, at a vocabulary of SmolLM2's size."""

import numpy as np
import pytest

from attnviz.engine.computing import generate as G
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.sampling import choose


def by_the_definition(logprobs, temperature, top_p, rng) -> int:
    p = np.exp(log_softmax(logprobs / temperature))
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    keep = order[:int(np.searchsorted(cum, top_p * cum[-1])) + 1]
    kept = p[keep] / p[keep].sum()
    return int(keep[min(int(np.searchsorted(np.cumsum(kept), rng.random())), len(keep) - 1)])


def _logprobs(kind: str, V: int, rng) -> np.ndarray:
    if kind == "spread":  # an LM's spread: a few likely tokens, a long tail down to about -35
        x = rng.standard_normal(V) * 3.0
        x[rng.integers(0, V, 5)] += 12.0
    elif kind == "ties":  # few distinct values: the cut and the draw fall inside groups of equals
        x = rng.choice(np.array([0.0, -0.5, -1.0, -3.0, -8.0, -40.0]), V, p=[.001, .004, .02, .1, .3, .575])
    else:  # "flat": every token as likely
        x = np.zeros(V)
    return log_softmax(x)


@pytest.mark.parametrize("kind", ["spread", "ties", "flat"])
@pytest.mark.parametrize("V", [5, 1000, 49152])
def test_choose_draws_the_definitions_token_with_the_same_generator(kind, V):
    rng = np.random.default_rng([V, len(kind)])
    n = 0
    for temperature in (0.05, 0.3, 0.7, 1.0, 1.7):
        for top_p in (1e-9, 0.3, 0.9, 0.999, 1.0):
            logprobs = _logprobs(kind, V, rng)
            for seed in range(3 if V == 49152 else 12):
                a, b = np.random.default_rng(seed), np.random.default_rng(seed)
                got, want = choose(logprobs, temperature, top_p, a), by_the_definition(logprobs, temperature, top_p, b)
                assert got == want, (kind, V, temperature, top_p, seed)
                assert a.random() == b.random()  # (one number drawn each)
                n += 1
    assert n >= 75


def test_choose_with_nan_among_the_values_draws_the_definitions_token():
    logprobs = _logprobs("spread", 1000, np.random.default_rng(0))
    logprobs[[3, 500]] = np.nan
    for seed in range(5):
        assert choose(logprobs, 1.0, 0.9, np.random.default_rng(seed)) == by_the_definition(
            logprobs, 1.0, 0.9, np.random.default_rng(seed))


@pytest.mark.parametrize("V", [1000, 4096, 49152])
def test_a_cut_that_falls_on_a_running_sum_keeps_the_definitions_tokens(V):
    """Every token as likely and top_p = m / V: the threshold equals a running sum but for its
    last bits, which differ between the sum in sorted order and any other; the cut must follow
    the sorted one."""
    logprobs = _logprobs("flat", V, None)
    for m in range(1, 40):
        for seed in range(8):
            a, b = np.random.default_rng(seed), np.random.default_rng(seed)
            assert choose(logprobs, 1.0, m / V, a) == by_the_definition(logprobs, 1.0, m / V, b), (m, seed)


def test_the_smallest_temperature_draws_the_most_likely_token_and_a_smaller_one_is_refused():
    """At MIN_TEMPERATURE every draw is the most likely token, even with a vocabulary of 2**31
    ids and a most likely token at -log(vocab); a temperature between 0 and it is refused with the
    smallest allowed one named (its logprobs / temperature would all be -inf: a draw of token 0)."""
    from attnviz.engine import InputError
    from attnviz.engine.computing.sampling import MIN_TEMPERATURE

    V = 2 ** 31
    lp = np.array([-np.log(V) - 1.0, -np.log(V), -np.log(V) - 0.5])  # (the rest of the vocabulary left out)
    for seed in range(5):
        assert choose(lp, MIN_TEMPERATURE, 1.0, np.random.default_rng(seed)) == 1
        assert choose(lp, MIN_TEMPERATURE, 1.0, np.random.default_rng(seed)) == by_the_definition(
            lp, MIN_TEMPERATURE, 1.0, np.random.default_rng(seed))
    G.check_sampling(MIN_TEMPERATURE, 1.0, 1)
    for tiny in (1e-310, MIN_TEMPERATURE / 2):
        with pytest.raises(InputError, match=r"temperature must be 0 \(greedy\) or at least 1e-300, got "):
            G.check_sampling(tiny, 1.0, 1)


@pytest.mark.parametrize("kind", ["spread", "ties", "flat"])
def test_draw_p_is_each_top_tokens_probability_in_the_definitions_draw(kind):
    """What the Generate panel shows beside the model's top-k: the probability each one had in the
    draw, by the definition (sorted, cut at top_p, renormalised), 0 outside the top-p set."""
    from attnviz.engine.computing.sampling import draw_p, draw_set

    V, k = 49152, 10
    logprobs = _logprobs(kind, V, np.random.default_rng(7))
    top = G.top_ids(logprobs, k)
    for temperature in (0.3, 1.0, 1.7):
        p = np.exp(log_softmax(logprobs / temperature))
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        keep = order[:int(np.searchsorted(cum, 0.5 * cum[-1])) + 1]
        want = np.array([p[i] / p[keep].sum() if i in set(keep.tolist()) else 0.0 for i in top])
        np.testing.assert_allclose(draw_p(draw_set(logprobs, temperature, 0.5), top), want, rtol=1e-12, atol=0)
        np.testing.assert_allclose(draw_p(draw_set(logprobs, temperature, 1.0), top), p[top] / p.sum(), rtol=1e-12)
    if kind == "spread":
        assert 0 < np.count_nonzero(draw_p(draw_set(logprobs, 1.0, 0.5), top)) < k  # (the cut falls in the top-k)
