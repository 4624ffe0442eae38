"""`attnviz qk-attribution` and `attnviz circuits`: their JSON keys and the engine's numbers, the
short tables, and one-line refusals (a key after the query, a position out of range, an encoder
asked for ov_top)."""

import json

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C, qk as Q
from tiny import FIXTURES

GPT2 = str(FIXTURES / "gpt2")
IDS = "3,1,4,1,5,9,2,6"


def test_qk_attribution_json_has_the_interface_keys_and_adds_up(cli):
    rc, out, _ = cli("qk-attribution", "--model", GPT2, "--ids", IDS, "--layer", "1",
                     "--head", "2", "--query", "6", "--key", "3", "--json")
    assert rc == 0
    doc = json.loads(out)
    for key in ("tokens", "score", "components", "table", "query_side", "key_side", "bias", "top"):
        assert key in doc, key
    model = load_model(GPT2)
    n = 2 + model.config.n_head + 1
    assert doc["components"][0] == "embed" and doc["components"][-1] == "bias" and len(doc["components"]) == n
    table = np.array(doc["table"])
    assert table.shape == (n, n)
    assert table.sum() == pytest.approx(doc["score"], rel=1e-4)
    np.testing.assert_allclose(doc["query_side"], table.sum(axis=1))
    np.testing.assert_allclose(doc["key_side"], table.sum(axis=0))
    assert len(doc["top"]) == 20 and set(doc["top"][0]) == {"query", "key", "value"}
    assert abs(doc["top"][0]["value"]) == pytest.approx(np.abs(table).max())
    r = model.run(ids=[int(i) for i in IDS.split(",")], trace=Q.qk_trace())
    a = Q.qk_attribution(model, r.trace, 1, 2, 6, 3)
    assert doc["score"] == pytest.approx(a.score) and doc["bias"] == pytest.approx(a.bias)


def test_qk_attribution_prints_a_short_table(cli):
    rc, out, _ = cli("qk-attribution", "--model", GPT2, "--ids", IDS, "--layer", "1",
                     "--head", "0", "--query", "5", "--key", "5")
    assert rc == 0
    assert "L1 H0, query 5" in out and "largest query x key pairs" in out
    assert "query side:" in out and "key side:" in out


@pytest.mark.parametrize("argv, words", [
    (("--query", "2", "--key", "5"), "key 5 comes after query 2"),
    (("--query", "8", "--key", "1"), "query position 8 is outside the 8 tokens"),
])
def test_qk_attribution_refuses_bad_cells_in_one_line(cli, argv, words):
    rc, out, err = cli("qk-attribution", "--model", GPT2, "--ids", IDS, "--layer", "0",
                       "--head", "0", *argv)
    assert rc == 2 and out == ""
    assert words in err and err.count("\n") == 1


def test_circuits_json_has_the_interface_keys_and_the_engines_numbers(cli):
    rc, out, _ = cli("circuits", "--model", GPT2, "--head", "1.2", "--token", "#7", "--json")
    assert rc == 0
    doc = json.loads(out)
    model = load_model(GPT2)
    cfg = model.config
    np.testing.assert_allclose(doc["copying"], C.copying_scores(model))
    assert set(doc["composition"]) == {"q", "k", "v"}
    comp = C.composition_scores(model)
    for mode in "qkv":
        assert np.shape(doc["composition"][mode]) == (cfg.n_layer, cfg.n_head) * 2
        np.testing.assert_allclose(doc["composition"][mode], comp[mode])
    assert [row["id"] for row in doc["ov_top"]] == [i for i, _, _ in C.ov_top(model, 1, 2, 7)]
    assert set(doc["ov_top"][0]) == {"id", "token", "value"}
    assert "note" not in doc  # (GPT-2 has no RoPE: the scores leave nothing out)


def test_circuits_note_the_rope_they_leave_out_only_for_a_model_with_rope(cli):
    """The same rule as the Circuits tab: the RoPE caveat for a rotary model, none for GPT-2."""
    rc, out, _ = cli("circuits", "--model", str(FIXTURES / "llama_gqa"), "--json")
    assert rc == 0 and "ignore RoPE" in json.loads(out)["note"]
    rc, out, _ = cli("circuits", "--model", str(FIXTURES / "llama_gqa"))
    assert rc == 0 and "ignore RoPE" in out.splitlines()[0]
    rc, out, _ = cli("circuits", "--model", GPT2)
    assert rc == 0 and "RoPE" not in out


