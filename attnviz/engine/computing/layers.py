"""The building blocks of a transformer forward pass, one small pure function each.

Shape vocabulary: T tokens, d_model width, n_head query heads, n_kv_head key/value heads, d_head per head.
A pattern is `[n_head, n_q, n_k]`: row q holds how query position q spreads its weight over the keys.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.reading.config import group_size

SQRT_HALF = np.float32(np.sqrt(0.5))
SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


CHUNK = 1 << 16  # elements per pass of an element-wise chain: about 256 KiB of float32, in cache


def _for_row_chunks(fn, n_rows: int, row_len: int) -> None:
    """fn(slice) over cache-sized row blocks, so a chain of element-wise passes stays in cache.
    (Not shared out to threads: they would compete with BLAS's threads.)"""
    step = max(1, CHUNK // max(1, row_len))
    for i in range(0, n_rows, step):
        fn(slice(i, i + step))


def softmax(x: np.ndarray) -> np.ndarray:  # [..., n] -> [..., n], in place, row max subtracted
    # reference: exp(x - max) / sum(exp(x - max)), over the last axis
    rows = x.reshape(-1, x.shape[-1]) if x.flags.c_contiguous else None

    def block(part):
        part -= part.max(axis=-1, keepdims=True)
        np.exp(part, out=part)
        part /= part.sum(axis=-1, keepdims=True)

    if rows is None:  # a non-contiguous view: one pass over the whole array
        block(x)
    else:
        _for_row_chunks(lambda r: block(rows[r]), rows.shape[0], rows.shape[1])
    return x


def layer_norm(x, gain, bias, eps):  # [T, d] -> [T, d]
    # reference: (x - mean(x)) / sqrt(var(x) + eps) * gain + bias
    # tuned: np.mean's own arithmetic (a sum, divided by d), in place: the same bits, without
    # np.mean's Python wrapper and two temporaries (benchmarks/engine.py measures the run)
    d = x.shape[-1]
    mean = np.add.reduce(x, axis=-1, keepdims=True)
    np.true_divide(mean, d, out=mean)
    centered = np.subtract(x, mean)
    var = np.add.reduce(np.multiply(centered, centered), axis=-1, keepdims=True)
    np.true_divide(var, d, out=var)
    var += np.float32(eps)
    np.sqrt(var, out=var)
    centered /= var
    centered *= gain
    centered += bias
    return centered


def rms_norm(x, gain, eps):  # [T, d] -> [T, d]
    # reference: x / sqrt(mean(x²) + eps) * gain
    # tuned as layer_norm: np.mean's own arithmetic (a sum, divided by d) and in place, the same
    # bits without np.mean's Python wrapper and three temporaries (59 norms a SmolLM2 keystroke)
    ms = np.add.reduce(np.multiply(x, x), axis=-1, keepdims=True)
    np.true_divide(ms, x.shape[-1], out=ms)
    ms += np.float32(eps)
    np.sqrt(ms, out=ms)
    out = np.divide(x, ms)
    out *= gain
    return out


def _erfc_abs(z):  # z >= 0 -> 1 - erf(z), Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7)
    t = np.float32(0.3275911) * z
    t += 1.0
    np.reciprocal(t, out=t)
    poly = np.float32(1.061405429) * t
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    z2 = z * z
    np.negative(z2, out=z2)
    np.exp(z2, out=z2)
    poly *= z2
    return poly


def erf(x: np.ndarray) -> np.ndarray:
    """Error function to within 1.5e-7, below float32's precision (NumPy has no erf)."""
    return np.sign(x) * (1.0 - _erfc_abs(np.abs(x)))


def gelu_erf(x):  # [..., n] -> [..., n], exact GELU (BERT)
    # reference: 0.5 * x * (1 + erf(x / sqrt(2)))
    # tuned: max(x, 0) - |x| erfc(|x| / sqrt 2) / 2, the same for either sign (x >= 0: x - x Q;
    # below: x Q, with Q = erfc(|x| / sqrt 2) / 2; no cancellation in 1 + erf for large negative
    # x), with A & S 7.1.26's constants folded (its t from |x| directly, its polynomial halved,
    # exp(-x^2 / 2)): 17 NumPy passes a block instead of 22, and no np.where; in cache-sized blocks
    out = np.empty_like(x)
    x2 = x.reshape(-1, x.shape[-1])
    o2 = out.reshape(-1, x.shape[-1])

    def block(rows):  # a cache-sized piece of a long element-wise chain
        xs, o = x2[rows], o2[rows]
        a = np.abs(xs)
        t = np.multiply(a, _GELU_P)
        t += np.float32(1.0)
        np.reciprocal(t, out=t)
        tail = np.multiply(t, _GELU_C[0])
        for c in _GELU_C[1:]:
            tail += c
            tail *= t
        e = np.multiply(a, a)
        e *= np.float32(-0.5)
        np.exp(e, out=e)
        tail *= e
        tail *= a  # |x| Q(|x|)
        np.maximum(xs, np.float32(0.0), out=o)
        o -= tail

    _for_row_chunks(block, x2.shape[0], x2.shape[1])
    return out


_GELU_P = np.float32(0.3275911 * np.sqrt(0.5))  # t = 1 / (1 + p z) with z = |x| / sqrt 2
_GELU_C = tuple(np.float32(0.5 * c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))


def gelu_tanh(x):  # [..., n] -> [..., n], tanh approximation (GPT-2 "gelu_new")
    # reference: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x³)))
    return np.float32(0.5) * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + np.float32(0.044715) * (x * x * x))))


