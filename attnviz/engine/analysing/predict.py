"""What the model predicts and which parts of it write the prediction: the next-token top-k, the
logit lens, and direct logit attribution (DLA). Pure arithmetic on a Trace that kept the head
outputs z and the residual stream (`prediction_trace()`), no Qt.

    final-norm input x = resid[n_layer][q]  [d_model]  at the query position q
    logits = W_U · norm(x)                    [vocab]    (W_U [vocab, d_model]: the unembedding)
    lens at layer l:  W_U · norm(resid[l + 1][q])         (raw: the final norm applied to each layer)

DLA splits x into the parts the residual stream is a sum of (pre-LN: the embeddings, every head's
z_{l,h} W_O[h], each layer's attention output bias and MLP output) and passes each through the final
norm linearised with its scale frozen from this run, then · (W_U[target] - W_U[alt]):
    RMSNorm:   part · (g / rms(x)) · u
    LayerNorm: (part - mean(part)) · (g / std(x)) · u, and the norm's bias b · u in the bias row
so the parts add up to logit(target) - logit(alt) exactly (up to float rounding). Gemma 3 writes
the heads' sum through a norm of its own (post-attention RMSNorm, gain g_l) before the residual:
that norm is linearised the same way, each head's part · (g_l / rms(attention output)).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.computing.projections import head_writes
from attnviz.engine.computing.logits import LMHead, log_softmax, vocab_logits, vocab_logits_of
from attnviz.engine.computing.trace import Trace
from attnviz.engine.reading.token_text import quoted, tokens


def prediction_trace(**kw) -> Trace:
    """A trace that keeps what prediction, the lens and DLA read: z and the residual stream."""
    return Trace(z=True, resid=True, **kw)


def position_index(T: int, position: int | None) -> int:
    """A token index (negative: from the end; None: the last token) -> 0..T-1, or InputError."""
    if position is None:
        return T - 1
    if not -T <= position < T:
        raise InputError(f"position {position} is outside the {tokens(T)} (0..{T - 1}, or -1..-{T} "
                         "from the end)")
    return position % T


@dataclass(frozen=True)
class Prediction:
    position: int
    logprobs: np.ndarray  # [vocab] float64: log p(token | tokens 0..position)
    top_ids: np.ndarray  # [k] int64, most likely first
    top_logprobs: np.ndarray  # [k]


def prediction_of(logits, position: int, k: int = 10) -> Prediction:
    """One position's logits [vocab] -> its Prediction (the top-k next tokens)."""
    logprobs = log_softmax(logits)  # [vocab]
    k = max(1, min(int(k), logprobs.size))
    top = np.argpartition(-logprobs, k - 1)[:k]
    top = top[np.argsort(-logprobs[top], kind="stable")]
    return Prediction(position, logprobs, top.astype(np.int64), logprobs[top])


def predict(head: LMHead, trace: Trace, position: int | None = None, k: int = 10) -> Prediction:
    """The top-k next tokens after token `position` (default the last), from the trace's final
    residual stream."""
    q = position_index(len(trace.ids), position)
    return prediction_of(vocab_logits(head, trace.resid[-1][q:q + 1])[0], q, k)


@dataclass(frozen=True)
class Lens:
    """Logit lens (raw: the final norm applied to each layer) at one position, per layer l: the
    residual after block l through the final norm and the unembedding."""
    position: int
    target: int
    top_ids: np.ndarray  # [n_layer] int64: top-1 token per layer
    top_logprobs: np.ndarray  # [n_layer]
    target_logprobs: np.ndarray  # [n_layer]: log p(target) per layer
    target_ranks: np.ndarray  # [n_layer] int64: 0 = the layer's top-1


def lens_rows(trace: Trace, q: int) -> np.ndarray:
    """The lens's final-norm inputs at position q: the residual after each block [n_layer, d_model]
    (the last row is the model's own final-norm input: the lens's last layer is the prediction)."""
    return np.stack([r[q] for r in trace.resid[1:]])


def lens_of(logits, position: int, target: int | None = None,
            stop: Callable[[], bool] | None = None) -> Lens:
    """The lens from its rows' logits [n_layer, vocab] (float32; log-sum-exp in float64);
    `target` defaults to the last layer's top-1. `stop()` is asked between groups of 8 layers."""
    L = np.asarray(logits)
    n = L.shape[0]
    top = L.argmax(axis=1)  # [n_layer]
    m = L[np.arange(n), top].astype(np.float64)  # [n_layer] the row maxima
    if target is None:
        target = int(top[-1])
    t = L[:, target]  # [n_layer]
    lse, ranks = np.empty(n), np.empty(n, np.int64)
    for a in range(0, n, 8):
        if stop is not None and stop():
            raise Cancelled("a newer request replaced this one")
        b = min(n, a + 8)
        block = L[a:b]
        lse[a:b] = m[a:b] + np.log(np.exp(block - m[a:b, None].astype(L.dtype)).sum(axis=1, dtype=np.float64))
        ranks[a:b] = (block > t[a:b, None]).sum(axis=1)
    return Lens(position, int(target), top.astype(np.int64), m - lse, t.astype(np.float64) - lse, ranks)


