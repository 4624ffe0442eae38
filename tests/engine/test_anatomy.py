"""The anatomy's data (engine/analysing/anatomy.py): the layer inputs the forward pass keeps only when
asked, and every stage recomputed from them checked against the engine's own patterns and a naive
per-head loop on the checkpoint's tensors. No Qt."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.anatomy import cost_totals, head_costs, head_dim_note, layer_anatomy
from attnviz.engine.computing.layers import apply_rope, rope_cos_sin
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def _naive_layer(cfg, lw, x, layer):
    """Per head, by hand: W_Q's column slice h, the KV head h // n_group, softmax, W_O's rows."""
    dh, g = cfg.d_head, cfg.n_group
    T = x.shape[0]
    dq, dkv = cfg.n_head * dh, cfg.n_kv_head * dh
    w = lw.w_qkv.astype(np.float64)
    b = np.zeros(w.shape[1]) if lw.b_qkv is None else lw.b_qkv.astype(np.float64)
    heads, pats = [], []
    for h in range(cfg.n_head):
        kv = h // g
        cq = slice(h * dh, (h + 1) * dh)
        ck = slice(dq + kv * dh, dq + (kv + 1) * dh)
        cv = slice(dq + dkv + kv * dh, dq + dkv + (kv + 1) * dh)
        q, k, v = (x @ w[:, c] + b[c] for c in (cq, ck, cv))
        if cfg.rope_theta:
            cos, sin = rope_cos_sin(np.arange(T), dh, cfg.rope_theta)
            q, k = apply_rope(q[None], cos, sin)[0], apply_rope(k[None], cos, sin)[0]
        s = q @ k.T / np.sqrt(dh) / ((layer + 1) if cfg.attn_scale_by_layer else 1)
        if cfg.causal:
            s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        pats.append(a)
        heads.append(a @ v)
    concat = np.concatenate(heads, axis=1)
    out = concat @ lw.w_o.astype(np.float64) + (0 if lw.b_o is None else lw.b_o)
    return np.array(pats), np.array(heads), out


@pytest.mark.parametrize("name", ["llama_gqa", "llama_mqa", "llama_headdim", "gpt2", "bert", "qwen2"])
def test_every_stage_equals_a_naive_per_head_loop(name):
    model = load_model(FIXTURES / name)
    r = model.run(ids=IDS, request=RunRequest(inputs=True))
    cfg = model.config
    assert len(r.layer_inputs) == cfg.n_layer
    for layer in range(cfg.n_layer):  # the last layer too: its W_O output exists here
        an = layer_anatomy(cfg, model.weights, r.layer_inputs[layer], layer)
        np.testing.assert_allclose(an.pattern, r.attentions[layer], atol=2e-6)  # = the grid's
        pats, heads, out = _naive_layer(cfg, model.weights.layers[layer], r.layer_inputs[layer], layer)
        np.testing.assert_allclose(an.pattern, pats, atol=1e-5)
        np.testing.assert_allclose(an.head_out, heads, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(an.out, out, rtol=1e-4, atol=1e-5)
        T, dh = len(IDS), cfg.d_head
        assert an.w_q.shape == (cfg.d_model, cfg.n_head * dh)
        assert an.w_k.shape == an.w_v.shape == (cfg.d_model, cfg.n_kv_head * dh)
        assert an.concat.shape == (T, cfg.n_head * dh) and an.out.shape == (T, cfg.d_model)
        assert an.w_o.shape == (cfg.n_head * dh, cfg.d_model)


def test_the_default_path_keeps_no_layer_inputs_and_the_cache_gives_the_same_ones():
    model = load_model(FIXTURES / "llama_gqa")
    assert model.run(ids=IDS[:5]).layer_inputs is None
    cached = model.run(ids=IDS, request=RunRequest(inputs=True))  # the cache had no inputs: computed in full
    assert cached.cache_reused == 0
    longer = model.run(ids=IDS + [7, 8], request=RunRequest(inputs=True))  # now the prefix is reused
    assert longer.cache_reused == len(IDS)
    fresh = load_model(FIXTURES / "llama_gqa").run(ids=IDS + [7, 8],
                                                   request=RunRequest(inputs=True))
    for a, b in zip(longer.layer_inputs, fresh.layer_inputs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    same = model.run(ids=IDS + [7, 8], request=RunRequest(inputs=True))  # nothing new: from the cache
    assert same.cache_reused == len(IDS) + 2
    shorter = model.run(ids=IDS[:4], request=RunRequest(inputs=True))  # a prefix: the cache is cut
    for a, b in zip(shorter.layer_inputs, fresh.layer_inputs):
        np.testing.assert_allclose(a, b[:4], rtol=1e-5, atol=1e-6)


def test_minilm_anatomy_shows_the_grids_own_pattern(minilm):
    r = minilm.run("The keys to the cabinet are on the table.", request=RunRequest(inputs=True))
    an = layer_anatomy(minilm.config, minilm.weights, r.layer_inputs[2], 2, r.attentions[2])
    assert np.shares_memory(an.pattern, r.attentions)  # the grid's own data, not a copy
    again = layer_anatomy(minilm.config, minilm.weights, r.layer_inputs[2], 2)
    np.testing.assert_allclose(again.pattern, r.attentions[2], atol=2e-6)
    assert an.w_q.shape == (384, 384) and an.q.shape == (12, len(r.tokens), 32)


def test_smollm2_weights_drawn_are_the_unpermuted_ones_the_engine_uses(smollm2):
    """GGUF: the W_Q / W_K the anatomy draws are the engine's (llama.cpp's row permutation undone):
    the pattern recomputed from them equals the forward pass's, which matches transformers."""
    r = smollm2.run("Dr Zorblax met Mrs Okkadine. Later, Dr Zorblax thanked Mrs Okkadine.",
                    request=RunRequest(inputs=True))
    cfg = smollm2.config
    for layer in (0, cfg.n_layer - 1):
        an = layer_anatomy(cfg, smollm2.weights, r.layer_inputs[layer], layer)
        np.testing.assert_allclose(an.pattern, r.attentions[layer], atol=5e-6)
        lw = smollm2.weights.layers[layer]
        assert np.shares_memory(an.w_q, lw.w_qkv) and np.shares_memory(an.w_o, lw.w_o)
        assert an.w_k.shape == (576, 3 * 64) and np.isfinite(an.out).all()