def silu(x):  # [..., n] -> [..., n]
    # reference: x * sigmoid(x) = x / (1 + exp(-x))
    # tuned: the same operations in one new array, no temporaries
    out = np.negative(x)
    np.exp(out, out=out)
    out += np.float32(1.0)
    return np.divide(x, out, out=out)


def relu(x):
    return np.maximum(x, 0)


ACTIVATIONS = {
    "gelu": gelu_erf,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_fast": gelu_tanh,
    "silu": silu,
    "swish": silu,
    "relu": relu,
}


GEMV_ROWS = 5  # up to this many rows, linear() makes one matrix-vector product per row
STORED_ROWS_FIRST = 64  # from GEMV_ROWS + 1 to this many rows, a w stored as [out, in] rows is
# multiplied as those rows times x's rows as columns (linear)


def linear(x, w, b=None, packed=None):  # [T, d_in] @ [d_in, d_out] (+ [d_out]) -> [T, d_out]
    # packed: w's own quantised blocks (qpack.PackedMatrix), multiplied directly for a few rows,
    # and for every row where w is None (a packed view of a layer: no float32 copy held)
    n = x.shape[0] if x.ndim == 2 else 0
    if packed is not None and n and (w is None or _qmatvec().takes(packed, n)):
        y = _qmatvec().qlinear(x, packed)  # reads 4-8-bit weights instead of w's float32
    elif 1 < n <= GEMV_ROWS:  # a cached keystroke's new rows (2: it re-tokenised the last token).
        # One matrix-vector product a row: OpenBLAS's product of a few rows packs w first, slower
        # than the rows' products reading w again from cache (benchmarks/gemv_rows.py)
        y = np.empty((n, w.shape[1]), dtype=np.result_type(x, w))
        for i in range(n):
            np.matmul(x[i], w, out=y[i])
    elif GEMV_ROWS < n <= STORED_ROWS_FIRST and w.flags.f_contiguous and not w.flags.c_contiguous:
        # w is the [d_in, d_out] view of [d_out, d_in] rows, as GGUF files store them: BLAS
        # multiplies those rows by x's rows as columns faster than x @ w up to STORED_ROWS_FIRST
        # rows (benchmarks/row_products.py measures it): a run of a sentence, an edit inside the
        # text, a paste. The result's copy to C order is [T, d_out] floats.
        y = np.ascontiguousarray(np.matmul(w.T, x.T).T)
    else:
        y = x @ w
    if b is not None:
        y += b
    return y


_QMATVEC = None  # the qmatvec module once imported (a keystroke asks for it a few hundred times)


def _qmatvec():  # imported when a packed matrix first comes (numba loads in a fraction of a second)
    global _QMATVEC
    if _QMATVEC is None:
        from attnviz.engine.computing import qmatvec
        _QMATVEC = qmatvec
    return _QMATVEC


def one_row_steps(layer, n_rows: int, trace=None):
    """The compiled one-row steps (engine/computing/onerow.py) for a run of `n_rows` on `layer`:
    one row on a layer the kernels multiply by (packed, the kernels on), once qmatvec.warm has
    loaded them, where the run's `trace` takes them; else None (the NumPy steps). A trace that
    has not chosen yet chooses here, for every layer of its run: the steps loaded now
    (Trace.one_row)."""
    if n_rows != 1 or getattr(layer, "packed", None) is None:
        return None
    return _chosen(trace, _loaded())


