"""`attnviz predict` and `attnviz ablation-scan`: their JSON keys and numbers, the short tables,
ablation marked and compared with the clean run, and one-line refusals."""

import json

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import predict as P
from tiny import FIXTURES

GPT2 = str(FIXTURES / "gpt2")


def test_predict_json_has_the_interface_keys_and_the_engines_numbers(cli):
    rc, out, _ = cli("predict", "--model", GPT2, "--ids", "3,1,4,1,5,9,2", "--top", "4",
                     "--position", "-2", "--json")
    assert rc == 0
    doc = json.loads(out)
    for key in ("tokens", "input_ids", "position", "top", "target", "alt", "logit_diff", "dla",
                "dla_rest", "lens"):
        assert key in doc, key
    model = load_model(GPT2)
    r = model.run(ids=[3, 1, 4, 1, 5, 9, 2], trace=P.prediction_trace())
    pred = P.predict(model.lm_head(), r.trace, -2, 4)
    assert doc["position"] == 5 and doc["input_ids"] == [3, 1, 4, 1, 5, 9, 2]
    assert [t["id"] for t in doc["top"]] == pred.top_ids.tolist()
    np.testing.assert_allclose([t["logprob"] for t in doc["top"]], pred.top_logprobs, atol=1e-6)
    assert (doc["target"], doc["alt"]) == tuple(pred.top_ids[:2].tolist())
    cfg = model.config
    assert np.shape(doc["dla"]) == (cfg.n_layer, cfg.n_head)
    assert len(doc["dla_rest"]["mlp"]) == cfg.n_layer and {"embed", "bias"} <= set(doc["dla_rest"])
    total = np.sum(doc["dla"]) + np.sum(doc["dla_rest"]["mlp"]) + doc["dla_rest"]["embed"] + \
        doc["dla_rest"]["bias"]
    assert total == pytest.approx(doc["logit_diff"], abs=1e-3)
    assert len(doc["lens"]) == cfg.n_layer and doc["lens"][-1]["top_id"] == doc["target"]
    assert set(doc["lens"][0]) == {"top_id", "top_token", "target_logprob"}
    assert "changed" not in doc


def test_predict_with_an_ablation_marks_it_and_compares_with_the_clean_run(cli):
    argv = ["predict", "--model", GPT2, "--ids", "3,1,4,1,5,9,2", "--target", "#7", "--alt", "#9"]
    _, clean, _ = cli(*argv, "--json")
    rc, out, _ = cli(*argv, "--ablate", "1.0,1.2", "--knockout", "0-1:6-2", "--json")
    assert rc == 0
    clean, doc = json.loads(clean), json.loads(out)
    assert doc["changed"] == "zero-ablated L1 H0, L1 H2; knocked out 6->2 in layers 0, 1"
    assert doc["clean_target_logprob"] == pytest.approx(clean["target_logprob"])
    assert doc["delta_target_logprob"] == pytest.approx(doc["target_logprob"] - clean["target_logprob"])
    assert abs(doc["delta_target_logprob"]) > 1e-4
    assert doc["dla"][1][0] == 0 and doc["dla"][1][2] == 0  # the ablated heads write nothing
    rc, table, _ = cli(*argv, "--ablate", "1.0", "--ablate-mode", "mean")
    assert rc == 0 and "mean-ablated L1 H0" in table and "delta" in table


def test_predict_table_on_the_textbook_model(cli):
    rc, out, _ = cli("predict", "--model", "attnviz-textbook", "--text", "the cat sat . the")
    assert rc == 0
    assert "logit lens (raw: the final norm applied to each layer)" in out
    assert "largest heads: L" in out


def test_predict_refuses_in_one_line(cli):
    rc, _, err = cli("predict", "--model", str(FIXTURES / "bert"), "--ids", "2,5,7")
    assert rc != 0 and "is an encoder, so it predicts no next token" in err and err.count("\n") == 1
    rc, _, err = cli("predict", "--model", GPT2, "--ids", "3,1,4", "--position", "3")
    assert rc != 0 and "outside the 3 tokens" in err
    rc, _, err = cli("predict", "--model", GPT2, "--ids", "3,1,4", "--ablate", "9.0")
    assert rc != 0 and "outside this model's layers" in err


