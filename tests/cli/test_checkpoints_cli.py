"""--checkpoint on the command line: models, heads, attention, find, export; bad indices exit 2."""

from __future__ import annotations
import json
import numpy as np
import pytest
from attnviz.cli import main
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.figures.data import open_sidecar

REPEATED = "The parser reads the token stream. The parser reads the token stream."


def test_models_shows_a_checkpoints_column(capsys, ckpts):
    assert main(["models"]) == 0
    out = capsys.readouterr().out.splitlines()
    col = out[0].index("CHECKPOINTS")
    row = next(line for line in out if line.startswith(TOY_MODEL))
    assert row[col:].split()[0] == str(len(ckpts))
    assert all(line[col:].split()[0] == "-" for line in out[1:]
               if line.startswith("attnviz-textbook ") and "knows only" not in line)
    assert any(line.startswith(f"{TOY_MODEL}: toy model trained by attnviz") for line in out)


def test_heads_takes_checkpoint(capsys, ckpts):
    assert main(["heads", "--model", TOY_MODEL, "--probe", "--json", "--checkpoint", "0"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["heads", "--model", TOY_MODEL, "--probe", "--json"]) == 0
    last = json.loads(capsys.readouterr().out)
    assert first["checkpoint"] == {"index": 0, "step": 0, "of": len(ckpts)}
    assert last["checkpoint"]["index"] == len(ckpts) - 1
    assert first["best"]["induction"]["strength"] == pytest.approx(ckpts.infos[0].induction_score,
                                                                   abs=1e-4)
    assert last["best"]["induction"]["strength"] == pytest.approx(ckpts.infos[-1].induction_score,
                                                                  abs=1e-4)
    assert main(["heads", "--model", TOY_MODEL, "--probe", "--checkpoint", "-1"]) == 0
    assert f"at checkpoint {len(ckpts) - 1} of 0..{len(ckpts) - 1}" in capsys.readouterr().out


def test_attention_takes_checkpoint(tmp_path, capsys, ckpts):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert main(["attention", "--model", TOY_MODEL, "--text", REPEATED, "--checkpoint", "2",
                 "--out", str(a)]) == 0
    assert f"(step {ckpts.infos[2].step})" in capsys.readouterr().out
    assert main(["attention", "--model", TOY_MODEL, "--text", REPEATED, "--out", str(b)]) == 0
    # within float32 rounding (the fixture's models may answer from their KV cache, rows computed
    # one run earlier); the two checkpoints' patterns differ by far more than that
    at_2, at_last = ckpts.model(2).run(REPEATED).attentions, ckpts.model(-1).run(REPEATED).attentions
    np.testing.assert_allclose(np.load(a)["attentions"], at_2, atol=1e-6)
    np.testing.assert_allclose(np.load(b)["attentions"], at_last, atol=1e-6)
    assert np.abs(at_2 - at_last).max() > 1e-2


@pytest.fixture
def default_budget():  # (--memory-budget sets the process's budget: put back for later tests)
    from attnviz.engine.reading import memory_budget as MB
    yield
    MB.set_memory_budget(None)


def test_find_takes_checkpoint(capsys, ckpts, default_budget):
    args = ["find", "--model", TOY_MODEL, "--text", REPEATED, "--from", "·par@13", "--to", "·stream@10",
            "--json"]
    docs = []
    for extra in (["--checkpoint", "0"], ["--memory-budget", "1G"]):
        assert main([*args, *extra]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    first, last = docs
    assert first["checkpoint"] == {"index": 0, "step": 0, "of": len(ckpts)}
    assert last["checkpoint"]["index"] == len(ckpts) - 1
    # each checkpoint's ranking is its own model's weights: the first and last differ
    assert [h["weight"] for h in first["heads"]] != [h["weight"] for h in last["heads"]]
    assert main([*args[:-1], "--checkpoint", "3"]) == 0
    assert f"at checkpoint 3 of 0..{len(ckpts) - 1}" in capsys.readouterr().out


def test_export_records_the_checkpoint(tmp_path, ckpts):
    out = tmp_path / "w.json"
    assert main(["export", "--model", TOY_MODEL, "--text", REPEATED, "--layer", "1",
                 "--checkpoint", "5", "--out", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["checkpoint"] == {"index": 5, "step": ckpts.infos[5].step, "of": len(ckpts)}
    np.testing.assert_allclose(np.array(doc["weights"]),
                               ckpts.model(5).run(REPEATED).attentions[1], atol=1e-6)


@pytest.mark.parametrize("argv", [
    ["heads", "--model", TOY_MODEL, "--probe", "--checkpoint", "999"],
    ["heads", "--model", TOY_MODEL, "--probe", "--checkpoint", "-999"],
    ["attention", "--model", TOY_MODEL, "--text", "a", "--checkpoint", "999", "--out", "{out}/a.npz"],
    ["export", "--model", TOY_MODEL, "--checkpoint", "999", "--out", "{out}/a.json"],
    ["find", "--model", TOY_MODEL, "--text", "a b", "--from", "a", "--to", "b", "--checkpoint", "999"],
    ["heads", "--model", "attnviz-textbook", "--probe", "--checkpoint", "3"],
])
def test_out_of_range_checkpoints_exit_2_with_one_line(argv, tmp_path, capsys):
    argv = [a.replace("{out}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and list(tmp_path.iterdir()) == []
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "is out of range" in lines[0], cap.err


def test_a_checkpoint_that_is_not_an_integer_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["heads", "--model", TOY_MODEL, "--probe", "--checkpoint", "last"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--checkpoint: expected an integer, got 'last'" in lines[0]


CLEAN, CORRUPT = "def add(a, b): return a + b", "def add(a, c): return a + c"
RUNS = {  # the commands that run a model at --checkpoint, beyond those above
    "predict": ["predict", "--text", CLEAN],
    "ablation-scan": ["ablation-scan", "--text", CLEAN],
    "patch": ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--what", "head_out"],
    "generate": ["generate", "--text", CLEAN, "--max-new", "2"],
    "qk-attribution": ["qk-attribution", "--text", CLEAN, "--layer", "1", "--head", "0", "--query",
                       "5", "--key", "3"],
    "circuits": ["circuits"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_every_command_names_the_checkpoint_it_ran_and_its_json_records_it(name, capsys, ckpts):
    argv = [*RUNS[name], "--model", TOY_MODEL, "--checkpoint", "5"]
    words = f" at checkpoint 5 of 0..{len(ckpts) - 1} (step {ckpts.infos[5].step})"
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    said = out[1] if name == "generate" else out[0]  # (generate prints the text first)
    assert words in said, said
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["checkpoint"] == {"index": 5, "step": ckpts.infos[5].step, "of": len(ckpts)}


@pytest.mark.parametrize("view", ["anatomy", "prediction", "lens", "dla"])
def test_exported_views_record_the_checkpoint_in_their_title_and_sidecar(view, tmp_path, capsys,
                                                                         ckpts):
    out = tmp_path / "v.png"
    assert main(["export", "--model", TOY_MODEL, "--text", CLEAN, "--view", view, "--checkpoint", "5",
                 "--out", str(out)] + (["--layer", "1"] if view == "anatomy" else [])) == 0
    step = ckpts.infos[5].step
    assert f" at checkpoint 5 of 0..{len(ckpts) - 1} (step {step})" in capsys.readouterr().out
    meta = open_sidecar(out)
    assert meta["checkpoint"] == {"index": 5, "step": step, "of": len(ckpts)}