def test_costs_all_heads_equal_one_full_width_head_in_the_projections():
    cfg = load_model(FIXTURES / "bert").config  # plain MHA, n_head * d_head = d_model
    T = 10
    rows = {r.what: r for r in head_costs(cfg, T)}
    for what in ("W_Q", "W_O", "Q, K, V projections", "q\u00b7k\u1d40, all T\u00b2 pairs",
                 "weights\u00b7V, all T\u00b2 pairs"):
        assert rows[what].all_heads == rows[what].full_head and rows[what].note == "equal"
        assert rows[what].all_heads == cfg.n_head * rows[what].per_head
    soft = rows["softmax"]
    assert soft.all_heads == cfg.n_head * soft.full_head and "differs" not in soft.note
    assert soft.note.startswith(f"{cfg.n_head} patterns") and soft.unit == "scores"
    d = cfg.d_model
    assert rows["Q, K, V projections"].all_heads == 2 * T * d * 3 * d
    assert head_dim_note(cfg) is None
    params, full = cost_totals(head_costs(cfg, T), "params")
    assert params == full == 4 * d * d + 4 * d  # BERT has Q/K/V and W_O biases
    assert rows["W_O bias (no head's)"].per_head == 0  # the layer's bias: no head's share


def test_anatomy_and_calculator_count_the_same_attention_parameters(minilm, smollm2):
    """One definition in both places: W_Q, W_K, W_V, W_O and their biases (MiniLM: 591,360)."""
    from attnviz.engine.calc import calc_inputs_from_config, calculate

    for model in (minilm, smollm2):
        params, _ = cost_totals(head_costs(model.config, 5), "params")
        calc = calculate(calc_inputs_from_config(model.config.raw, seq_len=5))
        assert params == calc.attn_params_per_layer, model.name
    assert cost_totals(head_costs(minilm.config, 5), "params")[0] == 591_360


