"""The next-token half of a comparison (compare.py's kld, kld_stats, same_top1, flips): both
models' next-token distributions at each position of a Pair, their logits read from the unembedding
a block of rows at a time, and what a keystroke's next numbers reuse of the last ones."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace

import numpy as np

from attnviz.engine.analysing.pair import Pair
from attnviz.engine.computing.logits import LMHead, build_head, log_softmax
from attnviz.engine.computing.model import token_text
from attnviz.engine.errors import Cancelled, ModelLoadError, NoPrediction
from attnviz.engine.parallel import in_threads
from attnviz.engine.reading.dequant import dequantize_into, prepare
from attnviz.engine.reading.gguf_tensors import release_pages

KLD_ROWS = 16  # positions whose [rows, vocab] float32 logits are held at once (one table pass)


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
                raise NoPrediction(f"the unembedding of {model.name} cannot be used for prediction: "
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


def predicts(model) -> bool:
    """Whether the model has a next-token distribution (a decoder with an unembedding)."""
    try:
        table_head(model)
    except NoPrediction:
        return False
    return True


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