def test_a_decoder_whose_file_lacks_its_unembedding_is_not_told_to_use_a_causal_model(cli, tmp_path):
    """A Llama (causal) whose file has no lm_head.weight: the refusal says what its file lacks and
    to use a model whose file holds it, not that a causal model is needed."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "nohead"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    t = load_file(folder / "model.safetensors")
    del t["lm_head.weight"]
    save_file(t, str(folder / "model.safetensors"))
    rc, _, err = cli("predict", "--model", str(folder), "--ids", "2,5,7")
    assert rc != 0 and err.count("\n") == 1
    assert err.strip().endswith(
        "nohead predicts no next token because the checkpoint in nohead/ has no unembedding "
        "lm_head.weight; `attnviz predict` needs a model whose file holds a usable final norm and "
        "unembedding, such as --model SmolLM2-135M-Instruct"), err
    assert "causal" not in err
    rc, _, err = cli("predict", "--model", str(FIXTURES / "bert"), "--ids", "2,5,7")
    assert rc != 0 and err.strip().endswith(
        "bert is an encoder, so it predicts no next token; `attnviz predict` needs a causal language "
        "model, such as --model SmolLM2-135M-Instruct"), err


def test_ablation_scan_json_ranks_every_head(cli):
    rc, out, _ = cli("ablation-scan", "--model", GPT2, "--ids", "3,1,4,1,5,9,2", "--json")
    assert rc == 0
    doc = json.loads(out)
    cfg = load_model(GPT2).config
    assert np.shape(doc["effect"]) == (cfg.n_layer, cfg.n_head) and doc["loss"] == "next"
    assert len(doc["ranked"]) == cfg.n_layer * cfg.n_head
    assert set(doc["ranked"][0]) == {"layer", "head", "effect"}
    effects = [r["effect"] for r in doc["ranked"]]
    assert effects == sorted(effects, reverse=True)
    best = doc["ranked"][0]
    assert doc["effect"][best["layer"]][best["head"]] == best["effect"]
    assert doc["baseline_loss"] > 0


def test_ablation_scan_repeat_loss_on_the_probe_and_its_refusal(cli):
    rc, out, _ = cli("ablation-scan", "--model", "attnviz-textbook", "--probe")
    assert rc == 0 and "second copy" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]  # 2 layers x 3 heads, ranked
    effects = [float(r[-1]) for r in rows]
    assert effects == sorted(effects, reverse=True)
    rc, _, err = cli("ablation-scan", "--model", GPT2, "--ids", "3,1,4,5", "--loss", "repeat")
    assert rc != 0 and "do not repeat" in err
    rc, _, err = cli("ablation-scan", "--model", GPT2, "--probe", "--position", "2")
    assert rc != 0 and "only with --loss next" in err


def test_predict_and_export_give_the_dla_the_same_default_alternative(cli, capsys, tmp_path):
    """The alternative left out is the clean top-1, or the second when the target is the top-1:
    on the command line as in the window (engine/analysing/predict.py dla_tokens), and both say so."""
    ids = "3,1,4,1,5,9,2"
    rc, out, _ = cli("predict", "--model", GPT2, "--ids", ids, "--top", "3", "--json")
    top = [t["id"] for t in json.loads(out)["top"]]
    for target, alt in ((top[0], top[1]), (top[1], top[0]), (top[2], top[0])):
        rc, out, err = cli("predict", "--model", GPT2, "--ids", ids, "--target", f"#{target}", "--json")
        assert rc == 0, err
        assert (json.loads(out)["target"], json.loads(out)["alt"]) == (target, alt)
        rc, _, err = cli("export", "--model", GPT2, "--text", ids.replace(",", ", "), "--view", "dla",
                         "--target", f"#{target}", "--out", str(tmp_path / "d.json"))
        assert rc == 0, err
        doc = json.loads((tmp_path / "d.json").read_text())
        assert doc["input_ids"] == [3, 1, 4, 1, 5, 9, 2] and (doc["target"], doc["alt"]) == (target, alt)
    for command in ("predict", "export"):
        with pytest.raises(SystemExit):
            cli(command, "--help")
        assert "(default: the clean run's top-1, or its second when the target is the top-1)" in \
            " ".join(capsys.readouterr().out.split())


def test_a_knockout_past_the_window_names_the_layers_that_see_it(cli):
    """Gemma 3 (window 8, layer 5 global): 20->2 lies past the local layers' window. Asked for in
    layers 0-5 it is knocked out in layer 5, the one whose query sees it, and a note on stderr says
    so (as the Ablation tab does); asked for in the local layers alone it is refused, naming the
    layer that sees it as a knockout to give."""
    ids = ",".join(str(i) for i in range(24))
    gemma = ("predict", "--model", str(FIXTURES / "gemma3"), "--ids", ids, "--knockout")
    rc, out, err = cli(*gemma, "0-5:20-2")
    assert rc == 0 and "knocked out 20->2 in layer 5" in out, (out, err)
    assert err.splitlines() == ["attnviz predict: note: knocked out 20->2 in layer 5 only: a query in "
                                "layers 0-4 sees keys within 8 of it"], err
    rc, _, err = cli(*gemma, "0-4:20-2")
    assert rc != 0
    assert "edge 20->2 is not one the query sees in layers 0-4 (a query sees keys at or before it, " \
           "within 8): nothing to knock out; layer 5 sees it: 5:20-2" in err, err
    rc, out, err = cli(*gemma, "5:20-2")
    assert rc == 0 and "knocked out 20->2 in layer 5" in out and err == "", (out, err)
