"""Pure NumPy operations on attention patterns that views and exports share, and the one check that
a run's patterns are finite. No Qt."""

from __future__ import annotations

import numpy as np

from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading.token_text import plural

SCOPES = ("head", "layer", "all")
SCALE_MODES = ("shared", "per-head")  # colour scale: one for all heads shown, or one per head
DEFAULT_SCALE = SCALE_MODES[0]


def drop_first_key(att: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """[..., n_q, n_k] -> [..., n_q, n_k - 1]: hide the first key column (the [CLS]/BOS "sink") and
    renormalise each row to sum to 1; written into `out` (float32, that shape) when given.

    A row whose whole weight was on the first key (BOS attending to itself in a causal model) has
    nothing left to show: it becomes all zeros, never NaN."""
    rest = np.asarray(att, dtype=np.float32)[..., 1:]
    total = rest.sum(axis=-1, keepdims=True)
    out = np.zeros_like(rest) if out is None else out
    out[...] = 0  # an empty row stays 0
    # (rest / total, not rest * (1 / total): a subnormal total's inverse overflows, as in reweigh)
    return np.divide(rest, total, out=out, where=total > 0)


def no_weight_rows(att: np.ndarray) -> np.ndarray:
    """[..., n_q, n_k] -> [..., n_q] bool: the rows with no weight on any key shown. Under Hide first
    token (drop_first_key, reweigh) those are 0/0, undefined: every view and export leaves them
    blank. (A renormalised row sums to 1 or has nothing.)"""
    return ~(np.asarray(att) > 0).any(axis=-1)


def pooled_undefined(undefined: np.ndarray, p: int) -> np.ndarray:  # [..., n_q] -> [..., ceil(n_q/p)]
    """Which rows of a pattern pooled p rows to a cell are undefined: those whose every row is
    (no_weight_rows); the last block takes the rows left. A block with a defined row shows its
    defined rows alone (an undefined row holds only zeros, which no block max takes)."""
    undefined = np.asarray(undefined, dtype=bool)
    if p <= 1:
        return undefined
    pad = -undefined.shape[-1] % p
    full = np.concatenate([undefined, np.ones((*undefined.shape[:-1], pad), bool)], axis=-1)
    return full.reshape(*undefined.shape[:-1], -1, p).all(axis=-1)


def key_totals(att: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[..., n_q, n_k] x key weights [..., n_k] -> [..., n_q]: each row's sum of a_qk * w_k, the
    total a row is renormalised by (`reweigh`). Row blocks of a pattern give their rows' totals."""
    att = np.asarray(att, dtype=np.float32)
    w = np.asarray(weights, dtype=np.float32)[..., None]
    return np.matmul(att, w)[..., 0]


def reweigh(att: np.ndarray, weights: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """[..., n_q, n_k] x key weights [..., n_k] x row totals [..., n_q] (`key_totals` of the whole
    rows) -> [..., n_q, n_k]: a_qk * w_k / total_q, a row whose total is 0 all zeros (never NaN).
    `att` may be a block of a row's keys: its totals are still the whole row's."""
    w = np.asarray(att, dtype=np.float32) * np.asarray(weights, dtype=np.float32)[..., None, :]
    t = np.broadcast_to(np.asarray(totals, dtype=np.float32)[..., None], w.shape)
    # (w / t, not w * (1 / t): a subnormal total's inverse overflows to inf, and 0 * inf is NaN)
    return np.divide(w, t, out=np.zeros_like(w), where=t > 0)


def value_weighted(att: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """[..., n_q, n_k] x value norms [..., n_k] -> [..., n_q, n_k]: each weight a_qk scaled by
    ||v_k W_O(h)||, the size of what key k sends through this head, then each row renormalised to
    sum to 1 (a row whose keys all send nothing stays 0). Kobayashi et al. (2020): a head can put
    weight 0.9 on a key that writes almost nothing."""
    return reweigh(att, norms, key_totals(att, norms))


def max_pool(x: np.ndarray, p: int, pk: int | None = None) -> np.ndarray:  # [..., n_q, n_k] -> [..., ceil(n_q/p), ceil(n_k/pk)]
    """Largest value in each p x pk block (p rows, pk keys; pk None: p), so a pattern drawn smaller
    than its cells keeps every peak. The last block row / column takes what is left (the same as
    zero padding for weights, which are >= 0). p = pk = 1 returns x itself."""
    x = np.asarray(x)
    pk = p if pk is None else pk
    if p <= 1 and pk <= 1:
        return x
    *lead, n_q, n_k = x.shape
    p, pk = max(1, p), max(1, pk)
    fq, fk = n_q // p * p, n_k // pk * pk
    rows = x[..., :fq, :].reshape(*lead, n_q // p, p, n_k).max(axis=-2)  # [..., n_q // p, n_k]
    if fq < n_q:
        rows = np.concatenate([rows, x[..., fq:, :].max(axis=-2, keepdims=True)], axis=-2)
    out = rows[..., :fk].reshape(*lead, rows.shape[-2], n_k // pk, pk).max(axis=-1)
    if fk < n_k:
        out = np.concatenate([out, rows[..., fk:].max(axis=-1, keepdims=True)], axis=-1)
    return out


def signed_pool(d: np.ndarray, pool: int) -> np.ndarray:  # [..., T, T] -> [..., ceil(T/p), ceil(T/p)]
    """Each pool x pool block's value of largest size, its sign kept (a tie: the first in the block's
    row order); the last block row / column takes what is left."""
    T = d.shape[-1]
    n = -(-T // pool)
    padded = np.zeros((*d.shape[:-2], n * pool, n * pool), d.dtype)
    padded[..., :T, :T] = d
    blocks = padded.reshape(*d.shape[:-2], n, pool, n, pool)
    blocks = np.moveaxis(blocks, -3, -2).reshape(*d.shape[:-2], n, n, pool * pool)
    pick = np.abs(blocks).argmax(axis=-1)[..., None]
    return np.take_along_axis(blocks, pick, axis=-1)[..., 0]


def select_patterns(attentions: np.ndarray, scope: str, layer: int | None = None,
                    head: int | None = None) -> np.ndarray:
    """Cut one head, one layer or all layers out of a run's attention weights.

    attentions [n_layer, n_head, T, T] -> head: [T, T]; layer: [n_head, T, T]; all: the input."""
    n_layer, n_head = attentions.shape[:2]
    if scope not in SCOPES:
        raise InputError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scope == "all":
        return attentions
    check_index("layer", layer, n_layer)
    if scope == "layer":
        return attentions[layer]
    check_index("head", head, n_head)
    return attentions[layer, head]


def head_title(layer: int, head: int) -> str:
    """`L3 H1`: how every view, export, message and command names one head."""
    return f"L{layer} H{head}"


def head_key(layer: int, head: int) -> str:
    """`L3H1`: one head's name as a key (QK attribution's component names, JSON keys)."""
    return f"L{layer}H{head}"


def group_size(kv_group) -> int:  # kv_group [n_head] -> query heads per KV head (1: plain MHA)
    """How many query heads read each KV head, from the KV head each query head reads."""
    counts = np.bincount(np.asarray(kv_group, dtype=np.int64))
    return int(counts.max()) if len(counts) else 1


def check_index(what: str, index: int | None, count: int, owner: str = "the model",
                per: str = "") -> None:
    """`index` must name one of `count` layers, heads, ... of `owner` ("head 12 is out of range:
    MiniLM has 12 heads per layer (0..11)")."""
    if index is None:
        raise InputError(f"a {what} index is needed (0..{count - 1})")
    if not 0 <= index < count:
        raise InputError(f"{what} {index} is out of range: {owner} has {plural(count, what)}{per} "
                         f"(0..{count - 1})")


def non_finite_layer(layers) -> int | None:
    """The first layer whose patterns ([n_layer, ...], or a sequence of per-layer arrays) hold NaN
    or inf, else None. NaN and +inf survive a max (weights are >= 0: no -inf), in float32:
    cheaper than a float64 sum, on every run. An array's layers are first taken in one max."""
    if isinstance(layers, np.ndarray) and layers.size and np.isfinite(np.max(layers)):
        return None
    for i, a in enumerate(layers):
        if not np.isfinite(np.max(a)):
            return i
    return None


def check_finite(name: str, layers) -> None:
    """A broken model (a NaN, inf or huge weight; a norm epsilon <= 0) gives NaN patterns: refuse
    them, naming the first layer, rather than let a NaN reach a heatmap or a file."""
    i = non_finite_layer(layers)
    if i is not None:
        raise ModelLoadError(
            f"{name}: layer {i} gives non-finite attention weights (NaN or inf) for this input; "
            "the model's weights or config.json are broken (a NaN, inf or huge weight, or a norm "
            "epsilon <= 0)")