def test_costs_say_where_gqa_and_head_dim_differ():
    gqa = load_model(FIXTURES / "llama_gqa").config
    rows = {r.what: r for r in head_costs(gqa, 7)}
    kv = rows["W_K + W_V"]
    assert kv.all_heads == 2 * gqa.d_model * gqa.n_kv_head * gqa.d_head < kv.full_head
    assert kv.note == f"GQA: K, V {gqa.n_kv_head * gqa.d_head} wide"
    hd = load_model(FIXTURES / "llama_headdim").config
    note = head_dim_note(hd)
    assert "head_dim = 16" in note and "48 / 4 = 12" in note
    assert {r.what: r for r in head_costs(hd, 5)}["W_Q"].note == "heads 64 wide, d_model 48"


STAGES = ("project_qkv", "attend", "head_outputs", "attention_output")


def test_the_anatomy_is_made_of_the_forward_passs_own_stages(monkeypatch):
    """The anatomy keeps what self_attention drops (q, head outputs, concat) by calling the stages
    self_attention is made of: each stage is called by both, and what the anatomy shows is what
    those calls returned (no copy of its own)."""
    from attnviz.engine.analysing import anatomy
    from attnviz.engine.computing import families

    returned = {}

    def spy(module, name):
        real = getattr(families, name)

        def stage(*a, **k):
            out = real(*a, **k)
            returned.setdefault((module.__name__, name), []).append(out)
            return out
        monkeypatch.setattr(module, name, stage)

    for module in (families, anatomy):
        for name in STAGES:
            spy(module, name)
    model = load_model(FIXTURES / "llama_gqa")
    r = model.run(ids=IDS, request=RunRequest(inputs=True, use_cache=False))
    assert all(returned.get((families.__name__, name)) for name in STAGES)  # the forward pass's stages
    an = layer_anatomy(model.config, model.weights, r.layer_inputs[1], 1)
    mine = {name: returned.pop((anatomy.__name__, name)) for name in STAGES}
    assert all(len(calls) == 1 for calls in mine.values())
    q, k, v = mine["project_qkv"][0]
    np.testing.assert_array_equal(an.q, q)
    np.testing.assert_array_equal(an.k, k)
    np.testing.assert_array_equal(an.v, v)
    assert an.pattern is mine["attend"][0] and an.head_out is mine["head_outputs"][0]
    concat, out = mine["attention_output"][0]
    assert an.concat is concat and an.out is out
    np.testing.assert_allclose(an.pattern, r.attentions[1], atol=2e-6)  # = the grid's


def test_one_heads_costs_are_the_layers_shared_evenly_by_its_query_heads(smollm2):
    """A query head's column is the layer's cost over n_head, exactly (a fraction where n_head does
    not divide it: the figure writes bytes to the nearest byte): under GQA its share of a KV head's
    K and V is 1 / n_group of them, not 1 / n_group of d_head rounded down first and multiplied by T
    after (SmolLM2, 46 tokens: 30.7 KiB, not 30.5 KiB)."""
    cfg = smollm2.config
    assert cfg.n_group > 1 and (2 * cfg.d_head) % cfg.n_group
    for T in (1, 7, 46):
        for r in head_costs(cfg, T):
            if r.what != "W_O bias (no head's)":
                assert r.per_head == pytest.approx(r.all_heads / cfg.n_head, rel=1e-12), (r.what, T)


def _flops_by_hand(cfg, T, layer):
    """One layer's attention over T tokens, multiply-adds counted query by query from the mask rules
    (an encoder's query reads all T keys, a causal one keys 0..t, a window the last `window` of
    those), 2 FLOPs each: {row: FLOPs of all heads}."""
    d, nh, nkv, dh = cfg.d_model, cfg.n_head, cfg.n_kv_head, cfg.d_head
    window = cfg.window(layer) if cfg.causal else None
    reads = 0
    for t in range(T):
        first = 0 if window is None else max(0, t - window + 1)
        reads += len(range(T)) if not cfg.causal else len(range(first, t + 1))
    return {"proj": 2 * T * d * (nh + 2 * nkv) * dh, "qk": 2 * nh * reads * dh,
            "av": 2 * nh * reads * dh, "wo": 2 * T * nh * dh * d, "scores": nh * reads}


