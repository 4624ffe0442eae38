"""Weight-space circuit scores ("A Mathematical Framework for Transformer Circuits"): OV copying,
Q-, K- and V-composition, and what a head writes when it attends to a token. No text is needed.

Each head's matrices, row vectors times matrices as everywhere in attnviz (x @ W), with the norm
gains folded in as TransformerLens' `fold_ln` does:

    W_Q, W_K, W_V [d_model, d_head]   diag(g) W with g the block's input-norm gain (a LayerNorm's
                                      reading weights are also centred over d_model, as its input
                                      is); the per-head q/k norm gains (Qwen3, Gemma 3) on W_Q, W_K's
                                      columns. A KV group's shared W_K and W_V serve each query head.
    W_O [d_head, d_model]             its rows of the output projection (Gemma 3: times the
                                      post-attention norm's gain)
    W_E [vocab, d_model]              the token embedding (times the family's embedding scale)
    W_U [d_model, vocab]              the unembedding with the final norm's gain folded (centred
                                      over d_model for a LayerNorm)

A post-norm model (BERT) has no input norm before attention: its weights are used as stored.

    copying(h) = Re(Σλ) / Σ|λ|,  λ the eigenvalues of W_E W_V W_O W_U [vocab, vocab], computed from
                 the d_head × d_head matrix W_O W_U W_E W_V (the same nonzero eigenvalues). 1: every
                 eigenvalue positive, the head copies what it attends to. NaN (0 / 0, undefined)
                 where that matrix is exactly zero; no map at all when it is for every head.
    composition(mode)[l1, h1, l2, h2] = ‖A B‖_F / (‖A‖_F ‖B‖_F), A = W_V W_O of the earlier head
                 (l1, h1), B of the later head (l2, h2): W_Q W_Kᵀ (q), W_K W_Qᵀ (k), W_V W_O (v);
                 defined only for l1 < l2 (composing; stored as 0 elsewhere). NaN (0 / 0,
                 undefined: ZERO_COMPOSITION) where A or B is exactly zero.

The norms are computed in factored form: ‖A B‖_F² = ⟨AᵀA, B Bᵀ⟩, with AᵀA = W_Oᵀ (W_Vᵀ W_V) W_O
and B Bᵀ = W_Q (W_Kᵀ W_K) W_Qᵀ (and so on) built once per head, never per pair.

These scores ignore RoPE (as TransformerLens' do): a rotary model's real query-key product also
depends on the two positions. QK attribution (engine/analysing/qk.py) includes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.families import FAMILY, output_projection
from attnviz.engine.computing.layers import kv_group, layer_norm
from attnviz.engine.errors import InputError, NoPrediction
from attnviz.engine.reading.token_text import plural

MODES = ("q", "k", "v")
HEAD_ZERO_OV = ("that head's W_E W_V W_O W_U is exactly zero, so its copying score Re(Σλ) / Σ|λ| is "
                "0 / 0, undefined")
ZERO_OV = ("every head's W_E W_V W_O W_U is exactly zero: no head writes a token through its values, "
           "and every copying score Re(Σλ) / Σ|λ| is 0 / 0, undefined")
ZERO_COMPOSITION = ("the earlier head's W_V W_O or the later head's W_Q W_Kᵀ (q), W_K W_Qᵀ (k) or "
                    "W_V W_O (v) is exactly zero, so its composition score is 0 / 0, undefined")
WRITES_NOTHING = ("every logit it writes is exactly 0, so no token ranks above another (its W_E W_V "
                  "W_O W_U row is zero)")
VOCAB_BLOCK = 4096  # embedding and unembedding rows read at a time
GRAM_BLOCK = 64  # rows of a packed Gram's blocks: smaller packs tighter, in more, smaller products
CHUNK_BYTES = 96 << 20  # packed reader Grams held at once: each read of the writers serves them all


@dataclass(frozen=True)
class HeadMatrices:
    """One layer's folded per-head matrices (module docstring), float64."""
    q: np.ndarray  # [n_head, d_model, d_head]
    k: np.ndarray  # [n_head, d_model, d_head] (a KV group's shared W_K for each query head)
    v: np.ndarray  # [n_head, d_model, d_head]
    o: np.ndarray  # [n_head, d_head, d_model]


