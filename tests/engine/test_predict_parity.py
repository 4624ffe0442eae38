"""Prediction, DLA and zero-ablation against transformers (references made by
tests/make_predict_fixtures.py): top-k ids and log-probs, each head's direct effect from HF's o_proj
input and final-norm input (Gemma 3: and its post-attention norm's), and a head zeroed in HF's o_proj
input, all within 1e-3; the lens's last
layer is the prediction. The textbook model is checked against a direct NumPy computation."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import ablation as A, predict as P
from attnviz.engine.reading import textbook
from attnviz.engine.computing.layers import layer_norm, softmax
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

REF = FIXTURES / "predict"


@pytest.fixture(scope="module")
def models(smollm2):
    return {"gpt2": load_model(FIXTURES / "gpt2"), "llama_gqa": load_model(FIXTURES / "llama_gqa"),
            "gemma3": load_model(FIXTURES / "gemma3"), "smollm2": smollm2}


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "gemma3", "smollm2"])
def test_prediction_dla_and_ablation_match_transformers(models, name):
    ref = np.load(REF / f"{name}.npz")
    model = models[name]
    r = model.run(ids=ref["ids"], trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = model.lm_head()
    k = len(ref["top_ids"])
    pred = P.predict(head, r.trace, k=k)
    assert pred.top_ids.tolist() == ref["top_ids"].tolist()
    np.testing.assert_allclose(pred.top_logprobs, ref["top_logprobs"], atol=1e-3)
    lens = P.logit_lens(head, r.trace)
    assert lens.top_ids[-1] == pred.top_ids[0]
    assert lens.target_logprobs[-1] == pytest.approx(pred.top_logprobs[0], abs=1e-4)
    target, alt = int(ref["target"]), int(ref["alt"])
    dla = P.attribute(model, head, r.trace, None, target, alt)
    np.testing.assert_allclose(dla.heads, ref["dla"], atol=1e-3)
    assert dla.logit_diff == pytest.approx(float(ref["logit_diff"]), abs=1e-3)
    layer, h = int(ref["ablate_layer"]), int(ref["ablate_head"])
    edited = A.run_edited(model, r.trace, A.head_edits(r.trace, [(layer, h)], "zero"))
    ablated = P.predict(head, edited, k=k)
    np.testing.assert_allclose(ablated.logprobs[ref["top_ids"]], ref["ablated_logprobs"], atol=1e-3)
    assert ablated.top_ids[:3].tolist() == ref["ablated_top_ids"][:3].tolist()
    assert np.abs(ablated.logprobs[ref["top_ids"]] - pred.top_logprobs).max() > 1e-4  # it changed


def test_the_textbook_prediction_equals_numpy_by_hand(tmp_path):
    """The textbook model (attention only, MLP zero, tied embedding) computed with plain loops over
    heads: logits at the last token, each head's DLA, and one head zero-ablated."""
    model = load_model(str(textbook.write_textbook(tmp_path / "tb")))
    cfg, w = model.config, model.weights
    ids = model.tokenizer.encode("the cat sat on the mat . the cat").ids
    T = len(ids)

    def by_hand(off=None):  # -> final-norm input [T, d_model], head outputs {(l, h): [T, d_model]}
        x = np.asarray(w.tok_emb[ids], np.float64) + w.pos_emb[:T]
        outs = {}
        for i, lw in enumerate(w.layers):
            hin = layer_norm(x, *lw.norm1, cfg.norm_eps)
            qkv = hin @ lw.w_qkv + lw.b_qkv
            att = np.zeros_like(x)
            for h in range(cfg.n_head):
                sl = slice(h * cfg.d_head, (h + 1) * cfg.d_head)
                q, k, v = (qkv[:, j * cfg.d_model:(j + 1) * cfg.d_model][:, sl] for j in range(3))
                s = q @ k.T / np.sqrt(cfg.d_head)
                s[np.triu_indices(T, 1)] = -np.inf
                o = softmax(s.astype(np.float32)).astype(np.float64) @ v @ lw.w_o[sl]
                outs[i, h] = o
                if (i, h) != off:
                    att += o
            x = x + att + lw.b_o
            mid = layer_norm(x, *lw.norm2, cfg.norm_eps)
            x = x + _act(mid @ lw.w_in + lw.b_in, cfg) @ lw.w_out + lw.b_out
        return x, outs

    x, outs = by_hand()
    g, b = w.head.norm
    xl = x[-1]
    c = xl - xl.mean()
    s = np.sqrt(np.mean(c * c) + cfg.norm_eps)
    logits = np.asarray(w.tok_emb, np.float64) @ (c / s * g + b)
    lp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    r = model.run(ids=ids, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = model.lm_head()
    pred = P.predict(head, r.trace, k=3)
    np.testing.assert_allclose(pred.logprobs, lp, atol=1e-3)
    t, a = int(pred.top_ids[0]), int(pred.top_ids[1])
    u = np.asarray(w.tok_emb[t], np.float64) - w.tok_emb[a]
    d = g * u / s
    d -= d.mean()
    dla = P.attribute(model, head, r.trace, None, t, a)
    for (i, h), o in outs.items():
        assert dla.heads[i, h] == pytest.approx(o[-1] @ d, abs=1e-3)
    x_off, _ = by_hand(off=(1, 0))
    c = x_off[-1] - x_off[-1].mean()
    logits = np.asarray(w.tok_emb, np.float64) @ (c / np.sqrt(np.mean(c * c) + cfg.norm_eps) * g + b)
    lp_off = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    edited = A.run_edited(model, r.trace, A.head_edits(r.trace, [(1, 0)]))
    np.testing.assert_allclose(P.predict(head, edited).logprobs, lp_off, atol=1e-3)


def _act(x, cfg):
    from attnviz.engine.computing.layers import ACTIVATIONS

    return ACTIVATIONS[cfg.activation](x.astype(np.float32)).astype(np.float64)
