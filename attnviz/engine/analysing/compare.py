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
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace

import numpy as np

from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.divergence import cosine_rows, row_jsd, visible_jsd  # noqa: F401 (row_jsd named here)
from attnviz.engine.analysing.model_identity import file_sha256, identity, model_files  # noqa: F401 (named here)
from attnviz.engine.analysing.pair import Pair, models_pair
from attnviz.engine.analysing.probes import PROBE_LENGTH, PROBE_SEED, probe_ids
from attnviz.engine.computing.logits import LMHead, build_head, log_softmax
from attnviz.engine.computing.model import token_text
from attnviz.engine.reading.gguf_tensors import release_pages
from attnviz.engine.computing.trace import Trace
from attnviz.engine.errors import Cancelled, InputError, ModelLoadError, NoPrediction
from attnviz.engine.parallel import in_threads
from attnviz.engine.reading.dequant import dequantize_into, prepare

INDUCTION_THRESHOLD = H.THRESHOLDS["induction"]  # an induction head: the Head roles panel's bar
KLD_ROWS = 16  # positions whose [rows, vocab] float32 logits are held at once (one table pass)


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


# ---------------------------------------------------------------- next-token distributions

@dataclass(frozen=True)
class NextTokens:
    """What the two next-token distributions say at each position."""
    kld: np.ndarray  # [T] KL(P_A || P_B) in nats
    top_a: np.ndarray  # [T] int64 A's most likely next token
    top_b: np.ndarray  # [T] int64 B's


def shared_prefix(ids_a, ids_b) -> int:
    """The number of leading ids two id lists share."""
    n = min(len(ids_a), len(ids_b))
    differ = np.flatnonzero(np.asarray(ids_a[:n]) != np.asarray(ids_b[:n]))
    return int(differ[0]) if differ.size else n


_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> table_head(model)


def table_head(model) -> LMHead:
    """The model's final norm and unembedding as the comparison reads them: an unembedding kept in
    its file's type stays so, never held as float32 (its logits are computed a block of rows at a
    time, each dequantized as it is used), its rows checked finite once here; a float32 one is the
    model's own. Kept per model. NoPrediction as Model.lm_head."""
    head = _HEADS.get(model)
    if head is None:
        head = build_head(model, pack=False)  # (its logits are whole passes: no kernel copy)
        table = getattr(head.w_u, "table", None)  # (an Unembedding: the file's table inside)
        if table is not None:
            try:  # a block of float32 rows at a time, the file's pages let go after each
                for a in range(0, table.shape[0], PAIR_BLOCK):
                    table[a:a + PAIR_BLOCK]
                    let_go(table, a, a + PAIR_BLOCK)
            except ModelLoadError as exc:  # a row found non-finite as it is dequantized
                raise NoPrediction(f"{model.name}: the unembedding cannot be used for prediction: "
                                   f"{exc}") from None
            head = replace(head, w_u=table)
        head = _HEADS[model] = head
    return head


def same_table(u, v) -> bool:
    """Whether two unembedding tables hold the same bytes (the same object, or equal arrays or
    quantized tables of one type)."""
    if u is v:
        return True
    if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
        return isinstance(u, np.ndarray) and isinstance(v, np.ndarray) and np.array_equal(u, v)
    return (u.shape == v.shape and getattr(u, "qtype", None) == getattr(v, "qtype", 0)
            and np.array_equal(u.data, v.data))


def pair_heads(a, b) -> tuple[LMHead, LMHead]:
    """table_head of A and of B, B's reading A's table where the two tables are the same bytes (a
    quantized copy that left the table as it was, a fine-tune with the embedding frozen): one table
    held, and dequantized once for both sides' logits."""
    ha, hb = table_head(a), table_head(b)
    if hb.w_u is not ha.w_u and same_table(ha.w_u, hb.w_u):
        hb = _HEADS[b] = replace(hb, w_u=ha.w_u)
    return ha, hb


PAIR_BLOCK = 1024  # unembedding rows a thread dequantizes at a time (a [block, d_model] scratch)


def table_rows(w_u, v0: int, v1: int, scratch: np.ndarray) -> np.ndarray:  # -> [v1 - v0, d_model]
    """Rows v0..v1-1 of an unembedding as float32: a view of a float32 table; a GGUF table's
    (QuantRows) rows dequantized into `scratch` (float32 [>= v1 - v0, d_model]), the values QuantRows gives
    (its finiteness was checked once, when table_head built the head)."""
    if isinstance(w_u, np.ndarray):
        return w_u[v0:v1]
    qtype = getattr(w_u, "qtype", None)
    if qtype is None:  # another kind of table (a bfloat16 one): its own rows
        return np.asarray(w_u[v0:v1], dtype=np.float32)
    out = scratch[:v1 - v0]
    prepare(qtype)
    if not dequantize_into(np.asarray(w_u.data[v0:v1]), qtype, out):  # (F16: gguf's cast)
        out[...] = np.asarray(w_u[v0:v1])
    return out