@dataclass(frozen=True)
class Circuits:
    copying: np.ndarray | None  # [n_layer, n_head]; None: the model has no unembedding
    composition: dict  # mode -> [n_layer, n_head, n_layer, n_head]: [earlier head, later head]
    no_copying: str | None = None  # why copying is None: one line, "a head's copying score ..."


def head_matrices(model, layer: int) -> HeadMatrices:
    """Layer `layer`'s W_Q, W_K, W_V, W_O per query head with the norm gains folded in."""
    cfg = model.config
    fam = FAMILY[cfg.family]
    layers = model.weights.layers
    lw = layers[layer]
    n, nkv, dh = cfg.n_head, cfg.n_kv_head, cfg.d_head
    w = lw.w_qkv.astype(np.float64)  # [d_model, (n_head + 2 n_kv_head) d_head]
    if fam.pre_norm:  # the input norm's gain on every reading row
        w = w * lw.norm1[0].astype(np.float64)[:, None]
        if fam.norm is layer_norm:  # LayerNorm's input is centred: so are its reading weights
            w = w - w.mean(axis=0, keepdims=True)
    q = w[:, :n * dh].reshape(-1, n, dh).transpose(1, 0, 2)  # [n_head, d_model, d_head]
    k = w[:, n * dh:(n + nkv) * dh].reshape(-1, nkv, dh).transpose(1, 0, 2)  # [n_kv_head, ...]
    v = w[:, (n + nkv) * dh:].reshape(-1, nkv, dh).transpose(1, 0, 2)
    if fam.qk_norm is not None:
        q = q * lw.q_norm.astype(np.float64)
        k = k * lw.k_norm.astype(np.float64)
    group = kv_group(n, nkv)
    w_out, _, post_norm = output_projection(layers, layer)
    o = w_out.astype(np.float64).reshape(n, dh, -1)  # [n_head, d_head, d_model]
    if post_norm is not None:  # Gemma 3: the post-attention norm's gain on what heads write
        o = o * post_norm[0].astype(np.float64)
    c = np.ascontiguousarray  # batched products of contiguous stacks go to BLAS
    return HeadMatrices(q=c(q), k=c(k[group]), v=c(v[group]), o=c(o))


def unembed_vector(model, w) -> np.ndarray:
    """A residual direction w [d_model] -> its logits through the folded W_U [vocab] (float32)."""
    head = _head(model)
    g = head.norm[0].astype(np.float64)
    w = np.asarray(w, dtype=np.float64)
    d = g * (w - w.mean()) if head.centred else g * w  # (W_U folded) · w = W_U · d
    d = d.astype(np.float32)
    V = head.w_u.shape[0]
    out = np.empty(V, np.float32)
    for a in range(0, V, VOCAB_BLOCK):
        out[a:a + VOCAB_BLOCK] = np.asarray(head.w_u[a:a + VOCAB_BLOCK]) @ d
    return out


def _head(model):
    try:
        return model.lm_head()
    except NoPrediction as exc:
        raise InputError("a head's copying score and the tokens it writes are read through the "
                         f"model's unembedding, and {exc}") from None


def embed_scale(model) -> float:
    f = FAMILY[model.config.family].embed_scale
    return 1.0 if f is None else float(np.float32(f(model.config)))


