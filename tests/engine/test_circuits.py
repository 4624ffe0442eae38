"""Weight-space circuit scores: copying, Q/K/V-composition and ov_top equal a direct dense NumPy
computation from the weights (full [vocab, vocab] OV circuits, [d_model, d_model] products) on
the tiny fixtures; a copy-only head of the textbook model scores copying 1; an encoder has no
copying and refuses ov_top in one line."""

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.analysing import circuits as C
from attnviz.engine.computing.families import FAMILY
from attnviz.engine.computing.layers import layer_norm
from attnviz.engine.reading import textbook
from tiny import FIXTURES

DECODERS = ["gpt2", "llama_gqa", "llama_mqa", "qwen3", "gemma3", "phi3"]


def _dense(model):
    """Per layer, per head: folded W_Q, W_K, W_V [d_model, d_head] and W_O [d_head, d_model],
    written out from the stored weights with one loop per head."""
    cfg = model.config
    fam = FAMILY[cfg.family]
    dh, n, nkv = cfg.d_head, cfg.n_head, cfg.n_kv_head
    out = []
    for i in range(cfg.n_layer):
        lw = model.weights.layers[i]
        w = np.array(lw.w_qkv, dtype=np.float64)
        if fam.pre_norm:
            w = np.diag(lw.norm1[0].astype(np.float64)) @ w
            if fam.norm is layer_norm:
                w = (np.eye(cfg.d_model) - 1.0 / cfg.d_model) @ w  # centring projector
        heads = []
        for h in range(n):
            g = h // (n // nkv)
            wq = w[:, h * dh:(h + 1) * dh]
            wk = w[:, (n + g) * dh:(n + g + 1) * dh]
            wv = w[:, (n + nkv + g) * dh:(n + nkv + g + 1) * dh]
            if fam.qk_norm is not None:
                wq, wk = wq @ np.diag(lw.q_norm), wk @ np.diag(lw.k_norm)
            wo = np.array(lw.w_o, dtype=np.float64)[h * dh:(h + 1) * dh]
            if lw.post_attn_norm is not None:
                wo = wo @ np.diag(lw.post_attn_norm[0])
            heads.append((wq, wk, wv, wo))
        out.append(heads)
    return out


def _dense_embed_unembed(model):  # W_E [vocab, d_model], folded W_U [d_model, vocab]
    cfg = model.config
    fam = FAMILY[cfg.family]
    w_e = np.array(model.weights.tok_emb, dtype=np.float64)
    if fam.embed_scale is not None:
        w_e = w_e * float(np.float32(fam.embed_scale(cfg)))
    h = model.weights.head
    w_u = np.diag(h.norm[0].astype(np.float64)) @ np.array(h.unembed, dtype=np.float64).T
    if len(h.norm) == 2:
        w_u = (np.eye(cfg.d_model) - 1.0 / cfg.d_model) @ w_u
    return w_e, w_u


@pytest.mark.parametrize("name", DECODERS)
def test_copying_equals_the_eigenvalues_of_the_full_ov_circuit(name):
    model = load_model(FIXTURES / name)
    w_e, w_u = _dense_embed_unembed(model)
    got = C.copying_scores(model)
    for i, heads in enumerate(_dense(model)):
        for h, (_, _, wv, wo) in enumerate(heads):
            lam = np.linalg.eigvals(w_e @ wv @ wo @ w_u)  # [vocab] (vocab x vocab, dense)
            assert got[i, h] == pytest.approx(lam.sum().real / np.abs(lam).sum(), abs=1e-6)
    assert np.abs(got).max() > 0.05


@pytest.mark.parametrize("name", DECODERS + ["bert"])
def test_composition_equals_dense_products(name):
    model = load_model(FIXTURES / name)
    got = C.composition_scores(model)
    dense = _dense(model)
    cfg = model.config
    fro = np.linalg.norm
    for l2 in range(cfg.n_layer):
        for h2, (wq, wk, wv, wo) in enumerate(dense[l2]):
            later = {"q": wq @ wk.T, "k": wk @ wq.T, "v": wv @ wo}  # [d_model, d_model] each
            for l1 in range(cfg.n_layer):
                for h1, (_, _, v1, o1) in enumerate(dense[l1]):
                    a = v1 @ o1
                    for mode, b in later.items():
                        want = fro(a @ b) / (fro(a) * fro(b)) if l1 < l2 else 0.0
                        assert got[mode][l1, h1, l2, h2] == pytest.approx(want, rel=1e-4, abs=1e-6), \
                            (mode, l1, h1, l2, h2)
    assert got["q"].max() > 0.01


