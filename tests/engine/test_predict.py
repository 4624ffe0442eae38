"""Prediction, the logit lens and direct logit attribution on the trace: the top-k equal a direct
computation from the weights, the lens's last layer is the prediction, each family's parts add up
to the logit difference, a model without a head says why in one line; ablation and knockout
recompute from the changed layer, and the scan ranks heads by the loss they save."""

import json
import shutil

import numpy as np
import pytest

from attnviz.engine import InputError, load_model
from attnviz.engine.analysing import ablation as A, predict as P
from attnviz.engine.reading import textbook
from attnviz.engine.errors import Cancelled, NoPrediction
from attnviz.engine.computing.families import forward
from attnviz.engine.computing.logits import VOCAB_BLOCK
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.trace import Knockout, ReplaceHead
from tiny import FIXTURES, llama_config, llama_tensors, write_model
from attnviz.engine.computing.request import RunRequest

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
CAUSAL = ["gpt2", "llama_gqa", "qwen2", "llama_mqa", "mistral", "llama_headdim", "qwen3", "phi3", "gemma3",
          "gemma3_old"]


@pytest.fixture(scope="module")
def models():
    return {name: load_model(FIXTURES / name) for name in CAUSAL}


def _by_hand_logits(model, x):  # final-norm input [d_model] -> logits [vocab], float64, from the weights
    h = model.weights.head
    x = x.astype(np.float64)
    if len(h.norm) == 2:  # LayerNorm
        c = x - x.mean()
        y = c / np.sqrt(np.mean(c * c) + model.config.norm_eps) * h.norm[0] + h.norm[1]
    else:
        y = x / np.sqrt(np.mean(x * x) + model.config.norm_eps) * h.norm[0]
    return np.asarray(h.unembed, dtype=np.float64) @ y