def one_row_stack(n_rows: int, trace=None, layers=None):
    """engine/computing/onerow_stack.py (every layer of a one-row run in one compiled call) for a
    run of `n_rows`: one row, the kernels on, the one-row steps loaded and their block taken
    (onerow.USE_BLOCK), where the run's `trace` takes them (one_row_steps); else None. `layers`:
    the model's, asked for first where the steps are not loaded and the trace has not chosen
    (ask_one_row: a process that leaves nothing for later waits for them there)."""
    steps = _loaded() if n_rows == 1 else None
    if steps is None and n_rows == 1 and layers is not None and (trace is None or trace.one_row is None):
        ask_one_row(layers)
        steps = _loaded()
    if steps is None or not steps.USE_BLOCK:
        return None
    steps = _chosen(trace, steps)
    return steps.onerow_stack if steps is not None else None


def ask_one_row(layers) -> None:
    """Layer 0 of `layers` asked for as a run of one row multiplies by it (layer_for), where it has
    a packed view and the kernels are on: qmatvec.takes_layer then loads the one-row steps, and in
    a process that leaves nothing for later waits for them, as the layer loop's first layer would.
    A one-row run that asks this before it chooses its path (one_row_stack) takes the same path
    whatever the warm-up's progress: the first generation of a process as every later one."""
    if _packed_view(layers, 0) is not None and _qmatvec().ENABLED:
        layer_for(layers, 0, 1)


def _loaded():  # the one-row steps where qmatvec.warm has loaded them and the kernels are on, else None
    qm = _qmatvec()
    return qm.ONE_ROW if qm.ENABLED else None


def _chosen(trace, steps):  # `steps` (loaded, or None) as the run of `trace` takes them (Trace.one_row)
    if trace is None:
        return steps
    if trace.one_row is None:
        trace.one_row = steps is not None
    return steps if trace.one_row else None


def _packed_view(layers, i: int):  # a LayerStore's packed view of layer i (None: none, or a list)
    view = getattr(layers, "packed_view", None)
    return view(i) if view is not None else None


def layer_vectors(layers, i: int):
    """Layer i for reading its vectors (norm gains, biases): the store's packed view where it has
    one (the same arrays as the expanded layer's, and nothing is expanded), else the layer."""
    view = _packed_view(layers, i)
    return view if view is not None else layers[i]


def layer_for(layers, i: int, n_rows: int):
    """Layer i as a run of `n_rows` new rows multiplies by it: the store's packed view (its
    matrices in the file's blocks, no float32 copy: engine/reading/budget.py) where the kernels
    take every packed matrix at that many rows (qmatvec.takes_layer), else the float32 layer (a
    LayerStore expands it within the memory budget)."""
    view = _packed_view(layers, i)
    if view is not None and _qmatvec().takes_layer(view, n_rows, layers.holds(i)):
        return view
    return layers[i]


def split_heads(x, n_head):  # [T, n_head*d_head] -> [n_head, T, d_head]
    T = x.shape[0]
    return x.reshape(T, n_head, -1).transpose(1, 0, 2)


def merge_heads(x):  # [n_head, T, d_head] -> [T, n_head*d_head]
    n_head, T, d_head = x.shape
    return x.transpose(1, 0, 2).reshape(T, n_head * d_head)


def qkv_heads(x, w_qkv, b_qkv, n_head, n_kv_head, d_head, packed=None):
    """The one place heads are split.

    [T, d_model] -> q [n_head, T, d_head], k and v [n_kv_head, T, d_head].
    The fused projection w_qkv is [d_model, (n_head + 2*n_kv_head) * d_head], columns ordered Q | K | V.
    """
    qkv = linear(x, w_qkv, b_qkv, packed)  # [T, (n_head + 2 n_kv_head) d_head]
    q_end = n_head * d_head
    k_end = q_end + n_kv_head * d_head
    q = split_heads(qkv[:, :q_end], n_head)
    k = split_heads(qkv[:, q_end:k_end], n_kv_head)
    v = split_heads(qkv[:, k_end:], n_kv_head)
    return q, k, v


def kv_group(n_head: int, n_kv_head: int) -> np.ndarray:  # [n_head]: the KV head each query head reads
    return np.arange(n_head, dtype=np.int64) // group_size(n_head, n_kv_head)


def repeat_kv(x, n_group):  # [n_kv_head, T, d_head] -> [n_kv_head * n_group, T, d_head]
    return x if n_group == 1 else np.repeat(x, n_group, axis=0)