def test_ov_top_equals_the_dense_row():
    model = load_model(FIXTURES / "gpt2")
    w_e, w_u = _dense_embed_unembed(model)
    _, _, wv, wo = _dense(model)[1][2]
    row = w_e[7] @ wv @ wo @ w_u  # [vocab]
    top = C.ov_top(model, 1, 2, 7, k=5)
    assert [i for i, _, _ in top] == np.argsort(-row)[:5].tolist()
    np.testing.assert_allclose([v for _, _, v in top], np.sort(row)[::-1][:5], rtol=1e-4, atol=1e-5)


def _copying_textbook(tmp_path):
    """The textbook model with its uniform head L1 H2 given a copying OV circuit: its value reads
    the token block and its output writes the same token back (+1 and the -1 mirror)."""
    from safetensors.numpy import save_file

    folder = textbook.write_textbook(tmp_path / "tb")
    w = textbook.build_weights()
    V, _, dh, d = textbook.dims()
    qkv = w["h.1.attn.c_attn.weight"]
    wo = w["h.1.attn.c_proj.weight"]
    cols = 2 * dh + np.arange(V)  # head 2's first V dims
    qkv[np.arange(V), 2 * d + cols] = 1.0  # W_V: token one-hot in
    wo[cols, np.arange(V)] = 1.0  # W_O: the same token out, and its mirror
    wo[cols, V + np.arange(V)] = -1.0
    save_file(w, str(folder / "model.safetensors"), metadata={"format": "np"})
    return load_model(folder)


def test_a_copy_only_textbook_head_scores_copying_one(tmp_path):
    model = _copying_textbook(tmp_path)
    c = C.copying_scores(model)
    assert c[1, 2] == pytest.approx(1.0, abs=1e-6)
    assert np.isnan(c[1, 0])  # no value weights: W_E W_V W_O W_U is zero, its score 0 / 0
    assert C.circuits(model).copying is not None  # (one head copies: the map is there)
    top = C.ov_top(model, 1, 2, textbook.VOCAB.index("cat"), k=1)
    assert top[0][0] == textbook.VOCAB.index("cat")
    comp = C.composition_scores(model)
    assert comp["k"][0, 0, 1, 0] > 0.05  # the induction key reads the previous-token head
    assert np.isnan(comp["k"][0, 2, 1, 0])  # (L0 H2 writes nothing: 0 / 0, no score)


def test_an_encoder_has_no_copying_and_refuses_ov_top_in_one_line():
    model = load_model(FIXTURES / "bert")
    c = C.circuits(model)
    assert c.copying is None and "encoder" in c.no_copying
    assert c.composition["k"].shape == (model.config.n_layer, model.config.n_head) * 2
    with pytest.raises(InputError, match="read through the model's unembedding") as e:
        C.ov_top(model, 0, 0, 5)
    assert "\n" not in str(e.value)


def test_ov_top_checks_its_head_and_token():
    model = load_model(FIXTURES / "gpt2")
    with pytest.raises(InputError, match="head 2.0 is outside"):
        C.ov_top(model, 2, 0, 1)
    with pytest.raises(InputError, match="token id 999 is outside the vocabulary"):
        C.ov_top(model, 0, 0, 999)


def test_progress_counts_each_layer_twice_and_can_stop_the_scores():
    model = load_model(FIXTURES / DECODERS[0])
    L = model.config.n_layer
    seen = []
    got = C.circuits(model, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 2 * L) for i in range(1, 2 * L + 1)]  # copying's layers, then composition's
    ref = C.circuits(model)
    np.testing.assert_array_equal(got.copying, ref.copying)
    for mode in C.MODES:
        np.testing.assert_array_equal(got.composition[mode], ref.composition[mode])

    class Stop(Exception):
        pass

    def stop(done, _total):
        if done == L + 1:  # the window's job: stale once another model is loaded
            raise Stop
    with pytest.raises(Stop):
        C.circuits(model, progress=stop)


