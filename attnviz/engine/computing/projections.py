"""The linear steps around a layer's attention, in the order data flows through them (families.py's
self_attention and mlp call them; engine/analysing/anatomy.py calls them one by one): a layer's
matrices in its file's blocks where it has them (`packed`), q, k and v projected, split into heads
and rotated (`project_qkv`), the heads' outputs merged and projected out (`attention_output`), a
long run's rows shared out in chunks (`in_row_chunks`), and a layer's output projection read
without expanding the rest of it (`output_projection`), or each head's output through it at one
position (`head_writes`). A layer's `Consts` (families.py, which
imports this module: not imported back) carries what they need besides the input and the weights.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine import parallel
from attnviz.engine.computing.layers import linear, merge_heads, qkv_heads
from attnviz.engine.parallel import for_row_chunks
from attnviz.engine.reading.layout import Layer


def packed(layer: Layer, name: str):
    """Layer matrix `name` in its file's blocks (qpack.PackedMatrix), or None (float32 only)."""
    return None if layer.packed is None else getattr(layer.packed, name)


def in_row_chunks(x, c) -> bool:  # c: the layer's Consts
    """Whether a row-wise step on x [n, ...] is shared out in row chunks (a long run's rows)."""
    return c.workers > 1 and x.shape[0] > parallel.ROW_CHUNK


def project_qkv(x, layer: Layer, c):  # c: the layer's Consts
    """x [n, d_model] -> q [n_head, n, d_head], k and v [n_kv_head, n, d_head], q and k rotated by
    position when the family has RoPE (a long run's rows in chunks, on c.workers threads)."""
    if in_row_chunks(x, c):
        n = x.shape[0]
        q = np.empty((c.n_head, n, c.d_head), dtype=np.float32)
        k, v = (np.empty((c.n_kv_head, n, c.d_head), dtype=np.float32) for _ in range(2))

        def rows(a, b):
            rope = None if c.rope is None else (c.rope[0][a:b], c.rope[1][a:b])
            q[:, a:b], k[:, a:b], v[:, a:b] = _project_qkv(x[a:b], layer, c, rope)
        for_row_chunks(n, rows, c.workers)
        return q, k, v
    return _project_qkv(x, layer, c, c.rope)


def _project_qkv(x, layer: Layer, c, rope):  # c: the layer's Consts; rope: cos, sin [n, d_head]
    q, k, v = qkv_heads(x, layer.w_qkv, layer.b_qkv,  # [n_head, n, d_head], [n_kv_head, n, d_head] x2
                        c.n_head, c.n_kv_head, c.d_head, packed(layer, "w_qkv"))
    if c.qk_norm is not None:
        q, k = c.qk_norm(q, k, layer, c)  # same shapes, each head normed
    if rope is not None:
        q, k = c.rotate(q, k, *rope)  # same shapes, rotated by position
    return q, k, v


def attention_output(z, layer: Layer):
    """z [n_head, n, d_head] -> concat [n, n_head d_head], out [n, d_model]."""
    concat = merge_heads(z)  # [n, n_head d_head]
    return concat, linear(concat, layer.w_o, layer.b_o, packed(layer, "w_o"))  # [n, d_model]


def output_projection(layers, i: int):
    """Layer i's w_o [n_head d_head, d_model], b_o [d_model] (or None) and post_attn_norm (Gemma 3's
    (gain,), or None), from a LayerStore without expanding the rest of a layer it does not hold,
    or from a tuple of layers."""
    output = getattr(layers, "output", None)
    if output is not None:
        return output(i)
    return layers[i].w_o, layers[i].b_o, layers[i].post_attn_norm


def head_writes(layers, i: int, z):  # [n_head, d_head] -> [n_head, d_model], b_o, post_attn_norm
    """What each head of layer i writes at one position, z_h W_O(h) (before the output bias), with
    the layer's b_o and post_attn_norm as output_projection gives them. Where a LayerStore holds
    the layer's W_O packed (its packed view), the kernels multiply its blocks (to float32 rounding
    of the float32 product): no float32 W_O is made for it, as a one-row run makes none."""
    n_head, d_head = z.shape
    view = getattr(layers, "packed_view", None)
    view = view(i) if view is not None else None
    pm = view.packed.w_o if view is not None else None
    if pm is not None:
        x = np.zeros((n_head, n_head, d_head), np.float32)  # row h: head h's z alone
        x[np.arange(n_head), np.arange(n_head)] = z
        return linear(x.reshape(n_head, -1), None, None, pm), view.b_o, view.post_attn_norm
    w_o, b_o, post_norm = output_projection(layers, i)
    return np.matmul(z[:, None, :], w_o.reshape(n_head, d_head, -1))[:, 0], b_o, post_norm
