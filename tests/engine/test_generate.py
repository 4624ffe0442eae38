"""Generation: greedy SmolLM2 equals transformers' generate(do_sample=False); every cached step
equals a full recompute of the tokens it read (its top-k and the last row of every head); the K
and V bytes of every step equal the calculator's figure for that T; sampling is repeatable by
seed; it stops at the end-of-sequence token unless told to go on, at max_new, or when asked."""

import json

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.computing import generate as G
from attnviz.engine.calc import calc_inputs_from_config, calculate
from attnviz.engine.errors import NoPrediction
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.sampling import choose
from attnviz.engine.computing.trace import Trace
from held_run import HeldRun
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

PROMPT = [3, 1, 4, 1, 5, 9, 2]


@pytest.fixture(scope="module")
def models():
    return {name: load_model(FIXTURES / name) for name in ("gpt2", "llama_gqa", "mistral_window")}


def _recompute(model, ids):  # -> (logprobs [vocab], last rows [n_layer, n_head, T]) from scratch
    r = model.run(ids=np.asarray(ids), trace=Trace(resid=True), request=RunRequest(use_cache=False))
    return log_softmax(model.lm_head().logits(r.trace.resid[-1][-1:])[0]), r.attentions[:, :, -1]


def _kv_bytes(model, T):
    return calculate(calc_inputs_from_config(model.config, seq_len=T, kv_dtype="fp32")).kv_bytes_sequence


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "mistral_window"])
def test_each_cached_step_equals_a_full_recompute_and_the_calculator(models, name):
    model = models[name]
    gen = G.generate(model, ids=PROMPT, max_new=6, rows=True, ignore_eos=True)
    assert len(gen.steps) == 6 and gen.stopped == "max_new"
    seq = PROMPT + gen.new_ids
    for s, step in enumerate(gen.steps):
        T = len(PROMPT) + s
        assert step.T == T
        logprobs, rows = _recompute(model, seq[:T])
        assert step.id == int(np.argmax(logprobs))
        np.testing.assert_allclose(step.top_logprobs, np.sort(logprobs)[::-1][:5], atol=1e-4)
        assert step.rows.shape == (model.config.n_layer, model.config.n_head, T)
        np.testing.assert_allclose(step.rows, rows, atol=1e-5, rtol=0)
        c = model.config
        assert step.kv_bytes == T * c.n_layer * c.n_kv_head * c.d_head * 2 * 4  # every token's K, V
        if c.sliding_window is None:
            assert step.kv_bytes == _kv_bytes(model, T)
        else:  # the calculator counts a window's keys only; the engine keeps every row's
            assert step.kv_bytes >= _kv_bytes(model, T)


def test_smollm2_greedy_equals_transformers_generate(smollm2):
    ref = json.loads((FIXTURES / "smollm2" / "generate.json").read_text())
    for case in ref["cases"][:2]:
        gen = G.generate(smollm2, ids=case["ids"], max_new=case["max_new"])
        assert gen.new_ids == case["new_ids"], case["prompt"]
        assert gen.stopped == ("eos" if case["new_ids"][-1] == 2 else "max_new")
        for s, step in enumerate(gen.steps):
            assert step.kv_bytes == _kv_bytes(smollm2, len(case["ids"]) + s)


def test_smollm2_stops_at_its_end_of_sequence_token_unless_told_to_go_on(smollm2):
    assert G.eos_ids(smollm2) == {2}  # <|im_end|>, from the GGUF's tokenizer.ggml.eos_token_id
    ref = json.loads((FIXTURES / "smollm2" / "generate.json").read_text())
    case = next(c for c in ref["cases"] if c["new_ids"][-1] == 2)
    n = len(case["new_ids"])
    gen = G.generate(smollm2, ids=case["ids"], max_new=n + 3, ignore_eos=True)
    assert gen.new_ids[:n] == case["new_ids"] and len(gen.new_ids) == n + 3


def test_sampling_is_repeatable_by_seed_and_top_p_near_zero_is_greedy(models):
    model = models["llama_gqa"]
    a = G.generate(model, ids=PROMPT, max_new=8, temperature=1.5, seed=7, ignore_eos=True)
    b = G.generate(model, ids=PROMPT, max_new=8, temperature=1.5, seed=7, ignore_eos=True)
    assert a.new_ids == b.new_ids
    others = [G.generate(model, ids=PROMPT, max_new=8, temperature=1.5, seed=s, ignore_eos=True).new_ids
              for s in range(4)]
    assert any(o != a.new_ids for o in others)  # the seed matters
    greedy = G.generate(model, ids=PROMPT, max_new=8, ignore_eos=True)
    tight = G.generate(model, ids=PROMPT, max_new=8, temperature=1.5, top_p=1e-9, seed=3, ignore_eos=True)
    assert tight.new_ids == greedy.new_ids


def test_choose_draws_only_from_the_top_p_set():
    logprobs = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)
    draws = {choose(logprobs, 1.0, 0.75, rng) for _ in range(300)}
    assert draws == {0, 1}  # 0.5 + 0.3 reaches 0.75
    assert choose(logprobs, 0.0, 0.1, rng) == 0