def unembed_embed(model) -> np.ndarray:
    """W_U W_E [d_model, d_model] float64 (W_U folded, W_E scaled), summed over the vocabulary in
    blocks: what the copying matrices W_O (W_U W_E) W_V share."""
    head = _head(model)
    emb = model.weights.tok_emb
    V, d = head.w_u.shape
    s = embed_scale(model)
    acc = np.zeros((d, d))
    for a in range(0, V, VOCAB_BLOCK):
        u = np.asarray(head.w_u[a:a + VOCAB_BLOCK], dtype=np.float32)  # [block, d_model]
        e = np.asarray(emb[a:a + VOCAB_BLOCK], dtype=np.float32)
        acc += (u.T @ u if np.array_equal(u, e) else u.T @ e)  # tied: uᵀ u, half the work (syrk)
    acc *= s * head.norm[0].astype(np.float64)[:, None]
    if head.centred:
        acc -= acc.mean(axis=0, keepdims=True)
    return acc


def copying_scores(model, progress=None) -> np.ndarray:
    """[n_layer, n_head]: Re(Σλ) / Σ|λ| of each head's OV circuit (module docstring), NaN where
    Σ|λ| = 0 (HEAD_ZERO_OV). progress(layers done, n_layer) after each layer (it may raise to stop)."""
    cfg = model.config
    G = unembed_embed(model)  # [d_model, d_model]
    out = np.zeros((cfg.n_layer, cfg.n_head))
    for layer in range(cfg.n_layer):
        m = head_matrices(model, layer)
        n, dh, d = m.o.shape
        og = (m.o.reshape(n * dh, d) @ G).reshape(n, dh, d)  # every head's W_O in one product
        M = og @ m.v  # [n_head, d_head, d_head]: W_O W_U W_E W_V
        lam = np.linalg.eigvals(M)  # [n_head, d_head]
        total = np.abs(lam).sum(axis=-1)
        out[layer] = np.where(total > 0, lam.sum(axis=-1).real / np.where(total > 0, total, 1), np.nan)
        if progress is not None:
            progress(layer + 1, cfg.n_layer)
    return out


def gram_layout(d: int, block: int = GRAM_BLOCK) -> list[tuple[int, int]]:
    """Row blocks (start, stop) of a d x d symmetric matrix, each kept from its diagonal on: the
    blocks' trapezoids cover the upper triangle, and each diagonal block whole."""
    return [(a, min(a + block, d)) for a in range(0, d, block)]


def packed_grams(s, layout, twice=False):  # [n, d, m] -> S Sᵀ packed [n, D] float32
    """Each S Sᵀ kept only in the `layout` trapezoids (rows a:b, columns a:), straight from the
    factor: no d x d matrix formed. With `twice`, entries right of each diagonal block times 2,
    the side of an inner product they are counted once on: ⟨X, Y⟩ = packed(X, twice) · packed(Y)."""
    s = s.astype(np.float32)
    st = _t(s)  # [n, m, d]
    n, d = len(s), s.shape[1]
    out = np.empty((n, sum((b - a) * (d - a) for a, b in layout)), np.float32)
    at = 0
    for a, b in layout:
        size = (b - a) * (d - a)
        part = out[:, at:at + size].reshape(n, b - a, d - a)
        np.matmul(s[:, a:b], st[:, :, a:], out=part)
        if twice:
            part[:, :, b - a:] *= 2
        at += size
    return out


def _t(a):  # [n, a, b] -> contiguous [n, b, a]
    return np.ascontiguousarray(a.transpose(0, 2, 1))


def _r(a):  # [n, m, d_head] -> R [n, d_head, d_head] with aᵀ a = Rᵀ R
    """Cholesky of aᵀ a (d_head x d_head), or the thin QR of a where aᵀ a is singular (a head
    with zero weights)."""
    try:
        return _t(np.linalg.cholesky(_t(a) @ a))
    except np.linalg.LinAlgError:
        return np.linalg.qr(a, mode="r")


def _reader_factors(m: HeadMatrices) -> dict:  # -> mode: S [n_head, d_model, d_head], B Bᵀ = S Sᵀ
    """Q (KᵀK) Qᵀ = (Q R_Kᵀ)(Q R_Kᵀ)ᵀ and likewise: each reader's B Bᵀ from a d_model × d_head factor."""
    r_k, r_q, r_o = _r(m.k), _r(m.q), _r(_t(m.o))
    return {"q": m.q @ _t(r_k), "k": m.k @ _t(r_q), "v": m.v @ _t(r_o)}


