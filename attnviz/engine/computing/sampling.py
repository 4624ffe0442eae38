"""A token drawn at a temperature: from softmax(logprobs / temperature), most likely first (the
lowest id first among equals), cut where the running sum first reaches top_p of the sum of them
all in that order, renormalised, with one uniform number from a seeded generator. Pure NumPy.

The definition sorts the whole vocabulary; this sorts only what settles the token. The cut
depends on every value through that sum, and a float64 sum depends on its order; but it is
settled by fewer values where (a) the rest are each under half an ulp of the running sum (adding
them leaves it as it is: a low temperature), or (b) top_p < 1 and no running sum of the most
likely values lies within the sum's rounding error of the threshold (any sum in that interval
cuts at the same place). Otherwise every value is sorted (values only; the id is found after)."""

from __future__ import annotations

import numpy as np

from attnviz.engine.computing.logits import log_softmax

SUM_STILL = 2.0 ** -54  # half an ulp of a sum in [0.5, 1): a value below it adds nothing to it
TOP_BOUNDS = (64, 1024, 8192)  # the most likely values sorted in turn for a cut below top_p = 1
# the smallest temperature above 0 (generate.check_sampling refuses one below): the most likely
# token's log-probability is at least -log(vocab), above -50 for any vocabulary, and divided by
# this it stays finite (float64 ends at 1.8e308); below it, every logprobs / temperature could be
# -inf and the softmax NaN (a draw of token 0, not the most likely)
MIN_TEMPERATURE = 1e-300


def choose(logprobs: np.ndarray, temperature: float, top_p: float, rng) -> int:
    """logprobs [vocab] (log_softmax's) -> a token: the argmax (lowest id on a tie) at temperature
    0; otherwise (a temperature of at least MIN_TEMPERATURE) a draw from softmax(logprobs /
    temperature) cut to the smallest most-likely set whose probability reaches top_p (the
    module's docstring)."""
    if temperature == 0:
        return int(np.argmax(logprobs))
    return pick(draw_set(logprobs, temperature, top_p), rng)


def draw_set(logprobs: np.ndarray, temperature: float, top_p: float) -> tuple:
    """What a draw at a temperature above 0 draws from: (p [vocab] float64, vals: p's values the
    most likely first, at least the m the cut keeps, m, the ids' whole order where p holds NaN
    else None)."""
    p = np.exp(log_softmax(logprobs / temperature))  # [vocab] float64
    if np.isnan(p).any():  # (NaN among the values: the ids' whole order, as the definition's)
        order = np.argsort(-p, kind="stable")
        vals = p[order]
        return p, vals, _cut_at(np.cumsum(vals), top_p), order
    return (p, *_cut(p, top_p), None)


def pick(drawn: tuple, rng) -> int:
    """A token from draw_set's answer, with one uniform number from rng."""
    p, vals, m, order = drawn
    kept = vals[:m] / vals[:m].sum()
    i = min(int(np.searchsorted(np.cumsum(kept), rng.random())), m - 1)
    if order is not None:
        return int(order[i])
    # the i-th most likely, the lowest ids first among equals: its rank among the ids of its value
    return int(np.flatnonzero(p == vals[i])[i - np.count_nonzero(p > vals[i])])


def draw_p(drawn: tuple, top: np.ndarray) -> np.ndarray:
    """draw_set's answer, top [k] (the k most likely ids, most likely first: generate.top_ids) ->
    [k] float64: the probability each had in the draw, that is softmax(logprobs / temperature)
    over the top-p set, renormalised; 0 outside the set. The i-th most likely is the i-th of the
    draw's order too (dividing by a temperature keeps the order)."""
    p, vals, m, _ = drawn
    out = p[top] / vals[:m].sum()
    out[m:] = 0.0
    return out


def _cut_at(cum: np.ndarray, top_p: float) -> int:  # running sums [k] -> tokens kept (>= 1)
    return min(int(np.searchsorted(cum, top_p * cum[-1])) + 1, len(cum))


def _cut(p: np.ndarray, top_p: float) -> tuple[np.ndarray, int]:  # [vocab] -> vals [k >= m], m
    if top_p < 1:
        settled = _cut_from_the_top(p, top_p)
        if settled is not None:
            return settled
    vals, cum = _sorted_mass(p)
    return vals, _cut_at(cum, top_p)


def _cut_from_the_top(p: np.ndarray, top_p: float) -> tuple[np.ndarray, int] | None:
    """(b): the sum in sorted order and NumPy's p.sum() each differ from the exact sum S by at most
    (vocab - 1) u S, u = eps / 2 (a recursive sum's bound, to first order; a pairwise sum's is
    smaller), so the threshold lies in [lo, hi]; the largest values are sorted in turn
    (TOP_BOUNDS) until their running sum passes hi. None where that never happens or a running
    sum lies in [lo, hi) (the place would depend on the last bits)."""
    V, S = len(p), p.sum()
    err = 4.0 * V * np.finfo(np.float64).eps * S  # (the two sums' bounds together, four times over)
    lo, hi = top_p * (S - err), top_p * (S + err)
    bounds = [k for k in TOP_BOUNDS if k < V // 2]
    if not bounds:
        return None
    part = np.partition(p, [V - k for k in reversed(bounds)])  # [V - k:] the k largest, each bound
    vals, done = np.empty(0), 0
    for k in bounds:
        vals = np.concatenate([vals, np.sort(part[V - k:V - done])[::-1]])
        done = k
        cum = np.cumsum(vals)
        if cum[-1] >= hi:
            j = int(np.searchsorted(cum, lo))
            return (vals, j + 1) if j == int(np.searchsorted(cum, hi)) else None
    return None


def _sorted_mass(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # [vocab] -> vals [k], cum [k]
    """p's values, largest first (a contiguous array), and their running sum, as far as the sum
    still changes (a): from the first value on that is under half an ulp of the sum so far, every
    later one is too (they only shrink, the sum only grows) and adding it rounds to the same
    sum, so cum[-1] is the whole vocabulary's sum in that order to the bit. At a low temperature
    few values are that large, and only those are partitioned out and sorted."""
    k = np.count_nonzero(p >= SUM_STILL) + 1  # (a probability sums to about 1)
    if k < len(p) // 2:
        vals = np.sort(np.partition(p, len(p) - k)[len(p) - k:])[::-1].copy()
        cum = np.cumsum(vals)
        if vals[-1] < np.spacing(cum[-1]) / 2:  # (the rest are at most vals[-1])
            return vals, cum
    vals = np.sort(p)[::-1].copy()
    return vals, np.cumsum(vals)
