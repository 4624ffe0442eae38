"""One default model: every command opens the window's model (SmolLM2) unless told, and a command
that needs what a model lacks says so in one line naming a model that has it."""

import pytest

from attnviz.cli import build_parser, main
from attnviz.engine.reading.registry import TOY_MODEL, WINDOW_MODEL


def _subcommands():
    return build_parser().commands


def test_every_command_with_a_model_defaults_to_the_windows_model():
    with_model = {}
    for name, p in _subcommands().items():
        if "--model" in p.format_usage():
            with_model[name] = p.get_default("model")
    # the commands that run a model (a new command with --model joins the check by itself)
    assert {"attention", "export", "generate", "heads", "find", "predict", "ablation-scan",
            "scan"} <= set(with_model)
    assert with_model == dict.fromkeys(with_model, WINDOW_MODEL)
    help_text = _subcommands()["generate"].format_help()
    assert WINDOW_MODEL in " ".join(help_text.split())


def test_generate_runs_on_the_default_model(capsys):
    assert main(["generate", "--text", "Hi", "--max-new", "2", "--json"]) == 0
    assert f'"model": "{WINDOW_MODEL}"' in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["generate", "--text", "Hi", "--max-new", "3"],
    ["predict", "--text", "Hi"],
    ["ablation-scan", "--text", "Hi there"],
    ["patch", "--clean", "Hi", "--corrupt", "Yo", "--what", "resid"],
    ["export", "--view", "prediction", "--text", "Hi", "--out", "p.json"],
])
def test_a_command_that_predicts_names_a_model_that_can_on_an_encoder(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--model", "all-MiniLM-L6-v2"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "all-MiniLM-L6-v2 is an encoder, so it predicts no next token" in err and f"--model {WINDOW_MODEL}" in err
    assert not (tmp_path / "p.json").exists()


def test_a_checkpoint_on_a_model_without_them_names_one_that_has_them(capsys, tmp_path):
    out = tmp_path / "a.npz"
    assert main(["attention", "--model", "attnviz-textbook", "--text", "the cat", "--checkpoint", "3",
                 "--out", str(out)]) != 0
    err = capsys.readouterr().err
    assert "is out of range" in err and "has no training checkpoints" in err and f"--model {TOY_MODEL}" in err and not out.exists()
