"""The calculator's FLOPs of one decode step: each kind of preset against a count by hand, and tiny
decode steps in NumPy whose matrix products are counted as they run (MLA: absorbed against naive)."""

import numpy as np
import pytest

from attnviz.engine.calc import MLA, calculate
from attnviz.engine.calc.presets import get_preset
from tests.flops_by_hand import KINDS, expected


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_preset_matches_the_count_by_hand(kind):
    pid = KINDS[kind]
    want = expected(pid)
    fl = calculate(get_preset(pid).inputs).flops
    got = {"projections": fl["projections_per_token"], "qk": fl["qk_per_token"],
           "av": fl["av_per_token"], "total": fl["attention_per_token"],
           "softmax": fl["softmax_elements_per_token"]}
    assert got == {k: want[k] for k in got}, pid
    hv = fl["heads_vs_one_head"]
    if want["one_head_matmul"] is None:
        assert hv is None and "not shown for MLA" in fl["heads_vs_one_head_absent"]
        assert "absorbed" in fl["mla_form"]
    else:
        assert (hv["n_heads_matmul_flops"], hv["one_head_matmul_flops"]) == (
            want["n_heads_matmul"], want["one_head_matmul"])
        assert hv["ratio"] == want["n_heads_matmul"] / want["one_head_matmul"]
        # narrow heads cost what one wide head does; shared K/V heads cost less
        assert (hv["ratio"] == 1.0) == (kind == "MHA")


class Counter:
    """Matrix products that count their FLOPs (2 per multiply-add) under a name."""

    def __init__(self):
        self.flops = {"projections": 0, "qk": 0, "av": 0}

    def mm(self, part, a, b):
        m = a.shape[0] if a.ndim == 2 else 1
        n = b.shape[1] if b.ndim == 2 else 1
        self.flops[part] += 2 * m * a.shape[-1] * n
        return a @ b


def softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def test_a_counted_gqa_decode_step_matches():
    rng = np.random.default_rng(0)
    D, H, K, dh, T, L = 24, 6, 2, 5, 9, 3  # n_head·d_head = 30 ≠ d_model
    c = Counter()
    for _ in range(L):
        x = rng.standard_normal(D)
        W_Q, W_K, W_V = (rng.standard_normal((n * dh, D)) for n in (H, K, K))
        W_O = rng.standard_normal((D, H * dh))
        q = c.mm("projections", W_Q, x).reshape(H, dh)
        k_new = c.mm("projections", W_K, x).reshape(K, dh)
        v_new = c.mm("projections", W_V, x).reshape(K, dh)
        keys = np.concatenate([rng.standard_normal((T - 1, K, dh)), k_new[None]])
        values = np.concatenate([rng.standard_normal((T - 1, K, dh)), v_new[None]])
        heads = []
        for h in range(H):
            g = h // (H // K)
            w = softmax(c.mm("qk", keys[:, g], q[h]))
            heads.append(c.mm("av", w, values[:, g]))
        c.mm("projections", W_O, np.concatenate(heads))
    fl = calculate(d_model=D, n_head=H, n_kv_head=K, d_head=dh, n_layer=L, seq_len=T).flops
    assert (fl["projections_per_token"], fl["qk_per_token"], fl["av_per_token"]) == (
        c.flops["projections"], c.flops["qk"], c.flops["av"])
    assert fl["attention_per_token"] == sum(c.flops.values())


def test_a_counted_absorbed_mla_decode_step_matches_and_equals_the_naive_one():
    """DeepSeek's absorbed decode (W_UK folded into q, W_UV after the mix, the latent cached)
    gives the naive form's output; the calculator counts the absorbed one's products."""
    rng = np.random.default_rng(1)
    D, H, ql, r, rope, nope, dv, T = 16, 4, 6, 4, 2, 3, 5, 7
    W_DQ = rng.standard_normal((ql, D))
    W_UQ = rng.standard_normal((H * (nope + rope), ql))
    W_DKV = rng.standard_normal((r + rope, D))
    W_UKV = rng.standard_normal((H * (nope + dv), r)).reshape(H, nope + dv, r)
    W_UK, W_UV = W_UKV[:, :nope], W_UKV[:, nope:]
    W_O = rng.standard_normal((D, H * dv))
    past = rng.standard_normal((T - 1, r + rope))  # the cached latent and rope key
    x = rng.standard_normal(D)

    c = Counter()
    q = c.mm("projections", W_UQ, c.mm("projections", W_DQ, x)).reshape(H, nope + rope)
    cache = np.concatenate([past, c.mm("projections", W_DKV, x)[None]])
    latent, k_rope = cache[:, :r], cache[:, r:]
    heads = []
    for h in range(H):
        q_latent = c.mm("projections", q[h, :nope], W_UK[h])  # [nope] x [nope, r]
        s = c.mm("qk", latent, q_latent) + c.mm("qk", k_rope, q[h, nope:])
        mixed = c.mm("av", softmax(s), latent)
        heads.append(c.mm("projections", W_UV[h], mixed))
    y = c.mm("projections", W_O, np.concatenate(heads))

    naive = []  # K and V of every token rebuilt per head, uncounted
    for h in range(H):
        k = np.concatenate([latent @ W_UK[h].T, k_rope], axis=1)
        naive.append(softmax(k @ q[h]) @ (latent @ W_UV[h].T))
    np.testing.assert_allclose(y, W_O @ np.concatenate(naive), rtol=1e-10)

    mla = MLA(kv_lora_rank=r, qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=dv,
              q_lora_rank=ql)
    fl = calculate(d_model=D, n_head=H, n_layer=1, seq_len=T, mla=mla).flops
    assert (fl["projections_per_token"], fl["qk_per_token"], fl["av_per_token"]) == (
        c.flops["projections"], c.flops["qk"], c.flops["av"])
    assert (fl["qk_width"], fl["av_width"]) == (r + rope, r)