def test_generation_stops_at_eos_or_when_asked(models, monkeypatch):
    model = models["llama_gqa"]
    greedy = G.generate(model, ids=PROMPT, max_new=5, ignore_eos=True).new_ids
    monkeypatch.setattr(G, "eos_ids", lambda m: frozenset({greedy[2]}))
    stop = G.generate(model, ids=PROMPT, max_new=5)
    assert stop.new_ids == greedy[:3] and stop.stopped == "eos"
    asked = []
    gen = G.generate(model, ids=PROMPT, max_new=5, ignore_eos=True, on_step=asked.append,
                     should_stop=lambda: len(asked) >= 2)
    assert gen.new_ids == greedy[:2] and gen.stopped == "stopped" and len(asked) == 2


def test_a_generation_stops_at_the_models_context_with_each_token_its_recomputes(models):
    """Steps run until the model's last position (each step's ids written into one array the loop
    keeps): a prompt 3 short of it gives 3 tokens, each the greedy token of its ids recomputed; a
    prompt that fills it gives the prefill's one."""
    model = models["llama_gqa"]
    L = model.config.max_positions
    prompt = (PROMPT * L)[:L - 3]
    gen = G.generate(model, ids=prompt, max_new=10, ignore_eos=True)
    assert len(gen.new_ids) == 3 and gen.stopped == "context"
    for s, token in enumerate(gen.new_ids):
        assert token == int(np.argmax(_recompute(model, prompt + gen.new_ids[:s])[0]))
    full = G.generate(model, ids=(PROMPT * L)[:L], max_new=4, ignore_eos=True)
    assert len(full.new_ids) == 1 and full.stopped == "context"


def test_bad_settings_and_encoders_are_refused(models):
    with pytest.raises(InputError, match="temperature must be >= 0"):
        G.generate(models["gpt2"], ids=PROMPT, max_new=2, temperature=-1)
    with pytest.raises(InputError, match="top-p must be in"):
        G.generate(models["gpt2"], ids=PROMPT, max_new=2, top_p=0)
    with pytest.raises(NoPrediction):
        G.generate(load_model(FIXTURES / "bert"), ids=PROMPT, max_new=2)


@pytest.mark.parametrize("when", ["before the prompt", "after the first step"])
def test_kv_bytes_are_the_generations_own_while_another_run_holds_the_models_cache(models, when):
    """A run of another text holding the model's cache lock (deterministically: it waits inside
    the lock, tests/held_run.py) changes neither the tokens nor the bytes each step reports: its T
    tokens' K and V, as counted from the config, every step (not a snapshot of the model's cache)."""
    model = models["llama_gqa"]
    c = model.config
    per_token = c.n_layer * c.n_kv_head * c.d_head * 2 * 4  # K and V, float32
    alone = G.generate(model, ids=PROMPT, max_new=6, rows=True, ignore_eos=True)
    other = HeldRun(model, PROMPT[:3] + [7, 7, 7, 7, 7])
    held = []

    def on_step(step):
        if when == "after the first step" and not held:
            held.append(other.start())

    if when == "before the prompt":
        model.run(ids=PROMPT[:4])  # the cache holds another text's run
        other.start()
    try:
        gen = G.generate(model, ids=PROMPT, max_new=6, rows=True, ignore_eos=True, on_step=on_step)
    finally:
        other.end()
    assert gen.new_ids == alone.new_ids and len(gen.steps) == 6
    for s, (step, ref) in enumerate(zip(gen.steps, alone.steps)):
        assert step.T == len(PROMPT) + s
        assert step.kv_bytes == step.T * per_token == ref.kv_bytes, (s, step.kv_bytes)
        np.testing.assert_allclose(step.rows, ref.rows, atol=1e-6, rtol=0)


def test_a_long_generation_gives_the_same_numbers_whatever_the_kv_room(tmp_path, monkeypatch):
    """Past a few hundred tokens the KV buffer's room grows with T (trace.kv_room): the tokens,
    logprobs and rows are those of a fixed room of KV_ROOM, bit for bit, and every step's K and V
    bytes are its T tokens', not the room's."""
    from attnviz.engine.computing import trace
    from tiny import tiny_text_decoder

    model = load_model(tiny_text_decoder(tmp_path / "m", positions=512))
    prompt = np.random.default_rng(2).integers(0, 250, 300).tolist()
    gens = {}
    for share in (trace.ROOM_SHARE, 10**9):  # 10**9: the room is KV_ROOM at every T
        monkeypatch.setattr(trace, "ROOM_SHARE", share)
        gens[share] = G.generate(model, ids=prompt, max_new=150, rows=True, ignore_eos=True)
        model.clear_cache()
    grown, fixed = gens.values()
    assert len(grown.steps) == 150 and grown.new_ids == fixed.new_ids
    c = model.config
    for s, f in zip(grown.steps, fixed.steps):
        np.testing.assert_array_equal(s.top_logprobs, f.top_logprobs)
        np.testing.assert_array_equal(s.rows, f.rows)
        assert s.kv_bytes == f.kv_bytes == s.T * c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    logprobs, rows = _recompute(model, (prompt + grown.new_ids)[:449])  # the last step's T
    np.testing.assert_allclose(grown.steps[-1].top_logprobs, np.sort(logprobs)[::-1][:5], atol=1e-4)
    np.testing.assert_allclose(grown.steps[-1].rows, rows, atol=1e-5, rtol=0)
