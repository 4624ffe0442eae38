"""`attnviz attention --value-weighted` writes value norms and value-weighted attention, checked
against a direct computation (a_qk * ||v_k W_O(h)||, rows renormalised) on a tiny GQA fixture and
on MiniLM."""

import numpy as np

from attnviz.cli import main
from attnviz.engine import load_model
from by_hand import direct
from tiny import FIXTURES


def test_cli_writes_value_norms_and_value_weighted_for_a_gqa_model(tmp_path, capsys):
    out = tmp_path / "a.npz"
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    assert main(["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids",
                 ",".join(map(str, ids)), "--value-weighted", "--out", str(out)]) == 0
    d = np.load(out, allow_pickle=False)
    norms, vw = direct(load_model(FIXTURES / "llama_gqa"), ids)
    assert d["value_norms"].dtype == np.float32 and d["value_norms"].shape == (2, 8, 8)
    assert d["value_weighted"].dtype == np.float32 and d["value_weighted"].shape == (2, 8, 8, 8)
    np.testing.assert_allclose(d["value_norms"], norms, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(d["value_weighted"], vw, atol=1e-5)
    np.testing.assert_allclose(d["value_weighted"].sum(-1), 1.0, atol=1e-5)
    assert main(["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4",
                 "--out", str(tmp_path / "b.npz")]) == 0
    assert "value_norms" not in np.load(tmp_path / "b.npz").files  # only when asked


def test_cli_value_weighted_on_minilm(tmp_path, minilm):
    out = tmp_path / "m.npz"
    text = "The keys to the cabinet are on the table."
    assert main(["attention", "--model", "all-MiniLM-L6-v2", "--text", text, "--value-weighted",
                 "--out", str(out)]) == 0
    d = np.load(out, allow_pickle=False)
    norms, vw = direct(minilm, minilm.run(text).input_ids)
    np.testing.assert_allclose(d["value_norms"], norms, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(d["value_weighted"], vw, atol=1e-5)