def let_go(w_u, v0: int, v1: int) -> None:
    """Unmap rows v0..v1-1 of a table read from a memory-mapped file (its bytes, or a float32 view
    of it): a pass over the whole unembedding would otherwise leave all its pages resident in this
    process; they stay in the page cache and are read back when next used. Nothing for a table
    in memory."""
    data = getattr(w_u, "data", None) if not isinstance(w_u, np.ndarray) else w_u
    if isinstance(data, np.ndarray):
        release_pages(data[v0:v1])


def pair_logits(ha: LMHead, hb: LMHead, xa, xb, stop=None) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' logits [n, vocab] float32 from their final-norm inputs xa, xb [n, d_model]: each
    row the product logits.vocab_logits computes, PAIR_BLOCK rows of the unembedding at a time, the
    blocks shared out to one thread per core, each dequantizing into a scratch of its own; a table
    the two heads share is read (and dequantized) once per block for both. `stop()` is asked
    before each block and raises Cancelled when it says so."""
    xs = [h.normed(np.asarray(x, dtype=np.float32)).astype(np.float32, copy=False)
          for h, x in ((ha, xa), (hb, xb))]
    V, d = ha.w_u.shape
    outs = [np.empty((x.shape[0], V), np.float32) for x in xs]
    starts = range(0, V, PAIR_BLOCK)
    local = threading.local()

    def block(k):
        if stop is not None and stop():
            raise Cancelled("a newer request replaced this one")
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = np.empty((2, PAIR_BLOCK, d), np.float32)
        v0 = starts[k]
        v1 = min(V, v0 + PAIR_BLOCK)
        blk_a = table_rows(ha.w_u, v0, v1, scratch[0])  # [block, d_model]
        blk_b = blk_a if hb.w_u is ha.w_u else table_rows(hb.w_u, v0, v1, scratch[1])
        outs[0][:, v0:v1] = xs[0] @ blk_a.T
        outs[1][:, v0:v1] = xs[1] @ blk_b.T
        for w_u in tables:
            let_go(w_u, v0, v1)

    tables = {id(ha.w_u): ha.w_u, id(hb.w_u): hb.w_u}.values()  # (one where the two share it)
    try:
        in_threads(len(starts), block)
    except BaseException:  # a stopped pass: its exception's traceback, kept in reference cycles
        outs.clear()  # until a collection, must not hold the logits and the scratch with it
        local.__dict__.clear()
        raise
    finally:  # a block's read can map pages of a neighbour already let go (the kernel's fault-around)
        for w_u in tables:
            let_go(w_u, 0, V)
    return outs[0], outs[1]


def kernel_logits(pair: Pair, ha: LMHead, hb: LMHead, xa, xb, stop=None):
    """Both sides' logits [n, vocab] float32 of a few positions (a keystroke's new ones) from A's
    unembedding packed for the quantised kernels, where A holds one (a window's model on its
    blocks: Model.lm_head) and B reads the same table (pair_heads): one product on the blocks per
    side instead of a pass that dequantizes the whole table; within the kernels' bound of
    pair_logits' products. None where the kernels do not take them (pair_logits then)."""
    from attnviz.engine.computing import qmatvec

    a = pair.a.model
    if not a.weights.packed_types or hb.w_u is not ha.w_u:  # (no head built where none would pack)
        return None
    packed = a.lm_head().packed
    if packed is None or not qmatvec.takes(packed, len(xa)):
        return None
    if stop is not None and stop():
        raise Cancelled("a newer request replaced this one")
    return tuple(qmatvec.qlinear(h.normed(np.asarray(x, dtype=np.float32)).astype(np.float32, copy=False), packed)
                 for h, x in ((ha, xa), (hb, xb)))


def same_rows(x, y) -> int:  # [n, d] x [m, d] -> the number of leading rows equal bit for bit
    """How many leading rows two float arrays share, compared as bits (a NaN equals itself, -0 and
    +0 differ): rows whose bits are equal give the same bits through any computation."""
    n = min(len(x), len(y))
    if n == 0 or x.shape[1:] != y.shape[1:] or x.dtype != y.dtype:
        return 0
    u = np.ascontiguousarray(x[:n]).view(np.uint8).reshape(n, -1)
    v = np.ascontiguousarray(y[:n]).view(np.uint8).reshape(n, -1)
    differ = np.flatnonzero((u != v).any(axis=1))
    return int(differ[0]) if differ.size else n


def reusable(known, ids, xa, xb) -> int:
    """The positions whose next-token numbers `known` (next_token_numbers' seen: ids, NextTokens and
    both sides' final-norm inputs) holds for these: the leading positions with the same ids whose
    final-norm inputs on both sides are bit for bit the ones it was computed from (a keystroke that
    appends to a decoder's text leaves them so: the KV cache keeps them). At least the last
    position is computed."""
    if known is None:
        return 0
    ids0, _nt, xa0, xb0 = known
    return max(0, min(shared_prefix(ids0, ids), same_rows(xa0, xa), same_rows(xb0, xb), len(ids) - 1))


