"""Messages that point somewhere: `predict` runs a text whose patterns would not fit at once as a
long text (the same prediction), a command that cannot names what a person can type instead, a
file that is not a model is named with what was expected, and no message names Python code."""

import json
import re

import numpy as np
import pytest

from attnviz.engine.computing import longdoc

TEXT = "the cat sat on the mat and the dog ran after it"
PYTHON_NAME = re.compile(r"\b[a-z]+\.[a-z]+_[a-z_]+\b|\b[a-z]+_[a-z_]+\(|\(\)")  # longdoc.run_long, f(), ...


@pytest.fixture
def small_limit(monkeypatch):
    """Dense patterns of this test's text [2, 8, T, T] are over the limit."""
    monkeypatch.setattr(longdoc, "DENSE_LIMIT", 1000)


def test_predict_runs_a_long_text_as_a_long_text_with_the_same_prediction(tiny, cli, monkeypatch):
    rc, out, err = cli("predict", "--model", tiny, "--text", TEXT, "--json")
    assert rc == 0, err
    dense = json.loads(out)
    monkeypatch.setattr(longdoc, "DENSE_LIMIT", 1000)
    rc, out, err = cli("predict", "--model", tiny, "--text", TEXT, "--json")
    assert rc == 0, err
    long = json.loads(out)
    assert [t["id"] for t in long["top"]] == [t["id"] for t in dense["top"]]
    assert (long["target"], long["alt"], long["position"]) == (dense["target"], dense["alt"], dense["position"])
    np.testing.assert_allclose([t["logprob"] for t in long["top"]], [t["logprob"] for t in dense["top"]],
                               atol=1e-5)
    np.testing.assert_allclose(long["dla"], dense["dla"], atol=1e-5)
    np.testing.assert_allclose([r["target_logprob"] for r in long["lens"]],
                               [r["target_logprob"] for r in dense["lens"]], atol=1e-5)
    rc, out, err = cli("predict", "--model", tiny, "--text", TEXT)
    assert rc == 0 and out.startswith("tiny"), err


def test_commands_that_need_every_pattern_say_what_to_type(tiny, cli, small_limit):
    rc, _, err = cli("predict", "--model", tiny, "--text", TEXT, "--ablate", "0.1")
    assert rc == 2 and "--ablate and --knockout need every pattern at once: give a shorter text" in err
    assert not PYTHON_NAME.search(err), err
    for argv in (["heads", "--model", tiny, "--text", TEXT],
                 ["find", "--model", tiny, "--text", TEXT, "--from", "cat", "--to", "mat"]):
        rc, _, err = cli(*argv)
        assert rc == 2 and "over the" in err, err
        assert "`attnviz attention --layer L` or `--rows A:B`" in err and "long view" in err, err
        assert not PYTHON_NAME.search(err), err


def test_a_file_that_is_not_a_model_is_named_with_what_was_expected(tmp_path, cli, monkeypatch):
    (tmp_path / "notamodel.txt").write_text("hello", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli("predict", "--model", "notamodel.txt", "--text", "hi")
    assert rc == 2
    assert "notamodel.txt is not a model: give a GGUF file (.gguf), or a model folder" in err, err
    assert f"{tmp_path} has no config.json" in err and ": . has" not in err, err
    rc, _, err = cli("attention", "--model", str(tmp_path), "--text", "hi",
                     "--out", str(tmp_path / "a.npz"))
    assert rc == 2 and f"{tmp_path} is not a model folder: it has no config.json" in err, err


def test_sampling_refusals_use_the_settings_names(cli):
    rc, _, err = cli("generate", "--model", "attnviz-textbook", "--text", "the cat",
                     "--max-new", "2", "--top-p", "0")
    assert rc == 2 and "top-p must be in (0, 1], got 0.0" in err and "top_p" not in err, err
