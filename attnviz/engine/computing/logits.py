"""From the residual stream to next-token logits: a model's head (its final norm and the
unembedding W_U [vocab, d_model]) as an `LMHead`, which Model.lm_head builds once and keeps.

    logits = W_U · norm(x)   [vocab]   (x: the final-norm input [d_model])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.engine.errors import Cancelled, ModelLoadError, NoPrediction
from attnviz.engine.computing.families import FAMILY
from attnviz.engine.computing.layers import layer_norm, rms_norm


@dataclass(frozen=True)
class LMHead:
    """A model's final norm and its unembedding as float32, ready for logits."""
    norm: tuple  # (gain,) RMSNorm or (gain, bias) LayerNorm, [d_model] each
    centred: bool  # LayerNorm (subtracts the mean) or RMSNorm
    eps: float
    w_u: np.ndarray  # [vocab, d_model] float32, or the file's table (QuantRows) under a memory budget

    def normed(self, x):  # [..., d_model] -> [..., d_model]
        return (layer_norm if self.centred else rms_norm)(x, *self.norm, self.eps)

    def logits(self, x):  # final-norm input [n, d_model] -> logits [n, vocab] (vocab_logits)
        return vocab_logits(self, x)


def build_head(model, table: bool = False) -> LMHead:
    """The model's final norm and unembedding as an LMHead (GGUF's quantised output head is
    dequantised here, once; with `table`, it is kept in the file's type instead, as under a memory
    budget: a comparison of two models holds no float32 copy of either). NoPrediction, in one line, for an encoder, a file missing its final
    norm or unembedding, or non-finite values in them."""
    cfg, h = model.config, model.weights.head
    if h is None:
        raise NoPrediction(f"{model.name}: this model's loader reads no final norm or unembedding")
    if h.missing:
        raise NoPrediction(f"{model.name}: {h.missing}")
    if not cfg.causal or not FAMILY[cfg.family].pre_norm:
        raise NoPrediction(f"{model.name} is not a causal language model: it predicts no next token")
    try:
        if (not table or isinstance(h.unembed, np.ndarray)) and _fits(model, h.unembed):
            w_u = np.ascontiguousarray(np.asarray(h.unembed, dtype=np.float32))  # [vocab, d_model]
        else:  # kept in the file's type, dequantised VOCAB_BLOCK rows at a time (checked here)
            w_u = h.unembed
            for a in range(0, w_u.shape[0], VOCAB_BLOCK):
                w_u[a:a + VOCAB_BLOCK]
    except ModelLoadError as exc:  # a GGUF row found non-finite as it is dequantised
        raise NoPrediction(f"{model.name}: the unembedding cannot be used for prediction: {exc}") from None
    if w_u.shape != (cfg.vocab_size, cfg.d_model):
        raise NoPrediction(f"{model.name}: the unembedding is {list(w_u.shape)}, expected "
                           f"[{cfg.vocab_size}, {cfg.d_model}]")
    for name, a in ((("unembedding", w_u),) if isinstance(w_u, np.ndarray) else ()) + tuple(
            ("final norm", g) for g in h.norm):
        if not np.isfinite(a).all():
            raise NoPrediction(f"{model.name}: the {name} holds non-finite values (NaN or inf): "
                               "prediction needs finite numbers")
    return LMHead(norm=tuple(np.asarray(g, dtype=np.float32) for g in h.norm),
                  centred=FAMILY[cfg.family].norm is layer_norm, eps=cfg.norm_eps, w_u=w_u)


def _fits(model, unembed) -> bool:
    """Whether the unembedding may be held as float32: it is one already (an array), or the
    model's memory budget holds every layer expanded and it besides (engine/reading/budget.py)."""
    if isinstance(unembed, np.ndarray):
        return True
    layers = model.weights.layers
    budget = getattr(layers, "budget", None)
    if budget is None:
        return True
    need = 4 * int(np.prod(unembed.shape, dtype=np.int64))
    return sum(layers.sizes) + need <= budget


def log_softmax(logits):  # [..., vocab] -> [..., vocab], float64
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


VOCAB_BLOCK = 4096  # unembedding rows per block of `vocab_logits`


def vocab_logits(head: LMHead, x, stop: Callable[[], bool] | None = None) -> np.ndarray:
    """Final-norm inputs x [..., d_model] -> logits [..., vocab] float32, in blocks of VOCAB_BLOCK
    unembedding rows, whether w_u is float32 or kept in the file's type under a memory budget (a
    block dequantised at a time): the same products either way, so a budget changes no logit, not
    even in the last bit. `stop()` is asked before each block and raises Cancelled when it says
    so: a newer keystroke waits for one block, not for the whole unembedding."""
    xn = head.normed(np.asarray(x, dtype=np.float32)).astype(np.float32, copy=False)
    V = head.w_u.shape[0]
    out = np.empty((*xn.shape[:-1], V), np.float32)  # [..., vocab], rows contiguous for reductions
    for v0 in range(0, V, VOCAB_BLOCK):
        if stop is not None and stop():
            raise Cancelled("a newer request replaced this one")
        out[..., v0:v0 + VOCAB_BLOCK] = xn @ np.asarray(head.w_u[v0:v0 + VOCAB_BLOCK]).T  # [..., block]
    return out