def next_tokens(pair: Pair, stop=None, known=None) -> NextTokens:
    """KL(P_A || P_B) and both top-1 ids at every position, from each side's final-norm input
    through its own final norm and unembedding (float32 logits, float64 log-softmax), KLD_ROWS
    positions at a time (pair_heads, pair_logits). NoPrediction for a model that predicts no next
    token. `known`: next_token_numbers' seen of an earlier pair of the same two models: the
    positions reusable() finds are taken from it, the rest computed."""
    ha, hb = pair_heads(pair.a.model, pair.b.model)
    xa, xb = pair.a.trace.resid[-1], pair.b.trace.resid[-1]  # [T, d_model]
    T = pair.T
    kld = np.empty(T)
    top_a = np.empty(T, np.int64)
    top_b = np.empty(T, np.int64)
    p = reusable(known, pair.a.ids, xa, xb)
    if p:
        kld[:p], top_a[:p], top_b[:p] = known[1].kld[:p], known[1].top_a[:p], known[1].top_b[:p]
    for t0 in range(p, T, KLD_ROWS):
        t1 = min(T, t0 + KLD_ROWS)
        zs = kernel_logits(pair, ha, hb, xa[t0:t1], xb[t0:t1], stop)
        za, zb = zs if zs is not None else pair_logits(ha, hb, xa[t0:t1], xb[t0:t1], stop)  # [n, vocab] float32 x2
        for i in range(t1 - t0):
            kld[t0 + i], top_a[t0 + i], top_b[t0 + i] = position_kl(za[i:i + 1], zb[i:i + 1])
        del za, zb  # (before the next block's are made)
    return NextTokens(kld, top_a, top_b)


def position_kl(za, zb) -> tuple[float, int, int]:  # [1, vocab] float32 x2
    """KL(P_A || P_B) in nats and both top-1 ids of one position's logits (float64 log-softmax):
    one position's float64 rows held at a time, not a block's."""
    la, lb = log_softmax(za), log_softmax(zb)  # [1, vocab] (one float64 array each)
    ta, tb = int(la[0].argmax()), int(lb[0].argmax())
    np.subtract(la, lb, out=lb)  # log P_A - log P_B
    np.exp(la, out=la)  # P_A
    return float(np.maximum(np.einsum("tv,tv->t", la, lb)[0], 0.0)), ta, tb


def kld_stats(kld) -> dict:
    """{mean, median, p99, max} of the per-position KLD [T]."""
    kld = np.asarray(kld, dtype=np.float64)
    return {"mean": float(kld.mean()), "median": float(np.median(kld)),
            "p99": float(np.percentile(kld, 99)), "max": float(kld.max())}


def same_top1(nt: NextTokens) -> float:
    """The share of positions whose top-1 next tokens agree."""
    return float((nt.top_a == nt.top_b).mean())


def flips(nt: NextTokens, token_text=str) -> list[dict]:
    """The positions whose top-1 differs: {position, a_id, a_token, b_id, b_token}; `token_text`
    labels an id."""
    return [{"position": int(t), "a_id": int(nt.top_a[t]), "a_token": token_text(int(nt.top_a[t])),
             "b_id": int(nt.top_b[t]), "b_token": token_text(int(nt.top_b[t]))}
            for t in np.flatnonzero(nt.top_a != nt.top_b)]


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


def predicts(model) -> bool:
    """Whether the model has a next-token distribution (a decoder with an unembedding)."""
    try:
        table_head(model)
    except NoPrediction:
        return False
    return True


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


def next_token_numbers(pair: Pair, known=None, stop=None) -> tuple[dict, tuple | None]:
    """({kld, kld_stats, same_top1, flips}, seen); all None, and None, where either model predicts
    no next token. seen: (ids, NextTokens, A's and B's final-norm inputs [T, d_model]), what the
    next call's `known` reuses (reusable)."""
    if not (predicts(pair.a.model) and predicts(pair.b.model)):
        return {"kld": None, "kld_stats": None, "same_top1": None, "flips": None}, None
    nt = next_tokens(pair, stop, known)
    seen = (np.array(pair.a.ids), nt, np.array(pair.a.trace.resid[-1]), np.array(pair.b.trace.resid[-1]))
    return ({"kld": nt.kld.tolist(), "kld_stats": kld_stats(nt.kld), "same_top1": same_top1(nt),
             "flips": flips(nt, lambda i: token_text(pair.a.model, i))}, seen)


def moved_most(jsd, n: int = 10) -> list[tuple[int, int, float]]:
    """The n heads with the largest JSD, largest first: [(layer, head, jsd)]."""
    jsd = np.asarray(jsd)
    order = np.argsort(-jsd, axis=None, kind="stable")[:n]
    return [(int(i // jsd.shape[1]), int(i % jsd.shape[1]), float(jsd.flat[i])) for i in order]