def rope_cos_sin(positions, d_head, theta):  # [T] -> cos, sin [T, d_head] (rotate-half layout)
    inv_freq = 1.0 / (theta ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head))
    freqs = np.outer(positions.astype(np.float64), inv_freq).astype(np.float32)  # [T, d_head/2]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def apply_rope(x, cos, sin):  # [n, T, d_head] -> [n, T, d_head]
    """Rotate-half RoPE, as Hugging Face checkpoints expect (not Meta's adjacent pairs)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def rope_qk(q, k, cos, sin):  # [n_head, n, d_head], [n_kv_head, n, d_head] -> the same, rotated
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def causal_mask(T: int, window: int | None = None, start: int = 0) -> np.ndarray:
    """-> bool [T - start, T], True = may attend: query rows start..T-1 (all by default), keys 0..T-1."""
    q = np.arange(start, T)[:, None]
    k = np.arange(T)[None, :]
    allowed = k <= q
    if window is not None:
        allowed &= (q - k) < window
    return allowed


def mask_bias(allowed: np.ndarray) -> np.ndarray:  # bool [T, T] -> float32 [T, T]: 0 or -inf
    return np.where(allowed, np.float32(0), np.float32(-np.inf))


def attention_scores(q, k, scale, bias=None, out=None):  # [n_head, n_q, d_head], [n_head, n_k, d_head] -> [n_head, n_q, n_k]
    """Scaled dot products q kᵀ * scale, plus `bias` [n_q, n_k]: 0 where allowed, -inf where masked."""
    q = q * np.float32(scale)  # scaling q costs T x d_head, scaling the scores T x T
    scores = np.matmul(q, k.transpose(0, 2, 1), out=out)
    if bias is not None:
        scores += bias
    return scores


def attention_pattern(q, k, scale, bias=None, out=None):  # [n_head, n_q, d_head], [n_head, n_k, d_head] -> [n_head, n_q, n_k]
    """Scaled dot-product weights; `bias` [n_q, n_k] is 0 where allowed, -inf where masked.
    Every row keeps at least its diagonal, so no row is all -inf and none turns into NaN."""
    # reference: softmax(q kᵀ * scale + bias)
    return softmax(attention_scores(q, k, scale, bias, out))


def head_grams(w_o, n_head):  # [n_head d_head, d_model] -> [n_head, d_head, d_head]
    """Each head's W_O Gram G_h = W_O(h) W_O(h)^T in float32: all that the value norms and head
    shares need of W_O, d_head / d_model of its size (float64 sums cost an 8B model's first
    value-weighted run seconds a layer for no visible digit). The same bits for the same W_O
    whatever its memory layout (a C-order copy is multiplied)."""
    wo = np.ascontiguousarray(w_o, dtype=np.float32).reshape(n_head, -1, w_o.shape[-1])
    return np.matmul(wo, wo.transpose(0, 2, 1))


def head_value_norms(v, gram, n_group):  # [n_kv_head, T, d_head], [n_head, d_head, d_head] -> [n_head, T]
    """||v_j W_O(h)||: the size of what key j sends into the residual stream through head h
    (Kobayashi et al., 2020), as sqrt(v_j G_h v_jᵀ) from head_grams (no [T, d_model] output formed)."""
    vh = repeat_kv(v, n_group)  # [n_head, T, d_head]
    sq = np.einsum("htd,htd->ht", np.matmul(vh, gram), vh)
    return np.sqrt(np.maximum(sq, 0.0, out=sq), out=sq)


def head_output_share(pattern, v, gram, n_group):  # [n_head, T, T], [n_kv_head, T, d_head], grams -> [n_head]
    """Each head's share of the layer's attention output: ||A_h (V_h W_O(h))||_F over the sum of
    all heads' (the output bias, shared by all heads, is left out)."""
    return _gram_shares(np.matmul(pattern, repeat_kv(v, n_group)), gram)  # o_h = A_h V_h


def head_output_share_of_heads(head_out, gram):  # [n_head, T, d_head], [n_head, d_head, d_head] -> [n_head]
    """The same share from each head's output o_h = A_h V_h (the anatomy has them) and the layer's
    Grams (head_grams; a Model keeps them: Model.output_grams)."""
    return _gram_shares(head_out, gram)


def _gram_shares(head_out, gram):  # [n_head, T, d_head], [n_head, d_head, d_head] -> [n_head]
    # ||o_h W_O(h)||_F^2 = sum(o_h G_h * o_h)
    sq = np.einsum("htd,htd->h", np.matmul(head_out, gram), head_out, dtype=np.float64)
    return _shares(np.sqrt(np.maximum(sq, 0.0)))


def _shares(norms):  # [n_head] float64 -> [n_head] float32, summing to 1 (all 0 when every norm is)
    total = norms.sum()
    return (norms / total if total > 0 else np.zeros_like(norms)).astype(np.float32)