def composition_scores(model, progress=None) -> dict:
    """mode -> [n_layer, n_head, n_layer, n_head]: composition of earlier head [l1, h1] into
    later head [l2, h2] (module docstring); 0 unless l1 < l2, NaN where either factor is exactly
    zero (ZERO_COMPOSITION). progress(layers done, n_layer)
    after each layer (it may raise to stop)."""
    cfg = model.config
    L, H, d = cfg.n_layer, cfg.n_head, cfg.d_model
    layout = gram_layout(d)
    D = sum((b - a) * (d - a) for a, b in layout)  # packed length of a d_model x d_model Gram
    writers = np.empty((max(L - 1, 0) * H, D), np.float32)  # packed AᵀA of each earlier head
    writer_norm = np.empty(max(L - 1, 0) * H)  # ‖A‖_F²
    out = {mode: np.zeros((L, H, L, H)) for mode in MODES}
    rows = 3 * H * D * 4  # bytes of one layer's packed readers
    chunk = max(1, CHUNK_BYTES // rows)  # later layers whose readers share one read of the writers
    pending = []  # (layer, reader factors, packed B Bᵀ [3 n_head, D])
    for layer in range(L):
        m = head_matrices(model, layer)
        if layer:
            factors = _reader_factors(m)  # mode -> S [n_head, d_model, d_head]
            pending.append((layer, factors,
                            np.concatenate([packed_grams(factors[mode], layout) for mode in MODES])))
        if layer < L - 1:
            P = _t(_r(m.v) @ m.o)  # [n_head, d_model, d_head]: AᵀA = P Pᵀ
            writers[layer * H:(layer + 1) * H] = packed_grams(P, layout, twice=True)
            writer_norm[layer * H:(layer + 1) * H] = np.einsum("hmd,hmd->h", P, P)
        if pending and (len(pending) == chunk or layer == L - 1):
            n = pending[-1][0] * H
            dots = np.concatenate([Y for _, _, Y in pending]) @ writers[:n].T  # ‖A B‖_F²
            for j, (later, factors, _) in enumerate(pending):
                for k, mode in enumerate(MODES):
                    S = factors[mode]
                    reader_norm = np.einsum("hmd,hmd->h", S, S)  # [n_head]: ‖B‖_F² = tr(S Sᵀ)
                    nl = later * H
                    d2 = dots[(3 * j + k) * H:(3 * j + k + 1) * H, :nl]  # [n_head, earlier heads]
                    denom = np.sqrt(np.outer(reader_norm, writer_norm[:nl]))
                    score = np.where(denom > 0, np.sqrt(np.maximum(d2, 0.0))
                                     / np.where(denom > 0, denom, 1.0), np.nan)
                    out[mode][:later, :, later, :] = score.T.reshape(later, H, H)
            pending = []
        if progress is not None:
            progress(layer + 1, L)
    return out


def composing(n_layer: int, n_head: int) -> np.ndarray:
    """bool [n_layer, n_head, n_layer, n_head]: the (earlier head, later head) pairs a composition
    score is defined for, l1 < l2 (a head reads only what earlier layers wrote)."""
    layers = np.arange(n_layer)
    earlier = layers[:, None] < layers[None, :]  # [l1, l2]
    return np.broadcast_to(earlier[:, None, :, None], (n_layer, n_head, n_layer, n_head))


def strongest(scores, n: int, into: tuple[int, int] | None = None) -> list[tuple[int, int, int, int, float]]:
    """The n defined pairs (composing, not NaN) with the largest composition scores [n_layer,
    n_head, n_layer, n_head], largest first, as (l1, h1, l2, h2, score); `into` (l2, h2): only
    pairs into that head. None for a model of one layer, or a head of the first."""
    scores = np.asarray(scores)
    keep = composing(*scores.shape[:2]) & ~np.isnan(scores)
    if into is not None:
        keep[:, :, :into[0]] = keep[:, :, into[0] + 1:] = False
        keep[:, :, into[0], :into[1]] = keep[:, :, into[0], into[1] + 1:] = False
    flat = np.flatnonzero(keep)  # (in index order: ties keep it)
    order = flat[np.argsort(-scores.reshape(-1)[flat], kind="stable")[:n]]
    return [(*(int(i) for i in np.unravel_index(k, scores.shape)), float(scores.flat[k])) for k in order]


def _json_numbers(scores) -> list:
    """Scores of any shape as JSON holds them: nested lists, an undefined (NaN) score as null."""
    a = np.asarray(scores, dtype=np.float64)
    out = a.astype(object)  # (Python floats)
    out[np.isnan(a)] = None
    return out.tolist()


def copying_numbers(copying) -> list | None:
    """The copying map as JSON holds it: an undefined (NaN) score as null."""
    return None if copying is None else _json_numbers(copying)


def undefined(scores, into: tuple[int, int] | None = None) -> tuple[int, int]:
    """(undefined, composing) pair counts of composition scores [n_layer, n_head, n_layer, n_head]:
    the composing pairs whose score is NaN (ZERO_COMPOSITION), of all; `into` (l2, h2): of the
    pairs into that head."""
    scores = np.asarray(scores)
    if into is not None:
        scores = scores[:, :, into[0], into[1]][:into[0]]  # [earlier layers, n_head]
        return int(np.isnan(scores).sum()), scores.size
    keep = composing(*scores.shape[:2])
    return int(np.isnan(scores[keep]).sum()), int(keep.sum())


def composition_numbers(composition: dict) -> dict:
    """The composition scores as JSON holds them: mode -> nested lists, an undefined (NaN) score
    as null."""
    return {mode: _json_numbers(composition[mode]) for mode in MODES}


def circuits(model, progress=None) -> Circuits:
    """Copying (None with the reason when the model has no unembedding) and composition.
    progress(steps done, 2 n_layer): a layer of copying, then of composition, is a step."""
    L = model.config.n_layer
    each = None if progress is None else (lambda base: lambda done, _n: progress(base + done, 2 * L))
    try:
        copying, why = copying_scores(model, None if each is None else each(0)), None
    except InputError as exc:
        copying, why = None, str(exc)
    if copying is not None and np.isnan(copying).all():
        copying, why = None, ZERO_OV
    return Circuits(copying, composition_scores(model, None if each is None else each(L)), why)


def ov_top(model, layer: int, head: int, token: int, k: int = 10) -> list[tuple[int, str, float]]:
    """What head (layer, head) writes when it attends to `token`: the top k tokens of
    W_E[token] W_V W_O W_U (folded), as (id, token text, logit), largest first; none where every
    logit is exactly 0 (WRITES_NOTHING: no order to give)."""
    cfg = model.config
    if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
        raise InputError(f"head {layer}.{head} is outside this model's {plural(cfg.n_layer, 'layer')} x "
                         f"{plural(cfg.n_head, 'head')} (0..{cfg.n_layer - 1}.0..{cfg.n_head - 1})")
    if not 0 <= token < cfg.vocab_size:
        raise InputError(f"token id {token} is outside the vocabulary 0..{cfg.vocab_size - 1}")
    _head(model)  # an encoder: one line before any arithmetic
    m = head_matrices(model, layer)
    e = np.asarray(model.weights.tok_emb[np.array([token])], dtype=np.float64)[0] * embed_scale(model)
    logits = unembed_vector(model, e @ m.v[head] @ m.o[head])  # [vocab]
    if not logits.any():
        return []
    k = max(1, min(int(k), logits.size))
    top = np.argpartition(-logits, k - 1)[:k]
    top = top[np.argsort(-logits[top], kind="stable")]
    return [(int(i), token_text(model, int(i)), float(logits[i])) for i in top]
