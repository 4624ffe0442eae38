"""The textbook model: constructed weights, a real checkpoint folder, the same engine, each head doing
the one job it was built for."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attnviz.engine import find_models, load_model
from attnviz.engine.analysing import heads as H, probes as P
from attnviz.engine.reading import textbook as tb


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tb.textbook_model_dir(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def model(folder):
    return load_model(str(folder))


@pytest.fixture(scope="module")
def probe_scores(model):
    result, _ = P.run_probe(model)
    return result, H.score_result(result)


def test_every_head_gets_the_role_it_was_built_for(probe_scores):
    result, hs = probe_scores
    built = [[tb.HEADS[(l, h)][0] for h in range(tb.N_HEAD)] for l in range(tb.N_LAYER)]
    assert hs.labels == built
    assert built == [["previous", "duplicate", "self"], ["induction", "sink", "mixed"]]


def test_scores_are_the_textbook_values(probe_scores):
    result, hs = probe_scores
    T = result.n_tokens  # BOS + 25 + 25
    assert T == 51
    s = hs.scores
    assert s["previous"][0, 0] == pytest.approx((T - 1) / T, abs=1e-4)  # row 0 has no previous
    assert s["self"][0, 2] == pytest.approx(1.0, abs=1e-4)
    assert s["sink"][1, 1] == pytest.approx(1.0, abs=1e-4)
    # duplicate / induction: the 25 rows of the second half match; the 26 others park on BOS
    for role, (l, h) in (("duplicate", (0, 1)), ("induction", (1, 0))):
        assert s[role][l, h] == pytest.approx(25 / T, abs=1e-4)
        assert hs.strength[role][l, h] == pytest.approx(1.0, abs=1e-4)
        assert s["sink"][l, h] == pytest.approx(26 / T, abs=1e-4)
    # the averaging control: rows spread evenly over 1..T keys
    assert s["entropy"][1, 2] == pytest.approx(np.mean(np.log2(np.arange(1, T + 1))), abs=1e-4)


def test_patterns_are_one_hot_where_built(probe_scores):
    result, _ = probe_scores
    a = result.attentions
    T = result.n_tokens
    np.testing.assert_allclose(a[0, 0, np.arange(1, T), np.arange(T - 1)], 1.0, atol=1e-4)
    np.testing.assert_allclose(np.diagonal(a[0, 2]), 1.0, atol=1e-4)
    np.testing.assert_allclose(a[1, 1, :, 0], 1.0, atol=1e-4)
    # induction: second-half position i attends to i - 25 + 1 (the token after the first copy)
    q = np.arange(27, T)
    np.testing.assert_allclose(a[1, 0, q, q - 24], 1.0, atol=1e-4)


def test_induction_needs_the_previous_token_head(folder, tmp_path):
    """Cut head 0.0's output (its rows of c_proj): the induction head loses what it keys on."""
    w = load_file(str(folder / "model.safetensors"))
    d_head = w["wte.weight"].shape[1] // tb.N_HEAD
    w["h.0.attn.c_proj.weight"][:d_head] = 0.0
    broken = tmp_path / "broken"
    broken.mkdir()
    save_file(w, str(broken / "model.safetensors"))
    for f in ("config.json", "tokenizer.json"):
        (broken / f).write_bytes((folder / f).read_bytes())
    result, _ = P.run_probe(load_model(str(broken)))
    hs = H.score_result(result)
    assert hs.strength["induction"][1, 0] < 0.1
    assert hs.labels[1][0] == "sink"
    assert hs.labels[0] == ["previous", "duplicate", "self"]  # layer 0 is unchanged


def test_duplicate_and_induction_on_typed_text_with_repeats(model):
    r = model.run("the cat sat on the mat . the cat sat on the mat .")
    assert r.labels[0] == "<|bos|>" and "<|unk|>" not in r.tokens
    hs = H.score_result(r)
    assert hs.labels == [["previous", "duplicate", "self"], ["induction", "sink", "mixed"]]


def test_unknown_words_and_case(model):
    r = model.run("The zebra sat")
    assert r.tokens == ["<|bos|>", "the", "<|unk|>", "sat"]
    assert r.labels[1:] == ["the", "<|unk|>", "sat"]  # as the model sees them


def test_residual_stream_is_zero_mean_and_mlp_is_zero():
    w = tb.build_weights()
    cfg = tb.build_config()
    x = w["wte.weight"][:, None, :] + w["wpe.weight"][None, :, :]  # every (token, position)
    np.testing.assert_allclose(x.mean(-1), 0.0, atol=1e-7)
    np.testing.assert_allclose((x ** 2).sum(-1), 4.0)
    for l in range(cfg["n_layer"]):
        for name in ("mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            assert not w[f"h.{l}.{name}"].any()
    # only head 0.0 writes into the residual stream
    d_head = cfg["n_embd"] // cfg["n_head"]
    assert w["h.0.attn.c_proj.weight"][:d_head].any()
    assert not w["h.0.attn.c_proj.weight"][d_head:].any()
    assert not w["h.1.attn.c_proj.weight"].any()


def test_folder_is_rebuilt_when_the_version_changes(tmp_path):
    folder = tb.textbook_model_dir(tmp_path)
    marker = folder / "attnviz_textbook.json"
    assert json.loads(marker.read_text())["version"] == tb.TEXTBOOK_VERSION
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["n_layer"] == 2 and cfg["n_head"] == 3
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert tb.textbook_model_dir(tmp_path) == folder  # current: not rebuilt
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime
    marker.write_text(json.dumps({"version": tb.TEXTBOOK_VERSION - 1}))
    (folder / "model.safetensors").write_bytes(b"stale")
    assert tb.textbook_model_dir(tmp_path) == folder
    assert json.loads(marker.read_text())["version"] == tb.TEXTBOOK_VERSION
    assert load_file(str(folder / "model.safetensors"))["wte.weight"].shape[0] == len(tb.VOCAB)
    assert [p.name for p in tmp_path.iterdir()] == ["textbook"]  # no build folders left


def test_listed_and_loadable_by_name():
    names = [m.name for m in find_models()]
    assert tb.TEXTBOOK_NAME in names
    m = load_model(tb.TEXTBOOK_NAME)
    assert (m.config.n_layer, m.config.n_head, m.config.causal) == (2, 3, True)
    assert "README.md" in {p.name for p in m.path.iterdir()}


def test_every_head_is_described():
    for l in range(tb.N_LAYER):
        for h in range(tb.N_HEAD):
            text = tb.describe_head(l, h)
            assert text.startswith(f"built as {tb.HEADS[(l, h)][0]}:") and len(text) > 60
    assert tb.describe_head(5, 0) is None


def test_licence_is_the_projects_own(model, folder):
    # attnviz constructs it, so it is under attnviz's licence, not "not stated"
    assert tb.TEXTBOOK_LICENSE == "Apache-2.0"
    assert model.license.startswith("Apache-2.0")
    assert "License: Apache-2.0" in (folder / "README.md").read_text()