def logit_lens(head: LMHead, trace: Trace, position: int | None = None,
               target: int | None = None) -> Lens:
    """The lens at `position` (default last); `target` defaults to the model's final top-1."""
    q = position_index(len(trace.ids), position)
    return lens_of(vocab_logits(head, lens_rows(trace, q)), q, target)


def prediction_and_lens(head: LMHead, trace: Trace, position: int | None, k: int,
                        target: int | None = None) -> tuple[Prediction, Lens]:
    """predict(head, trace, position, k) and logit_lens(head, trace, position, target) from one
    pass over the unembedding (the same bits as the two passes give); `target` defaults to the
    prediction's top-1."""
    q = position_index(len(trace.ids), position)
    last, rows = vocab_logits_of(head, [trace.resid[-1][q:q + 1], lens_rows(trace, q)])
    pred = prediction_of(last[0], q, k)
    return pred, lens_of(rows, q, int(pred.top_ids[0]) if target is None else target)


def lens_grid(head: LMHead, trace: Trace, stop: Callable[[], bool] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """The full layer x position lens (on demand): top-1 ids [n_layer, T] int64 and their
    log-probs [n_layer, T]. `stop()`, asked before each layer, raises Cancelled."""
    ids = np.empty((len(trace.resid) - 1, len(trace.ids)), np.int64)
    lps = np.empty(ids.shape)
    for layer, r in enumerate(trace.resid[1:]):
        if stop is not None and stop():
            raise Cancelled(f"lens grid stopped before layer {layer}: cancelled")
        lp = log_softmax(head.logits(r))  # [T, vocab]
        ids[layer], lps[layer] = lp.argmax(axis=1), lp.max(axis=1)
    return ids, lps


ALT_RULE = "the clean run's top-1, or its second when the target is the top-1"
# how a token is typed, in the window and on the command line (vocab_token)
TOKEN_RULE = ("a text that is one token or the tokenizer's own spelling; #N is the id N (a number "
              "alone is text: 7 is the token '7')")


def dla_tokens(top_ids, target: int | None = None, alt: int | None = None) -> tuple[int, int]:
    """The two tokens DLA compares, from the clean run's top ids (most likely first, at least two):
    `target` (None: the top-1) and `alt` (None: ALT_RULE, the strongest rival the target has).
    InputError when they are one token."""
    top = [int(i) for i in top_ids[:2]]
    t = top[0] if target is None else int(target)
    a = (top[1] if top[0] == t else top[0]) if alt is None else int(alt)
    if t == a:
        raise InputError(f"target and alt are the same token ({t}): pick two different tokens")
    return t, a


@dataclass(frozen=True)
class Attribution:
    """Direct logit attribution of logit(target) - logit(alt) at one position: heads [n_layer,
    n_head], mlp [n_layer], embed and bias (attention output biases and the final norm's bias);
    they add up to logit_diff."""
    position: int
    target: int
    alt: int
    logit_diff: float  # from the model's own two logits (normed final stream · W_U rows)
    heads: np.ndarray  # [n_layer, n_head]
    mlp: np.ndarray  # [n_layer]
    embed: float
    bias: float

    def total(self) -> float:
        return float(self.heads.sum() + self.mlp.sum() + self.embed + self.bias)


def attribute(model, head: LMHead, trace: Trace, position: int | None, target: int,
              alt: int) -> Attribution:
    """DLA of logit(target) - logit(alt) after token `position` (module docstring)."""
    cfg = model.config
    q = position_index(len(trace.ids), position)
    for name, t in (("target", target), ("alt", alt)):
        if not 0 <= int(t) < cfg.vocab_size:
            raise InputError(f"{name} token id {t} is outside the vocabulary 0..{cfg.vocab_size - 1}")
    x = trace.resid[-1][q].astype(np.float64)  # [d_model] the final-norm input
    u = head.w_u[target].astype(np.float64) - head.w_u[alt]  # [d_model]
    gain = head.norm[0].astype(np.float64)
    if head.centred:  # LayerNorm: centre each part, scale by the frozen std, bias on its own
        c = x - x.mean()
        direction = gain * u / np.sqrt(np.mean(c * c) + head.eps)
        direction -= direction.mean()  # (p - mean p) · d = p · (d - mean d)
        norm_bias = float(head.norm[1] @ u)
    else:  # RMSNorm: scale by the frozen 1 / rms
        direction = gain * u / np.sqrt(np.mean(x * x) + head.eps)
        norm_bias = 0.0
    d = direction.astype(np.float32)
    layers = model.weights.layers  # (read once: its files checked once, not a layer)
    heads = np.empty((cfg.n_layer, cfg.n_head))
    mlp = np.empty(cfg.n_layer)
    bias = norm_bias
    for layer in range(cfg.n_layer):
        # W_O(h) z_h per head (under a memory budget W_O alone, not the whole layer; a packed
        # layer's on its blocks)
        writes, b_out, post_norm = head_writes(layers, layer, trace.z[layer][:, q])
        d_l = d
        if post_norm is not None:  # Gemma 3: the heads' sum passes an RMSNorm before the
            # residual; linearised like the final norm, its 1 / rms frozen from this run
            out = writes.sum(axis=0, dtype=np.float64)  # [d_model] attention output
            if b_out is not None:
                out = out + b_out
            d_l = (post_norm[0] / np.sqrt(np.mean(out * out) + cfg.norm_eps) * direction
                   ).astype(np.float32)
        heads[layer] = writes @ d_l  # [n_head]: each head's part · direction
        b_o = float(b_out @ d_l) if b_out is not None else 0.0
        step = float((trace.resid[layer + 1][q] - trace.resid[layer][q]) @ d)  # attention + MLP
        mlp[layer] = step - heads[layer].sum() - b_o
        bias += b_o
    embed = float(trace.resid[0][q] @ d)
    diff = float(head.normed(trace.resid[-1][q:q + 1])[0] @ (head.w_u[target] - head.w_u[alt]))
    return Attribution(q, int(target), int(alt), diff, heads, mlp, embed, bias)


_HASH_ID = re.compile(r"#\s*(-?[0-9]+)")  # (a minus too: "#-1" is an id out of range, not text)


def _vocab_id(digits: str, V: int) -> int:
    """An id typed as digits ("464", "-1") -> the id, InputError when outside 0..V-1; a long one is
    refused by its length (int() refuses over 4,300 digits) and named shortened."""
    sign, digits = ("-", digits[1:]) if digits.startswith("-") else ("", digits)
    if len(digits.lstrip("0")) > len(str(V)):
        shown = sign + (digits if len(digits) <= 20 else f"{digits[:12]}… ({len(digits)} digits)")
        raise InputError(f"token id {shown} is outside the vocabulary 0..{V - 1}")
    i = int(sign + (digits.lstrip("0") or "0"))
    if not 0 <= i < V:
        raise InputError(f"token id {i} is outside the vocabulary 0..{V - 1}")
    return i


def vocab_token(model, spec) -> int:
    """A token of the vocabulary as a person gives it, in the window or on the command line (one
    rule: TOKEN_RULE) -> its id: `#464` is the id; any other text is text (digits too: "2024" may
    be a token), the tokenizer's own spelling ("Ġthe") or a text that is one token, as given or
    after a space ("the" -> " the"). InputError in one line otherwise, saying what the text is."""
    spec = str(spec)
    V = model.config.vocab_size
    m = _HASH_ID.fullmatch(spec.strip())
    if m:
        return _vocab_id(m.group(1), V)
    if not spec:
        raise InputError("give a token, or #id")
    if model.tokenizer is None:
        raise InputError(f"{model.name} has no tokenizer: give the token as an id, #id (0..{V - 1})")
    i = model.tokenizer.token_to_id(spec)
    if i is not None and i < V:
        return int(i)
    unk = model.tokenizer.unknown_token()  # (text the vocabulary lacks is read as it: not that token)
    unk_id = model.tokenizer.token_to_id(unk) if unk else None
    for text in dict.fromkeys((spec, " " + spec.lstrip())):
        enc = model.tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids) == 1 and (unk_id is None or enc.ids[0] != unk_id):
            return int(enc.ids[0])
    enc = model.tokenizer.encode(spec, add_special_tokens=False)
    if unk_id is not None and unk_id in enc.ids:
        raise InputError(f"{quoted(spec)} is not in {model.name}'s vocabulary (its tokenizer reads it as "
                         f"{quoted(unk)}): give one token, its tokenizer string or #id")
    raise InputError(f"{quoted(spec)} is {tokens(len(enc.ids))} ({', '.join(map(quoted, enc.labels)) or 'none'}), "
                     "not one: give one token, its tokenizer string or #id")