@pytest.mark.parametrize("name", CAUSAL)
def test_top_k_and_lens_equal_a_direct_computation(models, name):
    model = models[name]
    r = model.run(ids=IDS, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = model.lm_head()
    pred = P.predict(head, r.trace, position=-3, k=5)
    assert pred.position == len(IDS) - 3
    logits = _by_hand_logits(model, r.trace.resid[-1][pred.position])
    want = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    assert pred.top_ids.tolist() == np.argsort(-want)[:5].tolist()
    np.testing.assert_allclose(pred.top_logprobs, np.sort(want)[::-1][:5], atol=1e-4)
    lens = P.logit_lens(head, r.trace, position=-3)
    assert lens.top_ids[-1] == pred.top_ids[0] and lens.target == pred.top_ids[0]
    np.testing.assert_allclose(lens.target_logprobs[-1], pred.top_logprobs[0], atol=1e-5)
    assert lens.target_ranks[-1] == 0 and len(lens.top_ids) == model.config.n_layer
    grid_ids, grid_lp = P.lens_grid(head, r.trace)
    assert grid_ids.shape == (model.config.n_layer, len(IDS))
    assert grid_ids[-1, pred.position] == pred.top_ids[0]
    asked = []  # stop(), asked before each layer: False changes nothing, True stops the grid
    same = P.lens_grid(head, r.trace, stop=lambda: asked.append(1) and False)
    assert len(asked) == model.config.n_layer and np.array_equal(same[0], grid_ids)
    with pytest.raises(Cancelled, match="before layer 0"):
        P.lens_grid(head, r.trace, stop=lambda: True)


@pytest.mark.parametrize("name", CAUSAL)
def test_dla_parts_add_up_to_the_logit_difference(models, name):
    model = models[name]
    r = model.run(ids=IDS, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = model.lm_head()
    pred = P.predict(head, r.trace, k=3)
    target, alt = int(pred.top_ids[0]), int(pred.top_ids[2])
    a = P.attribute(model, head, r.trace, None, target, alt)
    logits = _by_hand_logits(model, r.trace.resid[-1][-1])
    assert a.logit_diff == pytest.approx(logits[target] - logits[alt], abs=1e-4)
    assert a.total() == pytest.approx(a.logit_diff, abs=1e-3)
    assert a.heads.shape == (model.config.n_layer, model.config.n_head)
    assert np.abs(a.heads).max() > 1e-3 and np.abs(a.mlp).max() > 1e-3  # not all zero
    if model.weights.layers[0].b_o is None and len(head.norm) == 1:
        assert a.bias == 0.0  # no attention output bias, RMSNorm: nothing for the bias row


def test_dla_of_one_head_is_its_own_output_through_the_frozen_norm(models):
    """A head's DLA equals what removing exactly its direct path would change, with the norm's scale
    frozen: (z_h W_O[h]) · (g / rms) · (W_U[t] - W_U[a])."""
    model = models["llama_gqa"]
    cfg, w = model.config, model.weights
    r = model.run(ids=IDS, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = model.lm_head()
    a = P.attribute(model, head, r.trace, -1, 7, 11)
    layer, h = 1, 3
    x = r.trace.resid[-1][-1].astype(np.float64)
    part = r.trace.z[layer][h, -1] @ w.layers[layer].w_o[h * cfg.d_head:(h + 1) * cfg.d_head]
    u = np.asarray(head.w_u[7], np.float64) - head.w_u[11]
    want = part @ (head.norm[0] / np.sqrt(np.mean(x * x) + cfg.norm_eps) * u)
    assert a.heads[layer, h] == pytest.approx(want, abs=1e-5)


def test_the_textbook_model_predicts_with_its_tied_embedding(tmp_path):
    textbook_model = load_model(str(textbook.write_textbook(tmp_path / "tb")))
    r = textbook_model.run("the cat sat on the mat . the cat", trace=P.prediction_trace(),
                           request=RunRequest(use_cache=False))
    head = textbook_model.lm_head()
    np.testing.assert_array_equal(head.w_u, np.asarray(textbook_model.weights.tok_emb))
    pred = P.predict(head, r.trace, k=3)
    a = P.attribute(textbook_model, head, r.trace, None, int(pred.top_ids[0]), int(pred.top_ids[1]))
    assert a.total() == pytest.approx(a.logit_diff, abs=1e-3)


def test_a_model_without_a_head_says_why_in_one_line(tmp_path):
    bert = load_model(FIXTURES / "bert")
    with pytest.raises(NoPrediction) as err:
        bert.lm_head()
    assert str(err.value) == "bert is an encoder, so it predicts no next token"
    cfg = llama_config(n_layer=1)
    t = llama_tensors(cfg)
    del t["model.norm.weight"]
    no_norm = load_model(write_model(tmp_path / "no_norm", cfg, t))
    assert no_norm.run(ids=[1, 2, 3]).attentions.shape[0] == 1  # attention still works
    with pytest.raises(NoPrediction, match="model.norm.weight"):
        no_norm.lm_head()
    untied = load_model(write_model(tmp_path / "untied", cfg, llama_tensors(cfg)))  # no lm_head
    with pytest.raises(NoPrediction, match="lm_head.weight"):
        untied.lm_head()
    t = llama_tensors(cfg)
    t["lm_head.weight"] = np.ones((cfg["vocab_size"], cfg["hidden_size"]), np.float32)
    t["lm_head.weight"][4, 2] = np.nan
    with pytest.raises(NoPrediction, match="lm_head.weight"):
        load_model(write_model(tmp_path / "nan", cfg, t)).lm_head()


def test_an_encoder_whose_file_holds_an_mlm_head_is_not_said_to_lack_one(tmp_path):
    """A BERT checkpoint may carry its masked-LM head (cls.predictions.*): it still predicts no next
    token, because it is an encoder, and the line says that, not that it lacks a head."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "bert_mlm"
    shutil.copytree(FIXTURES / "bert", folder)
    t = load_file(folder / "model.safetensors")
    cfg = json.loads((folder / "config.json").read_text())
    d, v = cfg["hidden_size"], cfg["vocab_size"]
    t.update({"cls.predictions.bias": np.zeros(v, np.float32),
              "cls.predictions.transform.dense.weight": np.eye(d, dtype=np.float32),
              "cls.predictions.transform.dense.bias": np.zeros(d, np.float32),
              "cls.predictions.transform.LayerNorm.weight": np.ones(d, np.float32),
              "cls.predictions.transform.LayerNorm.bias": np.zeros(d, np.float32),
              "cls.predictions.decoder.weight": np.ones((v, d), np.float32)})
    save_file(t, str(folder / "model.safetensors"))
    with pytest.raises(NoPrediction) as err:
        load_model(folder).lm_head()
    assert str(err.value) == "bert_mlm is an encoder, so it predicts no next token"


def test_vocab_tokens_and_positions_are_checked(models):
    model = models["llama_gqa"]  # no tokenizer: ids only
    assert P.vocab_token(model, "#7") == 7
    with pytest.raises(InputError, match="outside the vocabulary"):
        P.vocab_token(model, f"#{model.config.vocab_size}")
    for typed in ("the", "7"):  # (a number alone is text, here as anywhere)
        with pytest.raises(InputError, match="no tokenizer: give the token as an id, #id"):
            P.vocab_token(model, typed)
    # an id longer than int() reads (4,300 digits) is outside the vocabulary too, named shortened
    for typed in ("#" + "9" * 5000, "# -" + "9" * 5000):
        with pytest.raises(InputError, match=r"^token id -?9{12}… \(5000 digits\) is outside the "
                                             rf"vocabulary 0\.\.{model.config.vocab_size - 1}$"):
            P.vocab_token(model, typed)
    assert P.vocab_token(model, "#" + "0" * 5000 + "7") == 7
    with pytest.raises(InputError, match="outside the 11 tokens"):
        P.position_index(11, 11)
    assert P.position_index(11, -11) == 0


def test_a_number_alone_is_the_token_of_that_text_and_hash_n_the_id_n(toy):
    """One rule, the window's and the command line's: "1" is the token "1", "#1" the id 1."""
    assert P.vocab_token(toy, "1") == toy.tokenizer.token_to_id("1") != 1
    assert P.vocab_token(toy, "#1") == 1 and P.vocab_token(toy, "# 1") == 1


def test_a_text_the_vocabulary_lacks_is_refused_not_taken_as_the_unknown_token():
    """A word-level vocabulary reads a text it lacks as its unknown token: typed, that text is
    refused (naming it), while the unknown token's own spelling and a word it has resolve."""
    book = load_model("attnviz-textbook")
    unk = book.tokenizer.unknown_token()
    for typed in ("7", "qqq"):
        with pytest.raises(InputError, match=rf"^'{typed}' is not in attnviz-textbook's vocabulary"):
            P.vocab_token(book, typed)
    assert P.vocab_token(book, unk) == book.tokenizer.token_to_id(unk)
    assert P.vocab_token(book, "cat") == book.tokenizer.token_to_id("cat")


def test_smollm2_predicts_the_repeated_token_and_gguf_vocab_strings_resolve(smollm2):
    text = "one two three four five six. one two three four five"
    r = smollm2.run(text, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    head = smollm2.lm_head()
    pred = P.predict(head, r.trace, k=5)
    assert token_text(smollm2, pred.top_ids[0]) == "·six"  # the readable label: a leading space shows as ·
    assert P.vocab_token(smollm2, " six") == pred.top_ids[0]
    a = P.attribute(smollm2, head, r.trace, None, int(pred.top_ids[0]), int(pred.top_ids[1]))
    assert a.total() == pytest.approx(a.logit_diff, abs=1e-3)


# -- ablation and knockout ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_an_edited_run_resumes_and_equals_the_whole_run(models, name):
    model = models[name]
    r = model.run(ids=IDS, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    edits = A.head_edits(r.trace, [(1, 2)], "mean") + A.knockout_edits(model.config, len(IDS),
                                                                        [([1], 8, 4)])
    edited = A.run_edited(model, r.trace, edits)
    whole = forward(model.config, model.weights, np.array(IDS), P.prediction_trace(edits=edits))
    np.testing.assert_allclose(edited.resid[-1], whole.resid[-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(edited.attentions[0], r.trace.attentions[0])  # layer 0 reused
    mean = r.trace.z[1][2].mean(axis=0)
    np.testing.assert_allclose(edited.z[1][2], np.broadcast_to(mean, edited.z[1][2].shape))
    assert A.describe(edits) == "mean-ablated L1 H2; knocked out 8->4 in layer 1"


def test_knockouts_and_heads_are_checked():
    cfg = load_model(FIXTURES / "llama_gqa").config
    with pytest.raises(InputError, match="not one the query sees"):
        A.knockout_edits(cfg, 6, [([0], 2, 4)])
    with pytest.raises(InputError, match="nothing to attend to"):
        A.knockout_edits(cfg, 6, [([0], 0, 0)])
    assert len(A.knockout_edits(cfg, 6, A.parse_knockouts("0-1:5-2", cfg.n_layer))) == 2
    with pytest.raises(InputError, match="LAYER.HEAD"):
        A.parse_heads("3", cfg.n_layer, cfg.n_head)
    with pytest.raises(InputError, match="outside this model's layers"):
        A.parse_heads(f"0.{cfg.n_head}", cfg.n_layer, cfg.n_head)
    with pytest.raises(InputError, match="LAYERS:Q-K"):
        A.parse_knockouts("1:5", cfg.n_layer)
    # a range typed backwards is named as such, not as layers outside the model
    with pytest.raises(InputError, match=r"^knockout '1-0:5-2': layers 1-0 run backwards: write 0-1$"):
        A.parse_knockouts("1-0:5-2", cfg.n_layer)
    with pytest.raises(InputError, match=rf"layer {cfg.n_layer} is outside this model's layers"):
        A.parse_knockouts(f"0-{cfg.n_layer}:5-2", cfg.n_layer)


def test_an_encoder_knocks_out_an_edge_to_a_later_key():
    bert = load_model(FIXTURES / "bert").config
    assert not bert.causal and A.edge_seen(bert, 0, 2, 4)
    assert A.knockout_edits(bert, 6, [([0], 2, 4)]) == [Knockout(0, 2, 4)]
    llama = load_model(FIXTURES / "llama_gqa").config
    assert not A.edge_seen(llama, 0, 2, 4) and A.edge_seen(llama, 0, 4, 2)


def test_an_edge_past_the_window_is_knocked_out_in_the_global_layers_only(models):
    model = models["gemma3"]  # 7 layers, window 8, layer 5 global
    cfg = model.config
    ids = np.arange(24) % cfg.vocab_size
    assert cfg.window(4) == 8 and cfg.window(5) is None
    assert A.edge_seen(cfg, 5, 20, 2) and not A.edge_seen(cfg, 4, 20, 2) and A.edge_seen(cfg, 4, 20, 13)
    with pytest.raises(InputError, match=r"^edge 20->2 is not one the query sees in layer 4 \(a query "
                                         r"sees keys at or before it, within 8\): nothing to knock out; "
                                         r"layer 5 sees it: 5:20-2$"):
        A.knockout_edits(cfg, 24, [([4], 20, 2)])
    # asked for in layers some of which see it: narrowed to those, and said (the tab's rule too)
    assert A.knockout_edits(cfg, 24, [([4, 5], 20, 2)]) == [Knockout(5, 20, 2)]
    assert A.knockout_notes(cfg, 24, [([4, 5], 20, 2), ([4, 5], 20, 13)]) == [
        "knocked out 20->2 in layer 5 only: a query in layer 4 sees keys within 8 of it"]
    assert A.knockout_notes(cfg, 24, [(list(range(7)), 20, 2)]) == [
        "knocked out 20->2 in layer 5 only: a query in the local layers sees keys within 8 of it"]
    with pytest.raises(InputError, match=r"^edge 20->2 is not one the query sees in layers 0-4 .*: nothing "
                                         r"to knock out; layer 5 sees it: 5:20-2$"):
        A.knockout_edits(cfg, 24, [([0, 1, 2, 3, 4], 20, 2)])
    # a later key in local and global layers: the window is said of the local layers alone
    with pytest.raises(InputError, match=r"^edge 2->20 is not one the query sees in layers 0-6 \(a query "
                                         r"sees keys at or before it, within 8 in the local layers\): "
                                         r"nothing to knock out$"):
        A.knockout_edits(cfg, 24, [(list(range(7)), 2, 20)])
    # a global layer's query keeps the keys before the window: knocking out the window's 8 leaves them
    window = [([5], 20, k) for k in range(13, 21)]
    assert len(A.knockout_edits(cfg, 24, window)) == 8
    with pytest.raises(InputError, match="query 20 in layer 4 leaves it nothing to attend to"):
        A.knockout_edits(cfg, 24, [([4], 20, k) for k in range(13, 21)])
    r = model.run(ids=ids, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
    assert r.trace.attentions[5][:, 20, 2].min() > 0
    edited = A.run_edited(model, r.trace, A.knockout_edits(cfg, 24, [([5], 20, 2)]))
    assert edited.attentions[5][:, 20, 2].max() == 0
    np.testing.assert_allclose(edited.attentions[5][:, 20].sum(axis=-1), 1, atol=1e-5)


def test_a_head_is_read_as_the_window_names_it_or_as_layer_dot_head():
    for typed in ("18.6", "L18 H6", "L18H6", " l18 h6 ", "18 . 6"):
        assert A.head_from_text(typed) == (18, 6), typed
    for typed in ("18", "L18", "H6", "18.6.1", "L18 6", "-1.2", ""):
        assert A.head_from_text(typed) is None, typed
    assert A.parse_heads("L1 H2,0.3", 4, 4) == [(1, 2), (0, 3)]


def test_repeat_span_finds_the_repeated_half_or_refuses():
    assert A.repeat_span([9, 4, 7, 2, 4, 7, 2, 8]) == (1, 3)
    assert A.repeat_span([0] + list(range(10, 35)) * 2) == (1, 25)
    with pytest.raises(InputError, match="do not repeat"):
        A.repeat_span([1, 2, 3, 4, 5])


@pytest.mark.parametrize("loss", ["next", "repeat"])
def test_the_scan_equals_one_ablated_run_per_head(models, loss):
    model = models["llama_gqa"]
    cfg = model.config
    head = model.lm_head()
    ids = [2, 17, 30, 8, 41, 17, 30, 8, 41, 5]
    seen = []
    scan = A.ablation_scan(model, head, ids, loss, position=6, progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, cfg.n_layer * cfg.n_head) and seen[-1] == (cfg.n_layer * cfg.n_head,) * 2
    clean = forward(cfg, model.weights, np.array(ids), P.prediction_trace())
    layer, h = 1, 5
    ablated = forward(cfg, model.weights, np.array(ids), P.prediction_trace(edits=[ReplaceHead(layer, h)]))
    if loss == "next":
        target = int(P.predict(head, clean, 6).top_ids[0])
        assert scan.target == target
        want = A.next_loss(head, ablated, 6, target) - A.next_loss(head, clean, 6, target)
    else:
        assert scan.span == (1, 4)
        want = A.repeat_loss(head, ablated, (1, 4)) - A.repeat_loss(head, clean, (1, 4))
    assert scan.effect[layer, h] == pytest.approx(want, abs=1e-4)
    ranked = scan.ranked()
    assert len(ranked) == cfg.n_layer * cfg.n_head and ranked[0][2] == scan.effect.max()
    assert set(scan.seconds) == {"forward", "unembedding", "total"}


def test_the_scan_can_be_cancelled(models):
    model = models["llama_gqa"]
    calls = []

    def cancelled():
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled):
        A.ablation_scan(model, model.lm_head(), IDS, "next", cancelled=cancelled)
    assert len(calls) == 4


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_a_gguf_predicts_with_its_output_head_and_refuses_without_its_parts(tmp_path, qtype):
    """A GGUF with output.weight (untied, kept quantised) predicts what the same safetensors model
    does; without output_norm.weight or the last layer's MLP it opens for attention and prediction
    names the missing tensor."""
    import gguf

    from gguf_files import gguf_tensors, write_gguf

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    q = getattr(gguf.GGMLQuantizationType, qtype)
    model = load_model(write_gguf(tmp_path / "m.gguf", cfg, tensors, q))
    ref = load_model(FIXTURES / "llama_gqa")
    preds = []
    for m in (model, ref):
        r = m.run(ids=IDS, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
        preds.append(P.predict(m.lm_head(), r.trace, k=3))
    assert preds[0].top_ids.tolist() == preds[1].top_ids.tolist()
    np.testing.assert_allclose(preds[0].top_logprobs, preds[1].top_logprobs,
                               atol=1e-4 if qtype == "F32" else 0.1)
    last = cfg["num_hidden_layers"] - 1
    for drop in ("output_norm.weight", f"blk.{last}.ffn_up.weight"):
        kept = {k: v for k, v in tensors.items()
                if k != drop and not (drop.startswith("blk") and k.startswith(f"blk.{last}.ffn_")
                                      and "norm" not in k)}
        m = load_model(write_gguf(tmp_path / f"no-{drop}.gguf", cfg, kept, q))
        assert m.run(ids=IDS).attentions.shape[0] == cfg["num_hidden_layers"]
        with pytest.raises(NoPrediction, match=drop.replace(".", r"\.")):
            m.lm_head()


def test_the_unembedding_in_blocks_equals_one_product_and_stops_between_blocks(monkeypatch):
    """vocab_logits (blocks of VOCAB_BLOCK rows, a stop check before each) gives the logits of the
    whole unembedding at once; a stop that turns true after two blocks raises Cancelled there."""
    model = load_model("SmolLM2-135M-Instruct")
    head = model.lm_head()
    r = model.run(text="The keys to the cabinet are", trace=P.prediction_trace())
    rows = P.lens_rows(r.trace, len(r.trace.ids) - 1)  # [n_layer, d_model]
    whole = head.logits(rows)  # [n_layer, vocab]
    blocks = P.vocab_logits(head, rows)
    assert blocks.shape == whole.shape and np.abs(blocks - whole).max() < 1e-4
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 2

    with pytest.raises(Cancelled):
        P.vocab_logits(head, rows, stop)
    assert len(asked) == 3 and head.w_u.shape[0] > 2 * VOCAB_BLOCK


def test_the_lens_from_float32_logits_matches_a_float64_log_softmax():
    """lens_of (log-sum-exp in float64 over float32 logits, rank by counting larger logits) gives
    the log-probs and ranks of a plain float64 log-softmax."""
    model = load_model("SmolLM2-135M-Instruct")
    head = model.lm_head()
    r = model.run(text="one two three four one two three", trace=P.prediction_trace())
    L = P.vocab_logits(head, P.lens_rows(r.trace, 4))
    lp = P.log_softmax(L)
    target = int(np.argmax(lp[-1]))
    lens = P.lens_of(L, 4)
    assert lens.target == target
    assert np.array_equal(lens.top_ids, lp.argmax(axis=1))
    assert np.abs(lens.top_logprobs - lp.max(axis=1)).max() < 1e-6
    assert np.abs(lens.target_logprobs - lp[:, target]).max() < 1e-6
    assert np.array_equal(lens.target_ranks, (lp > lp[:, target:target + 1]).sum(axis=1))
    assert lens.target_ranks[-1] == 0


@pytest.mark.parametrize("loss", ["next", "repeat"])
def test_the_scan_on_two_threads_equals_the_scan_on_one(models, loss):
    """Heads of a layer run on two threads and their loss rows share one unembedding product: the
    effects and the baseline are those of the one-thread scan (the per-head runs themselves are
    checked against next_loss and repeat_loss in test_the_scan_equals_one_ablated_run_per_head)."""
    model = models["llama_gqa"]
    head = model.lm_head()
    ids = [2, 17, 30, 8, 41, 17, 30, 8, 41, 5]
    one = A.ablation_scan(model, head, ids, loss, position=6, threads=1)
    two = A.ablation_scan(model, head, ids, loss, position=6, threads=2)
    assert np.abs(one.effect - two.effect).max() < 1e-9 and one.baseline_loss == two.baseline_loss
    assert np.abs(one.effect).max() > 1e-4  # the heads matter here: the comparison can fail


def test_log_softmax_gives_the_float64_steps_bits_for_any_input():
    """log_softmax (one new array, the logits converted step by step) equals x - (m + log(sum(exp(x
    - m)))) on a float64 copy bit for bit: float32 rows, a row of a batch, strided, float16,
    integers, a list, ties of -0 and 0, inf and -inf."""
    from attnviz.engine.computing.logits import log_softmax

    def by_copy(logits):
        x = np.asarray(logits, dtype=np.float64)
        m = x.max(axis=-1, keepdims=True)
        return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))

    a = (np.random.default_rng(1).standard_normal((3, 4099)) * 7).astype(np.float32)
    cases = [a, a[1], a[:, ::3], a.astype(np.float16), a.astype(np.float64), [1, 2, 3], np.arange(7),
             np.array([-0.0, 0.0, 0.0], np.float32), np.array([np.inf, -1.0, 2.0], np.float32),
             np.array([-np.inf, 0.0], np.float32)]
    with np.errstate(invalid="ignore"):
        for logits in cases:
            got, want = log_softmax(logits), by_copy(logits)
            assert got.dtype == np.float64 and got.shape == want.shape
            np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))


def test_a_position_past_a_one_token_text_says_one_token():
    """The engine's messages write a count of one as the window does: "the 1 token", not "1 tokens"."""
    with pytest.raises(InputError, match=r"position 1 is outside the 1 token \(0\.\.0"):
        P.position_index(1, 1)
    with pytest.raises(InputError, match=r"outside the 1,200 tokens"):
        P.position_index(1200, 1200)
