"""What changes between two models on the same tokens: pure functions of a Pair (pair.py).

Model A (the loaded one) and model B (another file, a checkpoint, A quantized) run the same ids
[T]; each side's trace kept its patterns and its residual stream (`compare_trace()`). Definitions
(logs base 2 for attention, in bits; base e for next-token distributions, in nats):

    JSD(p, q) = 1/2 sum_k p_k log2(p_k / m_k) + 1/2 sum_k q_k log2(q_k / m_k),  m = (p + q) / 2
        over the keys k a query row can see (k <= q in a decoder, every key in an encoder); a term
        with p_k = 0 is 0. 0 for equal rows, at most 1.
    heads_jsd[l, h]      mean over query rows of JSD(A[l, h, q, :], B[l, h, q, :]): rows 1..T-1 in
                         a decoder (row 0 has one key, so its JSD is always 0), rows 0..T-1 in an
                         encoder.                                                  [n_layer, n_head]
    heads_jsd_max[l, h]  the largest of those row values.                        [n_layer, n_head]
    resid_cos[l]         mean over positions t of cos(x_A[t], x_B[t]), x the residual stream after
                         block l (trace.resid[l + 1]), cos(x, y) = x.y / sqrt((x.x)(y.y)).  [n_layer]
    kld[t]               KL(P_A || P_B) = sum_v P_A(v | 0..t) (log P_A(v | 0..t) - log P_B(v | 0..t)),
                         the next-token distributions after token t over the whole vocabulary, in
                         nats (decoders with an unembedding; absent otherwise).          [T]
    kld_stats            mean, median, 99th percentile (linear interpolation between the two
                         nearest positions, NumPy's default) and max of kld over the T positions.
    same_top1            the share of the T positions where A's and B's most likely next token is
                         the same (argmax; the lowest id wins a tie).
    flips                the positions where it is not: {position, a_id, a_token, b_id, b_token}.
    induction            on the model's repeated-random probe (probes.probe_ids: the Head roles
                         panel's probe and score), each head's induction strength in A and in B
                         (heads.score_heads(...).strength["induction"]); a head at or above
                         `threshold` in A survived when it is at or above it in B too, and is lost
                         when it falls below it.

A run against itself gives exactly 0 (JSD, KLD), 1.0 (resid_cos, same_top1), no flips, none lost.
The next-token numbers (kld, kld_stats, same_top1, flips) are computed in compare_tokens.py.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.compare_tokens import next_token_numbers, shared_prefix
from attnviz.engine.analysing.divergence import cosine_rows, row_jsd, visible_jsd  # noqa: F401 (row_jsd named here)
from attnviz.engine.analysing.model_identity import file_sha256, identity, model_files  # noqa: F401 (named here)
from attnviz.engine.analysing.pair import Pair, models_pair
from attnviz.engine.analysing.probes import PROBE_LENGTH, PROBE_SEED, probe_ids
from attnviz.engine.computing.trace import Trace
from attnviz.engine.errors import InputError

INDUCTION_THRESHOLD = H.THRESHOLDS["induction"]  # an induction head: the Head roles panel's bar


def compare_trace(**kw) -> Trace:
    """A trace that keeps what the comparison reads: the patterns and the residual stream."""
    return Trace(resid=True, **kw)


# ---------------------------------------------------------------- attention

def query_rows(T: int, causal: bool) -> np.ndarray:
    """The query rows the head JSD averages over: 1..T-1 in a decoder, 0..T-1 in an encoder."""
    return np.arange(1 if causal else 0, T)


def jsd_rows(pair: Pair, first: int = 0) -> np.ndarray:  # -> [n_layer, n_head, n_rows] in bits
    """Every head's JSD per query row (query_rows; those from row `first` on) over the keys the
    row sees (divergence.visible_jsd), a few layers a pass."""
    causal = pair.a.model.config.causal
    T = pair.T
    if causal and T < 2:
        raise InputError("a decoder's heads are compared on at least 2 tokens (row 0 has one key); "
                         f"the text gives {T}")
    rows = query_rows(T, causal)
    rows = rows[rows >= first]
    last = rows if causal else np.full(len(rows), T - 1)  # the last key each row sees
    A, B = pair.a.attentions, pair.b.attentions
    n = layers_per_pass(A.shape[1] * len(rows) * T)
    return np.concatenate([visible_jsd(A[l:l + n][:, :, rows], B[l:l + n][:, :, rows], last)
                           for l in range(0, A.shape[0], n)])


PASS_ELEMENTS = 1 << 20  # values of all layers' rows one pass of visible_jsd / cosine_rows takes


def layers_per_pass(per_layer: int) -> int:
    """How many layers of `per_layer` values each one pass of a row function takes: every layer of
    a short text in one (a keystroke's comparison: one pass, not one a layer), a long text's a few
    at a time (its float64 temporaries stay about 8 MiB each). Each row's value is the same bits
    either way: a row is reduced on its own."""
    return max(1, PASS_ELEMENTS // max(1, per_layer))


def heads_jsd(pair: Pair) -> np.ndarray:  # -> [n_layer, n_head] in bits
    """Mean over query rows of the JSD between A's and B's attention rows (module docstring)."""
    return jsd_rows(pair).mean(axis=-1)


def heads_jsd_max(pair: Pair) -> np.ndarray:  # -> [n_layer, n_head] in bits
    """The largest row JSD of each head."""
    return jsd_rows(pair).max(axis=-1)


# ---------------------------------------------------------------- residual stream

def resid_cos(pair: Pair) -> np.ndarray:  # -> [n_layer]
    """Mean over positions of the cosine between A's and B's residual stream after each block."""
    return resid_cos_rows(pair).mean(axis=-1)


def resid_cos_rows(pair: Pair, first: int = 0) -> np.ndarray:  # -> [n_layer, T - first]
    """The cosine between A's and B's residual stream after each block at positions first..T-1."""
    ra, rb = pair.a.trace.resid, pair.b.trace.resid
    if not ra or ra[-1] is None or not rb or rb[-1] is None:
        raise ValueError("resid_cos needs traces that kept the residual stream (compare_trace())")
    n = layers_per_pass(ra[-1][first:].size)
    return np.concatenate([cosine_rows(np.stack([r[first:] for r in ra[l + 1:l + 1 + n]]),
                                       np.stack([r[first:] for r in rb[l + 1:l + 1 + n]]))
                           for l in range(0, len(ra) - 1, n)])


# ---------------------------------------------------------------- induction heads

def raw_probe_ids(vocab_size: int, n: int = PROBE_LENGTH, seed: int = PROBE_SEED) -> list[int]:
    """A model without a tokenizer's probe: n ids drawn at random (seeded, without repeats when the
    vocabulary allows) from 0..vocab_size-1, repeated twice, no special tokens."""
    rng = np.random.default_rng(seed)
    seq = rng.choice(vocab_size, size=n, replace=vocab_size < n).tolist()
    return [int(i) for i in seq + seq]


def induction_probe(model) -> list[int]:
    """The ids the induction comparison runs: the model's repeated-random probe (the Head roles
    panel's), or raw_probe_ids for a model without a tokenizer (fitted to its positions)."""
    if model.tokenizer is not None:
        return probe_ids(model)[0]
    n = min(PROBE_LENGTH, int(model.config.max_positions) // 2)
    return raw_probe_ids(int(model.config.vocab_size), n)


def induction_strength(run) -> np.ndarray:  # Run -> [n_layer, n_head]
    """Each head's induction strength on the run's ids, as the Head roles panel scores it."""
    unknown = H.unknown_token_ids(run.model) if run.model.tokenizer is not None else ()
    return H.score_heads(run.attentions, run.ids, unknown_ids=unknown).strength["induction"]


def induction(probe_pair: Pair, threshold: float = INDUCTION_THRESHOLD) -> dict:
    """{a, b: [n_layer][n_head] strengths, threshold, survived, lost: [[layer, head], ...]} on a
    pair run on the probe (induction_probe)."""
    a, b = induction_strength(probe_pair.a), induction_strength(probe_pair.b)
    strong = a >= threshold
    return {"a": a.tolist(), "b": b.tolist(), "threshold": float(threshold),
            "survived": [[int(l), int(h)] for l, h in np.argwhere(strong & (b >= threshold))],
            "lost": [[int(l), int(h)] for l, h in np.argwhere(strong & (b < threshold))]}


def beside_threshold(value: float, threshold: float, digits: int = 2) -> str:
    """`value` at `digits` decimals, or more where fewer cross `threshold` (0.3996, not 0.40)."""
    for text in (f"{value:.{d}f}" for d in range(digits, 9)):
        if (float(text) >= threshold) == (value >= threshold):
            return text
    return repr(float(value))


def probe_pair(a, b, stop=None) -> Pair:
    """A and B on A's induction probe (patterns only). `stop()`: Trace.stop, asked before each
    layer of either run (a caller may wait inside it, the run going on from there)."""
    def traced() -> Trace:
        trace = Trace()
        trace.stop = stop
        return trace
    return models_pair(a, b, induction_probe(a), traced)


def compare(pair: Pair, probe: Pair | None = None, threshold: float = INDUCTION_THRESHOLD) -> dict:
    """Every metric of the module docstring, keyed as the command line's JSON: heads_jsd,
    heads_jsd_max, resid_cos, kld, kld_stats, same_top1, flips (None where the models predict no
    next token) and induction (None without a probe pair)."""
    return compare_with(pair, probe, threshold)[0]


def compare_with(pair: Pair, probe: Pair | None = None, threshold: float = INDUCTION_THRESHOLD,
                 known=None, stop=None, predictions: bool = True) -> tuple[dict, tuple | None]:
    """compare(), and next_token_numbers' seen for the next call's `known` (next_tokens): a window's
    keystroke computes the next-token numbers of its new positions only (None: a model that
    predicts no next token). `stop()` raises Cancelled between the unembedding's blocks.
    predictions=False leaves kld, kld_stats, same_top1 and flips None (a window computes them in
    a job of their own, with next_token_numbers)."""
    doc, seen = head_numbers(pair)[0], None
    if predictions:
        numbers, seen = next_token_numbers(pair, known, stop)
        doc.update(numbers)
    doc["induction"] = induction(probe, threshold) if probe is not None else None
    return doc, seen


def head_numbers(pair: Pair, known=None) -> tuple[dict, tuple]:
    """compare_with(pair, predictions=False)'s numbers (heads_jsd, heads_jsd_max, resid_cos; the
    next-token ones and induction None), and `seen` (the pair, its row JSDs and position cosines) for the next
    call's `known`: the rows and positions reusable_rows finds keep their values from it (each
    row's and position's value is its own, the same bits whatever follows it)."""
    p = reusable_rows(known, pair)
    rows, cos = jsd_rows(pair, first=p), resid_cos_rows(pair, first=p)
    if p:  # (a decoder: query rows 1..p-1, positions 0..p-1 kept)
        rows = np.concatenate([known[1][..., :p - 1], rows], axis=-1)
        cos = np.concatenate([known[2][:, :p], cos], axis=-1)
    doc = {"heads_jsd": rows.mean(axis=-1).tolist(), "heads_jsd_max": rows.max(axis=-1).tolist(),
           "resid_cos": cos.mean(axis=-1).tolist(),
           "kld": None, "kld_stats": None, "same_top1": None, "flips": None, "induction": None}
    return doc, (pair, rows, cos)


def reusable_rows(known, pair: Pair) -> int:
    """The leading positions p whose rows head_numbers' `known` holds for `pair` (else 0): a
    decoder's pair of the same two models with the same ids there, and on both sides the patterns
    among them (a row sees no later key) and the residual stream at them bit for bit those it was
    computed from (an appended token: the KV cache keeps them). At most T - 1."""
    if known is None or not pair.a.model.config.causal:
        return 0
    old = known[0]
    if old.a.model is not pair.a.model or old.b.model is not pair.b.model:
        return 0
    p = min(shared_prefix(old.a.ids, pair.a.ids), old.T, pair.T - 1)
    for new, was in ((pair.a, old.a), (pair.b, old.b)):
        if p <= 0 or not same_bits(new.attentions[:, :, :p, :p], was.attentions[:, :, :p, :p]) or not all(
                same_bits(x[:p], y[:p]) for x, y in zip(new.trace.resid[1:], was.trace.resid[1:])):
            return 0
    return max(p, 0)


def same_bits(x, y) -> bool:  # two float arrays: equal bit for bit (a NaN equals itself)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.flags.c_contiguous and y.flags.c_contiguous:  # (one memcmp: a residual stream's rows)
        return x.tobytes() == y.tobytes()
    return bool((x.view(f"u{x.itemsize}") == y.view(f"u{y.itemsize}")).all())


def moved_most(jsd, n: int = 10) -> list[tuple[int, int, float]]:
    """The n heads with the largest JSD, largest first: [(layer, head, jsd)]; a head whose JSD is
    exactly 0 did not move and is left out (none, for a model against itself)."""
    jsd = np.asarray(jsd)
    order = np.argsort(-jsd, axis=None, kind="stable")[:n]
    return [(int(i // jsd.shape[1]), int(i % jsd.shape[1]), float(jsd.flat[i])) for i in order
            if jsd.flat[i] > 0]


def resid_drift(cos) -> str:
    """resid_cos [n_layer] in words, as `attnviz compare` and the Compare panel write it: its lowest
    value and the block it follows, and the last block's, each at 6 decimals."""
    cos = np.asarray(cos)
    return (f"residual stream cosine: lowest {cos.min():.6f} after L{int(cos.argmin())}, "
            f"after the last block {cos[-1]:.6f}")
