"""What heads do, as the window runs it (engine/analysing/effects.py): the run shown under an ablation equals
the same edits run from the first layer, with the layers before it the clean run's; an ablation that
does not fit the text leaves the clean run with a note; the analysis's defaults, its Δ log p and its
DLA add up; typed tokens resolve to one id or are refused in one line; ablation states compare,
describe and round-trip through JSON."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.effects import Ablation, analyse, token_id, window_run
from attnviz.engine.computing.model import token_text
from attnviz.engine.errors import InputError
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.logits import log_softmax
from attnviz.engine.computing.trace import Knockout, ReplaceHead, Trace
from tiny import FIXTURES, tiny_llama
from attnviz.engine.computing.request import RunRequest

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("effects")
    return {"gpt2": load_model(FIXTURES / "gpt2"),
            "llama_gqa": load_model(tiny_llama(root / "gqa", seed=2, n_head=8, n_kv_head=2, n_layer=3))}


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_the_run_shown_under_an_ablation_equals_the_whole_edited_run(models, name, mode):
    model = models[name]
    cfg = model.config
    ab = Ablation(heads=((1, 0), (2 % cfg.n_layer, 1)), mode=mode, knockouts=(((1,), 7, 2),))
    run = window_run(model, "", ids=IDS, ablation=ab, request=RunRequest(values=True))
    clean = forward(cfg, model.weights, np.array(IDS), Trace(z=True, resid=True))
    value = (lambda l, h: 0.0) if mode == "zero" else (lambda l, h: clean.z[l][h].mean(axis=0))
    edits = [ReplaceHead(l, h, value(l, h)) for l, h in ab.heads] + [Knockout(1, 7, 2)]
    whole = forward(cfg, model.weights, np.array(IDS), Trace(z=True, resid=True, edits=edits))
    np.testing.assert_allclose(run.result.attentions, whole.attentions, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run.changed.resid[-1], whole.resid[-1], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(run.result.attentions[0], run.clean.attentions[0])  # reused
    assert run.result.attentions[1][:, 7, 2].max() == 0  # the edge knocked out
    assert run.result.value_norms is not None and run.result.value_norms.shape == run.result.attentions.shape[:3]
    assert not np.array_equal(run.result.attentions, run.clean.attentions)


def test_the_time_shown_under_an_ablation_counts_the_changed_run(models, monkeypatch):
    """The compute time of the run shown is the clean run's and the changed run's together: a clean
    run the KV cache gives whole takes no time, the changed run still does."""
    import time

    from attnviz.engine.analysing import effects

    model = models["llama_gqa"]
    window_run(model, "", ids=IDS)  # (the clean run next comes from the cache)
    real = effects.forward

    def slow(*a, **kw):  # the changed run's forward pass, made to take a known time
        time.sleep(0.05)
        return real(*a, **kw)
    monkeypatch.setattr(effects, "forward", slow)
    run = window_run(model, "", ids=IDS, ablation=Ablation(heads=((1, 0),)))
    assert run.changed is not None and run.clean.reused == len(IDS)
    assert run.result.compute_s >= 0.05


def test_a_clean_run_keeps_what_prediction_reads_and_equals_a_plain_run(models):
    model = models["llama_gqa"]
    run = window_run(model, "", ids=IDS)
    plain = model.run(ids=IDS, request=RunRequest(use_cache=False))
    np.testing.assert_allclose(run.result.attentions, plain.attentions, rtol=1e-6, atol=1e-7)
    assert run.changed is None and run.shown is run.clean and run.clean.resid[-1] is not None


def test_a_window_run_stops_in_either_run_once_asked(models):
    """window_run(request=RunRequest(stop=fn)): asked before each layer of the clean run and then of the changed run;
    True stops it there with Cancelled."""
    from attnviz.engine.errors import Cancelled

    model = models["llama_gqa"]
    n_layer = model.config.n_layer
    ab = Ablation(heads=((1, 0),))  # the changed run starts at layer 1
    for stop_at, where in ((1, "before layer 1"), (n_layer + 1, "before layer 2")):
        asked = []
        model.clear_cache()  # (a cached text would compute no layer of the clean run)
        with pytest.raises(Cancelled, match=where):
            window_run(model, "", ids=IDS, ablation=ab,
                       request=RunRequest(stop=lambda: asked.append(1) or len(asked) > stop_at))
        assert len(asked) == stop_at + 1
    asked = []
    model.clear_cache()
    run = window_run(model, "", ids=IDS, ablation=ab,
                     request=RunRequest(stop=lambda: asked.append(1) and False))
    assert run.changed is not None and len(asked) == n_layer + (n_layer - 1)  # clean, then from 1


def test_a_knockout_past_the_end_of_the_text_leaves_the_clean_run_with_a_note(models):
    model = models["llama_gqa"]
    run = window_run(model, "", ids=IDS[:5], ablation=Ablation(knockouts=(((0,), 8, 3),)))
    assert run.changed is None
    assert "8→3" in run.note and "5 tokens" in run.note


def test_the_analysis_defaults_to_the_top_two_and_its_parts_add_up(models):
    model = models["gpt2"]
    clean_run = window_run(model, "", ids=IDS)
    a = analyse(model, clean_run, position=6)
    assert a.position == 6 and a.changed is None and a.delta_target() is None
    assert (a.target, a.alt) == tuple(int(i) for i in a.clean.top_ids[:2])
    assert abs(a.dla.total() - a.dla.logit_diff) < 1e-3
    assert a.lens.target == a.target and len(a.lens.top_ids) == model.config.n_layer
    run = window_run(model, "", ids=IDS, ablation=Ablation(heads=((0, 1), (1, 0))))
    b = analyse(model, run, position=6)
    logits = model.lm_head().logits(run.changed.resid[-1][6:7])[0]
    assert b.target == a.target  # the clean run's top-1, so the change is measured on it
    np.testing.assert_allclose(b.changed.logprobs, log_softmax(logits), atol=1e-6)
    assert b.delta_target() == pytest.approx(
        float(b.changed.logprobs[b.target] - a.clean.logprobs[a.target]), abs=1e-9)
    assert abs(b.dla.total() - b.dla.logit_diff) < 1e-3
    assert b.dla.logit_diff != pytest.approx(a.dla.logit_diff)


def test_the_dla_alternative_is_the_top_1_or_the_second_when_the_target_is_the_top_1(models):
    model = models["gpt2"]
    run = window_run(model, "", ids=IDS)
    top = [int(i) for i in analyse(model, run, position=6).clean.top_ids[:3]]
    for target, alt in ((top[0], top[1]), (top[1], top[0]), (top[2], top[0])):
        a = analyse(model, run, position=6, target=f"#{target}")
        assert (a.target, a.alt) == (target, alt)
    with pytest.raises(InputError, match=rf"same token \({top[1]}\)"):
        analyse(model, run, position=6, target=f"#{top[1]}", alt=f"#{top[1]}")


def test_typed_tokens_resolve_to_one_id_or_are_refused_in_one_line(models):
    model = load_model("SmolLM2-135M-Instruct")
    the = token_id(model, " The")
    assert token_text(model, the) == "·The" == model.run("a The").labels[-1]  # the token strip's label
    assert token_id(model, "The") == the or token_text(model, token_id(model, "The")) == "The"
    two = token_id(model, "2")  # digits typed in the window are text, "#2" the id 2
    assert token_text(model, two) in ("2", "·2") and token_id(model, "#2") == 2
    assert token_id(model, "ĠThe") == the  # as the vocabulary spells it
    assert token_id(model, f"#{the}") == the
    assert token_text(model, token_id(model, "\n")) == "↵"
    with pytest.raises(InputError, match="tokens"):
        token_id(model, "Plumbrook Plumbrook")
    with pytest.raises(InputError, match="outside the vocabulary"):
        token_id(model, "#999999999")
    with pytest.raises(InputError, match=r"^token id -1 is outside the vocabulary 0\.\.49151$"):
        token_id(model, "#-1")  # an id that is no token, not a text of three tokens
    with pytest.raises(InputError, match="no tokenizer"):
        token_id(models["gpt2"], "the")
    assert token_id(models["gpt2"], "#7") == 7


def test_ablation_states_compare_describe_and_round_trip():
    a = Ablation().toggled(3, 1).toggled(0, 2)
    assert a == Ablation(heads=((0, 2), (3, 1))) and a.active
    assert a.toggled(3, 1).toggled(0, 2) == Ablation() and not Ablation().active
    k = a.with_knockout(range(2, 5), 7, 3)
    assert k.describe() == "zero-ablated L0 H2, L3 H1; knocked out 7→3 in layers 2-4"
    assert k.with_knockout([4, 3, 2], 7, 3) == a
    assert Ablation.from_json(k.to_json(), 6, 4) == k
    with pytest.raises(InputError, match="L3 H1"):
        Ablation.from_json(k.to_json(), 3, 4)
    with pytest.raises(InputError, match="mode"):
        Ablation(mode="half")
