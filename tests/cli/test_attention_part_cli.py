"""`attnviz attention --layer L --rows A:B` writes only the patterns asked for, equal to the same
part of the dense patterns; a dense request over the limit is refused naming its size and both
options; bad --rows and --layer values are refused in one line."""

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.engine import load_model
from attnviz.engine.computing import longdoc
from tiny import FIXTURES
from attnviz.engine.computing.request import RunRequest

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]


def _dense(name):
    return load_model(FIXTURES / name).run(ids=IDS, request=RunRequest(use_cache=False)).attentions


@pytest.mark.parametrize("extra, layers, rows", [
    (["--layer", "1"], [1], (0, 14)),
    (["--rows", "4:9"], [0, 1], (4, 9)),
    (["--layer", "0", "--rows", "13:14"], [0], (13, 14)),
])
def test_attention_writes_the_layer_and_rows_asked_for(tmp_path, capsys, extra, layers, rows):
    out = tmp_path / "a.npz"
    assert main(["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", ",".join(map(str, IDS)),
                 "--out", str(out), *extra]) == 0
    d = np.load(out, allow_pickle=False)
    a, b = rows
    assert d["attentions"].shape == (len(layers), 8, b - a, 14)
    np.testing.assert_allclose(d["attentions"], _dense("llama_gqa")[layers][:, :, a:b], atol=1e-5, rtol=0)
    assert d["layers"].tolist() == layers and d["rows"].tolist() == [a, b]
    assert d["input_ids"].tolist() == IDS
    whole = tmp_path / "whole.npz"  # (the whole file's token labels, which the part file has too)
    assert main(["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", ",".join(map(str, IDS)),
                 "--out", str(whole)]) == 0
    assert d["labels"].tolist() == np.load(whole, allow_pickle=False)["labels"].tolist()
    assert len(d["labels"]) == 14
    assert f"attentions {list(d['attentions'].shape)}" in capsys.readouterr().out


def test_a_dense_request_over_the_limit_names_its_size_and_the_options(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(longdoc, "DENSE_LIMIT", 5000)
    args = ["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", ",".join(map(str, IDS)),
            "--out", str(tmp_path / "a.npz")]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "[2, 8, 14, 14] float32 = 12.3 KiB, over the 4.88 KiB limit" in err
    assert "--layer L" in err and "--rows A:B" in err
    assert not (tmp_path / "a.npz").exists()
    assert main([*args, "--layer", "1", "--rows", "0:5"]) == 0  # 2.19 KiB: written


@pytest.mark.parametrize("extra, message", [
    (["--rows", "5:5"], "--rows '5:5': give a block of query rows as A:B"),
    (["--rows", "a:b"], "--rows 'a:b'"),
    (["--rows", "3:40"], "--rows 3:40 runs past the text's 14 tokens"),
    (["--layer", "2"], "--layer 2 is outside"),
    (["--layer", "0", "--value-weighted"], "--value-weighted applies to every layer's whole"),
])
def test_bad_layer_or_rows_are_refused_in_one_line(tmp_path, capsys, extra, message):
    assert main(["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", ",".join(map(str, IDS)),
                 "--out", str(tmp_path / "a.npz"), *extra]) != 0
    assert message in capsys.readouterr().err