def _shown_flops(cfg, T, layer):
    rows = head_costs(cfg, T, layer)
    by = {r.what.split(", ")[0] if r.unit == "FLOPs" and "\u00b7" in r.what else r.what: r for r in rows}
    return {"proj": by["Q, K, V projections"].all_heads, "qk": by["q\u00b7k\u1d40"].all_heads,
            "av": by["weights\u00b7V"].all_heads, "wo": by["output projection W_O"].all_heads,
            "scores": by["softmax"].all_heads}, rows


def test_the_layers_flops_are_the_multiply_adds_its_mask_lets_it_do(minilm, smollm2):
    """Counted by hand for 10 tokens, 2 FLOPs a multiply-add, the Calculator's convention.
    MiniLM (encoder, d 384, 12 heads of 32): projections 2*10*384*1152 = 8,847,360; q.k^T and
    weights.V each 2*100*384 = 76,800 (all 100 pairs); W_O 2*10*384*384 = 2,949,120.
    SmolLM2 (causal GQA, d 576, 9 query heads and 3 KV heads of 64): projections 2*10*576*960 =
    11,059,200; q.k^T and weights.V each 2*55*576 = 63,360 (55 = 10*11/2 causal pairs, not 100);
    W_O 2*10*576*576 = 6,635,520. The FLOPs total is those four rows, the softmax not among them."""
    minilm_by_hand = {"proj": 8_847_360, "qk": 76_800, "av": 76_800, "wo": 2_949_120, "scores": 1200}
    smollm2_by_hand = {"proj": 11_059_200, "qk": 63_360, "av": 63_360, "wo": 6_635_520, "scores": 495}
    for model, hand, pairs in ((minilm, minilm_by_hand, "all T\u00b2 pairs"),
                               (smollm2, smollm2_by_hand, "causal: T(T+1)/2 pairs")):
        assert _flops_by_hand(model.config, 10, 0) == hand, model.name
        shown, rows = _shown_flops(model.config, 10, 0)
        assert shown == hand, model.name
        assert {r.what for r in rows} >= {f"q\u00b7k\u1d40, {pairs}", f"weights\u00b7V, {pairs}"}
        flops = sum(hand[k] for k in ("proj", "qk", "av", "wo"))
        assert cost_totals(rows, "FLOPs")[0] == flops, model.name
    assert cost_totals(head_costs(smollm2.config, 10), "FLOPs")[0] == 17_821_440


@pytest.mark.parametrize("fixture", ["bert", "llama_gqa", "llama_mqa", "llama_headdim", "mistral_window",
                                     "gemma3"])
def test_the_layers_flops_match_a_count_by_hand_and_the_patterns_own_reads(fixture):
    """Every layer of the tiny fixtures, T below and above a sliding window: the shown FLOPs equal the
    count by hand, and the pairs they count are the pattern's entries the mask leaves open (its
    nonzero weights), so a window or the causal triangle is counted as the engine attends."""
    model = load_model(FIXTURES / fixture)
    cfg = model.config
    for T in (3, 9):
        r = model.run(ids=list(range(1, T + 1)), request=RunRequest(inputs=True, use_cache=False))
        for layer in range(cfg.n_layer):
            hand = _flops_by_hand(cfg, T, layer)
            assert _shown_flops(cfg, T, layer)[0] == hand, (fixture, T, layer)
            assert int(np.count_nonzero(r.attentions[layer])) == hand["scores"], (fixture, T, layer)


def test_an_encoders_k_and_v_per_token_are_not_called_a_cache(minilm, smollm2):
    """An encoder reads its whole text at once and caches no keys and values: its row says so,
    while a causal model's is its KV cache per token (float32 K and V, one layer)."""
    names = {m.name: [r for r in head_costs(m.config, 10) if r.unit == "bytes"][-1] for m in (minilm, smollm2)}
    enc, dec = names[minilm.name], names[smollm2.name]
    assert enc.what == "K, V per token (an encoder caches none)" and enc.all_heads == 4 * 2 * 384
    assert dec.what == "KV cache per token" and dec.all_heads == 4 * 2 * 3 * 64
