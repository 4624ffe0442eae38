"""Heads across a corpus: per-text statistics, top examples, and heads compared by behaviour.

Pure NumPy on one run's `attentions [n_layer, n_head, T, T]` (row q = how query q spreads its weight
over the keys) and token ids `[T]`; what `attnviz scan` stores per text and the Corpus panel shows.

Per text and head (the `heads` table's columns):
- n_tokens: T;
- first_token_mass: mean over query rows of A[q, 0];
- entropy: mean over query rows of -sum_k A[q, k] ln A[q, k], in nats;
- mean_distance: mean over query rows of sum_k A[q, k] |q - k|, in tokens;
- previous: mean of A[q, q-1] over rows q >= 1;
- duplicate, induction: the scores `attnviz heads` reports (head_patterns.mul_score on the
  detection patterns, no exclusions), where unknown tokens ([UNK]) never count as repeats; null
  when more than heads.UNKNOWN_LIMIT of the text's tokens are unknown (heads gives those roles no
  label there: the words cannot be told apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.analysing import head_patterns as HP, heads as H

HEAD_STATS = ("first_token_mass", "entropy", "mean_distance", "previous", "duplicate", "induction")
STAT_UNITS = {"entropy": "nats", "mean_distance": "tokens"}  # the others are shares of a row's weight
DIAGONAL_LIMIT = 0.5  # a head whose mean diagonal mass is over this has its diagonal left out of its examples
EXAMPLES_RULE = (
    "examples: each head's top-K cells (query, key) by weight; the first key (position 0, the sink) "
    f"is left out, and so is the diagonal of a head whose mean diagonal mass on that text is over "
    f"{DIAGONAL_LIMIT:g}; ties go to the lower text_id, query_pos, key_pos. Each batch keeps its "
    "top-K per head; the corpus top-K is the top-K of the batches' (exact: a cell in the corpus "
    "top-K is in its batch's top-K)."
)
EXAMPLE_COLUMNS = ("layer", "head", "text_id", "query_pos", "key_pos", "weight")


def first_token_mass(attn):  # [..., T, T] -> [...]
    return attn[..., :, 0].mean(axis=-1, dtype=np.float64)


def entropy_nats(attn):  # [..., T, T] -> [...], in nats
    return HP.entropy(attn) * np.log(2.0)


def previous_mass(attn):  # [..., T, T] -> [...]; mean of A[q, q-1] over q >= 1
    return np.diagonal(attn, offset=-1, axis1=-2, axis2=-1).mean(axis=-1, dtype=np.float64)


def diagonal_mass(attn):  # [..., T, T] -> [...]; mean of A[q, q]
    return np.diagonal(attn, axis1=-2, axis2=-1).mean(axis=-1, dtype=np.float64)


def identity_scores(attentions, ids, unknown_ids=()):  # [n_layer, n_head, T, T], [T] -> 2x [n_layer, n_head]
    """Duplicate and induction scores exactly as `attnviz heads` computes them (no exclusions);
    NaN when more than UNKNOWN_LIMIT of the tokens are unknown."""
    unknown = H.unknown_mask(ids, unknown_ids)
    if unknown.mean() > H.UNKNOWN_LIMIT:
        nan = np.full(attentions.shape[:2], np.nan)
        return nan, nan.copy()
    return tuple(HP.mul_score(attentions, H.detection_pattern(role, ids, unknown))
                 for role in H.IDENTITY_ROLES)


def text_statistics(attentions, ids, unknown_ids=()):
    """One text's statistics: [n_layer, n_head, T, T], ids [T] -> {name: float64 [n_layer, n_head]}
    for every name in HEAD_STATS. Needs T >= 2 (as `attnviz heads` does)."""
    attentions, ids = H.check_patterns(attentions, ids, "head statistics")
    duplicate, induction = identity_scores(attentions, ids, unknown_ids)
    return {
        "first_token_mass": first_token_mass(attentions),
        "entropy": entropy_nats(attentions),
        "mean_distance": HP.mean_distance(attentions),
        "previous": previous_mass(attentions),
        "duplicate": duplicate,
        "induction": induction,
    }


@dataclass(frozen=True)
class Examples:
    """Top cells, one row each, columns of equal length: layer, head, text_id, query_pos, key_pos
    (int64) and weight (float32)."""

    layer: np.ndarray
    head: np.ndarray
    text_id: np.ndarray
    query_pos: np.ndarray
    key_pos: np.ndarray
    weight: np.ndarray

    def __len__(self):
        return len(self.weight)

    def columns(self) -> dict:
        return {name: getattr(self, name) for name in EXAMPLE_COLUMNS}


def _empty_examples() -> Examples:
    z = np.zeros(0, dtype=np.int64)
    return Examples(z, z, z, z, z, np.zeros(0, dtype=np.float32))


# text_examples takes the heads this many cells at a time: its temporaries (a float32 copy, the
# argpartition's int64 indices) are a few times a chunk, not a few times a whole text's patterns
# (a 128-token text's SmolLM2 patterns are 17.7 MB)
EXAMPLE_CHUNK_CELLS = 2 ** 20


def example_cells(flat, selfish, T):  # [n, T*T], [n] bool, T -> float32 [n, T*T]
    """The weights examples are chosen from, for `n` heads' patterns flattened (query, then key);
    left-out cells are -1: the first key (the sink) always, and the diagonal of the heads marked
    `selfish` (mean diagonal mass over DIAGONAL_LIMIT)."""
    w = np.array(flat, dtype=np.float32)
    w[:, ::T] = -1.0  # key 0 of every query row: cells q*T
    w[np.flatnonzero(selfish)[:, None], np.arange(0, T * T, T + 1)[None, :]] = -1.0  # cells q*T + q
    return w


def _top_cells(flat, selfish, T, k):  # [n, T*T], [n], T, K -> (head rows, cells, weights)
    """Each of n heads' top-k cells by weight (weight > 0, after example_cells' exclusions),
    ordered by head, weight descending, then cell."""
    w = example_cells(flat, selfish, T)
    # top-k per head: the weight descending, then the lower flat index (query, then key)
    part = np.argpartition(w, T * T - k, axis=1)[:, T * T - k:] if k < T * T else \
        np.broadcast_to(np.arange(T * T), w.shape)
    # argpartition may cut inside a tie: take every cell tied with the k-th weight, then sort
    kth = np.take_along_axis(w, part, axis=1).min(axis=1, keepdims=True)  # [n, 1]
    rows, cells = np.nonzero(w >= kth)
    weight = w[rows, cells]
    order = np.lexsort((cells, -weight, rows))
    rows, cells, weight = rows[order], cells[order], weight[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)  # position within the head
    keep = (rank < k) & (weight > 0)
    return rows[keep], cells[keep], weight[keep]


def text_examples(attentions, text_id, k):  # [n_layer, n_head, T, T], int, K -> Examples
    """One text's top-k cells per head by weight (weight > 0, after example_cells' exclusions),
    EXAMPLE_CHUNK_CELLS of the heads' cells at a time."""
    n_layer, n_head, T, _ = attentions.shape
    k = min(k, T * T)
    if k <= 0:
        return _empty_examples()
    flat = np.reshape(attentions, (n_layer * n_head, T * T))  # [n_heads, T*T]
    selfish = (diagonal_mass(attentions) > DIAGONAL_LIMIT).reshape(-1)  # [n_heads]
    step = max(1, EXAMPLE_CHUNK_CELLS // (T * T))
    found = []
    for a in range(0, len(flat), step):
        rows, cells, weight = _top_cells(flat[a:a + step], selfish[a:a + step], T, k)
        found.append((rows + a, cells, weight))
    rows, cells, weight = (np.concatenate(c) for c in zip(*found))
    return Examples(layer=(rows // n_head).astype(np.int64), head=(rows % n_head).astype(np.int64),
                    text_id=np.full(len(rows), text_id, dtype=np.int64),
                    query_pos=(cells // T).astype(np.int64), key_pos=(cells % T).astype(np.int64),
                    weight=weight.astype(np.float32))


def merge_examples(parts, k) -> Examples:
    """The top-k per (layer, head) of several Examples, ordered by layer, head, then weight
    descending, text_id, query_pos, key_pos ascending."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return _empty_examples()
    cols = {name: np.concatenate([getattr(p, name) for p in parts]) for name in EXAMPLE_COLUMNS}
    order = np.lexsort((cols["key_pos"], cols["query_pos"], cols["text_id"],
                        -cols["weight"].astype(np.float64), cols["head"], cols["layer"]))
    cols = {name: c[order] for name, c in cols.items()}
    group = cols["layer"] * (int(cols["head"].max()) + 1) + cols["head"]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    rank = np.arange(len(group)) - np.repeat(starts, np.diff(np.r_[starts, len(group)]))
    keep = rank < k
    return Examples(**{name: c[keep] for name, c in cols.items()})


# ---------------------------------------------------------------- heads compared (Clark et al. 2019)

MASS_STATS = ("first_token_mass", "previous", "duplicate", "induction")  # shares of a row's weight
SCALED_STATS = ("entropy", "mean_distance")  # divided by their largest head mean
PROFILE_STATS = MASS_STATS + SCALED_STATS
PROFILE_RULE = (
    "Heads compared by behaviour: each head's corpus means of first_token_mass, previous, duplicate "
    "and induction (shares of its weight), and of entropy and mean_distance divided by their "
    "largest head's mean, are each read as a two-outcome distribution (s, 1 - s); the distance of "
    "two heads is the square root of the mean Jensen-Shannon divergence (base 2) over those "
    "statistics, 0 (same behaviour) to 1; classical MDS places the heads in 2-D. A statistic no "
    "text gave a value is left out; a head without a value for one of the others is not placed."
)


def head_profiles(means):  # {stat: [n_layer, n_head]} -> [n_layer * n_head, n_stat] in [0, 1]
    """Each head's mean statistics scaled into [0, 1] (see PROFILE_RULE); a missing mean stays NaN."""
    cols = []
    for name in PROFILE_STATS:
        m = np.asarray(means[name], dtype=np.float64).reshape(-1)
        if name in SCALED_STATS:
            finite = m[np.isfinite(m)]
            top = finite.max() if finite.size else 0.0
            m = m / top if top > 0 else np.where(np.isfinite(m), 0.0, np.nan)
        cols.append(np.clip(m, 0.0, 1.0))
    return np.stack(cols, axis=1)


def placed_heads(profiles):  # [n, n_stat] -> (placed [n] bool, used [n_stat] bool)
    """Which statistics and heads the scatter uses: a statistic no head has a value for is left
    out of every distance; a head missing any of the others is left out of the scatter (never
    placed as if it scored 0)."""
    have = np.isfinite(profiles)
    used = have.any(axis=0)
    placed = have[:, used].all(axis=1) & used.any()
    return placed, used


def place_heads(means, dims=2):  # {stat: [n_layer, n_head]} -> [n_layer * n_head, dims], NaN rows
    """The heads placed by behaviour (PROFILE_RULE) over the statistics that have values; a head
    left out (placed_heads) has a NaN row."""
    p = head_profiles(means)
    placed, used = placed_heads(p)
    coords = np.full((p.shape[0], dims), np.nan)
    if placed.any():
        coords[placed] = classical_mds(js_distance(p[placed][:, used]), dims)
    return coords


def _xlogx(p):
    out = np.zeros_like(p)
    np.multiply(p, np.log2(p, where=p > 0, out=np.zeros_like(p)), out=out, where=p > 0)
    return out


def js_distance(profiles):  # [n, n_stat] in [0, 1] -> [n, n] in [0, 1]
    """sqrt(mean over statistics of JSD(Bernoulli(a_s), Bernoulli(b_s))), base 2."""
    p = np.asarray(profiles, dtype=np.float64)
    a, b = p[:, None, :], p[None, :, :]
    m = (a + b) / 2

    def h(x):  # entropy of Bernoulli(x), bits
        return -(_xlogx(x) + _xlogx(1 - x))

    jsd = h(m) - (h(a) + h(b)) / 2  # [n, n, n_stat]
    d = np.sqrt(np.clip(jsd.mean(axis=-1), 0.0, None))
    np.fill_diagonal(d, 0.0)
    return d


def classical_mds(dist, dims=2):  # [n, n] -> [n, dims]
    """Torgerson's classical MDS: the top eigenvectors of the double-centred squared distances."""
    d2 = np.asarray(dist, dtype=np.float64) ** 2
    n = d2.shape[0]
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ d2 @ j
    vals, vecs = np.linalg.eigh(b)
    top = np.argsort(vals)[::-1][:dims]
    coords = vecs[:, top] * np.sqrt(np.clip(vals[top], 0.0, None))
    for i in range(coords.shape[1]):  # a deterministic sign: the largest entry positive
        if coords[np.argmax(np.abs(coords[:, i])), i] < 0:
            coords[:, i] = -coords[:, i]
    if coords.shape[1] < dims:
        coords = np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))
    return coords