@pytest.mark.parametrize("d, block", [(13, 5), (13, 13), (12, 4), (7, 64)])
def test_packed_grams_give_the_inner_product_of_the_dense_grams(d, block):
    rng = np.random.default_rng(d + block)
    p, s = rng.standard_normal((2, 3, d, 4))  # [n, d, m] factors of X = P Pᵀ and Y = S Sᵀ
    layout = C.gram_layout(d, block)
    got = C.packed_grams(p, layout, twice=True) @ C.packed_grams(s, layout).T  # [n, n]
    want = np.einsum("aij,bij->ab", p @ p.transpose(0, 2, 1), s @ s.transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_model_whose_every_ov_circuit_is_zero_has_no_copying_and_no_top_tokens():
    """The textbook model's heads write nothing through W_E W_V W_O W_U: each copying score is
    0 / 0 (not +0.00), so the map is absent with the reason, and no token ranks above another."""
    model = load_model(textbook.TEXTBOOK_NAME)
    assert np.isnan(C.copying_scores(model)).all()
    c = C.circuits(model)
    assert c.copying is None and c.no_copying == C.ZERO_OV
    assert C.ov_top(model, 1, 0, textbook.VOCAB.index("cat")) == []
    assert C.copying_numbers(np.array([[np.nan, 0.5]])) == [[None, 0.5]]


def test_strongest_composition_pairs_are_earlier_layer_into_later_layer_only():
    """No self pair and no pair within one layer (their 0 is no score), for the whole model and
    into one head (the Circuits tab's partners)."""
    model = load_model(FIXTURES / "gpt2")  # 2 layers of 4 heads: 16 defined pairs
    comp = C.composition_scores(model)["q"]
    every = C.strongest(comp, 100)
    assert len(every) == 16 and all(l1 < l2 for l1, _, l2, _, _ in every)
    assert [v for *_, v in every] == sorted((v for *_, v in every), reverse=True)
    assert C.strongest(comp, 5, into=(1, 2)) == [(0, h, 1, 2, comp[0, h, 1, 2]) for h in
                                                 np.argsort(-comp[0, :, 1, 2], kind="stable")]
    assert C.strongest(comp, 5, into=(0, 1)) == []  # the first layer reads no earlier head
    assert C.strongest(np.zeros((1, 4, 1, 4)), 5) == []
    assert C.undefined(comp) == (0, 16)


def test_a_composition_with_a_zero_factor_is_undefined_and_not_ranked():
    """The textbook model: most of its heads have zero W_V W_O (all but L0 H0), L1 H1 a zero W_Q
    and L1 H2 zero W_Q and W_K, so those pairs' ‖A B‖ / (‖A‖ ‖B‖) is 0 / 0: NaN, never a 0.000
    ranked among the partners; the defined pairs keep their scores."""
    model = load_model(textbook.TEXTBOOK_NAME)
    comp = C.composition_scores(model)
    m = [C.head_matrices(model, layer) for layer in range(2)]
    for mode in C.MODES:
        for h1 in range(3):
            for h2 in range(3):
                a = m[0].v[h1] @ m[0].o[h1]
                b = {"q": m[1].q[h2] @ m[1].k[h2].T, "k": m[1].k[h2] @ m[1].q[h2].T,
                     "v": m[1].v[h2] @ m[1].o[h2]}[mode]
                zero = not a.any() or not b.any()
                assert np.isnan(comp[mode][0, h1, 1, h2]) == zero, (mode, h1, h2)
        assert (comp[mode][~C.composing(2, 3)] == 0).all()  # (no composing pair: 0 as before)
    assert comp["k"][0, 0, 1, 0] == pytest.approx(0.109, abs=1e-3)
    assert C.strongest(comp["k"], 5) == [(0, 0, 1, 0, comp["k"][0, 0, 1, 0])]
    assert C.strongest(comp["v"], 5) == [] and C.undefined(comp["v"]) == (9, 9)
    assert C.undefined(comp["q"], into=(1, 0)) == (2, 3)
    nums = C.composition_numbers(comp)
    assert nums["v"][0][1][1][2] is None and nums["k"][0][0][1][0] == comp["k"][0, 0, 1, 0]
    assert nums["k"][1][0][0][0] == 0.0  # (no composing pair: 0 as before)