def test_circuits_without_a_head_prints_the_copying_map(cli):
    rc, out, _ = cli("circuits", "--model", GPT2)
    assert rc == 0
    assert "copying [layer x head]" in out and "k-composition, strongest" in out
    assert "ov_top" not in out and "n/a" not in out  # (every composition score defined)


@pytest.mark.parametrize("argv, words", [
    (("--model", str(FIXTURES / "bert"), "--head", "0.0", "--token", "#5"), "read through the model's unembedding"),
    (("--model", GPT2, "--head", "0.0"), "--head and --token go together"),
    (("--model", GPT2, "--top", "3"), "--top sets the length of ov_top, which needs --head and --token"),
    (("--model", GPT2, "--head", "9.0", "--token", "#5"), "--head: head 9.0 is outside this model's layers 0..1"),
])
def test_circuits_refusals_are_one_line(cli, argv, words):
    rc, out, err = cli("circuits", *argv)
    assert rc == 2 and out == ""
    assert words in err and err.count("\n") == 1


def test_an_encoders_circuits_have_no_copying(cli):
    rc, out, _ = cli("circuits", "--model", str(FIXTURES / "bert"), "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["copying"] is None and "encoder" in doc["no_copying"]


def test_circuits_head_is_read_and_refused_as_the_ablation_tab_reads_it():
    """--head takes a head as every place a head is typed does, and refuses it in the same words."""
    from attnviz.commands.circuits_cmd import parse_head
    from attnviz.engine.analysing import ablation as A
    from attnviz.engine.errors import InputError

    for typed in ("18.6", "L18 H6", "L18H6", " l18 h6 "):
        assert parse_head(typed, 30, 9) == (18, 6), typed
    for typed, n_layer in (("18", 30), ("30.0", 30)):
        with pytest.raises(InputError) as cli_said:
            parse_head(typed, n_layer, 9)
        with pytest.raises(InputError) as tab_said:
            A.parse_heads(typed, n_layer, 9)
        assert str(cli_said.value) == f"--head: {tab_said.value}"



def test_a_model_whose_ov_circuits_are_zero_shows_no_copying_and_no_top_tokens(cli):
    """attnviz-textbook: every head's W_E W_V W_O W_U is exactly zero, so no copying score (0 / 0)
    and no ranked top tokens; a composition pair whose earlier W_V W_O or later W_Q W_Kᵀ / W_K W_Qᵀ /
    W_V W_O is zero has no score either (0 / 0): not ranked as 0.000, counted n/a with the reason,
    null in JSON. Its one defined pair per mode is earlier layer -> later layer; q's, exactly 0 but
    1.1e-6 in float32, reads <0.001, not 0.000."""
    rc, out, _ = cli("circuits", "--model", "attnviz-textbook", "--head", "1.0", "--token", "cat")
    assert rc == 0
    assert f"copying: none ({C.ZERO_OV})" in out and "+0.00" not in out
    assert out.rstrip().endswith(f"head 1.0 attending to 'cat' (11) writes no top tokens: {C.WRITES_NOTHING}")
    strongest = [s for s in out.splitlines() if "-composition, strongest: " in s]
    assert strongest == ["q-composition, strongest: L0 H0 -> L1 H0 <0.001 (8 of 9 pairs n/a)",
                         "k-composition, strongest: L0 H0 -> L1 H0 0.109 (8 of 9 pairs n/a)",
                         "v-composition, strongest: none (9 of 9 pairs n/a)"]
    assert f"  n/a: {C.ZERO_COMPOSITION}" in out.splitlines()
    rc, out, _ = cli("circuits", "--model", "attnviz-textbook", "--head", "1.0", "--token", "cat", "--json")
    doc = json.loads(out)
    assert doc["copying"] is None and doc["no_copying"] == C.ZERO_OV
    assert doc["ov_top"] == [] and doc["no_ov_top"] == C.WRITES_NOTHING
    assert doc["composition"]["v"][0][0][1] == [None, None, None]  # [l1][h1][l2]: into L1's heads
    assert doc["composition"]["k"][0][0][1][0] == pytest.approx(0.109, abs=1e-3)
    assert doc["no_composition"] == f"null: {C.ZERO_COMPOSITION}"
